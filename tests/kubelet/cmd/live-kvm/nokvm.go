package main

// A guest whose kernel has no KVM (live-kvm -no-kvm): the second boot of
// make test-live-kvm-arm64, the same kernel at EL1 (QEMU's virt machine without
// virtualization=on), as an arm64 cloud VM without nested virtualization boots. KVM is built into
// that kernel but cannot initialise: no /dev/kvm, no kvm misc device, and a node made by hand
// (what a stale /dev or a container's device grant keeps) opens with ENODEV. This is the arm64
// counterpart of amd64's "module removed" at the device: the daemon started there, on the bare
// node and in the pod layout.

import (
	"fmt"
	"os"
	"strings"

	"sdp/kubelet"
)

// What the probe says of a KVM node with no KVM behind it.
const enodev = "ENODEV opening " + kvmPath

func runNoKVM(podDaemon string) int {
	r := newLiveRun(podDaemon)
	return r.run(func() {
		r.step("preflight-no-kvm", r.noKVMPreflight)
		r.step("mock-kubelet", r.startKubelet)
		r.step("daemon-no-device", r.daemonNoDevice)
		r.step("stale-node", r.staleNode)
		r.step("daemon-start", func() string { return r.startDaemon(0) })
		r.step("registered", r.registered)
		r.unusable("enodev", enodev)
		r.step("daemon-stop", r.stopDaemon)
		r.step("pod-start", r.podStart)
		r.step("pod-registered", r.registered)
		r.step("pod-layout", r.podLayoutChecked)
		r.unusable("pod-enodev", enodev)
		r.step("sigterm", r.sigterm)
		fmt.Printf("%s live-kvm -no-kvm: every step passed\n", r.stamp())
	})
}

// noKVMPreflight: the kernel says why it has no KVM, and its answer to a KVM node is ENODEV.
func (r *liveRun) noKVMPreflight() string {
	for _, p := range []string{kvmPath, kvmMiscClass} {
		if exists(p) {
			r.fail("%s exists: this kernel has a KVM", p)
		}
	}
	said := r.kernelSaid(thisNode.noKVMLog...)
	stale := "/tmp/kvm-stale"
	r.check(mknodKVM(stale, 0o600, 0, 0))
	defer os.Remove(stale)
	f, err := os.OpenFile(stale, os.O_RDWR, 0)
	if err == nil {
		f.Close()
		r.fail("a node %d:%d opens on a kernel without KVM", kubelet.KVMMajor, kubelet.KVMMinor)
	}
	if errnoName(err) != "ENODEV" {
		r.fail("open of a node %d:%d: %v, want ENODEV", kubelet.KVMMajor, kubelet.KVMMinor, err)
	}
	return fmt.Sprintf("no %s, no %s; kernel: %s; a node %d:%d made by hand: open %s",
		kvmPath, kvmMiscClass, strings.Join(said, "; "), kubelet.KVMMajor, kubelet.KVMMinor, errnoName(err))
}

// daemonNoDevice: a daemon started on a node without /dev/kvm exits 1 saying so, unregistered.
func (r *liveRun) daemonNoDevice() string {
	r.startDaemon(0)
	code, err := r.daemon().Wait(startBound)
	r.check(err)
	line := r.waitLog(0, `msg="no usable hypervisor device"`)
	if code != 1 || !strings.Contains(line, "level=error") || !strings.Contains(line, "nor "+kvmPath+" exists") {
		r.fail("exit %d, log %s; want exit 1 and an error naming %s", code, line, kvmPath)
	}
	if n := r.k.Registrations(resource); n != 0 {
		r.fail("%d registrations from a daemon without a device", n)
	}
	return fmt.Sprintf("exit %d, unregistered; log: %s", code, line[strings.Index(line, "level="):])
}

// staleNode makes /dev/kvm by hand: 10:232 with no KVM behind it.
func (r *liveRun) staleNode() string {
	r.check(mknodKVM(kvmPath, 0o600, 0, 0))
	return fmt.Sprintf("mknod %s c %d %d (0600 root), no KVM behind it", kvmPath, kubelet.KVMMajor, kubelet.KVMMinor)
}
