#!/bin/sh
# Build the device plugins people run instead of ours, for make bench-peers, from their Go
# modules at pinned versions, through the Go module proxy (module cache: go env GOMODCACHE,
# outside the checkout), with a build cache of its own in BUILD_DIR/gocache-peers:
#   - github.com/squat/generic-device-plugin (this module, go.mod/go.sum here: the peer's own
#     requirements, nothing moved),
#   - gitlab.com/arm-research/smarter/smarter-device-manager v1.20.11 (smarter/go.mod: its
#     release has an empty go.mod and its Dockerfile runs `go mod init && go mod tidy` at build
#     time; smarter/go.mod pins what that resolved when v1.20.11 was tagged, 2022-09: k8s.io/kubelet
#     v0.25.0, grpc v1.49.0; today's k8s.io/kubelet no longer compiles it),
# and the report writer (report/, standard library only). Static (CGO_ENABLED=0), stripped
# (-s -w, as the peers' own images ship them). Then one-layer OCI archives of each peer
# (cluster/oci-image.py, as make cluster makes its images) in BUILD_DIR/peers.
#   bench/peers/build.sh BUILD_DIR
set -eu
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
out=$(cd "$1" && pwd)/peers
mkdir -p "$out"
# Go >= 1.26 (the peers' go.mod says go 1.26.0): /usr/local/go's before Debian's 1.19 on PATH
[ ! -x /usr/local/go/bin/go ] || PATH=/usr/local/go/bin:$PATH
export GO111MODULE=on GOFLAGS=-mod=readonly CGO_ENABLED=0 GOCACHE="$out/../gocache-peers"
[ -n "${GOPROXY:-}" ] && [ "$GOPROXY" != off ] || export GOPROXY=https://proxy.golang.org
cd "$src"
go build -trimpath -ldflags='-s -w' -o "$out/generic-device-plugin" github.com/squat/generic-device-plugin
go build -trimpath -o "$out/sdp-peers-report" ./report
cd "$src/smarter"
go build -trimpath -ldflags='-s -w' -o "$out/smarter-device-manager" gitlab.com/arm-research/smarter/smarter-device-manager
# the images: name and tag from the module version (go list -m), the binary as its image
# ships it (generic: /generic-device-plugin; smarter: /usr/bin/smarter-device-management)
v=$(cd "$src" && go list -m -f '{{.Version}}' github.com/squat/generic-device-plugin)
echo "localhost/generic-device-plugin:$v" >"$out/generic-device-plugin.ref"
python3 "$src/../../cluster/oci-image.py" "$out/generic-device-plugin.tar" "localhost/generic-device-plugin:$v" \
	--file "$out/generic-device-plugin:/generic-device-plugin:0755" --entrypoint '["/generic-device-plugin"]' >/dev/null
v=$(go list -m -f '{{.Version}}' gitlab.com/arm-research/smarter/smarter-device-manager)
echo "localhost/smarter-device-manager:$v" >"$out/smarter-device-manager.ref"
python3 "$src/../../cluster/oci-image.py" "$out/smarter-device-manager.tar" "localhost/smarter-device-manager:$v" \
	--file "$out/smarter-device-manager:/usr/bin/smarter-device-management:0755" --dir /root/config:0755 \
	--entrypoint '["/usr/bin/smarter-device-management"]' --cmd '["-logtostderr=true","-v=0"]' >/dev/null
