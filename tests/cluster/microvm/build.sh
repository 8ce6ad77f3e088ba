#!/bin/sh
# build.sh [--tiny] OUT_DIR: the microVM pod's pieces, from this Debian 12 host's own packages
# (qemu-system-x86, linux-image-amd64, busybox-static, cpio, binutils, xz-utils, gcc).
#
#   OUT_DIR/rootfs/                   the container's whole root: busybox (static) with its
#                                     applets, the QEMU closure (below) and /microvm/
#   OUT_DIR/rootfs/microvm/vmlinux    the guest kernel: the Debian kernel's ELF, unpacked from
#                                     /boot/vmlinuz-<version> (QEMU boots it by its PVH note:
#                                     no firmware decompression, no bzImage setup code)
#   OUT_DIR/rootfs/microvm/initramfs.cpio  busybox-static, virtio_net and what it needs, init
#   OUT_DIR/rootfs/microvm/tiny.elf   the tiny guest (MICROVM_GUEST=tiny): tiny/tiny.c, a
#                                     freestanding 32-bit ELF QEMU also enters by its PVH note
#   OUT_DIR/rootfs/microvm/run-in-pod.sh   what the pod's container runs
#
# The QEMU closure (and iputils' ping, for the pod side: see $ping below): /usr/bin/qemu-system-x86_64, exactly the libraries ldd resolves for it
# and for its TCG accelerator module (accel-tcg-x86_64.so, which QEMU loads from
# /usr/lib/x86_64-linux-gnu/qemu when -accel tcg), at the same paths, the dynamic loader,
# and the three firmware files the command line of run-in-pod.sh opens (strace):
# /usr/share/seabios/bios-256k.bin, /usr/share/qemu/kvmvapic.bin, /usr/share/qemu/pvh.bin
# (the NIC's option ROM is off: romfile=). The build proves it complete: it boots the guest
# in `chroot OUT_DIR/rootfs` (TCG, no network device) to its init, and the tiny guest to its
# `MICROVM: FAIL no virtio-net ...` and isa-debug-exit.
#
# MICROVM_KERNEL=<version> picks another installed kernel (default: the newest in /boot).
#
# --tiny: only what MICROVM_GUEST=tiny needs (make test-live-kvm's micro-VM step): no
# microvm/vmlinux, no microvm/initramfs.cpio and no Linux guest boot in the chroot (the tiny
# guest's boot there still proves the closure); no kernel or modules needed.
set -eu

tiny_only=
if [ "${1:-}" = --tiny ]; then
	tiny_only=1
	shift
fi
out=${1:?usage: build.sh [--tiny] OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
kver=${MICROVM_KERNEL:-$(printf '%s\n' /boot/vmlinuz-* | sed 's|/boot/vmlinuz-||' | sort -V | tail -n 1)}
vmlinuz=/boot/vmlinuz-$kver
moddir=/lib/modules/$kver
qemu=/usr/bin/qemu-system-x86_64
tcgmod=/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so
# the pod's ping: iputils (package iputils-ping), which uses an ICMP datagram socket
# (net.ipv4.ping_group_range) when it has no CAP_NET_RAW; busybox's ping needs a raw socket
ping=/usr/bin/ping
firmware="/usr/share/seabios/bios-256k.bin /usr/share/qemu/kvmvapic.bin /usr/share/qemu/pvh.bin"
modules_wanted="virtio_pci virtio_net"

linux_files="$vmlinuz $moddir/modules.dep"
linux_tools="cpio xz modinfo"
[ -z "$tiny_only" ] || linux_files='' linux_tools=''
for f in $linux_files "$qemu" "$tcgmod" "$ping" /bin/busybox $firmware; do
	[ -e "$f" ] || { echo "build.sh: missing $f" >&2; exit 1; }
done
for t in $linux_tools ldd readelf gcc; do
	command -v "$t" >/dev/null || { echo "build.sh: missing tool $t" >&2; exit 1; }
done

mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/rootfs" "$out/initramfs"
root=$out/rootfs
mkdir -p "$root/microvm"

if [ -z "$tiny_only" ]; then
	# ---- the guest kernel: the ELF inside the bzImage (xz on Debian 12) ----
	off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -n 1 | cut -d: -f1)
	[ -n "$off" ] || { echo "build.sh: no xz payload in $vmlinuz" >&2; exit 1; }
	tail -c +$((off + 1)) "$vmlinuz" | xz -dc --single-stream -q >"$root/microvm/vmlinux" 2>/dev/null || true
	readelf -n "$root/microvm/vmlinux" 2>/dev/null | grep -q 'Unknown note type: (0x00000012)' || {
		echo "build.sh: $vmlinuz: unpacked kernel has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY)" >&2
		exit 1
	}
