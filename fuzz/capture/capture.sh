#!/bin/bash
# Capture real grpc-go traffic for the fuzz corpus (run by hand; the seeds are committed).
#   server corpus: what grpc-go clients send (every DevicePlugin method, health Check/Watch,
#                  Register) to the libdp server (build/tests/grpc/grpc_test_server), through
#                  relay.py which records both directions;
#   client corpus: what a grpc-go server (Registration + health) answers the libdp client
#                  (grpc_test_server --client: Register, health Check);
#   proto corpus:  grpc-go's encoding of each message type.
# Usage: fuzz/capture/capture.sh [BUILD]   (after make build)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-build}" && pwd)
gp="$build/gopath"
ln -sfn "$src/fuzz/capture/peer" "$gp/src/sdp/fuzzpeer"
GOPATH="$gp:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOCACHE="$build/gocache" GOPROXY=off \
	go build -o "$build/fuzz-peer" sdp/fuzzpeer
tmp=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"' EXIT
wait_sock() { for _ in $(seq 500); do [ -S "$1" ] && return 0; sleep 0.01; done; echo "no socket $1" >&2; exit 1; }

"$build/tests/grpc/grpc_test_server" "$tmp/c-server.sock" & pids+=($!)
wait_sock "$tmp/c-server.sock"
python3 "$src/fuzz/capture/relay.py" "$tmp/c-relay.sock" "$tmp/c-server.sock" "$tmp/c" & pids+=($!)
wait_sock "$tmp/c-relay.sock"
"$build/fuzz-peer" client "$tmp/c-relay.sock"

"$build/fuzz-peer" server "$tmp/s-server.sock" & pids+=($!)
wait_sock "$tmp/s-server.sock"
python3 "$src/fuzz/capture/relay.py" "$tmp/s-relay.sock" "$tmp/s-server.sock" "$tmp/s" & pids+=($!)
wait_sock "$tmp/s-relay.sock"
reg=0a0776316265746131120d66757a7a2d312d312e736f636b1a0c66757a7a2e6465762f646576 # RegisterRequest
"$build/tests/grpc/grpc_test_server" --client "$tmp/s-relay.sock" /v1beta1.Registration/Register "$reg" 2000
"$build/tests/grpc/grpc_test_server" --client "$tmp/s-relay.sock" /grpc.health.v1.Health/Check "" 2000
"$build/tests/grpc/grpc_test_server" --client "$tmp/s-relay.sock" /grpc.health.v1.Health/Check 0a0972656164696e657373 2000
"$build/tests/grpc/grpc_test_server" --client "$tmp/s-relay.sock" /no.Such/Method "" 2000
sleep 0.2 # the relay writes its last bytes (only the capture, never a test, waits like this)

corpus="$src/fuzz/corpus"
for f in "$tmp"/c/*.c2s; do cp "$f" "$corpus/server/grpcgo-$(basename "$f" .c2s)"; done
for f in "$tmp"/s/*.s2c; do cp "$f" "$corpus/client/grpcgo-$(basename "$f" .s2c)"; done
"$build/fuzz-peer" protos "$corpus/proto"
ls -l "$corpus/server" "$corpus/client" "$corpus/proto"
