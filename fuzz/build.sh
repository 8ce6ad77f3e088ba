#!/bin/bash
# Build the libFuzzer targets: clang -fsanitize=fuzzer,address,undefined, in OUT (default
# build-fuzz). Needs a built meson build directory (BUILD, default build: its generated sources,
# the protoc-c output, dp_version.h and kata's name table). What to compile and how comes from
# it (scripts/build-info.py): each library's sources from its meson target, each file's flags
# from BUILD/compile_commands.json, so that the source lists and the warning flags exist only
# in the meson.build files. Each library becomes an archive here, linked like meson links it.
# Usage: fuzz/build.sh [BUILD [OUT]]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
out=${2:-build-fuzz}
mkdir -p "$out/obj"
out=$(cd "$out" && pwd)
info="$src/scripts/build-info.py"
# After meson's own flags: the later -O1 wins over its -O2.
fuzzflags=(-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
# The libraries the fuzz targets link (fuzz/meson.build), users before what they use.
libs=(kata hyperlight hyperlight-label-node dphttps dpdraclaim dp dpproto)
syslibs=(-lnghttp2 -lprotobuf-c -lseccomp -lmbedtls -lmbedx509 -lmbedcrypto -ljansson)
jobs=$(nproc)

# compile SOURCE OBJECT EXTRA...: with the flags meson compiles SOURCE with, in the background
# (at most $jobs at a time; a failure leaves $failed, checked by join); only when the object is
# missing or older than the source.
failed="$out/obj/failed"
rm -f "$failed"
compile() {
	local c=$1 o=$2 flags
	shift 2
	[ -f "$o" ] && [ ! "$c" -nt "$o" ] && return 0
	mapfile -t flags < <("$info" cflags "$build" "$c")
	[ ${#flags[@]} -ne 0 ] || { echo "fuzz/build.sh: no flags for $c" >&2; return 1; }
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
	{ clang "${flags[@]}" "${fuzzflags[@]}" "$@" -c "$c" -o "$o" || { rm -f "$o"; touch "$failed"; }; } &
}
join() {
	wait
	[ ! -e "$failed" ] || { echo "fuzz/build.sh: compilation failed (above)" >&2; exit 1; }
}

archives=()
for lib in "${libs[@]}"; do
	mapfile -t lib_src < <("$info" sources "$build" "$lib")
	[ ${#lib_src[@]} -ne 0 ] || { echo "fuzz/build.sh: no sources for library $lib in $build" >&2; exit 1; }
	mkdir -p "$out/obj/$lib"
	objs=()
	for c in "${lib_src[@]}"; do
		o="$out/obj/$lib/$(basename "$c" .c).o"
		compile "$c" "$o" -fsanitize=fuzzer-no-link
		objs+=("$o")
	done
	join
	rm -f "$out/lib$lib.a"
	ar rcs "$out/lib$lib.a" "${objs[@]}"
	archives+=("$out/lib$lib.a")
done
compile "$src/fuzz/util.c" "$out/obj/util.o" -fsanitize=fuzzer-no-link
join
for t in "$src"/fuzz/fuzz_*.c; do
	name=$(basename "$t" .c)
	name=${name#fuzz_}
	compile "$t" "$out/obj/fuzz_$name.o" -fsanitize=fuzzer-no-link
done
join
for t in "$src"/fuzz/fuzz_*.c; do
	name=$(basename "$t" .c)
	name=${name#fuzz_}
	clang "${fuzzflags[@]}" -fsanitize=fuzzer "$out/obj/fuzz_$name.o" "$out/obj/util.o" \
		"${archives[@]}" "${syslibs[@]}" -o "$out/fuzz_$name"
done
ls "$out"/fuzz_*
