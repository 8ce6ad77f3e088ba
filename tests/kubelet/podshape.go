package kubelet

// The deployed shape ("pod shape"): a daemon run the way its manifest runs it, on the simulated
// node the other scenarios use, with nothing but the Linux primitives a container runtime uses:
//
//   - PID 1 of a new PID namespace, in a new mount namespace (the test binary re-executes
//     itself with CLONE_NEWPID|CLONE_NEWNS; its init hook, podInitHook, mounts a fresh /proc,
//     chroots, joins the memory cgroup, drops every capability, sets no_new_privs and execs the
//     daemon, which keeps PID 1);
//   - in a memory cgroup of its own with the chart's limit (cgroup v1 memory controller, or
//     cgroup v2 where memory is delegated), OOM kills counted by the cgroup;
//   - a read-only root: a tmpfs holding only the binary, the shared libraries it loads (read
//     from its ELF headers) and, for hyperlight, the hypervisor shim, each bind-mounted
//     read-only, then the tmpfs itself remounted read-only; /dev is a small tmpfs of its own with
//     the runtime's default nodes and the injected device (a mknod'ed copy of the node's);
//   - the hostPath volumes bind-mounted where the manifests mount them: the kubelet directory
//     at /var/lib/kubelet/device-plugins, the CDI directory at /var/run/cdi, the node's /dev
//     read-only at /host-dev, /dev/vfio and (kata, standing in for the container's sysfs) the
//     fake /sys read-only. The daemon runs WITHOUT SDP_TEST_ROOT, on its real paths;
//   - restarted at once when it exits (kubelet's restartPolicy: Always without its crash
//     back-off, which is kubelet's, not the daemon's), kill -9 and OOM kill included;
//   - exec probes (Exec) run the binary inside the pod's PID and mount namespaces with nsenter,
//     in the pod's cgroup, as kubelet's exec probe would.
//
// What differs from a real pod (docs/reliability.md, "As deployed"): no seccomp RuntimeDefault
// profile (the daemons install their own filter), no network namespace (the daemons use only
// unix sockets), no NODE_NAME (no API server), the exec probe keeps nsenter's capabilities and
// runs without the hypervisor shim (it opens no device), and the pod root's mounts live in the
// test process's mount namespace (which must be private: tests/run.sh runs the scenarios under
// `unshare -m --propagation private`). A pod with Shim false runs the real hypervisor device
// (for a live-KVM run).
//
// Files: this one (the pod's life), podshape_root.go (the root), podshape_cgroup.go (the memory
// cgroup), podshape_manifest.go (the manifests and the daemons' PodSpecs), podshape_hostile.go
// (hostile clients).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// In-pod paths, as the manifests mount them.
const (
	PodKubeletDir = "/var/lib/kubelet/device-plugins"
	PodCDIDir     = "/var/run/cdi"
	PodHostDev    = "/host-dev"
	// PodShimPath is where the hypervisor shim is mounted in a pod that preloads it.
	PodShimPath = "/hvshim/libhvshim.so"
	// PodMaxRestarts bounds the restarts of one pod: a daemon that exits at once is not
	// restarted forever (kubelet would back off; the test fails on the restarts instead).
	PodMaxRestarts = 100
	podInitEnv     = "SDP_PODSHAPE_INIT"
	podPath        = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// PodDevNode is a character device the runtime creates in the pod's /dev.
type PodDevNode struct {
	Path         string // in the pod, e.g. /dev/kvm
	Major, Minor uint32
}

// PodBind is a hostPath volume.
type PodBind struct {
	Host, Path string // host directory, mount path in the pod
	ReadOnly   bool
}

// PodSpec is one container of a DaemonSet, as far as the daemon can tell.
type PodSpec struct {
	Name        string   // short, for the cgroup and the log
	Binary      string   // the daemon on the host; /<base name> in the pod (the image's entrypoint)
	Args        []string // the container's args
	Env         []string // the container's env (KEY=value; later entries win)
	MemoryLimit int64    // bytes; the chart's resources.limits.memory
	Binds       []PodBind
	DevNodes    []PodDevNode
	// Shim preloads the hypervisor shim (tests/fakes/libhvshim.so next to Binary's build) with
	// HVSHIM_DEVICE=/dev/kvm: every daemon the tests run probes a fake KVM.
	Shim    bool
	ShimLib string // the shim on the host; default: $SDP_BUILD_DIR/tests/fakes/libhvshim.so
}

// InPodBinary is the daemon's path in the pod.
func (s *PodSpec) InPodBinary() string { return "/" + filepath.Base(s.Binary) }

// PodContainer is one run of the container (the first, then one per restart).
type PodContainer struct {
	*Daemon             // Pid is the daemon's host PID (PID 1 in the pod)
	N         int       // 0 for the first run, 1 for the first restart...
	Started   time.Time // when the process was started (before the daemon's exec)
	Ended     time.Time // zero while running
	OOMKilled bool      // the cgroup counted an OOM kill while it ran and it died of SIGKILL
}

// Pod runs one PodSpec and restarts it when it exits.
type Pod struct {
	Spec PodSpec
	Dir  string // host directory holding the root
	Root string // the pod's root on the host (a read-only tmpfs)

	cg      *podCgroup
	env     []string
	mounts  []string
	mu      sync.Mutex
	runs    []*PodContainer
	closing bool
	oomSeen int64
	err     error
}

// MergeEnv returns env with extra applied: a KEY in extra replaces the same KEY in env.
func MergeEnv(env []string, extra ...string) []string {
	out := append([]string(nil), env...)
	for _, kv := range extra {
		key := kv[:strings.IndexByte(kv+"=", '=')]
		replaced := false
		for i, old := range out {
			if strings.HasPrefix(old, key+"=") {
				out[i], replaced = kv, true
			}
		}
		if !replaced {
			out = append(out, kv)
		}
	}
	return out
}

// StartPod builds the pod's root and cgroup and starts its container. Close undoes all of it.
func StartPod(spec PodSpec) (*Pod, error) {
	if err := PrivateMountNamespace(); err != nil {
		return nil, err
	}
	if spec.Shim && spec.ShimLib == "" {
		build, err := BuildDir()
		if err != nil {
			return nil, err
		}
		spec.ShimLib = filepath.Join(build, ShimLibrary)
	}
	dir, err := os.MkdirTemp("", "sdp-pod-")
	if err != nil {
		return nil, err
	}
	p := &Pod{Spec: spec, Dir: dir, Root: filepath.Join(dir, "root")}
	p.env = MergeEnv([]string{podPath, "HOSTNAME=" + spec.Name}, spec.Env...)
	if spec.Shim {
		p.env = MergeEnv(p.env, "LD_PRELOAD="+PodShimPath, "HVSHIM_DEVICE=/dev/kvm")
	}
	p.env = MergeEnv(p.env, sanitizerEnv()...)
	if err := p.buildRoot(); err != nil {
		p.Close()
		return nil, err
	}
	if p.cg, err = newPodCgroup(spec.Name, spec.MemoryLimit); err != nil {
		p.Close()
		return nil, err
	}
	if p.oomSeen, err = p.cg.oomKills(); err != nil {
		p.Close()
		return nil, err
	}
	p.mu.Lock()
	err = p.startLocked()
	p.mu.Unlock()
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// ---- starting, restarting, stopping

// podInit is what the init hook does in the child before it execs the daemon (mode "run") or
// a command entering the pod (mode "exec").
type podInit struct {
	Mode   string
	Root   string
	Procs  string // the cgroup's cgroup.procs
	Path   string
	Args   []string
	Env    []string
	NoCaps bool
}

func init() {
	if v, ok := os.LookupEnv(podInitEnv); ok {
		podInitHook(v)
	}
}

// podInitHook runs in the re-executed test binary (any binary importing this package) and
// never returns: it execs the daemon, or exits 127 with a message.
func podInitHook(config string) {
	runtime.LockOSThread() // capset and no_new_privs are per thread: the exec'ing one
	die := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "pod init: %s: %v\n", what, err)
		os.Exit(127)
	}
	var c podInit
	if err := json.Unmarshal([]byte(config), &c); err != nil {
		die("config", err)
	}
	if c.Mode == "run" {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			die("private mounts", err)
		}
		if err := unix.Mount("proc", filepath.Join(c.Root, "proc"), "proc",
			unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			die("mount /proc", err)
		}
	}
	procs, err := os.OpenFile(c.Procs, os.O_WRONLY, 0)
	if err != nil {
		die("open cgroup", err)
	}
	if c.Mode == "run" {
		if err := unix.Chroot(c.Root); err != nil {
			die("chroot", err)
		}
		if err := unix.Chdir("/"); err != nil {
			die("chdir", err)
		}
	}
	// Join the cgroup last: the Go runtime's own pages stay charged where they were.
	if _, err := procs.Write([]byte("0")); err != nil {
		die("join cgroup", err)
	}
	procs.Close()
	if c.NoCaps {
		for cap := 0; cap <= 63; cap++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(cap), 0, 0, 0); err != nil && cap <= unix.CAP_LAST_CAP {
				die("drop capability bounding set", err)
			}
		}
		_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			die("no_new_privs", err)
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			die("capset", err)
		}
	}
	err = syscall.Exec(c.Path, c.Args, c.Env)
	die("exec "+c.Path, err)
}

