#!/bin/sh
# Build sdp-kvm-run (kvm_run.c), statically linked, into OUT_DIR/sdp-kvm-run:
#
#   tests/cluster/kvm-run/build.sh [--arch amd64|arm64] OUT_DIR
#
# A test workload, not a product: meson does not build it. amd64: musl-gcc (Debian's
# musl-tools, as scripts/build-static.sh uses) if installed, else gcc -static (glibc).
# arm64: aarch64-linux-gnu-gcc with musl's specs (musl-dev:arm64) if installed, else
# aarch64-linux-gnu-gcc -static. Against musl the kernel's UAPI headers (linux/, asm/) are
# searched after musl's own, through links in OUT_DIR/.kernel-include. Prints nothing on
# success; on failure one line on stderr (after the compiler's) and exit 1.
set -eu
src=$(cd "$(dirname "$0")" && pwd)
arch=amd64
if [ "${1:-}" = --arch ]; then
	arch=${2:-}
	shift 2 || { echo "kvm-run/build.sh: --arch needs a value (amd64, arm64)" >&2; exit 2; }
fi
if [ $# -ne 1 ] || [ -z "$1" ]; then
	echo "usage: tests/cluster/kvm-run/build.sh [--arch amd64|arm64] OUT_DIR" >&2
	exit 2
fi
die() { echo "kvm-run/build.sh: $*" >&2; exit 1; }

case $arch in
amd64)
	multiarch=x86_64-linux-gnu
	gcc=gcc
	musl=""
	command -v musl-gcc >/dev/null && musl=musl-gcc
	;;
arm64)
	multiarch=aarch64-linux-gnu
	gcc=aarch64-linux-gnu-gcc
	specs=/usr/lib/aarch64-linux-musl/musl-gcc.specs
	musl=""
	[ ! -f "$specs" ] || musl="$gcc -specs $specs"
	;;
*) die "--arch $arch: want amd64 or arm64" ;;
esac
command -v "$gcc" >/dev/null || die "$gcc missing (scripts/install-deps.sh $arch)"
mkdir -p "$1" || die "cannot create $1"
out=$(cd "$1" && pwd)
bin="$out/sdp-kvm-run"

flags="-std=c17 -Os -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
	-Wformat=2 -D_GNU_SOURCE -static -s"
if [ -n "$musl" ]; then
	kinc="$out/.kernel-include"
	mkdir -p "$kinc"
	ln -sfn /usr/include/linux "$kinc/linux"
	ln -sfn /usr/include/asm-generic "$kinc/asm-generic"
	ln -sfn "/usr/include/$multiarch/asm" "$kinc/asm"
	[ -f "$kinc/asm/kvm.h" ] || die "/usr/include/$multiarch/asm/kvm.h missing (linux-libc-dev for $arch)"
	# shellcheck disable=SC2086
	$musl $flags -idirafter "$kinc" -o "$bin" "$src/kvm_run.c" ||
		die "compiling $bin with musl ($musl) failed"
else
	# shellcheck disable=SC2086
	"$gcc" $flags -o "$bin" "$src/kvm_run.c" || die "compiling $bin ($gcc -static) failed"
fi
# Static: no program interpreter (readelf, binutils).
hdr=$(readelf -l "$bin") || die "readelf -l $bin failed"
case $hdr in
*"program interpreter"*) die "$bin is not static" ;;
esac