fi

# ---- the tiny guest: freestanding 32-bit C (no libc, no multilib needed), entered by PVH ----
gcc -m32 -march=i686 -Os -ffreestanding -fno-pic -fno-stack-protector -fno-asynchronous-unwind-tables \
	-mgeneral-regs-only -Wall -Wextra -nostdlib -static -no-pie \
	-Wl,-T,"$here/tiny/tiny.ld" -Wl,--build-id=none -Wl,--no-warn-rwx-segments \
	-o "$root/microvm/tiny.elf" "$here/tiny/tiny.c"
readelf -n "$root/microvm/tiny.elf" | grep -q 'Unknown note type: (0x00000012)' || {
	echo "build.sh: tiny.elf has no PVH entry note" >&2
	exit 1
}

if [ -z "$tiny_only" ]; then
	# ---- the initramfs ----
	ir=$out/initramfs
	mkdir -p "$ir/bin" "$ir/sbin" "$ir/proc" "$ir/sys" "$ir/dev" "$ir/tmp" "$ir/etc" "$ir/lib/modules"
	cp /bin/busybox "$ir/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ -e "$ir/bin/$a" ] || ln -s busybox "$ir/bin/$a"
	done
	cp "$here/init" "$ir/init"
	chmod 0755 "$ir/init"
	# a module's dependencies first (modinfo's depends:), each once; built-in ones have no .ko
	: >"$ir/etc/modules.order"
	add_module() {
		grep -qx "$1" "$ir/etc/modules.order" && return 0
		f=$(modinfo -k "$kver" -F filename "$1") || { echo "build.sh: no module $1" >&2; exit 1; }
		case $f in
		"(builtin)") return 0 ;;
		esac
		for d in $(modinfo -k "$kver" -F depends "$1" | tr ',' ' '); do
			add_module "$d"
		done
		# (sh has no locals: the recursion above reused $f)
		f=$(modinfo -k "$kver" -F filename "$1")
		case $f in
		*.ko) cp "$f" "$ir/lib/modules/$1.ko" ;;
		*.ko.xz) xz -dc "$f" >"$ir/lib/modules/$1.ko" ;;
		*.ko.zst) zstd -dcq "$f" >"$ir/lib/modules/$1.ko" ;;
		*) echo "build.sh: $f: unknown module format" >&2; exit 1 ;;
		esac
		echo "$1" >>"$ir/etc/modules.order"
	}
	for m in $modules_wanted; do
		add_module "$m"
	done
	(cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$root/microvm/initramfs.cpio"
fi

# ---- the container's root: busybox, then QEMU's closure ----
mkdir -p "$root/bin" "$root/tmp" "$root/dev" "$root/proc" "$root/sys" "$root/run"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do
	[ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"
done
copy() { # copy PATH to the same path under the root, its symlink chain too
	p=$1
	while :; do
		mkdir -p "$root$(dirname "$p")"
		if [ -L "$p" ]; then
			t=$(readlink "$p")
			[ -e "$root$p" ] || [ -L "$root$p" ] || ln -s "$t" "$root$p"
			case $t in /*) p=$t ;; *) p=$(dirname "$p")/$t ;; esac
		else
			cp "$p" "$root$p"
			return
		fi
	done
}
libs() { # the libraries ldd resolves, and the loader
	ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'
}
copy "$qemu"
copy "$tcgmod"
copy "$ping"
for l in $( (libs "$qemu"; libs "$tcgmod"; libs "$ping") | sort -u); do
	copy "$l"
done
for f in $firmware; do
	copy "$f"
done
# /usr/share/qemu/bios-256k.bin is the name QEMU asks for first on some builds
[ -e /usr/share/qemu/bios-256k.bin ] && copy /usr/share/qemu/bios-256k.bin
cp "$here/run-in-pod.sh" "$root/microvm/run-in-pod.sh"
chmod 0755 "$root/microvm/run-in-pod.sh"

# ---- proof: the closure runs with nothing else (a chroot of rootfs) ----
chroot "$root" /usr/bin/qemu-system-x86_64 --version | head -n 1
if [ -z "$tiny_only" ]; then
	log=$out/build-proof.log
	start=$(date +%s)
	chroot "$root" /bin/timeout 120 /usr/bin/qemu-system-x86_64 -accel tcg -cpu max -m 256 -smp 1 \
		-M pc -nodefaults -no-user-config -display none -monitor none -no-reboot \
		-serial stdio -kernel /microvm/vmlinux -initrd /microvm/initramfs.cpio \
		-append "console=ttyS0 panic=-1 quiet rdinit=/init" </dev/null >"$log" 2>&1 || true
	if grep -q 'MICROVM: FAIL no eth0' "$log"; then
		echo "build.sh: closure proven: chroot $root boots the guest to its init (TCG, no NIC) in $(($(date +%s) - start)) s"
	else
		echo "build.sh: closure proof failed, see $log" >&2
		tail -n 20 "$log" >&2
		exit 1
	fi
fi
# the tiny guest, in the same chroot, with no NIC: its FAIL line, then QEMU's exit status 35
rc=0
chroot "$root" /bin/timeout 60 /usr/bin/qemu-system-x86_64 -accel tcg -cpu max -m 128 -smp 1 \
	-M pc -nodefaults -no-user-config -display none -monitor none -no-reboot \
	-serial stdio -kernel /microvm/tiny.elf -device isa-debug-exit,iobase=0xf4,iosize=4 \
	</dev/null >"$out/build-proof-tiny.log" 2>&1 || rc=$?
if [ $rc = 35 ] && grep -q 'MICROVM: FAIL no virtio-net' "$out/build-proof-tiny.log"; then
	echo "build.sh: the tiny guest boots in the chroot (TCG, no NIC) to its FAIL line and isa-debug-exit"
else
	echo "build.sh: tiny guest proof failed (exit $rc), see $out/build-proof-tiny.log" >&2
	tail -n 5 "$out/build-proof-tiny.log" >&2
	exit 1
fi
[ -n "$tiny_only" ] || echo "build.sh: kernel $kver, modules: $(tr '\n' ' ' <"$ir/etc/modules.order")"
sz() { du -sh --apparent-size "$@" | tail -n 1 | cut -f1; }
if [ -n "$tiny_only" ]; then
	echo "build.sh: sizes (apparent): rootfs $(sz "$root"): QEMU closure and ping $(sz -c "$root/usr" "$root/lib" "$root/lib64"), busybox $(sz "$root/bin"), tiny.elf $(sz "$root/microvm/tiny.elf") (--tiny: no Linux guest)"
	exit 0
fi
echo "build.sh: sizes (apparent): rootfs $(sz "$root"): QEMU closure and ping $(sz -c "$root/usr" "$root/lib" "$root/lib64"), busybox $(sz "$root/bin"), vmlinux $(sz "$root/microvm/vmlinux"), initramfs $(sz "$root/microvm/initramfs.cpio"), tiny.elf $(sz "$root/microvm/tiny.elf")"
