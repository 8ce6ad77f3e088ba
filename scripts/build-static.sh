#!/bin/sh
# Build the two daemons for their images (FROM scratch) against musl instead of glibc:
#
#   scripts/build-static.sh [BUILD_DIR]                  (default: build-static)
#   scripts/build-static.sh --arch arm64 [BUILD_DIR]     (default: build-static-arm64)
#
# --arch arm64: the same for aarch64, cross-compiled: Debian's aarch64-linux-gnu-gcc with the
# musl-gcc.specs of musl-dev:arm64 (what musl-gcc is to the native gcc), Debian's arm64 static
# libraries (scripts/install-deps.sh arm64), a meson cross file written into BUILD_DIR; the
# loader is lib/ld-musl-aarch64.so.1, and --version runs under qemu-aarch64-static. The same
# checks hold.
#
#   BUILD_DIR/image-context-kata/{kata-device-plugin,sdp-kube-api}
#       statically linked: the image holds the daemon and its API-server helper (PLUGIN_API=dra:
#       dp/draapi.h; Mbed TLS and jansson there only), nothing else.
#   BUILD_DIR/image-context-hyperlight/rootfs/{hyperlight-device-plugin,hyperlight-label-node,
#                                              lib/ld-musl-x86_64.so.1}
#       the daemon and its API-server helper program (node labels, DRA), linked against musl's
#       libc.so only (every other library static: Mbed TLS and jansson in the helper only), with
#       musl's dynamic loader and
#       C library (one 690 KiB file) beside them. Dynamic, not static, for one reason:
#       the tests' hypervisor stand-in (tests/fakes/hvshim.c) is an LD_PRELOAD library, and a
#       static binary cannot preload it; with a musl-built shim
#       (BUILD_DIR/musl-dynamic/libhvshim.so) the image runs the real probe code path on a
#       machine without KVM (make test-runtime, make bench), as the glibc build does.
#
# Separate meson build directories compiled with musl-gcc (Debian's musl-tools, installed by
# scripts/install-deps.sh static) against musl's libc and Debian's libnghttp2.a,
# libprotobuf-c.a, libseccomp.a and (hyperlight's node-label child) libmbedtls.a,
# libmbedx509.a, libmbedcrypto.a (built for glibc; the few glibc entry points they call are in
# core/compat/), optimised for size (-Os, link-time optimisation of our code, unused sections
# and the unwind tables dropped), assertions off, stripped; the static kata without a RELRO
# segment (-z norelro): musl applies none to a static executable (its .data.rel.ro stays
# writable, as /proc/<pid>/maps shows), so the page alignment it costs was padding only. glibc's static libc alone was
# 750 KiB of kata's 1.1 MiB binary; musl's is about 50 KiB (docs/benchmarks.md). The daemons
# use no NSS (the label child resolves a host name with musl's own resolver: /etc/hosts,
# /etc/resolv.conf), no locale, no threads. Fails unless kata has no program interpreter and no
# shared library dependency, and hyperlight none but musl's.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
arch=amd64
if [ "${1:-}" = --arch ]; then
	arch=${2:-}
	shift 2 || { echo "build-static: --arch needs a value (amd64, arm64)" >&2; exit 2; }
fi
# The output directory is removed and rebuilt: an option in its place (--help) is refused.
case ${1:-} in -*)
	echo "usage: build-static.sh [--arch amd64|arm64] [BUILD_DIR] (unknown option $1)" >&2
	exit 2
	;;
esac
case $arch in
amd64)
	out=${1:-$src/build-static}
	"$src/scripts/install-deps.sh" static
	musl_loader=/lib/ld-musl-x86_64.so.1
	multiarch=$(gcc -print-multiarch)
	musl_cc="musl-gcc"
	tool=""
	run=""
	;;
arm64)
	out=${1:-$src/build-static-arm64}
	"$src/scripts/install-deps.sh" arm64
	musl_loader=/lib/ld-musl-aarch64.so.1
	multiarch=aarch64-linux-gnu
	musl_cc="aarch64-linux-gnu-gcc -specs /usr/lib/aarch64-linux-musl/musl-gcc.specs"
	tool=aarch64-linux-gnu-
	run=qemu-aarch64-static
	;;
*)
	echo "build-static: --arch $arch: want amd64 or arm64" >&2
	exit 2
	;;
