#!/bin/sh
# Build sdp-kubelet-restarts into BUILD_DIR: the kubelet's own device-manager registration server
# in a harness (main.go). A Go module of its own (go.mod, go.sum: k8s.io/kubernetes at one
# release, every k8s.io staging module replaced by the version published with it), fetched
# through the Go module proxy into the module cache (go env GOMODCACHE, outside the checkout),
# compiled with a cache of its own in BUILD_DIR/gocache-kubelet. Static (CGO_ENABLED=0): the
# LD_PRELOAD meant for the daemon it starts does nothing to it. Only `make bench` and
# `make bench-kubelet-restarts` build it: `make build` and `make test` need no network.
#   bench/kubelet-restarts/build.sh BUILD_DIR
set -eu
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$1" && pwd)
cd "$src"
export GO111MODULE=on GOFLAGS=-mod=readonly CGO_ENABLED=0 GOCACHE="$out/gocache-kubelet"
[ -n "${GOPROXY:-}" ] && [ "$GOPROXY" != off ] || export GOPROXY=https://proxy.golang.org
go build -trimpath -o "$out/sdp-kubelet-restarts" .