// selfCommand is the test binary re-executed with the init hook configured by c.
func selfCommand(ctx context.Context, c podInit) (*exec.Cmd, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if ctx != nil {
		cmd = exec.CommandContext(ctx, "/proc/self/exe")
	} else {
		cmd = exec.Command("/proc/self/exe")
	}
	cmd.Args = []string{"sdp-pod-init"}
	cmd.Env = []string{podInitEnv + "=" + string(b)}
	return cmd, nil
}

func (p *Pod) startLocked() error {
	s := &p.Spec
	cmd, err := selfCommand(nil, podInit{Mode: "run", Root: p.Root, Procs: p.cg.procs(), Path: s.InPodBinary(),
		Args: append([]string{s.InPodBinary()}, s.Args...), Env: p.env, NoCaps: true})
	if err != nil {
		return err
	}
	d := &Daemon{Path: s.Binary, Cmd: cmd, Stderr: &LogBuffer{}, Stdout: &LogBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = d.Stdout, d.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	c := &PodContainer{Daemon: d, N: len(p.runs), Started: time.Now()}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pod %s: start: %v", s.Name, err)
	}
	p.runs = append(p.runs, c)
	go func() {
		cmd.Wait() //nolint:errcheck // the state holds the outcome
		d.state = cmd.ProcessState
		p.exited(c)
		close(d.done)
	}()
	return nil
}

