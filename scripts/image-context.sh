#!/bin/bash
# Make the build context for images/hyperlight.Containerfile from a built binary.
#
#   scripts/image-context.sh BINARY CONTEXT
#
# CONTEXT (new or empty) receives rootfs/ with:
#   /hyperlight-device-plugin               the binary (mode 0755)
#   the dynamic loader                      at the binary's PT_INTERP path (ldd's loader line)
#   every shared library ldd resolves       at the path ldd resolved it to, which is one of
#                                           the loader's built-in search directories (the
#                                           image has no /etc/ld.so.cache)
#   every library in DLOPEN_LIBS            the libraries the binary loads with dlopen(), which
#   and every library ldd resolves for it   ldd cannot see: libcurl.so.4 for the node-label
#                                           helper child (hyperlight/label_patch.h,
#                                           HL_CURL_SONAME). Each is looked up in the
#                                           directories ldd resolved the binary's own
#                                           libraries in (the loader's search path in the
#                                           image), and copied with its whole ldd closure.
#   /etc/ssl/certs/ca-certificates.crt      from the build host (CA_BUNDLE overrides the source)
# Symbolic links are resolved: each path holds a regular file. The list of files is printed.
# DLOPEN_LIBS (space-separated sonames) overrides the default "libcurl.so.4"; empty: none.
# Fails, leaving a message, if a library is not found, the binary is missing, or CONTEXT is
# not empty. With SOURCE_DATE_EPOCH set, every file and directory gets that time.
set -euo pipefail

usage() {
	echo "usage: $0 BINARY CONTEXT" >&2
	exit 2
}

[ $# -eq 2 ] || usage
bin=$1
ctx=$2
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
dlopen_libs=${DLOPEN_LIBS-libcurl.so.4}

die() {
	echo "image-context: $*" >&2
	exit 1
}

if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
	die "$bin: not an executable file"
fi
[ -f "$ca" ] || die "$ca: CA bundle not found (install ca-certificates or set CA_BUNDLE)"
if [ -e "$ctx" ]; then
	[ -d "$ctx" ] || die "$ctx exists and is not a directory"
	[ -z "$(ls -A "$ctx")" ] || die "$ctx is not empty"
fi
mkdir -p "$ctx/rootfs"
root=$(cd "$ctx/rootfs" && pwd)

# put SRC DEST: copy SRC (symbolic links followed) to rootfs DEST, parents 0755.
put() {
	local src=$1 dest=$2 mode=$3
	case $dest in
	/*) ;;
	*) die "not an absolute path: $dest" ;;
	esac
	install -D -m "$mode" "$(readlink -f "$src")" "$root$dest"
	echo "$dest"
}

# ldd_libs FILE: append the libraries ldd resolves for FILE (loader included) to libs.
# ldd lines: "libx.so.1 => /path (0x...)", "/lib64/ld-linux-x86-64.so.2 (0x...)",
# "linux-vdso.so.1 (0x...)" (in the kernel, nothing to copy), "libx.so.1 => not found".
libs=()
ldd_libs() {
	local out line p
	out=$(LC_ALL=C ldd "$1" 2>&1) || {
		case $out in
		*"not a dynamic executable"* | *"statically linked"*) return 0 ;;
		*) die "ldd $1 failed: $out" ;;
		esac
	}
	while read -r line; do
		[ -n "$line" ] || continue
		case $line in
		*"=> not found"*) die "library not found: ${line%% *} (needed by $1)" ;;
		*"=> /"*)
			p=${line#*=> }
			libs+=("${p%% (*}")
			;;
		/*)
			libs+=("${line%% (*}")
			;;
		linux-vdso.so.* | linux-gate.so.*) ;;
		*) die "unexpected ldd line: $line" ;;
		esac
	done <<<"$out"
}
ldd_libs "$bin"

# The directories the binary's libraries were found in, in order: where dlopen() in the
# image finds a library by its soname.
dirs=()
for l in "${libs[@]}"; do
	d=${l%/*}
	case " ${dirs[*]} " in *" $d "*) ;; *) dirs+=("$d") ;; esac
done
for so in $dlopen_libs; do
	found=
	for d in "${dirs[@]}"; do
		if [ -f "$d/$so" ]; then
			found=$d/$so
			break
		fi
	done
	[ -n "$found" ] || die "library $so (loaded with dlopen by the binary) not found in: ${dirs[*]}"
	libs+=("$found")
	ldd_libs "$found"
done

put "$bin" /hyperlight-device-plugin 0755
for l in $(printf '%s\n' "${libs[@]}" | awk '!seen[$0]++'); do
	[ -f "$l" ] || die "library $l: no such file"
	put "$l" "$l" 0755
done
put "$ca" /etc/ssl/certs/ca-certificates.crt 0644

find "$root" -type d -exec chmod 0755 {} +
if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
	find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
fi
