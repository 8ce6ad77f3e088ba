#!/bin/bash
# Build the libFuzzer targets: clang -fsanitize=fuzzer,address,undefined, in OUT (default
# build-fuzz). Needs the protoc-c output and dp_version.h of a configured meson build (BUILD,
# default build). Usage: fuzz/build.sh [BUILD [OUT]]
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
out=${2:-build-fuzz}
mkdir -p "$out/obj"
out=$(cd "$out" && pwd)
cflags=(-std=c17 -D_GNU_SOURCE -fno-strict-aliasing -Wall -Wextra -Werror -Wshadow
	-Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wno-unused-parameter -g -O1
	-fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
	-I"$src/core/include" -I"$build" -I"$build/proto" -I"$src/kata" -I"$src/hyperlight" -I"$src/fuzz")
objs=()
lib_src=("$src"/core/src/*.c "$build/proto/api.pb-c.c" "$build/proto/health.pb-c.c"
	"$src/kata/scan.c" "$src/kata/scan_device.c" "$src/kata/scan_diff.c" "$src/kata/scan_parse.c" "$src/kata/scan_cache.c" "$src/kata/table.c" "$src/hyperlight/http_response.c" "$src/fuzz/util.c")
for c in "${lib_src[@]}"; do
	o="$out/obj/$(basename "$c" .c).o"
	extra=()
	case "$c" in *.pb-c.c) extra=(-Wno-missing-prototypes -Wno-shadow) ;; esac
	if [ ! -f "$o" ] || [ "$c" -nt "$o" ]; then
		clang "${cflags[@]}" "${extra[@]}" -fsanitize=fuzzer-no-link -c "$c" -o "$o" &
	fi
	objs+=("$o")
done
wait
for t in "$src"/fuzz/fuzz_*.c; do
	name=$(basename "$t" .c)
	name=${name#fuzz_}
	clang "${cflags[@]}" -fsanitize=fuzzer "$t" "${objs[@]}" -lnghttp2 -lprotobuf-c -lseccomp \
		-o "$out/fuzz_$name" &
done
wait
ls "$out"/fuzz_*
