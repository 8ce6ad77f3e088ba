#!/bin/sh
# Build the initramfs of the live KVM test: busybox-static, Debian's kvm/kvm-amd modules (and
# their dependencies) for the kernel we boot, the daemon with exactly the shared libraries ldd
# resolves plus the dynamic loader, the live-kvm driver (static Go) and tests/live/init.
# Usage: tests/live/build-initramfs.sh BUILD_DIR
# Writes BUILD_DIR/live/initramfs.cpio and BUILD_DIR/live/vmlinuz (a symlink to the kernel).
# LIVE_KVM_KERNEL=<version> picks another installed kernel (default: the one linux-image-amd64
# depends on).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
out="$build/live"
root="$out/root"
# Load order: every module after its dependencies (checked against modinfo below).
MODULES="irqbypass kvm ccp kvm-amd"

die() { echo "build-initramfs: $*" >&2; exit 1; }

kernel_version() {
	if [ -n "${LIVE_KVM_KERNEL:-}" ]; then
		echo "$LIVE_KVM_KERNEL"
		return
	fi
	dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) ||
		die "linux-image-amd64 is not installed (scripts/install-deps.sh live-kvm)"
	# "linux-image-6.1.0-57-amd64 (= 6.1.192-3)" -> 6.1.0-57-amd64
	echo "$dep" | sed -n 's/^linux-image-\([^ ,]*\).*/\1/p'
}

ver=$(kernel_version)
[ -n "$ver" ] || die "cannot tell the kernel version of linux-image-amd64"
kernel="/boot/vmlinuz-$ver"
moddir="/lib/modules/$ver"
[ -r "$kernel" ] || die "$kernel missing or unreadable"
[ -d "$moddir" ] || die "$moddir missing"
busybox=/bin/busybox
[ -x "$busybox" ] || die "$busybox missing (busybox-static)"
ldd "$busybox" 2>&1 | grep -q 'not a dynamic executable' || die "$busybox is not static (install busybox-static)"
daemon="$build/hyperlight-device-plugin"
driver="$build/live-kvm"
[ -x "$daemon" ] || die "$daemon missing (make build)"
[ -x "$driver" ] || die "$driver missing (scripts/go-build.sh $build)"
ldd "$driver" 2>&1 | grep -q 'not a dynamic executable' || die "$driver is not static (CGO_ENABLED=0)"

rm -rf "$root"
mkdir -p "$root" "$out"
cd "$root"
mkdir -p bin sbin usr/bin usr/sbin usr/local/bin lib/modules proc sys dev tmp run etc host-dev \
	var/lib/kubelet/device-plugins var/run/cdi root

# busybox and one symlink per applet it has
cp "$busybox" bin/busybox
for applet in $("$busybox" --list); do
	[ -e "bin/$applet" ] || ln -s busybox "bin/$applet"
done

# The modules, uncompressed (busybox insmod reads plain ELF), flat in /lib/modules.
for m in $MODULES; do
	f=$(modinfo -k "$ver" -n "$m") || die "module $m not found for $ver"
	case "$f" in
	*.ko) cp "$f" "lib/modules/$m.ko" ;;
	*.ko.xz) xz -dc "$f" >"lib/modules/$m.ko" ;;
	*.ko.zst) zstd -qdc "$f" >"lib/modules/$m.ko" ;;
	*.ko.gz) gzip -dc "$f" >"lib/modules/$m.ko" ;;
	*) die "module $m: unknown file type $f" ;;
	esac
	# Every dependency must be loaded before it: earlier in $MODULES.
	for d in $(modinfo -k "$ver" -F depends "$m" | tr ',' ' '); do
		d=$(echo "$d" | tr _ -)
		[ -f "lib/modules/$d.ko" ] || die "module $m depends on $d, which is not loaded before it"
	done
done
echo "$MODULES" >lib/modules/order
echo "$ver" >lib/modules/version

# The daemon and exactly the libraries ldd resolves for it, at the same paths, plus the loader.
cp "$daemon" usr/local/bin/hyperlight-device-plugin
ldd "$daemon" | awk '/=> \// { print $3; next } /^[[:space:]]*\// { print $1 }' | while read -r lib; do
	mkdir -p ".$(dirname "$lib")"
	cp -L "$lib" ".$lib"
done
cp "$driver" usr/local/bin/live-kvm
cp "$here/init" init
chmod 0755 init
echo "root:x:0:0:root:/root:/bin/sh" >etc/passwd
echo "nobody:x:65534:65534:nobody:/nonexistent:/bin/false" >>etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
# The kernel opens /dev/console for init before devtmpfs is mounted (init reopens it after).
if [ "$(id -u)" -eq 0 ]; then
	mknod -m 0600 dev/console c 5 1
fi

# The library set is complete if the daemon runs in this tree (as root: chroot).
if [ "$(id -u)" -eq 0 ]; then
	chroot "$root" /usr/local/bin/hyperlight-device-plugin --version >/dev/null ||
		die "the daemon does not run inside the initramfs tree (missing library?)"
fi

find . -print | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 >"$out/initramfs.cpio"
ln -sfn "$kernel" "$out/vmlinuz"
echo "initramfs: $out/initramfs.cpio ($(du -k "$out/initramfs.cpio" | cut -f1) KiB), kernel $ver, modules: $MODULES"