// exited records how c ended and restarts the container unless the pod is closing.
func (p *Pod) exited(c *PodContainer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.Ended = time.Now()
	if n, err := p.cg.oomKills(); err == nil && n > p.oomSeen {
		ws, _ := c.Cmd.ProcessState.Sys().(syscall.WaitStatus)
		c.OOMKilled = ws.Signaled() && ws.Signal() == syscall.SIGKILL
		p.oomSeen = n
	}
	if p.closing {
		return
	}
	if len(p.runs) > PodMaxRestarts {
		p.err = fmt.Errorf("pod %s: more than %d restarts, not restarted again", p.Spec.Name, PodMaxRestarts)
		return
	}
	if err := p.startLocked(); err != nil && p.err == nil {
		p.err = err
	}
}

// Current is the newest container run (possibly exited, when a restart failed or the pod is
// closing).
func (p *Pod) Current() *PodContainer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs[len(p.runs)-1]
}

// Containers are every run so far, oldest first.
func (p *Pod) Containers() []*PodContainer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*PodContainer(nil), p.runs...)
}

// Restarts is the number of restarts so far (kubelet's restartCount).
func (p *Pod) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.runs) - 1
}

// Err is the error that stopped the restarts, if any.
func (p *Pod) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Kill sends SIGKILL to the current container's PID 1 (from the host, as kubelet/the runtime
// or the OOM killer would).
func (p *Pod) Kill() error { return p.Current().Signal(syscall.SIGKILL) }

