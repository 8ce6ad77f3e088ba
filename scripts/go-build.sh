#!/bin/sh
# Build the grpc-go side of the tests (mock kubelet, scenario tests, demo driver) in GOPATH
# mode with Debian's grpc-go; no network.
#   scripts/go-build.sh BUILD_DIR
#   scripts/go-build.sh --arch arm64 BUILD_DIR
# --arch arm64: only the in-guest driver of make test-live-kvm-arm64 (live-kvm), cross-built
# for aarch64 (GOARCH=arm64, CGO_ENABLED=0: a static binary), into BUILD_DIR (the arm64 build,
# build-arm64); the other Go programs run on the host and stay amd64 (make test-arm64 takes
# them from the native build).
set -eu
arch=""
if [ "${1:-}" = --arch ]; then
	arch=${2:-}
	shift 2 || { echo "go-build: --arch needs a value (arm64)" >&2; exit 2; }
	[ "$arch" = arm64 ] || { echo "go-build: --arch $arch: want arm64" >&2; exit 2; }
fi
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(cd "$1" && pwd)
gp="$out/gopath"
mkdir -p "$gp/src/sdp/v1beta1"
ln -sfn "$src/tests/kubelet" "$gp/src/sdp/kubelet"
protoc --go_out=plugins=grpc:"$gp/src/sdp/v1beta1" -I"$src/proto" "$src/proto/api.proto"
mkdir -p "$gp/src/sdp/pluginregistration"
protoc --go_out=plugins=grpc:"$gp/src/sdp/pluginregistration" -I"$src/proto" "$src/proto/pluginregistration.proto"
mkdir -p "$gp/src/sdp/drav1" "$gp/src/sdp/drahealthv1"
protoc --go_out=plugins=grpc:"$gp/src/sdp/drav1" -I"$src/proto" "$src/proto/dra.proto"
protoc --go_out=plugins=grpc:"$gp/src/sdp/drahealthv1" -I"$src/proto" "$src/proto/dra_health.proto"
export GOPATH="$gp:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOCACHE="$out/gocache" GOPROXY=off
if [ -n "$arch" ]; then
	GOARCH=$arch CGO_ENABLED=0 go build -o "$out/live-kvm" sdp/kubelet/cmd/live-kvm
	exit 0
fi
go build -o "$out/mock-kubelet" sdp/kubelet/cmd/mock-kubelet
go build -o "$out/sdp-demo" sdp/kubelet/cmd/demo
go build -o "$out/sdp-startup" sdp/kubelet/cmd/startup
go build -o "$out/sdp-katatree" sdp/kubelet/cmd/katatree
go test -c -o "$out/scenario.test" sdp/kubelet
go test -c -o "$out/grpcpeer.test" sdp/kubelet/grpcpeer
CGO_ENABLED=0 go build -o "$out/live-kvm" sdp/kubelet/cmd/live-kvm
CGO_ENABLED=0 go build -o "$out/live-vfio" sdp/kubelet/cmd/live-vfio
go build -o "$out/runtime-e2e" sdp/kubelet/cmd/runtime-e2e
"$src/bench/build.sh" "$out"
