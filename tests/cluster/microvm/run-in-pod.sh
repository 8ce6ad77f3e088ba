#!/bin/sh
# run-in-pod.sh: what the microVM pod's container runs (POSIX sh; busybox is enough).
#
# QEMU makes the tap tap0 itself in the pod's network namespace (/dev/net/tun, TUNSETIFF:
# CAP_NET_ADMIN), boots the guest on it with virtio-net (vhost=on only when /dev/vhost-net
# opens); this script gives the pod's end 10.77.0.1/24, waits for the guest's console line
# `MICROVM: ping 10.77.0.1 ok`, pings the guest (10.77.0.2) from the pod, tells the guest it
# is done (TCP 7777), waits for QEMU to end. One result line, exit 0/1:
#   microvm: ok accel=kvm vhost=off guest-ping=ok pod-ping=ok boot=...s total=...s guest=linux
#   microvm: FAIL <why>
# The guest (MICROVM_GUEST), beside this script:
#   linux  vmlinux + initramfs.cpio: Debian's kernel, init powers off (QEMU's exit status 0)
#   tiny   tiny.elf (tiny/tiny.c): a bare-metal guest that runs even on a PVM host's KVM; a
#          legacy virtio-net device (disable-modern=on); it ends QEMU through isa-debug-exit,
#          exit status 33 at its clean end (35 after its FAIL line)
#
# Environment (all optional):
#   MICROVM_GUEST    linux (default) or tiny
#   MICROVM_ACCEL    kvm (default: needs /dev/kvm) or tcg (QEMU's software CPU)
#   MICROVM_CPU      QEMU's -cpu (default: host with kvm, max with tcg)
#   MICROVM_MEM      guest memory in MiB (default 128)
#   MICROVM_TB_SIZE  with tcg: QEMU's translation cache in MiB (default 64)
#   MICROVM_TIMEOUT  seconds for the guest's console line (default 180)
#   MICROVM_APPEND   more kernel command line (linux)
#   MICROVM_DIR      where vmlinux, initramfs.cpio, tiny.elf are (default: this script's directory)
#   MICROVM_KEEP     a directory to keep console.log and qemu.log in
set -u
PATH=/bin:/sbin:/usr/bin:/usr/sbin
export PATH

dir=${MICROVM_DIR:-$(cd "$(dirname "$0")" && pwd)}
accel=${MICROVM_ACCEL:-kvm}
kind=${MICROVM_GUEST:-linux}
mem=${MICROVM_MEM:-128}
limit=${MICROVM_TIMEOUT:-180}
qemu="qemu-system-x86_64"
guest=10.77.0.2
pod=10.77.0.1
work=$(mktemp -d /tmp/microvm.XXXXXX) || { echo "microvm: FAIL mktemp in /tmp"; exit 1; }
pid=

cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null
		i=0
		while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
		kill -9 "$pid" 2>/dev/null
	fi
	if [ -n "${MICROVM_KEEP:-}" ]; then
		mkdir -p "$MICROVM_KEEP" && cp "$work"/*.log "$MICROVM_KEEP"/ 2>/dev/null
	fi
	rm -rf "$work"
}
fail() {
	echo "microvm: FAIL $*"
	cleanup
	exit 1
}
# the reason an open fails, as the shell says it ("can't open '/dev/x': No such device")
open_err() {
	e=$( { exec 3<>"$1"; } 2>&1) && return 0
	echo "${e##*: }"
	return 1
}
first_qemu_error() {
	l=$(grep -m 1 -E 'KVM internal error|emulation failure|could not|Could not|failed|error' "$work/qemu.log" 2>/dev/null)
	[ -n "$l" ] || l=$(head -n 1 "$work/qemu.log" 2>/dev/null)
	grep -q 'emulation failure' "$work/qemu.log" 2>/dev/null && l="$l (emulation failure)"
	echo "${l:-no message}"
}

# ---- what the pod must have been given ----
# the guest's part of QEMU's command line (the positional parameters: POSIX sh has no arrays)
case $kind in
linux)
	if [ ! -f "$dir/vmlinux" ] || [ ! -f "$dir/initramfs.cpio" ]; then
		fail "no $dir/vmlinux or $dir/initramfs.cpio"
	fi
	set -- -kernel "$dir/vmlinux" -initrd "$dir/initramfs.cpio" \
		-append "console=ttyS0 panic=-1 quiet rdinit=/init ${MICROVM_APPEND:-}"
	nicopt=
	;;
tiny)
	[ -f "$dir/tiny.elf" ] || fail "no $dir/tiny.elf"
	set -- -kernel "$dir/tiny.elf" -device isa-debug-exit,iobase=0xf4,iosize=4
	# the tiny guest drives legacy virtio: BAR 0 an I/O BAR
	nicopt=,disable-modern=on
	;;
*) fail "MICROVM_GUEST=$kind: not linux or tiny" ;;
esac
command -v "$qemu" >/dev/null || fail "no $qemu in PATH"
[ -c /dev/net/tun ] || fail "/dev/net/tun: no such character device (the container needs the node's /dev/net/tun, c 10:200)"
e=$(open_err /dev/net/tun) || fail "/dev/net/tun: open: $e"
case $accel in
kvm)
	[ -c /dev/kvm ] || fail "/dev/kvm: no such character device (accel=kvm needs the node's /dev/kvm, c 10:232)"
	e=$(open_err /dev/kvm) || fail "/dev/kvm: open: $e"
	cpu=${MICROVM_CPU:-host}
	;;
tcg)
	cpu=${MICROVM_CPU:-max}
	# QEMU's default translation cache (up to 1 GiB) is most of its memory; 64 MiB is plenty
	accelopt=",tb-size=${MICROVM_TB_SIZE:-64}"
	;;
*) fail "MICROVM_ACCEL=$accel: not kvm or tcg" ;;
esac
if [ ! -e /dev/vhost-net ]; then
	vhost=off why="/dev/vhost-net: absent"
elif e=$(open_err /dev/vhost-net); then
	vhost=on why="/dev/vhost-net: opens"
else
	vhost=off why="/dev/vhost-net: $e"
fi
echo "microvm: guest=$kind accel=$accel cpu=$cpu vhost=$vhost ($why) mem=${mem}M"

# ---- QEMU makes tap0 and boots the guest ----
start=$(date +%s)
"$qemu" -accel "$accel${accelopt:-}" -cpu "$cpu" -m "$mem" -smp 1 -M pc -nodefaults -no-user-config \
	-display none -monitor none -no-reboot \
	-serial "file:$work/console.log" "$@" \
	-netdev "tap,id=n0,ifname=tap0,script=no,downscript=no,vhost=$vhost" \
	-device "virtio-net-pci,netdev=n0,mac=52:54:00:77:00:02,romfile=$nicopt" \
	</dev/null >"$work/qemu.log" 2>&1 &
pid=$!

# tap0 appears as soon as QEMU's TUNSETIFF passed (bounded: 10 s)
i=0
while ! ip link show tap0 >/dev/null 2>&1; do
	if ! kill -0 "$pid" 2>/dev/null; then
		m=$(first_qemu_error)
		case $m in
		*"Operation not permitted"*) fail "tap0: $m (TUNSETIFF: creating a tap needs CAP_NET_ADMIN)" ;;
		*) fail "qemu exited before tap0 existed: $m" ;;
		esac
	fi
	i=$((i + 1))
	[ $i -gt 100 ] && fail "tap0 did not appear in 10 s"
	sleep 0.1
done
ip addr add "$pod/24" dev tap0 2>"$work/ip.err" || fail "ip addr add $pod/24 dev tap0: $(cat "$work/ip.err")"
ip link set tap0 up 2>"$work/ip.err" || fail "ip link set tap0 up: $(cat "$work/ip.err")"

# ---- the guest's line (bounded: MICROVM_TIMEOUT) ----
while :; do
	# QEMU's state before the console's: a guest that prints its line and ends QEMU at once
	# (the tiny guest's FAIL) is not taken for a QEMU that died before the line
	alive=yes
	kill -0 "$pid" 2>/dev/null || alive=
	# the first MICROVM: line once its newline is there: a slow guest (nested, or TCG) writes
	# it a byte per exit, and a part of it is not its result (unless QEMU has ended)
	n=$(grep -a -n -m 1 'MICROVM: ' "$work/console.log" 2>/dev/null | cut -d: -f1)
	if [ -n "$n" ] && { [ -z "$alive" ] || [ "$(wc -l <"$work/console.log")" -ge "$n" ]; }; then
		line=$(sed -n "${n}p" "$work/console.log" | tr -d '\r')
		break
	fi
	[ -n "$alive" ] || fail "qemu exited before the guest's line: $(first_qemu_error)"
	# KVM's internal errors stop the VM but not QEMU
	if grep -q 'KVM internal error' "$work/qemu.log" 2>/dev/null; then
		fail "KVM internal error after $(($(date +%s) - start)) s: $(grep -m 1 -E '^emulation failure|Suberror' "$work/qemu.log") at $(grep -m 1 '^RIP=' "$work/qemu.log" | cut -d' ' -f1) $(grep -m 1 '^Code=' "$work/qemu.log" | sed 's/.*<\(..\)> \(..\) \(..\) \(..\).*/insn \1 \2 \3 \4/'); guest's last line: $(tail -n 1 "$work/console.log" 2>/dev/null | tr -d '\r' | cut -c1-100)"
	fi
	[ $(($(date +%s) - start)) -ge "$limit" ] && fail "no MICROVM: line on the guest's console in $limit s; its last line: $(tail -n 1 "$work/console.log" 2>/dev/null | tr -d '\r' | cut -c1-100)"
	sleep 0.2
