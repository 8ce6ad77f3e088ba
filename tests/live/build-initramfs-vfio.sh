#!/bin/sh
# Build the initramfs of the live VFIO test: busybox-static, Debian's VFIO modules (vfio,
# vfio_iommu_type1, vfio_pci_core, vfio-pci) and snd-hda-intel with every dependency modinfo
# names, in load order, for the kernel we boot; the kata daemon of KATA_BIN with exactly the
# shared libraries ldd resolves plus the dynamic loader; the live-vfio driver (static Go) and
# tests/live/init-vfio.
# Usage: tests/live/build-initramfs-vfio.sh BUILD_DIR KATA_BIN [iommufd BZIMAGE]
# Writes BUILD_DIR/live-vfio-guest/initramfs.cpio and BUILD_DIR/live-vfio-guest/vmlinuz (a symlink).
# LIVE_KVM_KERNEL=<version> picks another installed kernel, as for the KVM test.
# With `iommufd BZIMAGE` (make test-live-vfio-iommufd): the kernel is BZIMAGE, which has everything
# built in (tests/live/build-kernel-iommufd.sh), so no modules; the tree goes to
# BUILD_DIR/live-vfio-iommufd-guest and /etc/live-vfio-mode says iommufd (init-vfio runs
# `live-vfio iommufd`).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
kata=$2
mode=${3:-legacy}
out="$build/live-vfio-guest"
# The modules asked for; their dependencies come first (modinfo), each once.
WANTED="vfio vfio_iommu_type1 vfio-pci snd-hda-intel"
case "$mode" in
legacy) ;;
iommufd)
	[ $# -eq 4 ] || { echo "usage: build-initramfs-vfio.sh BUILD_DIR KATA_BIN [iommufd BZIMAGE]" >&2; exit 2; }
	out="$build/live-vfio-iommufd-guest"
	WANTED=""
	;;
*) echo "build-initramfs-vfio: unknown mode $mode" >&2; exit 2 ;;
esac
root="$out/root"

die() { echo "build-initramfs-vfio: $*" >&2; exit 1; }

kernel_version() {
	if [ -n "${LIVE_KVM_KERNEL:-}" ]; then
		echo "$LIVE_KVM_KERNEL"
		return
	fi
	dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) ||
		die "linux-image-amd64 is not installed (scripts/install-deps.sh live-kvm)"
	echo "$dep" | sed -n 's/^linux-image-\([^ ,]*\).*/\1/p'
}

if [ "$mode" = iommufd ]; then
	kernel=$4
	[ -r "$kernel" ] || die "$kernel missing or unreadable"
	# the setup header's kernel_version (offset 0x20e): the version string's offset less 0x200
	off=$(od -An -tu2 -j526 -N2 "$kernel" | tr -d ' ')
	ver=$(dd if="$kernel" bs=1 skip=$((off + 512)) count=64 2>/dev/null | tr '\000' '\n' | head -1 | cut -d' ' -f1)
	[ -n "$ver" ] || ver=unknown
else
	ver=$(kernel_version)
	[ -n "$ver" ] || die "cannot tell the kernel version of linux-image-amd64"
	kernel="/boot/vmlinuz-$ver"
	[ -r "$kernel" ] || die "$kernel missing or unreadable"
	[ -d "/lib/modules/$ver" ] || die "/lib/modules/$ver missing"
fi
busybox=/bin/busybox
ldd "$busybox" 2>&1 | grep -q 'not a dynamic executable' || die "$busybox is not static (install busybox-static)"
driver="$build/live-vfio"
[ -x "$kata" ] || die "$kata missing"
[ -x "$driver" ] || die "$driver missing (scripts/go-build.sh $build)"
ldd "$driver" 2>&1 | grep -q 'not a dynamic executable' || die "$driver is not static (CGO_ENABLED=0)"

# order: the load order so far (module names with '-'), appended to by add_module.
order=""
add_module() {
	name=$(echo "$1" | tr _ -)
	case " $order " in *" $name "*) return ;; esac
	deps=$(modinfo -k "$ver" -F depends "$1") || die "module $1 not found for $ver"
	for d in $(echo "$deps" | tr ',' ' '); do
		add_module "$d"
	done
	# $1 is this call's own argument (the loop above reused $name)
	name=$(echo "$1" | tr _ -)
	case " $order " in *" $name "*) ;; *) order="$order $name" ;; esac
}
for m in $WANTED; do
	add_module "$m"
done
order=${order# }

rm -rf "$root"
mkdir -p "$root" "$out"
cd "$root"
mkdir -p bin sbin usr/bin usr/sbin usr/local/bin lib/modules proc sys dev tmp run etc \
	var/lib/kubelet/device-plugins var/run/cdi root
cp "$busybox" bin/busybox
for applet in $("$busybox" --list); do
	[ -e "bin/$applet" ] || ln -s busybox "bin/$applet"
done

for m in $order; do
	f=$(modinfo -k "$ver" -n "$m") || die "module $m not found for $ver"
	case "$f" in
	*.ko) cp "$f" "lib/modules/$m.ko" ;;
	*.ko.xz) xz -dc "$f" >"lib/modules/$m.ko" ;;
	*.ko.zst) zstd -qdc "$f" >"lib/modules/$m.ko" ;;
	*.ko.gz) gzip -dc "$f" >"lib/modules/$m.ko" ;;
	*) die "module $m: unknown file type $f" ;;
	esac
	for d in $(modinfo -k "$ver" -F depends "$m" | tr ',' ' '); do
		d=$(echo "$d" | tr _ -)
		[ -f "lib/modules/$d.ko" ] || die "module $m depends on $d, which is not loaded before it"
	done
done
echo "$order" >lib/modules/order
echo "$ver" >lib/modules/version

cp "$kata" usr/local/bin/kata-device-plugin
ldd "$kata" | awk '/=> \// { print $3; next } /^[[:space:]]*\// { print $1 }' | while read -r lib; do
	mkdir -p ".$(dirname "$lib")"
	cp -L "$lib" ".$lib"
done
cp "$driver" usr/local/bin/live-vfio
cp "$here/init-vfio" init
chmod 0755 init
echo "$mode" >etc/live-vfio-mode
echo "root:x:0:0:root:/root:/bin/sh" >etc/passwd
printf 'root:x:0:\n' >etc/group
if [ "$(id -u)" -eq 0 ]; then
	mknod -m 0600 dev/console c 5 1
	chroot "$root" /usr/local/bin/kata-device-plugin --version >/dev/null ||
		die "the daemon does not run inside the initramfs tree (missing library?)"
fi

find . -print | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 >"$out/initramfs.cpio"
ln -sfn "$kernel" "$out/vmlinuz"
echo "initramfs: $out/initramfs.cpio ($(du -k "$out/initramfs.cpio" | cut -f1) KiB), kernel $ver, modules: ${order:-none (built in)}"
