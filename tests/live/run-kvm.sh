#!/bin/sh
# make test-live-kvm: boot Debian's kernel under QEMU's software emulation of an AMD EPYC CPU
# (SVM included), load kvm + kvm-amd inside the guest for a real /dev/kvm, and run the live-kvm
# driver there against the daemon (tests/kubelet/cmd/live-kvm).
# make test-live-kvm-arm64 (arm64): boot Debian's arm64 kernel on QEMU's emulated virt machine
# at EL2 (virtualization=on, -cpu max), whose built-in KVM gives a real /dev/kvm, and run the
# arm64 driver there against the arm64 daemons; then boot the same guest at EL1 (no KVM) for the
# driver's -no-kvm steps.
# Prints each guest's transcript; passes only on each guest's "LIVE-KVM-RESULT: PASS" line.
# Usage: tests/live/run-kvm.sh BUILD_DIR [arm64 STATIC_BUILD_DIR]
# LIVE_KVM_TIMEOUT (seconds, default 600) bounds each guest run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
arch=${2:-amd64}
timeout=${LIVE_KVM_TIMEOUT:-600}
out="$build/live"

case "$arch" in
amd64)
	name=test-live-kvm
	qemu="qemu-system-x86_64"
	profile=live-kvm
	boots="kvm"
	;;
arm64)
	name=test-live-kvm-arm64
	qemu="qemu-system-aarch64"
	profile=live-kvm-arm64
	boots="kvm nokvm"
	;;
*)
	echo "usage: run-kvm.sh BUILD_DIR [arm64 STATIC_BUILD_DIR]" >&2
	exit 2
	;;
esac
command -v "$qemu" >/dev/null || { echo "$name: $qemu missing (scripts/install-deps.sh $profile)" >&2; exit 1; }
"$here/build-initramfs.sh" "$build" ${2:+"$arch" "${3:-}"}

# machine BOOT: QEMU's machine and CPU, and what the kernel command line adds, for BOOT.
# amd64: an EPYC with SVM. arm64: the virt machine; kvm at EL2 (virtualization=on), nokvm at
# EL1. pauth-impdef=on: pointer authentication with QEMU's own hash instead of the architected
# QARMA5, which TCG computes slowly (the boot to init took 12.7 s instead of 3.5 s): the guest
# still signs and checks pointers.
# amd64: nohz=off highres=off, a periodic tick: while a nested guest runs (the micro-VM steps:
# QEMU on the guest's KVM, SVM emulated by TCG), the emulated CPU at times never takes an
# interrupt its local APIC holds pending (the timer's vector in IRR, the CPU halted in the idle
# loop or running the nested guest), and a one-shot timer never raises it again: the guest
# stalled for good (4 of 7 micro-VM runs); the periodic timer raises it again at the next tick.
machine() {
	case "$arch-$1" in
	amd64-kvm) echo "-accel tcg -cpu EPYC|console=ttyS0 nohz=off highres=off" ;;
	arm64-kvm) echo "-accel tcg -machine virt,virtualization=on -cpu max,pauth-impdef=on|console=ttyAMA0" ;;
	arm64-nokvm) echo "-accel tcg -machine virt -cpu max,pauth-impdef=on|console=ttyAMA0 live_kvm=nokvm" ;;
	esac
}

passed=0
failed=0
verdict=0
took_all=""
for boot in $boots; do
	m=$(machine "$boot")
	suffix=""
	[ "$boot" = kvm ] || suffix="-$boot"
	console="$out/console$suffix.log"
	qemulog="$out/qemu$suffix.log"
	echo "$name: booting the guest ($boot: QEMU TCG, ${m%%|*}, bound ${timeout} s)"
	start=$(date +%s)
	# The console streams to the terminal and to console.log; QEMU's own messages (TCG feature
	# warnings) go to qemu.log.
	# shellcheck disable=SC2086
	timeout -k 10 "$timeout" "$qemu" ${m%%|*} -smp 1 -m 768 \
		-nodefaults -no-user-config -nic none -display none -monitor none \
		-serial stdio -no-reboot \
		-kernel "$out/vmlinuz" -initrd "$out/initramfs.cpio" \
		-append "${m#*|} panic=-1 quiet rdinit=/init" \
		</dev/null 2>"$qemulog" | tr -d '\r' | tee "$console" || true
	# The pipeline's status is tee's: the guest's verdict is its marker line.
	took=$(($(date +%s) - start))
	took_all="$took_all${took_all:+, }$boot ${took} s"

	echo
	# One line per guest step: "[   1.234s] ok   name ..." or "[   1.234s] FAIL name ...".
	p=$(grep -c '^\[ *[0-9.]*s\] ok ' "$console" || true)
	f=$(grep -c '^\[ *[0-9.]*s\] FAIL ' "$console" || true)
	passed=$((passed + p))
	if grep -q '^LIVE-KVM-RESULT: PASS$' "$console" && ! grep -q '^LIVE-KVM-RESULT: FAIL' "$console" &&
		[ "$f" -eq 0 ] && [ "$p" -gt 0 ]; then
		echo "$name: $boot guest PASS in ${took} s ($p steps)"
		continue
	fi
	verdict=1
	if ! grep -q '^LIVE-KVM-RESULT:' "$console"; then
		echo "$name: FAIL: no result from the $boot guest after ${took} s (timeout ${timeout} s, or the guest died)" >&2
	else
		echo "$name: FAIL: $boot guest: $(grep '^LIVE-KVM-RESULT:' "$console" | head -1)" >&2
	fi
	grep -v "TCG doesn't support requested feature" "$qemulog" >&2 || true
	[ "$f" -gt 0 ] || f=1
	failed=$((failed + f))
done
if [ "$verdict" -eq 0 ]; then
	echo "$name: PASS ($took_all)"
fi
echo "$name: $passed passed, $failed failed"
exit "$verdict"