done
boot=$(($(date +%s) - start))
# the tiny guest's first line names the CPU it runs on (CPUID's hypervisor signature)
[ "$kind" = tiny ] && echo "microvm: guest: $(grep -a -m 1 '^tiny: PVH entry' "$work/console.log" | tr -d '\r')"
echo "microvm: guest: $line"
case $line in
"MICROVM: ping $pod ok"*) guestping=ok ;;
*) fail "guest: ${line#MICROVM: }" ;;
esac

# ---- the pod's ping of the guest ----
# iputils' ping (in the image at /usr/bin/ping) falls back to an ICMP datagram socket
# without CAP_NET_RAW; busybox's ping needs a raw socket (CAP_NET_RAW)
pingcmd=ping
[ -x /usr/bin/ping ] && pingcmd=/usr/bin/ping
if out=$($pingcmd -c 3 -W 2 "$guest" 2>&1); then
	podping=ok
	echo "microvm: pod: $pingcmd: $(echo "$out" | grep -E 'packets transmitted')"
else
	fail "ping $guest from the pod: $(echo "$out" | tail -n 2 | tr '\n' ' ')"
fi
# the guest ends when told (or after its own 60 s)
if command -v nc >/dev/null; then nc=nc; else nc="busybox nc"; fi
echo "done $(date +%s)" | $nc -w 2 "$guest" 7777 >/dev/null 2>&1 || fail "$nc $guest 7777: the guest's listener did not answer"
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$pid" 2>/dev/null && fail "qemu still running 20 s after the pod said done"
rc=0
wait "$pid" 2>/dev/null || rc=$?
[ "$kind" = tiny ] && [ "$rc" != 33 ] &&
	fail "qemu's exit status $rc, not the tiny guest's clean end (33: isa-debug-exit 0x10)"
said=$(grep -a -m 1 'MICROVM: pod said' "$work/console.log" | tr -d '\r')
echo "microvm: guest: ${said:-no goodbye line}"
total=$(($(date +%s) - start))
echo "microvm: ok accel=$accel vhost=$vhost guest-ping=$guestping pod-ping=$podping boot=${boot}s total=${total}s guest=$kind"
pid=
cleanup
exit 0
