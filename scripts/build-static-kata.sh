#!/bin/sh
# Build a statically linked kata-device-plugin for images/kata.Containerfile (FROM scratch).
#
#   scripts/build-static-kata.sh [BUILD_DIR]        (default: build-static)
#
# A separate meson build directory: static libraries preferred (Debian 12 ships libnghttp2.a,
# libprotobuf-c.a and glibc's libc.a), linked with -static, assertions off, stripped. Only the
# kata target is built: hyperlight needs libcurl, whose static dependencies Debian does not
# all ship. The daemon uses no NSS (no user or host name lookups), so static glibc is safe.
# Fails unless the result has no program interpreter and no shared library dependency.
# The image build context is BUILD_DIR/image-context: the stripped binary, nothing else.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/build-static}
if [ ! -f "$out/build.ninja" ]; then
	meson setup "$out" "$src" -Ddefault_library=static -Dprefer_static=true \
		-Dc_link_args=-static -Dtests=false -Db_ndebug=true -Dstrip=true >/dev/null
fi
ninja -C "$out" kata-device-plugin >/dev/null
bin=$out/kata-device-plugin
if LC_ALL=C readelf -lW "$bin" | grep -q 'Requesting program interpreter' ||
	LC_ALL=C readelf -dW "$bin" | grep -q '(NEEDED)'; then
	echo "build-static-kata: $bin is not statically linked:" >&2
	LC_ALL=C readelf -dW "$bin" | grep '(NEEDED)' >&2 || true
	exit 1
fi
ctx=$out/image-context
rm -rf "$ctx"
mkdir -p "$ctx"
strip -o "$ctx/kata-device-plugin" "$bin"
chmod 0755 "$ctx/kata-device-plugin"
version=$("$ctx/kata-device-plugin" --version) || {
	echo "build-static-kata: $ctx/kata-device-plugin --version failed" >&2
	exit 1
}
echo "$ctx/kata-device-plugin: static, stripped, $(stat -c %s "$ctx/kata-device-plugin") bytes ($version)"
