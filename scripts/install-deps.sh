#!/bin/sh
# Install the Debian 12 packages the build and the tests need (nothing else is downloaded).
# Run by every make target; does nothing when everything is present.
# Usage: scripts/install-deps.sh [PROFILE]. Without PROFILE: the build and `make test`
# (including musl-tools for the musl build of the hyperlight image, pci.ids for kata's SKU name
# table, and Node.js with npm for the manifest checks: npm is looked for with `command -v`, so a
# Node.js from elsewhere, e.g. NodeSource's, which bundles npm, is used as it is).
# Profile live-kvm: what `make test-live-kvm` adds (QEMU, Debian's kernel and modules,
# busybox-static and cpio for the guest's initramfs, readelf; for its micro-VM step, built by
# tests/cluster/microvm/build.sh --tiny: gcc for the tiny guest, iputils-ping for the pod's ping,
# and QEMU again, copied into the guest).
# Profile live-kvm-arm64: what `make test-live-kvm-arm64` adds to arm64: qemu-system-arm (its
# qemu-system-aarch64), cpio, readelf. The guest's own packages, linux-image-<version>-arm64
# and busybox-static:arm64, are not installed: tests/live/build-initramfs.sh fetches them with
# apt-get download and unpacks them into the build directory.
# Profile live-iommufd: what `make test-live-vfio-iommufd` adds to live-kvm: the kernel build
# tools (bc, bison, flex, libelf-dev, libssl-dev, xz-utils, binutils) for the small guest kernel
# built from linux-source-6.12 (bookworm-backports, fetched through a private apt list by
# tests/live/build-kernel-iommufd.sh, never by changing the machine's sources).
# Profile cluster: what `make cluster` adds (the real single-node cluster, cluster/README.md):
# iptables (the nft backend; kube-proxy, the kubelet and the CNI plugins' rules), nftables (make
# cluster-down deletes the tables iptables-nft made), conntrack (kube-proxy clears UDP flows with
# it), containernetworking-plugins (the pods' bridge, host-local, loopback, portmap in
# /usr/lib/cni), busybox-static (the workload image), curl (health checks), jq and python3-yaml
# (make test-cluster reads the API's JSON and kata's CDI specs); the Go toolchain is
# not Debian's (1.19 is too old): cluster/build.sh wants Go >= 1.26.
# Profile lint: what `make lint` adds (clang-tidy 14, cppcheck 2.10; gcc is already there).
# Profile runtime: what `make images` and `make test-runtime` add (podman 4.3, runc, conmon,
# uidmap, busybox-static for the workload image), with the arm64 profile (the arm64 images'
# cross builds; qemu-user-static, which test-runtime runs them under).
# Profile static: what scripts/build-static.sh adds (musl-tools: musl libc and musl-gcc, for
# the static kata binary).
# Profile arm64: what `make build ARCH=arm64`, `scripts/build-static.sh --arch arm64` (and so
# `make images`) and `make test-arm64` add: Debian's arm64 architecture (dpkg --add-architecture arm64), the cross
# compiler, the arm64 -dev packages of every library we link (their static libraries and
# pkg-config files, installed beside the amd64 ones by multiarch; musl-dev:arm64 for the
# static builds) and qemu-user-static to run the results. The protobuf-c generator (protoc-c),
# meson, ninja and pkg-config stay the amd64 ones of the default profile. Installed with
# --no-remove: an arm64 library whose version differs from the installed amd64 one fails the
# install instead of removing the amd64 package.
#
# Another apt or dpkg (unattended-upgrades on a machine's first boot) may hold the locks: we
# wait for them, up to LOCK_TIMEOUT seconds (default 600), saying once who holds them. A failed
# apt-get step prints apt's own error and stops the script (exit 100, apt's status).
set -eu
PKGS="gcc clang libclang-rt-14-dev make git meson ninja-build pkg-config \
libnghttp2-dev libprotobuf-c-dev libmbedtls-dev protobuf-c-compiler libcmocka-dev libseccomp-dev libjansson-dev \
golang-go golang-google-grpc-dev golang-goprotobuf-dev golang-github-fsnotify-fsnotify-dev protobuf-compiler python3-yaml valgrind openssl pci.ids musl-tools"
need_npm=0
case "${1:-}" in
"") need_npm=1 ;;
live-kvm) PKGS="qemu-system-x86 linux-image-amd64 busybox-static cpio binutils gcc iputils-ping" ;;
live-kvm-arm64) PKGS="qemu-system-arm qemu-user-static cpio binutils" ;;
live-iommufd) PKGS="qemu-system-x86 busybox-static cpio bc bison flex libelf-dev libssl-dev xz-utils binutils" ;;
cluster) PKGS="iptables nftables conntrack containernetworking-plugins busybox-static curl openssl libseccomp-dev python3 python3-yaml jq \
qemu-system-x86 linux-image-amd64 iputils-ping xz-utils cpio binutils" ;;
lint) PKGS="clang-tidy cppcheck" ;;
runtime) PKGS="podman runc conmon uidmap busybox-static" ;;
static) PKGS="musl-tools" ;;
arm64) PKGS="gcc-aarch64-linux-gnu libc6-dev:arm64 libnghttp2-dev:arm64 libprotobuf-c-dev:arm64 \
libseccomp-dev:arm64 libmbedtls-dev:arm64 libcmocka-dev:arm64 libjansson-dev:arm64 musl-dev:arm64 qemu-user-static" ;;
*)
	echo "install-deps.sh: unknown profile '$1' (known: live-kvm, live-kvm-arm64, live-iommufd, cluster, lint, runtime, static, arm64)" >&2
	exit 2
	;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ "$need_npm" = 1 ] && ! command -v npm >/dev/null 2>&1; then
	missing="$missing nodejs npm"
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "missing Debian packages:$missing" >&2
	echo "install them as root: apt-get install -y$missing" >&2
	exit 1
