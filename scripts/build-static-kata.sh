#!/bin/sh
# Build a statically linked kata-device-plugin for images/kata.Containerfile (FROM scratch).
#
#   scripts/build-static-kata.sh [BUILD_DIR]        (default: build-static)
#
# A separate meson build directory compiled with musl-gcc (Debian's musl-tools, installed by
# scripts/install-deps.sh static) against musl's libc.a and Debian's libnghttp2.a,
# libprotobuf-c.a and libseccomp.a (built for glibc; the few glibc entry points they call are in
# core/compat/),
# optimised for size (-Os, link-time optimisation of our code, unused sections and the unwind
# tables dropped), assertions off, stripped. glibc's static libc alone was 750 KiB of the 1.1 MiB binary; musl's
# is about 50 KiB (docs/benchmarks.md). Only the kata target is built: hyperlight needs libcurl,
# whose static dependencies Debian does not all ship. The daemon uses no NSS, no locale, no
# threads. Fails unless the result has no program interpreter and no shared library dependency.
# The image build context is BUILD_DIR/image-context: the stripped binary, nothing else.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/build-static}
"$src/scripts/install-deps.sh" static
# Debian's nghttp2, protobuf-c and libseccomp headers live in /usr/include, next to glibc's:
# musl-gcc sees only those of them, and the kernel's UAPI headers (linux/, asm/, which
# seccomp.h includes) after musl's own.
inc=$out/musl-include
kinc=$out/kernel-include
config="musl-gcc -Os lto gc-sections seccomp no-eh-frame v3"
if [ ! -f "$out/build.ninja" ] || [ "$(cat "$out/.static-config" 2>/dev/null)" != "$config" ]; then
	rm -rf "$out"
	mkdir -p "$inc" "$kinc"
	ln -s /usr/include/nghttp2 /usr/include/protobuf-c /usr/include/seccomp.h \
		/usr/include/seccomp-syscalls.h "$inc/"
	ln -s /usr/include/linux /usr/include/asm-generic "$kinc/"
	ln -s "/usr/include/$(gcc -print-multiarch)/asm" "$kinc/asm"
	CC=musl-gcc meson setup "$out" "$src" -Ddefault_library=static -Dprefer_static=true \
		-Doptimization=s -Db_lto=true -Dtests=false -Db_ndebug=true -Dstrip=true \
		"-Dc_args=-I$inc -idirafter $kinc -ffunction-sections -fdata-sections" \
		"-Dc_link_args=-static -Wl,--gc-sections -Wl,-T,$src/scripts/static-no-unwind.ld" >/dev/null
	echo "$config" >"$out/.static-config"
fi
ninja -C "$out" kata-device-plugin >/dev/null
bin=$out/kata-device-plugin
if LC_ALL=C readelf -lW "$bin" | grep -q 'Requesting program interpreter' ||
	LC_ALL=C readelf -dW "$bin" | grep -q '(NEEDED)'; then
	echo "build-static-kata: $bin is not statically linked:" >&2
	LC_ALL=C readelf -dW "$bin" | grep '(NEEDED)' >&2 || true
	exit 1
fi
# The unwind tables are dropped (scripts/static-no-unwind.ld): nothing may need them.
if nm "$bin" | grep -q '_Unwind_'; then
	echo "build-static-kata: $bin links an unwinder, but its .eh_frame is discarded" >&2
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
