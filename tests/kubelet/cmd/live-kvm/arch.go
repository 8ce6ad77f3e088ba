package main

// How the node's KVM goes away and comes back, per architecture (the "module removed" verdict).
//
// amd64: Debian builds KVM as modules (kvm, kvm-amd): rmmod kvm_amd makes the kernel remove
// /dev/kvm, insmod brings it back.
//
// arm64: Debian builds KVM into the kernel (CONFIG_KVM=y; tests/live/build-initramfs.sh checks
// it): there is no module to remove, and the kernel never takes /dev/kvm away. What the daemon
// can meet instead: the node removed from /dev (rm, as a device manager or an operator would;
// what rmmod does on amd64, seen from /dev), checked here; and a kernel whose KVM is not
// there at all (booted at EL1, as on a cloud VM without nested virtualization), where a stale
// node opens with ENODEV: the second boot of make test-live-kvm-arm64 (nokvm.go).

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sdp/kubelet"
)

type nodeKVM struct {
	remove, restore       string // step names: bare node
	podRemove, podRestore string // step names: the pod layout
	gone                  string // the state after remove, in step names: "unloaded", "removed"
	removes               string // the action of take that removes /dev/kvm (its times)
	// take takes /dev/kvm away (pod: the pod layout's variant); it returns when the successful
	// action began, when it returned, and what it did.
	take func(r *liveRun, pod bool) (start, returned time.Time, what string)
	// give brings /dev/kvm back and says what it did.
	give func(r *liveRun, pod bool) string
	// copyOpens: after take(pod), the pod's copy of /dev/kvm still opens (the kernel's KVM is
	// still there: only the node went).
	copyOpens bool
	// stays: what take leaves of the kernel's KVM, for the step lines.
	stays string
	// preflight: what the architecture adds to the preflight step.
	preflight func(r *liveRun) string
	// noKVMLog: the kernel's log lines of a boot without KVM (live-kvm -no-kvm).
	noKVMLog []string
	// companions: the initramfs holds the companions' modules (/lib/modules/companions): the
	// companion steps run (companion.go).
	companions bool
}

func nodeKVMOf(arch string) *nodeKVM {
	if arch == "arm64" {
		return &nodeKVM{
			remove: "rm-dev-kvm", restore: "mknod-dev-kvm",
			podRemove: "pod-rm-dev-kvm", podRestore: "pod-mknod-dev-kvm", gone: "removed", removes: "rm " + kvmPath,
			take: removeNode, give: restoreNode, copyOpens: true, preflight: arm64Preflight,
			stays:    " (KVM built in: " + kvmMiscClass + " stays)",
			noKVMLog: []string{"CPU: All CPU(s) started at EL1", "kvm [1]: HYP mode not available"},
		}
	}
	return &nodeKVM{
		remove: "rmmod-kvm_amd", restore: "insmod-kvm-amd",
		podRemove: "pod-rmmod", podRestore: "pod-insmod", gone: "unloaded", removes: "rmmod kvm_amd",
		take: unloadModules, give: loadModules,
		preflight:  func(*liveRun) string { return "" },
		companions: true,
	}
}

var thisNode = nodeKVMOf(runtime.GOARCH)

// unloadModules: rmmod kvm_amd (pod: then kvm), each retried while a probe in flight holds
// /dev/kvm open (the module in use), bounded. kvm_amd's unload removes /dev/kvm: its times are
// returned.
func unloadModules(r *liveRun, pod bool) (start, returned time.Time, what string) {
	mods := []string{"kvm_amd"}
	if pod {
		mods = append(mods, "kvm")
	}
	for i, m := range mods {
		var err error
		var s, e time.Time
		if !kubelet.Poll(eventBound, func() bool {
			s = time.Now()
			err = command("rmmod", m)
			e = time.Now()
			return err == nil
		}) {
			r.fail("%v", err)
		}
		if moduleLoaded(m) {
			r.fail("%s still loaded after rmmod", m)
		}
		if i == 0 {
			start, returned = s, e
		}
	}
	return start, returned, "rmmod " + strings.Join(mods, " ")
}

func loadModules(r *liveRun, pod bool) string {
	mods := []string{"kvm-amd"}
	if pod {
		mods = []string{"kvm", "kvm-amd"}
	}
	for _, m := range mods {
		r.check(command("insmod", filepath.Join(modulesDir, m+".ko")))
	}
	return "insmod " + strings.Join(mods, " ")
}

// removeNode removes the node's /dev/kvm: KVM stays in the kernel (its misc device is still
// registered: /sys/class/misc/kvm).
func removeNode(r *liveRun, pod bool) (start, returned time.Time, what string) {
	var st unix.Stat_t
	r.check(unix.Lstat(kvmPath, &st))
	r.kvmNode = st
	start = time.Now()
	r.check(os.Remove(kvmPath))
	returned = time.Now()
	if !exists(kvmMiscClass) {
		r.fail("%s is gone: the kernel's KVM went with the node", kvmMiscClass)
	}
	return start, returned, "rm " + kvmPath
}

