#!/bin/sh
# Run PROGRAM [ARGS...] of an arm64 build on this amd64 machine under qemu-user, as the program
# it is (same process: the wrapper execs): tests/arm64/run.sh sets it as SDP_EMULATOR, through
# which the scenario suites start every program of the build directory.
#
# qemu-aarch64-static runs PROGRAM explicitly. The programs it starts in turn (hyperlight's probe
# helper and node-label child: an exec of an arm64 binary) need the kernel's binfmt_misc to
# hand them to qemu, and nothing may be assumed registered on the machine. So the wrapper first
# enters a user namespace of its own (root mapped to root) with a mount namespace, mounts a
# binfmt_misc instance there (a sandboxed instance: Linux 6.7 and later give each user
# namespace its own) and registers qemu-aarch64-static for aarch64 ELF files in it (flag F: the
# interpreter is opened now). The machine's binfmt_misc is not touched; the registration ends
# with the namespace. A PROGRAM that is not an aarch64 ELF (unshare, in the PID-1 tests) is
# exec'd as it is, and its arm64 child runs through that registration too.
# Absolute paths only: the daemons' environment is the test's, which may hold no PATH.
set -eu
qemu=/usr/bin/qemu-aarch64-static
if [ "${1:-}" != --in-namespace ]; then
	exec /usr/bin/unshare --user --map-root-user --mount --propagation unchanged -- "$0" --in-namespace "$@"
fi
shift
/usr/bin/mount -t binfmt_misc sdp-binfmt /proc/sys/fs/binfmt_misc
# magic: ELF, 64-bit, little-endian, version 1, e_type ET_EXEC or ET_DYN (mask 0xfe),
# e_machine EM_AARCH64 (183); as Debian's qemu-user-static registers it system-wide.
printf '%s' ':sdp-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:'"$qemu"':F' \
	>/proc/sys/fs/binfmt_misc/register
machine=$(/usr/bin/od -An -tx1 -j18 -N2 "$1" 2>/dev/null | /usr/bin/tr -d ' \n')
if [ "$machine" = b700 ]; then
	exec "$qemu" "$@"
fi
exec "$@"
