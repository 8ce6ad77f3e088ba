#!/bin/sh
# make test-live-kvm: boot Debian's kernel under QEMU's software emulation of an AMD EPYC CPU
# (SVM included), load kvm + kvm-amd inside the guest for a real /dev/kvm, and run the live-kvm
# driver there against the daemon (tests/kubelet/cmd/live-kvm). Prints the guest transcript;
# passes only on the guest's "LIVE-KVM-RESULT: PASS" line.
# Usage: tests/live/run-kvm.sh BUILD_DIR
# LIVE_KVM_TIMEOUT (seconds, default 600) bounds the whole guest run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
timeout=${LIVE_KVM_TIMEOUT:-600}
out="$build/live"
console="$out/console.log"
qemulog="$out/qemu.log"

command -v qemu-system-x86_64 >/dev/null ||
	{ echo "test-live-kvm: qemu-system-x86_64 missing (scripts/install-deps.sh live-kvm)" >&2; exit 1; }
"$here/build-initramfs.sh" "$build"

echo "test-live-kvm: booting the guest (QEMU TCG, -cpu EPYC, bound ${timeout} s)"
start=$(date +%s)
# The console streams to the terminal and to console.log; QEMU's own messages (TCG feature
# warnings) go to qemu.log.
timeout -k 10 "$timeout" qemu-system-x86_64 \
	-accel tcg -cpu EPYC -smp 1 -m 768 \
	-nodefaults -no-user-config -nic none -display none -monitor none \
	-serial stdio -no-reboot \
	-kernel "$out/vmlinuz" -initrd "$out/initramfs.cpio" \
	-append "console=ttyS0 panic=-1 quiet rdinit=/init" \
	</dev/null 2>"$qemulog" | tr -d '\r' | tee "$console" || true
# The pipeline's status is tee's: the guest's verdict is its marker line.
took=$(($(date +%s) - start))

echo
# One line per guest step: "[   1.234s] ok   name ..." or "[   1.234s] FAIL name ...".
passed=$(grep -c '^\[ *[0-9.]*s\] ok ' "$console" || true)
failed=$(grep -c '^\[ *[0-9.]*s\] FAIL ' "$console" || true)
if grep -q '^LIVE-KVM-RESULT: PASS$' "$console" && ! grep -q '^LIVE-KVM-RESULT: FAIL' "$console" &&
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]; then
	echo "test-live-kvm: PASS in ${took} s"
	echo "test-live-kvm: $passed passed, 0 failed"
	exit 0
fi
if ! grep -q '^LIVE-KVM-RESULT:' "$console"; then
	echo "test-live-kvm: FAIL: no result from the guest after ${took} s (timeout ${timeout} s, or the guest died)" >&2
else
	echo "test-live-kvm: FAIL: $(grep '^LIVE-KVM-RESULT:' "$console" | head -1)" >&2
fi
grep -v "TCG doesn't support requested feature" "$qemulog" >&2 || true
[ "$failed" -gt 0 ] || failed=1
echo "test-live-kvm: $passed passed, $failed failed"
exit 1