// WaitRun waits until the n-th run (0 = first) has started and returns it.
func (p *Pod) WaitRun(n int, bound time.Duration) (*PodContainer, error) {
	var c *PodContainer
	if !Poll(bound, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.runs) > n {
			c = p.runs[n]
			return true
		}
		return false
	}) {
		return nil, fmt.Errorf("pod %s: run #%d not started within %v (restarts %d, %v)", p.Spec.Name, n, bound,
			p.Restarts(), p.Err())
	}
	return c, nil
}

// WaitExec waits (bounded) until run c has exec'ed the daemon (its comm is the binary's name,
// no longer the init hook's).
func (p *Pod) WaitExec(c *PodContainer, bound time.Duration) error {
	want := filepath.Base(p.Spec.Binary)
	if len(want) > 15 {
		want = want[:15]
	}
	var comm string
	if !Poll(bound, func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.Pid()))
		comm = strings.TrimSpace(string(b))
		return comm == want || c.Exited()
	}) || c.Exited() {
		return fmt.Errorf("pod %s: run #%d did not exec %s within %v (comm %q, %s)", p.Spec.Name, c.N, want, bound,
			comm, c.ExitDescription())
	}
	return nil
}

// sigBlocked reports whether pid's main thread blocks sig (SigBlk in /proc/<pid>/status).
func sigBlocked(pid int, sig syscall.Signal) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "SigBlk:") {
			m, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(l, "SigBlk:")), 16, 64)
			return err == nil && m&(1<<(uint(sig)-1)) != 0
		}
	}
	return false
}

// OOMKills is the number of OOM kills the pod's cgroup counted since it was made.
func (p *Pod) OOMKills() (int64, error) { return p.cg.oomKills() }

// MemoryPeak is the cgroup's peak usage in bytes (v1 memory.max_usage_in_bytes, v2
// memory.peak).
func (p *Pod) MemoryPeak() (int64, error) { return p.cg.peak() }

// MemoryUsage is the cgroup's current usage in bytes.
func (p *Pod) MemoryUsage() (int64, error) { return p.cg.usage() }

// Exec runs the daemon binary with args inside the current container's PID and mount
// namespaces and in the pod's cgroup, as kubelet's exec probe does, with a bound. Its
// environment is the container's without the hypervisor shim (nsenter is a host binary).
func (p *Pod) Exec(timeout time.Duration, args ...string) (Result, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return Result{Code: -1}, err
	}
	var env []string
	for _, kv := range p.env {
		if !strings.HasPrefix(kv, "LD_PRELOAD=") && !strings.HasPrefix(kv, "HVSHIM_") {
			env = append(env, kv)
		}
	}
	pid := p.Current().Pid()
	argv := append([]string{"nsenter", "--target", strconv.Itoa(pid), "--pid", "--mount", "--root", "--wd", "--",
		p.Spec.InPodBinary()}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd, err := selfCommand(ctx, podInit{Mode: "exec", Procs: p.cg.procs(), Path: nsenter, Args: argv, Env: env})
	if err != nil {
		return Result{Code: -1}, err
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := Result{Code: -1, Stdout: out.String(), Stderr: errb.String()}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("exec %s in pod %s did not finish within %v", strings.Join(args, " "), p.Spec.Name, timeout)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return r, err
	}
	return r, nil
}

// Log is every run's log, each after a header line saying how it ended.
func (p *Pod) Log() string {
	var b strings.Builder
	for _, c := range p.Containers() {
		fmt.Fprintf(&b, "== pod %s run #%d (host pid %d, started %s, %s%s)\n", p.Spec.Name, c.N, c.Pid(),
			c.Started.Format("15:04:05.000"), c.ExitDescription(), map[bool]string{true: ", OOM-killed"}[c.OOMKilled])
		b.WriteString(c.Log())
		if out := c.Stdout.String(); out != "" {
			b.WriteString("-- stdout:\n" + out)
		}
	}
	return b.String()
}

