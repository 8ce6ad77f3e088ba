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
// `unshare -m --propagation private`).

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
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

// ---- the root

func (p *Pod) mount(src, dst, fstype string, flags uintptr, data string) error {
	if err := unix.Mount(src, dst, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s (%s): %v", src, dst, fstype, err)
	}
	if flags&unix.MS_REMOUNT == 0 {
		p.mounts = append(p.mounts, dst)
	}
	return nil
}

// bind bind-mounts host (a file or a directory) at path in the root, read-only when ro.
func (p *Pod) bind(host, path string, ro bool) error {
	dst := filepath.Join(p.Root, path)
	fi, err := os.Stat(host)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.IsDir() {
		err = os.MkdirAll(dst, 0o755)
	} else if _, serr := os.Stat(dst); serr != nil {
		err = os.WriteFile(dst, nil, 0o755)
	}
	if err != nil {
		return err
	}
	if err := p.mount(host, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if ro {
		return p.mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, "")
	}
	return nil
}

func (p *Pod) buildRoot() error {
	s := &p.Spec
	if err := os.Mkdir(p.Root, 0o755); err != nil {
		return err
	}
	if err := p.mount("sdp-pod", p.Root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return err
	}
	for _, d := range []string{"proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(p.Root, d), 0o755); err != nil {
			return err
		}
	}
	// /dev first: hostPath volumes may be mounted below it (/dev/vfio).
	dev := filepath.Join(p.Root, "dev")
	if err := p.mount("sdp-pod-dev", dev, "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return err
	}
	files := map[string]string{s.InPodBinary(): s.Binary}
	if err := ElfFiles(s.Binary, files); err != nil {
		return err
	}
	if s.Shim {
		files[PodShimPath] = s.ShimLib
		if err := ElfFiles(s.ShimLib, files); err != nil {
			return err
		}
	}
	for in, host := range files {
		if err := p.bind(host, in, true); err != nil {
			return err
		}
	}
	for _, b := range s.Binds {
		if err := p.bind(b.Host, b.Path, b.ReadOnly); err != nil {
			return err
		}
	}
	// The runtime's default nodes, then the injected devices.
	nodes := append([]PodDevNode{{"/dev/null", 1, 3}, {"/dev/zero", 1, 5}, {"/dev/full", 1, 7},
		{"/dev/random", 1, 8}, {"/dev/urandom", 1, 9}, {"/dev/tty", 5, 0}}, s.DevNodes...)
	for _, n := range nodes {
		if err := Mknod(filepath.Join(p.Root, n.Path), n.Major, n.Minor); err != nil {
			return err
		}
	}
	// readOnlyRootFilesystem: true
	return p.mount("", p.Root, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "")
}

// ElfFiles adds to files (in-pod path -> host file) the program interpreter and every shared
// library path loads, found as its loader would find them (RUNPATH/RPATH, then the default
// directories), each at the path where it was found. musl's loader is its own libc.so.
func ElfFiles(path string, files map[string]string) error {
	return elfFiles(path, files, false)
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

func elfFiles(path string, files map[string]string, musl bool) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return fmt.Errorf("%s: PT_INTERP: %v", path, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		musl = musl || strings.Contains(interp, "ld-musl")
		if err := addFile(files, interp, interp); err != nil {
			return err
		}
	}
	if !musl {
		// A shared library of a musl program (the shim) names musl's libc.so too.
		if lib, _ := f.ImportedLibraries(); len(lib) > 0 {
			for _, l := range lib {
				if l == "libc.so" {
					musl = true
				}
			}
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(path)))
			}
		}
	}
	dirs = append(dirs, libDirs...)
	for _, name := range needed {
		if musl && strings.HasPrefix(name, "libc.so") {
			continue
		}
		found := ""
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				found = filepath.Join(d, name)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s: not found in %v", path, name, dirs)
		}
		if _, done := files[found]; done {
			continue
		}
		if err := addFile(files, found, found); err != nil {
			return err
		}
		if err := elfFiles(found, files, musl); err != nil {
			return err
		}
	}
	return nil
}

func addFile(files map[string]string, in, host string) error {
	real, err := filepath.EvalSymlinks(host)
	if err != nil {
		return err
	}
	files[in] = real
	return nil
}

// Instrumented reports whether path is built with AddressSanitizer.
func Instrumented(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, get := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, _ := get()
		for _, s := range syms {
			if s.Name == "__asan_init" {
				return true
			}
		}
	}
	return false
}