// restoreNode makes the node again as devtmpfs had it (10:232, the mode and owner it had).
func restoreNode(r *liveRun, pod bool) string {
	n := r.kvmNode
	r.check(mknodKVM(kvmPath, n.Mode&0o7777, int(n.Uid), int(n.Gid)))
	return fmt.Sprintf("mknod %s c %d %d (mode %04o, owner %d:%d)", kvmPath, kubelet.KVMMajor, kubelet.KVMMinor, n.Mode&0o7777, n.Uid, n.Gid)
}

// mknodKVM makes a KVM character device node with exactly mode and owner.
func mknodKVM(path string, mode uint32, uid, gid int) error {
	if err := unix.Mknod(path, unix.S_IFCHR|mode, int(unix.Mkdev(kubelet.KVMMajor, kubelet.KVMMinor))); err != nil {
		return fmt.Errorf("mknod %s: %v", path, err)
	}
	if err := os.Chmod(path, os.FileMode(mode)); err != nil { // the umask
		return err
	}
	return os.Lchown(path, uid, gid)
}

const kvmMiscClass = "/sys/class/misc/kvm"

// Ioctls of the arm64 preflight (<linux/kvm.h>).
const (
	kvmCheckExtension    = 0xAE03 // _IO(KVMIO, 0x03)
	kvmCapARMVMIPASize   = 165    // KVM_CAP_ARM_VM_IPA_SIZE
	kvmDefaultIPABits    = 40     // KVM_PHYS_SHIFT: what KVM_CREATE_VM(0) gets
	kvmMinIPABits        = 32     // ARM64_MIN_PARANGE_BITS: the smallest IPA size KVM takes
	sysLogActionReadAll  = 3      // SYSLOG_ACTION_READ_ALL
	kernelLogBufferBytes = 1 << 20
)

// kernelLog is the kernel's log buffer (what dmesg prints).
func kernelLog() (string, error) {
	buf := make([]byte, kernelLogBufferBytes)
	n, err := unix.Klogctl(sysLogActionReadAll, buf)
	if err != nil {
		return "", fmt.Errorf("syslog(READ_ALL): %v", err)
	}
	return string(buf[:n]), nil
}

// kernelSaid requires a kernel log line containing each of want and returns them.
func (r *liveRun) kernelSaid(want ...string) []string {
	log, err := kernelLog()
	r.check(err)
	var got []string
	for _, w := range want {
		found := ""
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, w) {
				// "<6>[    0.226956] kvm [1]: ...": the message, after the time stamp
				found = strings.TrimSpace(l[strings.Index(l, "] ")+1:])
				break
			}
		}
		if found == "" {
			r.fail("the kernel log has no %q", w)
		}
		got = append(got, found)
	}
	return got
}

// arm64Preflight: the kernel runs at EL2 with KVM built in, and KVM_CREATE_VM's argument (the
// VM type: on arm64 the IPA size, 0 the default of 40 bits) is what the kernel takes it for: a
// size above the host's limit is refused; 0 works when the limit allows 40 bits and is refused
// with EINVAL below (issue 30), where the limit itself works (what the probe passes there,
// hl_kvm_vm_type).
func arm64Preflight(r *liveRun) string {
	said := r.kernelSaid("CPU: All CPU(s) started at EL2", "mode initialized successfully")
	if moduleLoaded("kvm") {
		r.fail("a kvm module is loaded: KVM should be built in")
	}
	fd, err := unix.Open(kvmPath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	r.check(err)
	defer unix.Close(fd)
	limit, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCheckExtension, kvmCapARMVMIPASize)
	if e != 0 || limit < kvmMinIPABits {
		r.fail("KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE) = %d (%v): want at least %d bits", limit, e, kvmMinIPABits)
	}
	said = append(said, r.createVMAs(fd, 0, limit >= kvmDefaultIPABits))
	if limit < kvmDefaultIPABits {
		said = append(said, r.createVMAs(fd, limit, true))
	}
	said = append(said, r.createVMAs(fd, limit+1, false))
	return fmt.Sprintf("; kernel: %s; %s; no kvm module (built in); IPA limit %d bits: %s",
		said[0], said[1], limit, strings.Join(said[2:], ", "))
}

// createVMAs: KVM_CREATE_VM(typ) on the device fd must work (ok) or be refused with EINVAL.
func (r *liveRun) createVMAs(fd int, typ uintptr, ok bool) string {
	name := fmt.Sprintf("KVM_CREATE_VM(%d)", typ)
	if typ == 0 {
		name += fmt.Sprintf(" (the default %d bits)", kvmDefaultIPABits)
	}
	vm, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), kvmCreateVM, typ)
	if e == 0 {
		unix.Close(int(vm))
	}
	switch {
	case ok && e != 0:
		r.fail("%s: %v", name, e)
	case !ok && e != unix.EINVAL:
		r.fail("%s: %v, want EINVAL", name, e)
	case ok:
		return name + " works"
	}
	return name + " EINVAL"
}
