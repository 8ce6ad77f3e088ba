#!/bin/sh
# make demo: build (its output shown only if it fails), then both plugins, each on a simulated
# node (a temp dir) against the grpc-go mock kubelet: hyperlight-device-plugin, then
# hyperlight-device-plugin again as a DRA driver (a fake API server, grpc-go in the kubelet's place),
# kata-device-plugin with a GPU, an NVSwitch and a NIC it skips, then on legacy VFIO group nodes. Prints a transcript and cleans up.
# Usage: tests/demo.sh [BUILD_DIR] (default: build)
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
"$src/scripts/install-deps.sh" # says what it installs (or waits for), silent otherwise
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "building $build (meson, ninja, the Go mock kubelet; output shown only on failure) ..."
if ! { [ -f "$build/build.ninja" ] || meson setup "$build" "$src"; } >"$log" 2>&1 ||
	! ninja -C "$build" >>"$log" 2>&1 || ! "$src/scripts/go-build.sh" "$build" >>"$log" 2>&1; then
	cat "$log"
	echo "make demo: the build failed (its output is above); the demo did not run" >&2
	exit 1
fi
build=$(cd "$build" && pwd)
"$build/sdp-demo" -build "$build"