// sanitizerEnv is this process's ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS (make asan) without
// log_path: the pod's root is read-only, so reports go to stderr, the pod's log.
func sanitizerEnv() []string {
	var env []string
	for _, k := range []string{"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"} {
		v, ok := os.LookupEnv(k)
		if !ok {
			continue
		}
		var keep []string
		for _, o := range strings.Split(v, ":") {
			if o != "" && !strings.HasPrefix(o, "log_path=") {
				keep = append(keep, o)
			}
		}
		env = append(env, k+"="+strings.Join(keep, ":"))
	}
	return env
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
		// SIGTERM, repeated: PID 1 with the default disposition drops it (a daemon still
		// starting, or the init hook before its exec); SIGKILL after the grace period.
		if !Poll(10*time.Second, func() bool {
			if !cur.Exited() {
				cur.Signal(syscall.SIGTERM)
			}
			return cur.Exited()
		}) {
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
	for pid := os.Getppid(); pid > 1; pid = statusInt(pid, "PPid:") {
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

// statusInt reads the first number of a /proc/<pid>/status field ("PPid:", "VmHWM:" in KiB);
// 0 when unknown.
func statusInt(pid int, field string) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field) {
			if f := strings.Fields(strings.TrimPrefix(l, field)); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

// VmHWMKiB is the peak resident size of a (host) pid, 0 when unknown.
func VmHWMKiB(pid int) int { return statusInt(pid, "VmHWM:") }

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
// cgroup, no SDP_TEST_ROOT.
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

// ---- cgroup

type podCgroup struct {
	dir string // the cgroup's directory
	rel string // its path in the hierarchy (as /proc/<pid>/cgroup shows it)
	v2  bool
}

// newPodCgroup makes a child of this process's memory cgroup with limit bytes: cgroup v1's
// memory controller when mounted, else cgroup v2 when memory is enabled for children.
func newPodCgroup(name string, limit int64) (*podCgroup, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("pod %s: no memory limit", name)
	}
	mount, rel, v2, err := memoryCgroup()
	if err != nil {
		return nil, err
	}
	leaf := fmt.Sprintf("sdp-pod-%s-%d-%d", name, os.Getpid(), time.Now().UnixNano()%1e9)
	c := &podCgroup{dir: filepath.Join(mount, rel, leaf), rel: filepath.Join(rel, leaf), v2: v2}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("memory cgroup: %v", err)
	}
	files := [][2]string{{"memory.limit_in_bytes", strconv.FormatInt(limit, 10)}}
	if v2 {
		files = [][2]string{{"memory.max", strconv.FormatInt(limit, 10)}, {"memory.swap.max", "0"}}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(c.dir, f[0]), []byte(f[1]), 0); err != nil {
			if v2 && f[0] == "memory.swap.max" && os.IsNotExist(err) {
				continue // no swap accounting: no swap
			}
			os.Remove(c.dir)
			return nil, fmt.Errorf("memory cgroup %s: %s: %v (cgroup v2: is memory in the parent's cgroup.subtree_control?)",
				c.dir, f[0], err)
		}
	}
	return c, nil
}

// memoryCgroup finds the memory hierarchy's mount point and this process's path in it.
func memoryCgroup() (mount, rel string, v2 bool, err error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", false, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", false, err
	}
	find := func(match func(fstype, opts string) bool) (string, string) {
		for _, l := range strings.Split(string(mi), "\n") {
			i := strings.Index(l, " - ")
			if i < 0 {
				continue
			}
			f, post := strings.Fields(l[:i]), strings.Fields(l[i+3:])
			if len(f) > 4 && len(post) > 2 && match(post[0], ","+post[2]+",") {
				return f[4], f[3]
			}
		}
		return "", ""
	}
	for _, l := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 || !strings.Contains(","+parts[1]+",", ",memory,") {
			continue
		}
		mp, root := find(func(fs, opts string) bool { return fs == "cgroup" && strings.Contains(opts, ",memory,") })
		if mp != "" {
			return mp, strings.TrimPrefix(parts[2], strings.TrimSuffix(root, "/")), false, nil
		}
	}
	for _, l := range strings.Split(string(own), "\n") {
		if strings.HasPrefix(l, "0::") {
			mp, root := find(func(fs, _ string) bool { return fs == "cgroup2" })
			if mp == "" {
				break
			}
			rel := strings.TrimPrefix(l[3:], strings.TrimSuffix(root, "/"))
			ctl, _ := os.ReadFile(filepath.Join(mp, rel, "cgroup.controllers"))
			if strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " memory ") {
				return mp, rel, true, nil
			}
		}
	}
	return "", "", false, errors.New("no memory cgroup: neither cgroup v1's memory controller nor cgroup v2 with memory")
}

