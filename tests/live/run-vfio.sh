#!/bin/sh
# make test-live-vfio: boot Debian's kernel under QEMU's software emulation (TCG) on a q35
# machine with an emulated Intel IOMMU and a GPU-node-like PCI layout (two NUMA nodes with an
# expander bridge each, a PCIe switch, a multi-function device with an intel-hda companion, two
# devices behind a PCIe-to-PCI bridge), all stand-in GPUs QEMU's pci-testdev (1b36:0005, class
# 0x00ff00). Inside, Debian's VFIO modules give real IOMMU groups and group nodes, and the
# live-vfio driver (tests/kubelet/cmd/live-vfio) runs kata-device-plugin against the mock kubelet.
# The daemon is a build of its own with one extra PCI table row for the stand-in
# (-Dkata_extra_rows, BUILD/live-vfio-guest/kata-build); the normal build is untouched.
# Prints the guest transcript; passes only on the guest's "LIVE-VFIO-RESULT: PASS" line.
# Usage: tests/live/run-vfio.sh BUILD_DIR [iommufd]
# With iommufd (make test-live-vfio-iommufd): the same machine and proofs on the cdev backend,
# booting the small 6.12 of tests/live/build-kernel-iommufd.sh (IOMMUFD, VFIO_DEVICE_CDEV and
# everything else built in; cached outside the checkout, built on the first run) instead of
# Debian's 6.1, whose config has no IOMMUFD.
# LIVE_VFIO_TIMEOUT (seconds, default 600) bounds the whole guest run.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
mode=${2:-legacy}
timeout=${LIVE_VFIO_TIMEOUT:-600}
kbuild="$build/live-vfio-guest/kata-build"
case "$mode" in
legacy) name=test-live-vfio out="$build/live-vfio-guest" ;;
iommufd) name=test-live-vfio-iommufd out="$build/live-vfio-iommufd-guest" ;;
*) echo "usage: run-vfio.sh BUILD_DIR [iommufd]" >&2; exit 2 ;;
esac
console="$out/console.log"
qemulog="$out/qemu.log"
rows="example.com/testdev:0x1b36:0x00ff"

command -v qemu-system-x86_64 >/dev/null ||
	{ echo "$name: qemu-system-x86_64 missing (scripts/install-deps.sh live-kvm)" >&2; exit 1; }
mkdir -p "$out" "$(dirname "$kbuild")"
if [ ! -f "$kbuild/build.ninja" ]; then
	meson setup "$kbuild" "$src" -Dtests=false -Dkata_extra_rows="$rows" >/dev/null
else
	meson configure "$kbuild" -Dkata_extra_rows="$rows" >/dev/null
fi
ninja -C "$kbuild" kata-device-plugin >/dev/null
if [ "$mode" = iommufd ]; then
	kernel=$("$here/build-kernel-iommufd.sh") # its only stdout: the bzImage's path
	"$here/build-initramfs-vfio.sh" "$build" "$kbuild/kata-device-plugin" iommufd "$kernel"
else
	"$here/build-initramfs-vfio.sh" "$build" "$kbuild/kata-device-plugin"
fi

echo "$name: booting the guest (QEMU TCG, q35 + intel-iommu, bound ${timeout} s)"
start=$(date +%s)
# Two NUMA nodes of one CPU and 512 MiB each. pcie.0 holds three root ports (the switch, the
# multi-function device, the PCIe-to-PCI bridge) whose devices have no NUMA node, and the two
# expander bridges (bus 0x40 on node 0 with two root ports, bus 0x80 on node 1 with one).
timeout -k 10 "$timeout" qemu-system-x86_64 \
	-accel tcg -machine q35,kernel-irqchip=split -smp 2,sockets=2,cores=1,threads=1 -m 1024 \
	-object memory-backend-ram,id=m0,size=512M -numa node,nodeid=0,cpus=0,memdev=m0 \
	-object memory-backend-ram,id=m1,size=512M -numa node,nodeid=1,cpus=1,memdev=m1 \
	-nodefaults -no-user-config -nic none -display none -monitor none \
	-serial stdio -no-reboot \
	-device intel-iommu,intremap=on,caching-mode=on \
	-device pcie-root-port,id=rp_sw,bus=pcie.0,chassis=1,addr=0x2 \
	-device x3130-upstream,id=up,bus=rp_sw \
	-device xio3130-downstream,id=dn0,bus=up,chassis=2,slot=0,addr=0x0 \
	-device xio3130-downstream,id=dn1,bus=up,chassis=3,slot=1,addr=0x1 \
	-device pci-testdev,bus=dn0 -device pci-testdev,bus=dn1 \
	-device pcie-root-port,id=rp_mf,bus=pcie.0,chassis=4,addr=0x3 \
	-device pci-testdev,bus=rp_mf,addr=0x0.0,multifunction=on \
	-device intel-hda,bus=rp_mf,addr=0x0.1 \
	-device pcie-root-port,id=rp_br,bus=pcie.0,chassis=5,addr=0x4 \
	-device pcie-pci-bridge,id=br,bus=rp_br \
	-device pci-testdev,bus=br,addr=0x1 -device pci-testdev,bus=br,addr=0x2 \
	-device pxb-pcie,id=pxb0,bus_nr=64,numa_node=0,bus=pcie.0 \
	-device pcie-root-port,id=rp40,bus=pxb0,chassis=10,addr=0x0 -device pci-testdev,bus=rp40 \
	-device pcie-root-port,id=rp41,bus=pxb0,chassis=11,addr=0x1 -device pci-testdev,bus=rp41 \
	-device pxb-pcie,id=pxb1,bus_nr=128,numa_node=1,bus=pcie.0 \
	-device pcie-root-port,id=rp80,bus=pxb1,chassis=12,addr=0x0 -device pci-testdev,bus=rp80 \
	-kernel "$out/vmlinuz" -initrd "$out/initramfs.cpio" \
	-append "console=ttyS0 panic=-1 quiet rdinit=/init intel_iommu=on" \
	</dev/null 2>"$qemulog" | tr -d '\r' | tee "$console" || true
took=$(($(date +%s) - start))

echo
passed=$(grep -c '^\[ *[0-9.]*s\] ok ' "$console" || true)
failed=$(grep -c '^\[ *[0-9.]*s\] FAIL ' "$console" || true)
if grep -q '^LIVE-VFIO-RESULT: PASS$' "$console" && ! grep -q '^LIVE-VFIO-RESULT: FAIL' "$console" &&
	[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]; then
	echo "$name: PASS in ${took} s"
	echo "$name: $passed passed, 0 failed"
	exit 0
fi
if ! grep -q '^LIVE-VFIO-RESULT:' "$console"; then
	echo "$name: FAIL: no result from the guest after ${took} s (timeout ${timeout} s, or the guest died)" >&2
else
	echo "$name: FAIL: $(grep '^LIVE-VFIO-RESULT:' "$console" | head -1)" >&2
fi
cat "$qemulog" >&2 || true
[ "$failed" -gt 0 ] || failed=1
echo "$name: $passed passed, $failed failed"
exit 1