esac
# Absolute: the compiler flags below name directories under it, and meson runs the compiler in
# the build directory (a relative BUILD_DIR made every include path miss).
mkdir -p "$out"
out=$(cd "$out" && pwd)
dyn=$out/musl-dynamic
# Debian's nghttp2, protobuf-c, libseccomp and mbedtls headers live in /usr/include, next to
# glibc's: musl-gcc sees only those of them, and the kernel's UAPI headers (linux/, asm/, which
# seccomp.h includes) after musl's own.
inc=$out/musl-include
kinc=$out/kernel-include
config="$arch musl-gcc -Os lto gc-sections seccomp mbedtls jansson no-eh-frame musl-dynamic-hyperlight static-norelro v7"
cflags="-I$inc -idirafter $kinc -ffunction-sections -fdata-sections"
ldflags="-Wl,--gc-sections -Wl,-T,$src/scripts/static-no-unwind.ld"
cross=$out/musl-$arch.ini
setup() { # DIR LINK_ARGS
	if [ "$arch" = amd64 ]; then
		set -- "$1" "$2" env CC=musl-gcc meson setup
	else
		set -- "$1" "$2" meson setup --cross-file "$cross"
	fi
	dir=$1 link=$2
	shift 2
	"$@" "$dir" "$src" -Ddefault_library=static -Dprefer_static=true \
		-Doptimization=s -Db_lto=true -Dtests=false -Db_ndebug=true -Dstrip=true \
		"-Dc_args=$cflags" "-Dc_link_args=$link $ldflags" >/dev/null
}
if [ ! -f "$out/build.ninja" ] || [ ! -f "$dyn/build.ninja" ] ||
	[ "$(cat "$out/.static-config" 2>/dev/null)" != "$config" ]; then
	rm -rf "$out"
	mkdir -p "$inc" "$kinc"
	ln -s /usr/include/nghttp2 /usr/include/protobuf-c /usr/include/seccomp.h \
		/usr/include/seccomp-syscalls.h /usr/include/mbedtls /usr/include/psa /usr/include/jansson.h "$inc/"
	# jansson's configuration header: Debian's is arch-independent, in /usr/include
	ln -s /usr/include/jansson_config.h "$inc/"
	ln -s /usr/include/linux /usr/include/asm-generic "$kinc/"
	ln -s "/usr/include/$multiarch/asm" "$kinc/asm"
	if [ "$arch" = arm64 ]; then
		# meson's cross file: the cross compiler with musl's specs, the arm64 pkg-config
		cat >"$cross" <<EOC
[binaries]
c = ['aarch64-linux-gnu-gcc', '-specs', '/usr/lib/aarch64-linux-musl/musl-gcc.specs']
ar = 'aarch64-linux-gnu-gcc-ar'
strip = 'aarch64-linux-gnu-strip'
pkgconfig = 'aarch64-linux-gnu-pkg-config'
exe_wrapper = ['$run']

[host_machine]
system = 'linux'
cpu_family = 'aarch64'
cpu = 'aarch64'
endian = 'little'
EOC
	fi
	setup "$out" "-static -Wl,-z,norelro"
	# Debian's static libraries are not position-independent: a fixed-address executable.
	setup "$dyn" -no-pie
	echo "$config" >"$out/.static-config"
fi
ninja -C "$out" kata-device-plugin sdp-kube-api >/dev/null
ninja -C "$dyn" hyperlight-device-plugin hyperlight-label-node >/dev/null
# arm64: make test-arm64's filter check, built against musl as the shipped daemons are (their
# filters hold musl's own calls: tests/arm64/run.sh); not part of any image.
[ "$arch" = arm64 ] && ninja -C "$dyn" tests/sdp-seccomp-check >/dev/null
# The hypervisor stand-in for the tests, built against musl (it must be loaded by musl's loader).
$musl_cc -O2 -shared -fPIC -Wall -Wextra -Werror -idirafter "$kinc" -D_GNU_SOURCE \
	-I"$src/core" -o "$dyn/libhvshim.so" "$src/tests/fakes/hvshim.c" "$src/core/compat/musl.c"

die() {
	echo "build-static: $*" >&2
	exit 1
}
# The unwind tables are dropped (scripts/static-no-unwind.ld): nothing may need them.
check_unwind() { ! "${tool}nm" "$1" | grep -q '_Unwind_' || die "$1 links an unwinder, but its .eh_frame is discarded"; }
interp() { LC_ALL=C readelf -lW "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p'; }
needed() { LC_ALL=C readelf -dW "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p' | tr '\n' ' '; }
report() { # FILE
	version=$($run "$1" --version) || die "$1 --version failed"
	echo "$1: $2, stripped, $(stat -c %s "$1") bytes ($version)"
}

ctx=$out/image-context-kata
rm -rf "$ctx"
mkdir -p "$ctx"
for name in kata-device-plugin sdp-kube-api; do
	bin=$out/$name
	[ -z "$(interp "$bin")" ] && [ -z "$(needed "$bin")" ] || die "$bin is not statically linked: $(needed "$bin")"
	check_unwind "$bin"
	"${tool}strip" -o "$ctx/$name" "$bin"
	chmod 0755 "$ctx/$name"
	report "$ctx/$name" static
done

ctx=$out/image-context-hyperlight
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/lib"
for name in hyperlight-device-plugin hyperlight-label-node; do
	bin=$dyn/$name
	[ "$(interp "$bin")" = "$musl_loader" ] && [ "$(needed "$bin")" = "libc.so " ] ||
		die "$bin: interpreter '$(interp "$bin")', NEEDED '$(needed "$bin")'; want $musl_loader and musl's libc.so only"
	check_unwind "$bin"
	"${tool}strip" -o "$ctx/rootfs/$name" "$bin"
	chmod 0755 "$ctx/rootfs/$name"
	report "$ctx/rootfs/$name" "dynamic (musl's libc.so only)"
done
install -m 0755 "$(readlink -f "$musl_loader")" "$ctx/rootfs$musl_loader"