func (c *podCgroup) procs() string { return filepath.Join(c.dir, "cgroup.procs") }

func (c *podCgroup) readInt(file string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// key reads "key N" from a flat-keyed file (memory.oom_control, memory.events).
func (c *podCgroup) key(file, key string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == key {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s/%s has no %s (kernel too old to count OOM kills?)", c.dir, file, key)
}

func (c *podCgroup) oomKills() (int64, error) {
	if c.v2 {
		return c.key("memory.events", "oom_kill")
	}
	return c.key("memory.oom_control", "oom_kill")
}

func (c *podCgroup) peak() (int64, error) {
	if c.v2 {
		return c.readInt("memory.peak")
	}
	return c.readInt("memory.max_usage_in_bytes")
}

func (c *podCgroup) usage() (int64, error) {
	if c.v2 {
		return c.readInt("memory.current")
	}
	return c.readInt("memory.usage_in_bytes")
}

// remove waits (bounded) until no process is left in the cgroup, then removes it.
func (c *podCgroup) remove() error {
	var err error
	if !Poll(10*time.Second, func() bool {
		b, rerr := os.ReadFile(c.procs())
		if rerr != nil {
			err = rerr
			return true
		}
		if len(bytes.TrimSpace(b)) != 0 {
			err = fmt.Errorf("processes left in %s: %s", c.dir, bytes.Fields(b))
			return false
		}
		err = os.Remove(c.dir)
		return err == nil
	}) {
		return err
	}
	return err
}

// ---- the manifests

// Manifest is what the tests take from one container of a manifest (or the kata chart's
// values): its args, its literal env values and its memory limit.
type Manifest struct {
	Path        string
	Args        []string
	Env         []string // KEY=value, only the entries with a literal value
	MemoryLimit int64
}

// SourceDir finds the repository (the directory holding deploy/hyperlight): $SDP_SOURCE_DIR,
// else upwards from the working directory, else upwards from $SDP_BUILD_DIR.
func SourceDir() (string, error) {
	ok := func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "deploy/hyperlight/30-device-plugin.yaml"))
		return err == nil
	}
	if d := os.Getenv("SDP_SOURCE_DIR"); d != "" && ok(d) {
		return d, nil
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if b, err := BuildDir(); err == nil {
		if real, err := filepath.EvalSymlinks(b); err == nil {
			starts = append(starts, real)
		}
	}
	for _, d := range starts {
		for ; d != "/" && d != "."; d = filepath.Dir(d) {
			if ok(d) {
				return d, nil
			}
		}
	}
	return "", errors.New("cannot find the repository (deploy/hyperlight): set SDP_SOURCE_DIR")
}

// Manifest files, relative to the repository.
const (
	HyperlightManifest   = "deploy/hyperlight/30-device-plugin.yaml"
	DeviceAccessManifest = "deploy/hyperlight/20-device-access.yaml"
	KataValues           = "deploy/helm/kata-device-plugin/values.yaml"
)

// ReadManifest reads the first container's args, literal env and resources.limits.memory from a
// manifest, or resources.limits.memory and logLevel (as LOG_LEVEL) from the kata chart's
// values. A line-based reader for these files' layout (no YAML library in Debian's gocode).
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &Manifest{Path: path}
	lines := strings.Split(string(b), "\n")
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	section := func(i int) (end int) { // the lines indented deeper than line i
		for end = i + 1; end < len(lines); end++ {
			if t := strings.TrimSpace(lines[end]); t != "" && !strings.HasPrefix(t, "#") && indent(lines[end]) <= indent(lines[i]) {
				break
			}
		}
		return end
	}
	unquote := func(v string) string { return strings.Trim(strings.TrimSpace(v), `"'`) }
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		switch {
		case t == "limits:" && m.MemoryLimit == 0:
			for j := i + 1; j < section(i); j++ {
				if v := strings.TrimSpace(lines[j]); strings.HasPrefix(v, "memory:") {
					if m.MemoryLimit, err = ParseQuantity(unquote(strings.TrimPrefix(v, "memory:"))); err != nil {
						return nil, fmt.Errorf("%s:%d: %v", path, j+1, err)
					}
				}
			}
		case strings.HasPrefix(t, "args:") && m.Args == nil:
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(t, "args:"))), &m.Args); err != nil {
				return nil, fmt.Errorf("%s:%d: args: %v", path, i+1, err)
			}
		case t == "env:" && m.Env == nil:
			m.Env = []string{}
			name := ""
			for j := i + 1; j < section(i); j++ {
				v := strings.TrimSpace(lines[j])
				if strings.HasPrefix(v, "- name:") {
					name = unquote(strings.TrimPrefix(v, "- name:"))
				} else if strings.HasPrefix(v, "value:") && name != "" {
					m.Env = append(m.Env, name+"="+unquote(strings.TrimPrefix(v, "value:")))
					name = ""
				}
			}
		case strings.HasPrefix(t, "logLevel:") && indent(lines[i]) == 0:
			m.Env = append(m.Env, "LOG_LEVEL="+unquote(strings.TrimPrefix(t, "logLevel:")))
		}
	}
	if m.MemoryLimit == 0 {
		return nil, fmt.Errorf("%s: no resources.limits.memory", path)
	}
	return m, nil
}

