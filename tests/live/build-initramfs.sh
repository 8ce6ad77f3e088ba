#!/bin/sh
# Build the initramfs of the live KVM test: busybox-static, the kernel's KVM modules (amd64:
# Debian's kvm/kvm-amd and their dependencies; arm64: none, KVM is built in), the companions'
# modules (amd64: tun, vhost_net, vhost_vsock and their dependencies, loaded by the driver, not
# by init), the daemon and its
# node-label program with exactly the shared libraries the dynamic loader resolves plus the
# loader, the seccomp check library (tests/fakes/scprobe.c) likewise, the live-kvm driver (static Go),
# the workload's KVM check sdp-kvm-run (tests/cluster/kvm-run, built static here) and tests/live/init;
# amd64: the micro-VM pod's root at /microvm-pod (tests/cluster/microvm/build.sh --tiny: busybox,
# QEMU's closure, ping, /microvm/tiny.elf and run-in-pod.sh; the driver's micro-VM steps).
# Usage: tests/live/build-initramfs.sh BUILD_DIR [arm64 STATIC_BUILD_DIR]
# Writes BUILD_DIR/live/initramfs.cpio and BUILD_DIR/live/vmlinuz (a symlink to the kernel).
#
# amd64 (BUILD_DIR the native build): the installed kernel, modules and busybox (scripts/
# install-deps.sh live-kvm). LIVE_KVM_KERNEL=<version> picks another installed kernel (default:
# the one linux-image-amd64 depends on).
#
# arm64 (BUILD_DIR the cross build, build-arm64; scripts/install-deps.sh live-kvm-arm64): the
# guest's Debian packages, linux-image-<version>-arm64 (the one linux-image-arm64:arm64
# depends on, or LIVE_KVM_KERNEL=<version>) and busybox-static:arm64, fetched with apt-get
# download into BUILD_DIR/live/debs (kept for the next run) and unpacked there, never
# installed. The kernel's config must say CONFIG_KVM=y. The programs of the guest run on this
# machine under qemu-aarch64-static: the loader's --list for the libraries, --version in a
# chroot of the tree. STATIC_BUILD_DIR (scripts/build-static.sh --arch arm64) gives the image's
# musl build of the daemon and its label program, at /image/ with musl's loader at
# /lib/ld-musl-aarch64.so.1: the pod layout runs that one (-pod-daemon in /etc/live-kvm-args).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
arch=${2:-amd64}
out="$build/live"
root="$out/root"

die() { echo "build-initramfs: $*" >&2; exit 1; }

# installed_kernel: the version of the kernel linux-image-amd64 depends on.
installed_kernel() {
	dep=$(dpkg-query -W -f='${Depends}' linux-image-amd64 2>/dev/null) ||
		die "linux-image-amd64 is not installed (scripts/install-deps.sh live-kvm)"
	# "linux-image-6.1.0-57-amd64 (= 6.1.192-3)" -> 6.1.0-57-amd64
	echo "$dep" | sed -n 's/^linux-image-\([^ ,]*\).*/\1/p'
}

# fetch PACKAGE VERSION PATH...: the PATHs of PACKAGE:arm64 VERSION unpacked into $pkg, the
# .deb fetched into $debs by apt-get download unless it is there; unpacked once per .deb (a
# stamp file: the kernel's data.tar.xz takes about 10 s to scan).
fetch() {
	name=$1 version=$2
	shift 2
	deb="$debs/${name}_$(echo "$version" | sed 's/:/%3a/')_arm64.deb"
	if [ ! -s "$deb" ]; then
		sandbox=""
		[ "$(id -u)" -ne 0 ] || sandbox="-o APT::Sandbox::User=root"
		# shellcheck disable=SC2086
		(cd "$debs" && apt-get download -q $sandbox "$name:arm64=$version" >/dev/null) ||
			die "apt-get download $name:arm64=$version failed (apt-get update?)"
		[ -s "$deb" ] || die "$deb missing after apt-get download"
		echo "build-initramfs: fetched $(basename "$deb")"
	fi
	stamp="$pkg/.unpacked-$(basename "$deb")"
	[ ! -e "$stamp" ] || return 0
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$pkg" "$@" || die "unpacking $* from $deb failed"
	touch "$stamp"
}

