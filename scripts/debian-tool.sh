#!/bin/sh
# A program from a Debian package, unpacked into the build directory, never installed:
#
#   scripts/debian-tool.sh BUILD_DIR PACKAGE PROGRAM    prints the program's path
#
# e.g. `scripts/debian-tool.sh build prometheus promtool`. The tests need promtool and a
# Prometheus server (Debian's prometheus package) but installing the package would start a
# Prometheus service on the host: `apt-get download` fetches the .deb (from the configured
# Debian mirror, nothing else) and `dpkg-deb -x` unpacks it into BUILD_DIR/debian-tools/PACKAGE.
# Kept between runs; the package lists are refreshed once (as root) when apt cannot find it.
set -eu
[ $# -eq 3 ] || { echo "usage: $0 BUILD_DIR PACKAGE PROGRAM" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)/debian-tools/$2
prog=$dir/usr/bin/$3
if [ -x "$prog" ]; then
	echo "$prog"
	exit 0
fi
mkdir -p "$dir.download"
cd "$dir.download"
if ! apt-get download "$2" >apt.log 2>&1; then
	if [ "$(id -u)" != 0 ]; then
		echo "$0: apt-get download $2 failed (as root, apt-get update is tried first):" >&2
		cat apt.log >&2
		exit 1
	fi
	apt-get update >apt-update.log 2>&1 || { echo "$0: apt-get update failed:" >&2; cat apt-update.log >&2; exit 1; }
	apt-get download "$2" >apt.log 2>&1 || { echo "$0: apt-get download $2 failed:" >&2; cat apt.log >&2; exit 1; }
fi
rm -rf "$dir"
dpkg-deb -x "$2"_*.deb "$dir"
rm -f "$2"_*.deb
[ -x "$prog" ] || { echo "$0: package $2 has no usr/bin/$3" >&2; exit 1; }
rm -rf "$dir.download"
echo "$prog"