fi

LOCK_TIMEOUT=${LOCK_TIMEOUT:-600}
LISTS_LOCK=/var/lib/apt/lists/lock
DPKG_LOCKS="/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock"
started=$(date +%s)
said_waiting=""

# The process holding an fcntl lock on FILE, as "pid N (command)", from /proc/locks (apt and
# dpkg lock with fcntl(F_SETLK)); nothing when the lock is free.
lock_holder() {
	[ -e "$1" ] || return 0
	ino=$(stat -c %i "$1") || return 0
	pid=$(awk -v ino="$ino" '$2 != "->" && $6 ~ (":" ino "$") { print $5; exit }' /proc/locks 2>/dev/null)
	[ -n "$pid" ] || return 0
	if [ "$pid" -gt 0 ] 2>/dev/null; then
		echo "pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo gone))"
	else
		echo "an unknown process"
	fi
}

# Wait until none of the lock files is held, or LOCK_TIMEOUT seconds after the start.
wait_locks() {
	while :; do
		holder=""
		for f in "$@"; do
			holder=$(lock_holder "$f")
			[ -n "$holder" ] && break
		done
		[ -z "$holder" ] && return 0
		if [ -z "$said_waiting" ]; then
			echo "install-deps.sh: waiting up to ${LOCK_TIMEOUT}s for $f, held by $holder (another apt or dpkg, e.g. unattended-upgrades)"
			said_waiting=1
		fi
		if [ $(($(date +%s) - started)) -ge "$LOCK_TIMEOUT" ]; then
			echo "install-deps.sh: $f still held by $holder after ${LOCK_TIMEOUT}s; nothing installed" >&2
			exit 100
		fi
		sleep 1
	done
}

log=$(mktemp)
err=$(mktemp)
trap 'rm -f "$log" "$err"' EXIT
# apt STEP ARGS...: run apt-get quietly; on failure print apt's own error once and stop.
apt() {
	step=$1
	shift
	if apt-get -o DPkg::Lock::Timeout="$LOCK_TIMEOUT" "$@" >"$log" 2>"$err" </dev/null; then
		return 0
	else
		rc=$?
	fi
	# apt-get update (apt 2.6) does not wait for the lists lock: another update that took it
	# between our check and ours is waited for like the first.
	if [ "$step" = update ] && grep -q "Could not get lock $LISTS_LOCK" "$err" &&
		[ $(($(date +%s) - started)) -lt "$LOCK_TIMEOUT" ]; then
		wait_locks "$LISTS_LOCK"
		apt "$step" "$@"
		return
	fi
	grep -v '^debconf: delaying package configuration' "$err" >&2 || true
	[ -s "$err" ] || tail -20 "$log" >&2
	echo "install-deps.sh: apt-get $step failed (exit $rc); nothing more installed. Packages wanted:$missing" >&2
	exit "$rc"
}

echo "installing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
no_remove=""
if [ "${1:-}" = arm64 ]; then
	no_remove=--no-remove
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		echo "install-deps.sh: dpkg --add-architecture arm64"
		dpkg --add-architecture arm64
	fi
fi
wait_locks "$LISTS_LOCK"
apt update update -qq
wait_locks $DPKG_LOCKS
# shellcheck disable=SC2086
apt install install -y -qq --no-install-recommends $no_remove $missing