// ParseQuantity parses a Kubernetes memory quantity with a binary suffix or none ("64Mi").
func ParseQuantity(q string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"Ki", "Mi", "Gi"} {
		if strings.HasSuffix(q, suf) {
			q, mult = strings.TrimSuffix(q, suf), int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("memory quantity %q: want a positive number with Ki, Mi, Gi or no suffix", q)
	}
	return n * mult, nil
}

// ---- the daemons' pods

// HyperlightPod is the main plugin's pod (deploy/hyperlight/30-device-plugin.yaml) on node:
// /dev/kvm injected (a copy of the node's), the node's /dev read-only at /host-dev,
// HOST_DEVICE_DIR=/host-dev, the kubelet and CDI directories; extra env last. With
// deviceAccess, the bootstrap pod (20-device-access.yaml): no device, no CDI directory.
func HyperlightPod(node *Node, deviceAccess bool, extraEnv ...string) (PodSpec, *Manifest, error) {
	src, err := SourceDir()
	if err != nil {
		return PodSpec{}, nil, err
	}
	build, err := BuildDir()
	if err != nil {
		return PodSpec{}, nil, err
	}
	bin, err := Executable(build, HyperlightBinary)
	if err != nil {
		return PodSpec{}, nil, err
	}
	file, name := HyperlightManifest, "hyperlight"
	if deviceAccess {
		file, name = DeviceAccessManifest, "access"
	}
	m, err := ReadManifest(filepath.Join(src, file))
	if err != nil {
		return PodSpec{}, nil, err
	}
	s := PodSpec{Name: name, Binary: bin, Args: m.Args, Env: MergeEnv(m.Env, extraEnv...), MemoryLimit: m.MemoryLimit,
		Shim: true, Binds: []PodBind{{node.KubeletDir, PodKubeletDir, false}, {node.DevDir, PodHostDev, true}}}
	if !deviceAccess {
		var st unix.Stat_t
		if err := unix.Stat(node.KVMPath(), &st); err != nil {
			return PodSpec{}, nil, fmt.Errorf("the node's %s: %v", node.KVMPath(), err)
		}
		s.DevNodes = []PodDevNode{{"/dev/kvm", unix.Major(st.Rdev), unix.Minor(st.Rdev)}}
		s.Binds = append(s.Binds, PodBind{node.CDIDir, PodCDIDir, false})
	}
	return s, m, nil
}

// KataPod is the kata chart's pod on a node with the fake VFIO host tree: /dev/vfio read-only,
// the tree's sysfs read-only at /sys (the container's sysfs), the kubelet and CDI directories.
func KataPod(node *Node, tree *KataTree, extraEnv ...string) (PodSpec, *Manifest, error) {
	src, err := SourceDir()
	if err != nil {
		return PodSpec{}, nil, err
	}
	build, err := BuildDir()
	if err != nil {
		return PodSpec{}, nil, err
	}
	bin, err := Executable(build, KataBinary)
	if err != nil {
		return PodSpec{}, nil, err
	}
	m, err := ReadManifest(filepath.Join(src, KataValues))
	if err != nil {
		return PodSpec{}, nil, err
	}
	s := PodSpec{Name: "kata", Binary: bin, Env: MergeEnv(m.Env, extraEnv...), MemoryLimit: m.MemoryLimit,
		Binds: []PodBind{{node.KubeletDir, PodKubeletDir, false}, {node.CDIDir, PodCDIDir, false},
			{filepath.Join(tree.Root, "dev/vfio"), "/dev/vfio", true}, {filepath.Join(tree.Root, "sys"), "/sys", true}}}
	return s, m, nil
}