# is_static FILE: an ELF file with no program interpreter.
is_static() {
	readelf -l "$1" >/dev/null 2>&1 && ! readelf -l "$1" | grep -q 'Requesting program interpreter'
}

case "$arch" in
amd64)
	# Load order: every module after its dependencies (checked against modinfo below).
	MODULES="irqbypass kvm ccp kvm-amd"
	# The companions' drivers (Debian's 6.1: CONFIG_TUN, CONFIG_VHOST_NET, CONFIG_VHOST_VSOCK
	# =m), in load order; init does not load them: the driver's companion steps insmod and
	# rmmod them (lib/modules/companions).
	COMPANION_MODULES="tun tap vhost-iotlb vhost vhost-net vsock vmw-vsock-virtio-transport-common vhost-vsock"
	ver=${LIVE_KVM_KERNEL:-$(installed_kernel)}
	[ -n "$ver" ] || die "cannot tell the kernel version of linux-image-amd64"
	kernel="/boot/vmlinuz-$ver"
	[ -d "/lib/modules/$ver" ] || die "/lib/modules/$ver missing"
	# The companion steps unload and reload the companions' drivers: they must be modules.
	config="/boot/config-$ver"
	[ -r "$config" ] || die "$config missing or unreadable"
	for o in CONFIG_TUN CONFIG_VHOST_NET CONFIG_VHOST_VSOCK; do
		grep -qx "$o=m" "$config" ||
			die "$config: $o is not a module ($(grep "^$o=\|$o is not set" "$config" || echo "no $o")); the companion steps rmmod and insmod it"
	done
	busybox=/bin/busybox
	run=""
	libs() { ldd "$1"; }
	# The micro-VM pod's root (companion.go's micro-VM steps): only the tiny guest's pieces.
	mkdir -p "$out"
	"$here/../cluster/microvm/build.sh" --tiny "$out/microvm" >"$out/microvm.log" 2>&1 ||
		die "tests/cluster/microvm/build.sh --tiny failed: $(tail -n 5 "$out/microvm.log")"
	microvm="$out/microvm/rootfs"
	;;
