package main

// The workload's side of the node (tests/cluster/kvm-run: sdp-kvm-run, the program a workload
// pod of the cluster test runs): not only does /dev/kvm open, a guest runs on it. The program
// creates a VM with one vCPU and runs a few instructions to the exits they must cause. Run as
// uid 65534 (the runAsUser of deploy/hyperlight/examples/workload-pod.yaml), once on a node the
// way the container runtime makes it from the daemon's CDI spec (ok), once on the node's own
// /dev/kvm at 0600 root (FAIL open).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sdp/kubelet"
)

const (
	kvmRunPath = "/usr/local/bin/sdp-kvm-run"
	// workloadKVM: the workload container's /dev/kvm, as the runtime makes it from the CDI spec
	// (tests/live/README.md, step kvm-run).
	workloadKVM = "/tmp/workload-kvm"
	kvmRunBound = 60 * time.Second // one small guest under TCG (about 0.1 s measured)
)

// kvmRunExits: the exits sdp-kvm-run's guest causes, in its ok line, per architecture.
var kvmRunExits = map[string]string{
	"amd64": "io(port=0x10,value=0x2a),hlt",
	"arm64": "mmio(addr=0x10,value=0x2a),system-event(shutdown)",
}

// kvmRunResult is one run of sdp-kvm-run.
type kvmRunResult struct {
	pid            int
	code           int
	stdout, stderr string
}

// runKVMRun runs sdp-kvm-run as uid:gid (no supplementary groups) with args.
func runKVMRun(uid, gid int, args ...string) (kvmRunResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kvmRunBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, kvmRunPath, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := kvmRunResult{stdout: stdout.String(), stderr: stderr.String()}
	if cmd.Process != nil {
		res.pid = cmd.Process.Pid
	}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s did not end within %v (stdout %q, stderr %q)", kvmRunPath, kvmRunBound, res.stdout, res.stderr)
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		return res, err
	}
	return res, nil
}

// kvmRun: a node 10:232 with /dev/kvm's mode, owned by 65534:65534 (what the runtime creates
// from the daemon's CDI spec: its uid and gid, the host node's mode); sdp-kvm-run on it as
// 65534 prints its ok line, and the kernel reports the VM it created (its KVM uevent).
func (r *liveRun) kvmRun() string {
	var st unix.Stat_t
	r.check(unix.Stat(kvmPath, &st))
	mode := st.Mode & 0o7777
	_ = os.Remove(workloadKVM)
	r.check(unix.Mknod(workloadKVM, unix.S_IFCHR|mode, int(unix.Mkdev(kubelet.KVMMajor, kubelet.KVMMinor))))
	defer os.Remove(workloadKVM)
	r.check(unix.Chmod(workloadKVM, mode)) // the umask
	r.check(os.Chown(workloadKVM, nobody, nobody))
	since := time.Now()
	res, err := runKVMRun(nobody, nobody, workloadKVM)
	r.check(err)
	want := fmt.Sprintf("sdp-kvm-run: ok api=12 exits=%s uid=%d gid=%d", kvmRunExits[runtime.GOARCH], nobody, nobody)
	if ipa := hostSmallIPA(kvmPath); ipa != 0 {
		want += fmt.Sprintf(" ipa=%d", ipa) // a host below the default 40 bits (issue 30)
	}
	want += "\n"
	if res.code != 0 || res.stdout != want || res.stderr != "" {
		r.fail("sdp-kvm-run %s as %d: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", workloadKVM, nobody, res.code, res.stdout, res.stderr, want)
	}
	var e kvmEvent
	if !kubelet.Poll(eventBound, func() bool {
		var ok bool
		e, ok = r.kvmEv.find(since, func(e kvmEvent) bool { return e.event == "create" && e.pid == res.pid })
		return ok
	}) {
		list, rerr := r.kvmEv.events()
		r.fail("no KVM uevent EVENT=create PID=%d for sdp-kvm-run within %v (got %v, reader error %v)", res.pid, eventBound, list, rerr)
	}
	return fmt.Sprintf("as %d:%d on %s (%d:%d, %04o, owner %d:%d): %q; kernel uevent %v",
		nobody, nobody, workloadKVM, kubelet.KVMMajor, kubelet.KVMMinor, mode, nobody, nobody, strings.TrimSpace(res.stdout), e)
}

// kvmRunEACCES: /dev/kvm 0600 root; sdp-kvm-run (its default device) as 65534 fails at open
// with EACCES and creates no VM: the driver's own KVM_CREATE_VM after it is the barrier (the
// kernel queues a VM's uevent before KVM_CREATE_VM returns, in order, so once the driver's own
// has been read, one from sdp-kvm-run would have been too). /dev/kvm's owner and mode are
// restored after.
func (r *liveRun) kvmRunEACCES() string {
	var st unix.Stat_t
	r.check(unix.Stat(kvmPath, &st))
	r.check(os.Chown(kvmPath, 0, 0))
	r.check(os.Chmod(kvmPath, 0o600))
	since := time.Now()
	res, err := runKVMRun(nobody, nobody)
	r.check(err)
	const want = "sdp-kvm-run: FAIL open: Permission denied\n" // EACCES in glibc's and musl's words
	if res.code != 1 || res.stdout != "" || res.stderr != want {
		r.fail("sdp-kvm-run as %d on %s 0600 root: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", nobody, kvmPath, res.code, res.stdout, res.stderr, want)
	}
	_, tid, err := kvmSelfTest(kvmPath)
	r.check(err)
	if !kubelet.Poll(eventBound, func() bool {
		_, ok := r.kvmEv.find(since, func(e kvmEvent) bool { return e.event == "create" && e.pid == tid })
		return ok
	}) {
		r.fail("no KVM uevent for the driver's own KVM_CREATE_VM (thread %d) within %v", tid, eventBound)
	}
	if e, ok := r.kvmEv.find(since, func(e kvmEvent) bool { return e.event == "create" && e.pid == res.pid }); ok {
		r.fail("sdp-kvm-run failed at open, yet the kernel reports a VM it created: %v", e)
	}
	r.check(os.Chown(kvmPath, int(st.Uid), int(st.Gid)))
	r.check(unix.Chmod(kvmPath, st.Mode&0o7777))
	return fmt.Sprintf("as %d:%d on %s (0600 root:root): exit 1, %q; no KVM uevent from it (the driver's own after it came); owner %d:%d, mode %04o again",
		nobody, nobody, kvmPath, strings.TrimSpace(res.stderr), st.Uid, st.Gid, st.Mode&0o7777)
}
