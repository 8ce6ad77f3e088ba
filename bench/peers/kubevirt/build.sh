#!/bin/sh
# Build sdp-kubevirt-pci-plugin into BUILD_DIR: KubeVirt's PCI host device plugin
# (kubevirt.io/kubevirt v1.7.0, pkg/virt-handler/device-manager) constructed as virt-handler
# constructs it (main.go), and sdp-kubevirt-dpctl, the grpc-go client vfio-table.sh calls a
# plugin's Allocate with (dpctl/). A Go module of its own (go.mod, go.sum: every kubevirt.io
# staging module replaced by the version published with the release, the k8s.io pins of
# KubeVirt's go.mod repeated), fetched through the Go module proxy into the module cache
# (go env GOMODCACHE, outside the checkout), compiled with a cache of its own in
# BUILD_DIR/gocache-kubevirt. Static (CGO_ENABLED=0).
#   bench/peers/kubevirt/build.sh BUILD_DIR
set -eu
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$src"
export GO111MODULE=on GOFLAGS=-mod=readonly CGO_ENABLED=0 GOCACHE="$out/gocache-kubevirt"
[ -n "${GOPROXY:-}" ] && [ "$GOPROXY" != off ] || export GOPROXY=https://proxy.golang.org
go build -trimpath -ldflags=-s -o "$out/sdp-kubevirt-pci-plugin" .
go build -trimpath -ldflags=-s -o "$out/sdp-kubevirt-dpctl" ./dpctl
