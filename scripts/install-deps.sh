#!/bin/sh
# Install the Debian 12 packages the build and the tests need (nothing else is downloaded).
# Run by every make target; does nothing when everything is present.
# Usage: scripts/install-deps.sh [PROFILE]. Without PROFILE: the build and `make test`.
# Profile live-kvm: what `make test-live-kvm` adds (QEMU, Debian's kernel and modules,
# busybox-static and cpio for the guest's initramfs).
# Profile lint: what `make lint` adds (clang-tidy 14, cppcheck 2.10; gcc is already there).
# Profile runtime: what `make images` and `make test-runtime` add (podman 4.3, runc, conmon,
# uidmap, busybox-static for the workload image).
# Profile static: what scripts/build-static.sh adds (musl-tools: musl libc and musl-gcc, for
# the static kata binary).
set -eu
PKGS="gcc clang libclang-rt-14-dev make git meson ninja-build pkg-config \
libnghttp2-dev libprotobuf-c-dev libmbedtls-dev protobuf-c-compiler libcmocka-dev libseccomp-dev \
golang-go golang-google-grpc-dev golang-goprotobuf-dev golang-github-fsnotify-fsnotify-dev protobuf-compiler python3-yaml valgrind openssl pci.ids musl-tools"
case "${1:-}" in
"") ;;
live-kvm) PKGS="qemu-system-x86 linux-image-amd64 busybox-static cpio" ;;
lint) PKGS="clang-tidy cppcheck" ;;
runtime) PKGS="podman runc conmon uidmap busybox-static" ;;
static) PKGS="musl-tools" ;;
*)
	echo "install-deps.sh: unknown profile '$1' (known: live-kvm, lint, runtime, static)" >&2
	exit 2
	;;
esac
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "missing Debian packages:$missing" >&2
	echo "install them as root: apt-get install -y$missing" >&2
	exit 1
fi
echo "installing Debian packages:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