arm64)
	MODULES=""
	COMPANION_MODULES=""
	microvm=""
	[ -n "${3:-}" ] || die "usage: build-initramfs.sh BUILD_DIR arm64 STATIC_BUILD_DIR"
	static=$(cd "$3" && pwd)
	debs="$out/debs"
	pkg="$out/pkg"
	mkdir -p "$debs" "$pkg"
	kpkg=linux-image-${LIVE_KVM_KERNEL:-arm64}
	# The versions apt would fetch (the machine's lists), in one apt-cache call (each takes 2-3 s):
	# "PACKAGE<tab>VERSION<tab>DEPENDS" per package.
	info=$(apt-cache show --no-all-versions "$kpkg:arm64" busybox-static:arm64 2>/dev/null |
		awk -F': ' '/^Package:/ { p = $2 } /^Version:/ { v[p] = $2 } /^Depends:/ { d[p] = $2 }
			END { for (p in v) print p "\t" v[p] "\t" d[p] }')
	field() { echo "$info" | awk -F'\t' -v p="$1" -v f="$2" '$1 == p { print $f }'; }
	if [ -n "${LIVE_KVM_KERNEL:-}" ]; then
		ver=$LIVE_KVM_KERNEL
		kver=$(field "$kpkg" 2)
	else
		# Depends: "linux-image-6.1.0-57-arm64 (= 6.1.192-3)"
		dep=$(field linux-image-arm64 3)
		ver=$(echo "$dep" | sed -n 's/^linux-image-\([^ ,]*\) (= \([^)]*\)).*/\1/p')
		kver=$(echo "$dep" | sed -n 's/^linux-image-\([^ ,]*\) (= \([^)]*\)).*/\2/p')
	fi
	bver=$(field busybox-static 2)
	if [ -z "$ver" ] || [ -z "$kver" ] || [ -z "$bver" ]; then
		die "apt knows no $kpkg:arm64 or busybox-static:arm64 (scripts/install-deps.sh arm64 adds the architecture; then apt-get update)"
	fi
	fetch "linux-image-$ver" "$kver" "./boot/vmlinuz-$ver" "./boot/config-$ver"
	fetch busybox-static "$bver" ./bin/busybox
	kernel="$pkg/boot/vmlinuz-$ver"
	grep -qx 'CONFIG_KVM=y' "$pkg/boot/config-$ver" ||
		die "linux-image-$ver: KVM is not built in ($(grep '^CONFIG_KVM=\|CONFIG_KVM is not set' "$pkg/boot/config-$ver" || echo 'no CONFIG_KVM')); the arm64 guest loads no module"
	busybox="$pkg/bin/busybox"
	command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static missing (scripts/install-deps.sh live-kvm-arm64)"
	run=qemu-aarch64-static
	libs() { qemu-aarch64-static /lib/ld-linux-aarch64.so.1 --list "$1"; }
	image="$static/image-context-hyperlight/rootfs"
	for f in hyperlight-device-plugin hyperlight-label-node lib/ld-musl-aarch64.so.1; do
		[ -x "$image/$f" ] || die "$image/$f missing (scripts/build-static.sh --arch arm64 $static)"
	done
	;;
*) die "unknown architecture $arch (amd64, arm64)" ;;
esac

[ -r "$kernel" ] || die "$kernel missing or unreadable"
[ -x "$busybox" ] || die "$busybox missing (busybox-static)"
is_static "$busybox" || die "$busybox is not static (install busybox-static)"
daemon="$build/hyperlight-device-plugin"
label="$build/hyperlight-label-node"
driver="$build/live-kvm"
scprobe="$build/tests/fakes/libscprobe.so"
[ -x "$daemon" ] || die "$daemon missing (make build)"
[ -x "$label" ] || die "$label missing (make build)"
[ -f "$scprobe" ] || die "$scprobe missing (make build)"
[ -x "$driver" ] || die "$driver missing (scripts/go-build.sh $build)"
is_static "$driver" || die "$driver is not static (CGO_ENABLED=0)"
# The workload's guest run (live-kvm's kvm-run steps), built static for the guest's architecture.
"$here/../cluster/kvm-run/build.sh" --arch "$arch" "$out/kvm-run" || die "building sdp-kvm-run failed"
kvmrun="$out/kvm-run/sdp-kvm-run"
is_static "$kvmrun" || die "$kvmrun is not static"

rm -rf "$root"
mkdir -p "$root" "$out"
cd "$root"
mkdir -p bin sbin usr/bin usr/sbin usr/local/bin usr/local/lib lib/modules proc sys dev tmp run \
	etc host-dev var/lib/kubelet/device-plugins var/run/cdi root

# busybox and one symlink per applet it has
cp "$busybox" bin/busybox
for applet in $($run "$busybox" --list); do
	[ -e "bin/$applet" ] || ln -s busybox "bin/$applet"
done

