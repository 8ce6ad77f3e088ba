#!/bin/sh
# Build the benchmark driver and the reference Go plugin in GOPATH mode (called by
# scripts/go-build.sh with GOPATH etc. exported). Usage: bench/build.sh BUILD_DIR
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(cd "$1" && pwd)
ln -sfn "$src/bench" "$out/gopath/src/sdp/bench"
go build -o "$out/sdp-bench" sdp/bench
go build -o "$out/reference-go-plugin" sdp/bench/reference-go