// Close stops restarting, sends SIGTERM to the container (SIGKILL after 10 s, the manifests'
// terminationGracePeriodSeconds), then removes the cgroup, the mounts and the directory.
func (p *Pod) Close() error {
	var errs []string
	p.mu.Lock()
	p.closing = true
	var cur *PodContainer
	if len(p.runs) > 0 {
		cur = p.runs[len(p.runs)-1]
	}
	p.mu.Unlock()
	if cur != nil && !cur.Exited() {
		// One SIGTERM, once the daemon has blocked it (the first thing its main does): before
		// that, PID 1 with the default disposition drops it (the init hook before its exec, the
		// dynamic loader). SIGKILL after the grace period.
		Poll(5*time.Second, func() bool { return cur.Exited() || sigBlocked(cur.Pid(), syscall.SIGTERM) })
		cur.Signal(syscall.SIGTERM)
		if _, err := cur.Wait(10 * time.Second); err != nil {
			cur.Signal(syscall.SIGKILL)
			if _, err := cur.Wait(5 * time.Second); err != nil {
				errs = append(errs, err.Error())
			}
			errs = append(errs, fmt.Sprintf("pod %s: run #%d did not exit within 10 s of SIGTERM; killed", p.Spec.Name, cur.N))
		}
	}
	if p.cg != nil {
		if err := p.cg.remove(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(p.mounts) > 0 {
		// A lazy unmount of the root detaches every mount below it too.
		if err := unix.Unmount(p.Root, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Sprintf("umount %s: %v", p.Root, err))
		}
		if left := mountsUnder(p.Dir); len(left) > 0 {
			errs = append(errs, fmt.Sprintf("mounts left under %s: %v", p.Dir, left))
			return errors.New(strings.Join(errs, "; "))
		}
	}
	// Only empty directories are left; never RemoveAll (a bind mount left behind would be a
	// host directory).
	for _, d := range []string{p.Root, p.Dir} {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// mountsUnder lists this mount namespace's mount points under dir.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// PrivateMountNamespace fails unless this process runs in a mount namespace of its own (some
// ancestor, or PID 1, is in another): the pod roots are mounted in it.
func PrivateMountNamespace() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("cannot read the mount namespace: %v", err)
	}
	for pid := os.Getppid(); pid > 1; pid = statusInt(pid, "PPid") {
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && ns != self {
			return nil
		}
	}
	if ns, err := os.Readlink("/proc/1/ns/mnt"); err == nil && ns != self {
		return nil
	}
	return errors.New("the pod shape mounts and must run in a private mount namespace: " +
		"run the scenario binary under `unshare -m --propagation private` (tests/run.sh does)")
}

// statusInt is ProcStatus, 0 when unknown.
func statusInt(pid int, name string) int {
	n, _ := ProcStatus(pid, name)
	return n
}

// VmHWMKiB is the peak resident size of a (host) pid, 0 when unknown.
func VmHWMKiB(pid int) int { return statusInt(pid, "VmHWM") }

// NSPid is the innermost PID of a host pid (the last NSpid field): 1 for a pod's daemon.
func NSPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			return strconv.Atoi(f[len(f)-1])
		}
	}
	return 0, fmt.Errorf("no NSpid in /proc/%d/status", pid)
}

// CheckShape checks what the daemon itself would see: PID 1, the root read-only, in the pod's
// cgroup, no capability, no_new_privs, no SDP_TEST_ROOT.
func (p *Pod) CheckShape() error {
	c := p.Current()
	if err := p.WaitExec(c, 10*time.Second); err != nil {
		return err
	}
	pid := c.Pid()
	if n, err := NSPid(pid); err != nil || n != 1 {
		return fmt.Errorf("the daemon is pid %d in its namespace (%v), want 1", n, err)
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return err
	}
	rootRO := false
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
			rootRO = strings.Contains(","+f[5]+",", ",ro,")
		}
	}
	if !rootRO {
		return fmt.Errorf("the daemon's / is not read-only:\n%s", mi)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if !strings.Contains(string(cg), p.cg.rel) {
		return fmt.Errorf("the daemon is not in the pod's cgroup %s:\n%s", p.cg.rel, cg)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(string(st), want+"\n") {
			return fmt.Errorf("the daemon's /proc/%d/status lacks %q (capabilities: drop ALL; allowPrivilegeEscalation: false)",
				pid, want)
		}
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return err
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "SDP_TEST_ROOT=") {
			return fmt.Errorf("the daemon runs with %s", kv)
		}
	}
	return nil
}