# The modules, uncompressed (busybox insmod reads plain ELF), flat in /lib/modules: first the KVM
# modules (init loads them, lib/modules/order), then the companions' (the driver loads them,
# lib/modules/companions). Each must come after every module it depends on.
for m in $MODULES $COMPANION_MODULES; do
	f=$(modinfo -k "$ver" -n "$m") || die "module $m not found for $ver"
	case "$f" in
	*.ko) cp "$f" "lib/modules/$m.ko" ;;
	*.ko.xz) xz -dc "$f" >"lib/modules/$m.ko" ;;
	*.ko.zst) zstd -qdc "$f" >"lib/modules/$m.ko" ;;
	*.ko.gz) gzip -dc "$f" >"lib/modules/$m.ko" ;;
	*) die "module $m: unknown file type $f" ;;
	esac
	# Every dependency must be loaded before it: earlier in $MODULES (or, for a companion's
	# module, earlier in $COMPANION_MODULES or in $MODULES, which init loads).
	for d in $(modinfo -k "$ver" -F depends "$m" | tr ',' ' '); do
		d=$(echo "$d" | tr _ -)
		[ -f "lib/modules/$d.ko" ] || die "module $m depends on $d, which is not loaded before it"
	done
done
echo "$MODULES" >lib/modules/order
echo "$COMPANION_MODULES" >lib/modules/companions
echo "$ver" >lib/modules/version

# The daemon, its node-label program beside it (where the daemon looks for it) and the seccomp
# check, and exactly the libraries the loader resolves for them, at the same paths, plus the
# loader.
cp "$daemon" usr/local/bin/hyperlight-device-plugin
cp "$label" usr/local/bin/hyperlight-label-node
cp "$scprobe" usr/local/lib/libscprobe.so
for f in "$daemon" "$label" "$scprobe"; do
	listed=$(libs "$f") || die "the dynamic loader cannot resolve the libraries of $f"
	echo "$listed" | awk '/=> \// { print $3; next } /^[[:space:]]*\// { print $1 }' | while read -r lib; do
		mkdir -p ".$(dirname "$lib")"
		cp -L "$lib" ".$lib"
	done
done
args=""
if [ "$arch" = arm64 ]; then
	mkdir -p image
	cp "$image/hyperlight-device-plugin" "$image/hyperlight-label-node" image/
	cp "$image/lib/ld-musl-aarch64.so.1" lib/
	args="-pod-daemon /image/hyperlight-device-plugin"
fi
echo "$args" >etc/live-kvm-args
cp "$driver" usr/local/bin/live-kvm
if [ -n "$microvm" ]; then
	cp -a "$microvm" microvm-pod
fi
cp "$kvmrun" usr/local/bin/sdp-kvm-run
cp "$here/init" init
chmod 0755 init
echo "root:x:0:0:root:/root:/bin/sh" >etc/passwd
echo "nobody:x:65534:65534:nobody:/nonexistent:/bin/false" >>etc/passwd
printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
# The kernel opens /dev/console for init before devtmpfs is mounted (init reopens it after).
if [ "$(id -u)" -eq 0 ]; then
	mknod -m 0600 dev/console c 5 1
fi

# The library set is complete if each daemon runs in this tree (as root: chroot; arm64: with the
# emulator copied in for the check and removed after).
if [ "$(id -u)" -eq 0 ]; then
	emu=""
	if [ -n "$run" ]; then
		emu=/.check-emulator
		cp "$(command -v "$run")" ".$emu"
	fi
	for d in /usr/local/bin/hyperlight-device-plugin /usr/local/bin/hyperlight-label-node \
		${args:+/image/hyperlight-device-plugin /image/hyperlight-label-node}; do
		chroot "$root" $emu "$d" --version >/dev/null ||
			die "$d does not run inside the initramfs tree (missing library?)"
	done
	[ -z "$emu" ] || rm -f ".$emu"
fi

find . -print | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 >"$out/initramfs.cpio"
ln -sfn "$kernel" "$out/vmlinuz"
pod=""
[ -z "$microvm" ] || pod=", the micro-VM pod's root /microvm-pod ($(du -sk --apparent-size "$root/microvm-pod" | cut -f1) KiB)"
echo "initramfs: $out/initramfs.cpio ($(du -k "$out/initramfs.cpio" | cut -f1) KiB), kernel $ver ($arch), modules: ${MODULES:-none (built in)}${COMPANION_MODULES:+, companions' modules (loaded by the driver): $COMPANION_MODULES}$pod"
