package main

// The pod layout (deploy/hyperlight/30-device-plugin.yaml): the daemon in a mount namespace of
// its own, as the container runtime sets it up. Its /dev is a tmpfs holding a copy of /dev/kvm
// (mknod, same major:minor, root 0660: what the runtime creates for the device-access grant);
// the node's real /dev is bind-mounted read-only at /host-dev (HOST_DEVICE_DIR=/host-dev); the
// kubelet and CDI directories are the node's (hostPath volumes); the root file system is
// read-only; uid 0 with no capability and no_new_privs. The guest kernel is the host's: rmmod
// on it (arm64: rm of the node, arch.go) removes the node's /dev/kvm (seen at /host-dev/kvm)
// while the pod's copy stays.

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sdp/kubelet"
)

const (
	hostDevDir = "/host-dev"
	// Bound of the pod layout's health changes: generous, so the 30 s periodic check passes it
	// when no event reaches the daemon (the time is printed, not asserted).
	podBound = 60 * time.Second
)

// The nodes a runtime puts in a container's /dev, plus the device grant's copy of /dev/kvm.
var podNodes = []struct {
	name         string
	major, minor uint32
	mode         uint32
}{
	{"null", 1, 3, 0o666}, {"zero", 1, 5, 0o666}, {"full", 1, 7, 0o666},
	{"random", 1, 8, 0o666}, {"urandom", 1, 9, 0o666}, {"tty", 5, 0, 0o666},
	{"kvm", kubelet.KVMMajor, kubelet.KVMMinor, 0o660},
}

// podExec is the pod-exec trampoline: it builds the pod layout in a new mount namespace of
// its own thread, drops every capability and executes PROGRAM there.
func podExec(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: live-kvm pod-exec PROGRAM [ARG...]")
		return 2
	}
	// The namespace, the bounding set and no_new_privs are per thread: this thread execs.
	runtime.LockOSThread()
	if err := podLayout(); err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm pod-exec:", err)
		return 1
	}
	if err := limitCaps(0); err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm pod-exec:", err)
		return 1
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintf(os.Stderr, "live-kvm pod-exec: exec %s: %v\n", args[0], err)
	return 1
}

func mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %q on %s (%s, flags %#x): %v", src, dst, fstype, flags, err)
	}
	return nil
}

