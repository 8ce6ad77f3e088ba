#!/bin/sh
# make demo: the hyperlight daemon on a simulated node (temp dir) against the grpc-go mock
# kubelet; prints a transcript and cleans up.
set -eu
build=$(cd "${1:-build}" && pwd)
exec "$build/sdp-demo" -build "$build"
