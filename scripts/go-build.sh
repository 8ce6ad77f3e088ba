#!/bin/sh
# Build the grpc-go side of the tests (mock kubelet, scenario tests, demo driver) in GOPATH
# mode with Debian's grpc-go; no network. Usage: scripts/go-build.sh BUILD_DIR
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(cd "$1" && pwd)
gp="$out/gopath"
mkdir -p "$gp/src/sdp/v1beta1"
ln -sfn "$src/tests/kubelet" "$gp/src/sdp/kubelet"
protoc --go_out=plugins=grpc:"$gp/src/sdp/v1beta1" -I"$src/proto" "$src/proto/api.proto"
export GOPATH="$gp:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOCACHE="$out/gocache" GOPROXY=off
go build -o "$out/mock-kubelet" sdp/kubelet/cmd/mock-kubelet
go build -o "$out/sdp-demo" sdp/kubelet/cmd/demo
go build -o "$out/sdp-startup" sdp/kubelet/cmd/startup
go test -c -o "$out/scenario.test" sdp/kubelet
go test -c -o "$out/grpcpeer.test" sdp/kubelet/grpcpeer
CGO_ENABLED=0 go build -o "$out/live-kvm" sdp/kubelet/cmd/live-kvm
CGO_ENABLED=0 go build -o "$out/live-vfio" sdp/kubelet/cmd/live-vfio
go build -o "$out/runtime-e2e" sdp/kubelet/cmd/runtime-e2e
"$src/bench/build.sh" "$out"
