#!/bin/sh
# Build (or find in the cache) the small guest kernel of make test-live-vfio-iommufd: Debian's
# linux-source-6.12 (bookworm-backports; Debian 12's own kernels have no CONFIG_IOMMUFD),
# `make tinyconfig` for x86_64 plus tests/live/kernel-iommufd.config, everything built in.
# bookworm-backports is reached through a private apt list under the cache (Dir::Etc::SourceList,
# Dir::State::Lists, Dir::Cache of its own): the machine's apt sources are never changed.
# The bzImage is kept outside the checkout, in CACHE/<key>/bzImage, key = sha256 of the config
# fragment, the source package version and this recipe's version, so a second run builds nothing.
# Usage: tests/live/build-kernel-iommufd.sh   (prints the bzImage's path, its only stdout; the
#        rest goes to stderr)
# LIVE_IOMMUFD_CACHE: the cache (default /var/cache/sdp-live-kernel).
# LIVE_IOMMUFD_KERNEL: a bzImage to use as it is (nothing fetched or built).
# LIVE_IOMMUFD_JOBS: make -j (default: nproc).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
fragment="$here/kernel-iommufd.config"
pkg=linux-source-6.12
recipe=1 # bump when the steps below change what gets built

die() { echo "build-kernel-iommufd: $*" >&2; exit 1; }
say() { echo "build-kernel-iommufd: $*" >&2; }

if [ -n "${LIVE_IOMMUFD_KERNEL:-}" ]; then
	[ -r "$LIVE_IOMMUFD_KERNEL" ] || die "LIVE_IOMMUFD_KERNEL=$LIVE_IOMMUFD_KERNEL unreadable"
	echo "$LIVE_IOMMUFD_KERNEL"
	exit 0
fi
cache=${LIVE_IOMMUFD_CACHE:-/var/cache/sdp-live-kernel}
jobs=${LIVE_IOMMUFD_JOBS:-$(nproc)}
mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/apt/dl"
list="$cache/apt/sources.list"
echo "deb http://deb.debian.org/debian bookworm-backports main" >"$list"
aptp() {
	apt-get -q -o Dir::Etc::SourceList="$list" -o Dir::Etc::SourceParts=/dev/null \
		-o Dir::State::Lists="$cache/apt/lists" -o Dir::Cache="$cache/apt/cache" \
		-o APT::Sandbox::User=root "$@"
}

# The last (by name) downloaded .deb of the source package, or nothing.
cached_deb() {
	found=""
	for f in "$cache/apt/dl/${pkg}_"*_all.deb; do
		[ -f "$f" ] && found=$f
	done
	echo "$found"
}
# The source package: downloaded once (the newest version the private list offers then).
deb=$(cached_deb)
if [ -z "$deb" ]; then
	say "fetching $pkg from bookworm-backports (private apt list $list)"
	aptp update >&2 || die "apt-get update of $list failed"
	(cd "$cache/apt/dl" && aptp download "$pkg" >&2) || die "apt-get download $pkg failed"
	deb=$(cached_deb)
	[ -n "$deb" ] || die "apt-get download left no ${pkg}_*_all.deb in $cache/apt/dl"
fi
version=$(dpkg-deb -f "$deb" Version)
key=$( (cat "$fragment"; echo "$pkg $version recipe $recipe") | sha256sum | cut -c1-16)
dir="$cache/$key"
if [ -s "$dir/bzImage" ]; then
	say "cached: $dir/bzImage ($pkg $version)"
	echo "$dir/bzImage"
	exit 0
fi

for tool in bc bison flex gcc make xz perl; do
	command -v "$tool" >/dev/null || die "$tool missing (scripts/install-deps.sh live-iommufd)"
done
[ -e /usr/include/libelf.h ] || die "libelf-dev missing (scripts/install-deps.sh live-iommufd)"
[ -e /usr/include/openssl/ssl.h ] || die "libssl-dev missing (scripts/install-deps.sh live-iommufd)"

src="$cache/src/$pkg-$version"
if [ ! -f "$src/.extracted" ]; then
	say "extracting $deb"
	rm -rf "$src"
	mkdir -p "$src"
	dpkg-deb --fsys-tarfile "$deb" | tar -xOf - "./usr/src/$pkg.tar.xz" | tar -xJf - -C "$src" --strip-components=1
	[ -f "$src/Makefile" ] || die "no kernel tree in $deb"
	touch "$src/.extracted"
fi

obj="$cache/build-$key"
rm -rf "$obj"
mkdir -p "$obj"
say "configuring in $obj: tinyconfig + $(basename "$fragment")"
make -s -C "$src" O="$obj" ARCH=x86_64 tinyconfig >&2
"$src/scripts/kconfig/merge_config.sh" -m -O "$obj" "$obj/.config" "$fragment" >/dev/null
make -s -C "$src" O="$obj" ARCH=x86_64 olddefconfig >&2
# Every option of the fragment as written, or the build stops here.
grep '^CONFIG_' "$fragment" | while IFS= read -r line; do
	grep -qx "$line" "$obj/.config" || echo "$line (got: $(grep "^${line%%=*}=" "$obj/.config" || echo unset))"
done >"$obj/config-mismatch"
[ ! -s "$obj/config-mismatch" ] || die "options of $fragment dropped by olddefconfig:
$(cat "$obj/config-mismatch")"
grep -q '^CONFIG_MODULES=y' "$obj/.config" && die "CONFIG_MODULES=y: everything must be built in"

say "building bzImage ($pkg $version, make -j$jobs)"
start=$(date +%s)
make -s -C "$src" O="$obj" ARCH=x86_64 -j"$jobs" bzImage >&2
say "built in $(($(date +%s) - start)) s"
mkdir -p "$dir"
cp "$obj/.config" "$dir/config"
cp "$obj/arch/x86/boot/bzImage" "$dir/bzImage.tmp"
mv "$dir/bzImage.tmp" "$dir/bzImage"
echo "$pkg $version" >"$dir/version"
rm -rf "$obj"
echo "$dir/bzImage"