func podLayout() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %v", err)
	}
	steps := []func() error{
		func() error { return mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") },
		// hostPath /dev, readOnly: the node's devtmpfs at /host-dev
		func() error { return mount("/dev", hostDevDir, "", unix.MS_BIND|unix.MS_REC, "") },
		func() error {
			return mount("", hostDevDir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "")
		},
		// hostPath /var/lib/kubelet/device-plugins: a mount of its own, read-write
		func() error { return mount(kubeletDir, kubeletDir, "", unix.MS_BIND, "") },
		// the container's /dev
		func() error {
			return mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k")
		},
		makePodNodes,
		// readOnlyRootFilesystem
		func() error { return mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

func makePodNodes() error {
	unix.Umask(0)
	for _, n := range podNodes {
		p := "/dev/" + n.name
		if err := unix.Mknod(p, unix.S_IFCHR|n.mode, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("mknod %s: %v", p, err)
		}
	}
	return nil
}

// limitCaps: this thread keeps only the capabilities in keep (a bit per capability): the
// bounding set, the permitted and effective sets are keep, the inheritable and ambient sets
// empty, and no_new_privs is set, so the process it execs as root has exactly keep (what a
// runtime gives a container with `drop: [ALL]` and `add:` keep). The pod layout's daemon gets
// none (0), the micro-VM pod CAP_NET_ADMIN.
func limitCaps(keep uint64) error {
	for c := 0; c < 64; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %v", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective, data[0].Permitted = uint32(keep), uint32(keep)
	data[1].Effective, data[1].Permitted = uint32(keep>>32), uint32(keep>>32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %v", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_CAP_AMBIENT_CLEAR_ALL: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %v", err)
	}
	return nil
}

// ---------------------------------------------------------------- the steps

// podEnv: the manifest's environment, with NODE_NAME and the stub API server of the node
// labels.
func (r *liveRun) podEnv() []string {
	return append([]string{"PATH=/bin:/usr/bin:/usr/local/bin", "HOST_DEVICE_DIR=" + hostDevDir,
		"DEVICE_COUNT=2000", "DEVICE_UID=65534", "DEVICE_GID=65534", "DEVICE_MODE=0660", "LOG_LEVEL=info"}, r.labelEnv()...)
}

// labelEnv: NODE_NAME and the in-cluster KUBERNETES_SERVICE_* kubelet sets, naming the stub.
func (r *liveRun) labelEnv() []string {
	return []string{"NODE_NAME=" + podNodeName,
		"KUBERNETES_SERVICE_HOST=" + r.api.Host, "KUBERNETES_SERVICE_PORT=" + r.api.PortString()}
}

const (
	podNodeName = "live-kvm-node"
	podSAToken  = "live-kvm-token"
)

// startAPIStub serves the node labels' API (kubelet.APIStub: HTTPS on 127.0.0.1 with a CA of its
// own) and mounts the pod's service account (token, the stub's CA) where kubelet would.
func (r *liveRun) startAPIStub() {
	if r.api != nil {
		r.api.Close()
	}
	stub, err := kubelet.StartAPIStub(func(n int, q *kubelet.APIRequest) kubelet.APIAnswer {
		return kubelet.APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	})
	r.check(err)
	r.api = stub
	r.check(kubelet.WriteServiceAccount("/", podSAToken, stub.CAPEM))
}

// labelled: the node-label child (exec'd by the daemon, confined by the filter it inherits, over
// TLS to the stub) patched the node's labels.
func (r *liveRun) labelled() string {
	line := r.waitLog(0, `msg="node labelled"`)
	reqs := r.api.Requests()
	want := "/api/v1/nodes/" + podNodeName
	if len(reqs) == 0 || reqs[0].Method != "PATCH" || reqs[0].Path != want || reqs[0].Status != 200 ||
		reqs[0].Authorization != "Bearer "+podSAToken || !strings.Contains(string(reqs[0].Body), `"hyperlight.dev/hypervisor":"kvm"`) {
		r.fail("the stub API server's requests %+v, want a PATCH %s with the token and the hypervisor label, answered 200", reqs, want)
	}
	return fmt.Sprintf("PATCH %s %s (answered 200); log: %s", want, reqs[0].Body, line[strings.Index(line, "msg="):])
}

func (r *liveRun) podStart() string {
	r.nextReg = r.k.Registrations(resource) + 1
	r.prevEp = ""
	if p := r.k.Current(resource); p != nil {
		r.prevEp = p.Endpoint
	}
	self, err := os.Executable()
	r.check(err)
	r.startAPIStub()
	r.podT0 = time.Now()
	d, err := kubelet.StartDaemon(self, r.podEnv(), "pod-exec", r.podDaemon)
	r.check(err)
	r.daemons = append(r.daemons, &started{d: d, uid: 0})
	return fmt.Sprintf("%s pid %d through pod-exec, NODE_NAME=%s, HOST_DEVICE_DIR=%s, LOG_LEVEL=info (the manifest's environment), the API server a stub at %s",
		r.podDaemon, d.Pid(), podNodeName, hostDevDir, r.api.Addr())
}

// proc is a path inside the pod daemon's view (its root, in its mount namespace).
func (r *liveRun) proc(path string) string {
	return fmt.Sprintf("/proc/%d/root%s", r.daemon().Pid(), path)
}

// podLayoutChecked reads the layout the daemon runs in from /proc, not from the trampoline.
func (r *liveRun) podLayoutChecked() string {
	pid := r.daemon().Pid()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	r.check(err)
	if exe != r.podDaemon {
		r.fail("pid %d runs %s, want %s", pid, exe, r.podDaemon)
	}
	mounts, err := topMounts(pid)
	r.check(err)
	want := []struct{ at, fstype, opt string }{
		{"/", "", "ro"}, {"/dev", "tmpfs", "rw"}, {hostDevDir, "devtmpfs", "ro"},
		{kubeletDir, "", "rw"}, {cdiDir, "tmpfs", "rw"},
	}
	var seen []string
	for _, w := range want {
		m, ok := mounts[w.at]
		if !ok {
			r.fail("no mount at %s in the daemon's namespace", w.at)
		}
		if (w.fstype != "" && m.fstype != w.fstype) || !hasOpt(m.opts, w.opt) {
			r.fail("%s in the daemon's namespace: %s %s, want %s %s", w.at, m.fstype, m.opts, w.fstype, w.opt)
		}
		seen = append(seen, fmt.Sprintf("%s %s %s", w.at, m.fstype, w.opt))
	}
	copyNode, err := os.Lstat(r.proc(kvmPath))
	r.check(err)
	hostNode, err := os.Lstat(kvmPath)
	r.check(err)
	cs, hs := copyNode.Sys().(*syscall.Stat_t), hostNode.Sys().(*syscall.Stat_t)
	if cs.Rdev != hs.Rdev || cs.Dev == hs.Dev || copyNode.Mode()&os.ModeCharDevice == 0 {
		r.fail("the pod's %s (rdev %#x, dev %#x) is not a copy of the node's (rdev %#x, dev %#x)", kvmPath, cs.Rdev, cs.Dev, hs.Rdev, hs.Dev)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	r.check(err)
	for _, f := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(string(status), f+"\n") {
			r.fail("pid %d status lacks %q:\n%s", pid, f, status)
		}
	}
	return fmt.Sprintf("mounts: %s; /dev/kvm a copy %d:%d %v; no capabilities, no_new_privs; %s",
		strings.Join(seen, ", "), unix.Major(cs.Rdev), unix.Minor(cs.Rdev), copyNode.Mode().Perm(), r.confined())
}

type mountEntry struct{ fstype, opts string }

// topMounts maps each mount point of pid's namespace to its topmost mount.
func topMounts(pid int) (map[string]mountEntry, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil, err
	}
	m := map[string]mountEntry{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// id parent maj:min root mountpoint options [optional...] - fstype source superopts
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 {
			return nil, fmt.Errorf("mountinfo line %q", l)
		}
		m[f[4]] = mountEntry{fstype: g[0], opts: f[5]}
	}
	return m, nil
}

func hasOpt(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// podUnload takes KVM away from the guest kernel, the pod's host (arch.go: rmmod kvm_amd kvm;
// arm64 rm /dev/kvm).
func (r *liveRun) podUnload() string {
	r.unloadMark = len(r.daemon().Stderr.Lines())
	start, returned, what := thisNode.take(r, true)
	r.unloadStart, r.unloaded, r.unloadWhat = start, returned, what
	if exists(kvmPath) || exists(r.proc(hostDevDir+"/kvm")) {
		r.fail("the node's /dev/kvm (or the pod's view of it at %s/kvm) is still there", hostDevDir)
	}
	if !exists(r.proc(kvmPath)) {
		r.fail("the pod's copy of /dev/kvm is gone; it should stay (a tmpfs node)")
	}
	f, err := os.OpenFile(r.proc(kvmPath), os.O_RDWR, 0)
	open := "ok"
	if err == nil {
		f.Close()
	} else {
		open = errnoName(err)
	}
	if thisNode.copyOpens != (err == nil) {
		r.fail("after %s the pod's copy of /dev/kvm opens: %s, want it to open: %v", what, open, thisNode.copyOpens)
	}
	return fmt.Sprintf("%s in %s%s: the node's /dev/kvm and the pod's %s/kvm gone, the pod's copy stays (open: %s)",
		what, ms(time.Since(start)), thisNode.stays, hostDevDir, open)
}

func errnoName(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		if e, ok := pe.Err.(syscall.Errno); ok {
			if n := unix.ErrnoName(e); n != "" {
				return n
			}
		}
	}
	return fmt.Sprint(err)
}

// podUnhealthy: no Allocate meanwhile (an Allocate runs a check itself): only the daemon's
// own paths, an event or its periodic check, can bring the change.
func (r *liveRun) podUnhealthy() string {
	at := r.waitHealth(kubelet.Unhealthy, r.unloadStart, podBound)
	lat := at.Sub(r.unloaded)
	line := r.waitLog(r.unloadMark, "device unusable")
	path := "the 30 s periodic check: no event reached the daemon"
	if lat < time.Second {
		path = "an event: well inside the 30 s period"
	}
	when := ms(lat) + " after"
	if lat < 0 {
		when = ms(-lat) + " before"
	}
	return fmt.Sprintf("every device Unhealthy %s %s returned (bound %v, not asserted; %s); log: %s",
		when, thisNode.removes, podBound, path, reasonOf(line))
}

func (r *liveRun) podReload() string {
	start := time.Now()
	what := thisNode.give(r, true)
	returned := time.Now()
	if _, _, err := charDev(r.proc(hostDevDir + "/kvm")); err != nil {
		r.fail("after %s, in the pod: %v", what, err)
	}
	at := r.waitHealth(kubelet.Healthy, start, podBound)
	return fmt.Sprintf("%s in %s, %s/kvm back; every device Healthy %s after it returned",
		what, ms(returned.Sub(start)), hostDevDir, ms(at.Sub(returned)))
}

// podLogChecked: the probe's result reached the log at info, once per change of verdict.
func (r *liveRun) podLogChecked() string {
	var usable, unusable int
	for _, l := range r.daemon().Stderr.Lines() {
		switch {
		case strings.Contains(l, `msg="device usable"`):
			if !strings.Contains(l, "level=info") || !strings.Contains(l, probeResult) {
				r.fail("a \"device usable\" line without the probe's result at info: %s", l)
			}
			usable++
		case strings.Contains(l, `msg="device unusable`):
			unusable++
		}
	}
	// Once per change of verdict: the periodic checks in between log nothing. (The unusable
	// reason may change while the modules go and come back: each distinct reason is a line.)
	if usable != 2 || unusable < 1 {
		r.fail("\"device usable\" logged %d times and \"device unusable\" %d times, want 2 (start, reload) and at least 1 (%s)", usable, unusable, r.unloadWhat)
	}
	return fmt.Sprintf("%s twice (start, reload) at info, \"device unusable\" %d time(s), over %s",
		probeResult, unusable, ms(time.Since(r.podT0)))
}
