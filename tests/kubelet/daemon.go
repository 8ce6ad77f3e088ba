package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildDir returns $SDP_BUILD_DIR as an absolute path (the meson build directory holding the
// daemons) after checking that it holds the hypervisor shim every daemon runs with (see
// DaemonEnv). It is required: a default relative to the test's working directory is not reliable.
func BuildDir() (string, error) {
	d := os.Getenv("SDP_BUILD_DIR")
	if d == "" {
		return "", errors.New("SDP_BUILD_DIR is not set: set it to the build directory holding " +
			HyperlightBinary + " (e.g. SDP_BUILD_DIR=/path/to/repo/build)")
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	if _, err := ShimPath(abs); err != nil {
		return "", fmt.Errorf("SDP_BUILD_DIR=%s: %v", d, err)
	}
	return abs, nil
}

// Executable returns <build>/<name> after checking that it is an executable file.
func Executable(buildDir, name string) (string, error) {
	p := filepath.Join(buildDir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%s: %v (build it first)", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}

// ShimLibrary is the LD_PRELOAD hypervisor shim inside a build directory (tests/fakes/hvshim.c).
const ShimLibrary = "tests/fakes/libhvshim.so"

// ShimPath returns <build>/tests/fakes/libhvshim.so after checking that it is a regular file.
func ShimPath(buildDir string) (string, error) {
	p := filepath.Join(buildDir, ShimLibrary)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("the hypervisor shim %s: %v (build it first: ninja -C %s)", p, err, buildDir)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("the hypervisor shim %s is not a regular file", p)
	}
	return p, nil
}

// daemonEnvKeys are removed from the inherited environment so only the test decides them.
var daemonEnvKeys = []string{"SDP_TEST_ROOT", "DEVICE_COUNT", "DEVICE_UID", "DEVICE_GID", "DEVICE_MODE", "LOG_LEVEL",
	"HOST_DEVICE_DIR", "NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "LD_PRELOAD",
	"COMPANIONS", "TUN_RESOURCE", "TUN_COUNT", "VHOST_NET_RESOURCE", "VHOST_NET_COUNT", "VHOST_VSOCK_RESOURCE",
	"VHOST_VSOCK_COUNT"}

// PlainDaemonEnv is the inherited environment without the daemon's own variables (nor
// LD_PRELOAD and HVSHIM_*), plus SDP_TEST_ROOT=root, LOG_LEVEL=debug and then extra
// ("KEY=value"; later entries win). The daemon talks to the real hypervisor device: only for a
// machine that has one on purpose (the live KVM test); every scenario uses DaemonEnv.
func PlainDaemonEnv(root string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		keep := !strings.HasPrefix(kv, "HVSHIM_")
		for _, k := range daemonEnvKeys {
			if strings.HasPrefix(kv, k+"=") {
				keep = false
			}
		}
		if keep {
			env = append(env, kv)
		}
	}
	env = append(env, "SDP_TEST_ROOT="+root, "LOG_LEVEL=debug")
	return append(env, extra...)
}

// DaemonEnv is PlainDaemonEnv with the hypervisor shim preloaded, so no result depends on the
// host's own /dev/kvm (a mknod'ed <root>/dev/kvm 10:232 reaches the real KVM when the host has
// one): LD_PRELOAD=$SDP_BUILD_DIR/tests/fakes/libhvshim.so, HVSHIM_DEVICE=<root>/dev/kvm and
// HVSHIM_STATE_FILE=<root>/hvshim.state (Node.SetShim changes the knobs while the daemon
// runs), and the companions' fakes at their nodes under <root>/dev (ShimCompanionKnobs). The probe helper child inherits it. extra comes last and may override any of these.
// It panics with a clear message when SDP_BUILD_DIR is unset or the shim is not built: no
// daemon may run against the host's hypervisor by accident.
func DaemonEnv(root string, extra ...string) []string {
	build, err := BuildDir()
	if err == nil {
		var so string
		if so, err = ShimPath(build); err == nil {
			env := PlainDaemonEnv(root, "LD_PRELOAD="+so, "HVSHIM_DEVICE="+filepath.Join(root, "dev/kvm"),
				"HVSHIM_STATE_FILE="+filepath.Join(root, ShimStateFile))
			env = append(env, ShimCompanionKnobs(root)...)
			return append(env, extra...)
		}
	}
	panic(fmt.Sprintf("DaemonEnv: %v", err))
}

// LogBuffer collects a process's output; safe for concurrent use.
type LogBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	Echo io.Writer // optional: also copy every line here
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Echo != nil {
		b.Echo.Write(p)
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the complete lines written so far.
func (b *LogBuffer) Lines() []string {
	s := b.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	return strings.Split(s, "\n")
}

// Daemon is a running device plugin process.
type Daemon struct {
	Path   string
	Cmd    *exec.Cmd
	Stderr *LogBuffer
	Stdout *LogBuffer
	done   chan struct{}
	state  *os.ProcessState
}

// DaemonWrapperEnv names the environment variable holding a command line that every daemon is
// started through (words split on blanks, the daemon's path and arguments appended), e.g.
// SDP_DAEMON_WRAPPER="valgrind --error-exitcode=99 --log-file=/tmp/vg.%p" (make valgrind).
// The wrapper must exec the daemon in the same process (valgrind does), so Pid is the daemon's.
const DaemonWrapperEnv = "SDP_DAEMON_WRAPPER"

// EmulatorEnv names the environment variable holding a command line that every program of the
// build directory is run through (daemons, their client modes, the C gRPC test server; words
// split on blanks, the program's path and arguments appended). tests/arm64/run.sh sets it to
// tests/arm64/qemu-user.sh to run an arm64 build under qemu-user (make test-arm64). Like the
// daemon wrapper, it must exec the program in the same process.
const EmulatorEnv = "SDP_EMULATOR"

// prefixed returns the words of $env followed by path and args, or path and args alone.
func prefixed(env, path string, args []string) (string, []string) {
	words := strings.Fields(os.Getenv(env))
	if len(words) == 0 {
		return path, args
	}
	return words[0], append(append(words[1:], path), args...)
}

// Wrapped returns the program and arguments that run a daemon, path with args: the words of
// $SDP_DAEMON_WRAPPER followed by path and args when it is set, else Emulated(path, args...).
func Wrapped(path string, args ...string) (string, []string) {
	if strings.TrimSpace(os.Getenv(DaemonWrapperEnv)) != "" {
		return prefixed(DaemonWrapperEnv, path, args)
	}
	return Emulated(path, args...)
}

// Emulated returns the program and arguments that run path with args: path itself, or the words
// of $SDP_EMULATOR followed by path and args.
func Emulated(path string, args ...string) (string, []string) {
	return prefixed(EmulatorEnv, path, args)
}

// StartDaemon starts path with env and args (through $SDP_DAEMON_WRAPPER when set, see
// Wrapped); stdout and stderr are captured.
func StartDaemon(path string, env []string, args ...string) (*Daemon, error) {
	d := &Daemon{Path: path, Stderr: &LogBuffer{}, Stdout: &LogBuffer{}, done: make(chan struct{})}
	prog, argv := Wrapped(path, args...)
	d.Cmd = exec.Command(prog, argv...)
	d.Cmd.Env = env
	d.Cmd.Stdout = d.Stdout
	d.Cmd.Stderr = d.Stderr
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %v", path, err)
	}
	go func() {
		d.Cmd.Wait() //nolint:errcheck // the state holds the outcome
		d.state = d.Cmd.ProcessState
		close(d.done)
	}()
	return d, nil
}

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.Cmd.Process.Pid }

// Log is the daemon's stderr (its logfmt log) so far.
func (d *Daemon) Log() string { return d.Stderr.String() }

// Exited reports whether the process has exited.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// ExitCode is the exit status, -1 if killed by a signal or still running.
func (d *Daemon) ExitCode() int {
	if !d.Exited() {
		return -1
	}
	return d.state.ExitCode()
}

// ExitDescription says how the process ended ("exit status 1", "signal: killed").
func (d *Daemon) ExitDescription() string {
	if !d.Exited() {
		return "running"
	}
	return d.state.String()
}

// Wait waits up to timeout for the process to exit and returns its exit code.
func (d *Daemon) Wait(timeout time.Duration) (int, error) {
	select {
	case <-d.done:
		return d.state.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s (pid %d) still running after %v", filepath.Base(d.Path), d.Pid(), timeout)
	}
}

// Signal sends sig to the process.
func (d *Daemon) Signal(sig os.Signal) error { return d.Cmd.Process.Signal(sig) }

// Stop sends SIGTERM and waits up to timeout; then SIGKILL. It returns the exit code and an
// error if SIGKILL was needed.
func (d *Daemon) Stop(timeout time.Duration) (int, error) {
	if d.Exited() {
		return d.ExitCode(), nil
	}
	d.Signal(syscall.SIGTERM)
	code, err := d.Wait(timeout)
	if err == nil {
		return code, nil
	}
	d.Signal(syscall.SIGKILL)
	d.Wait(5 * time.Second)
	return -1, fmt.Errorf("did not exit within %v of SIGTERM; killed", timeout)
}

// WaitLog waits until a log line satisfies match and returns it.
func (d *Daemon) WaitLog(timeout time.Duration, match func(line string) bool) (string, bool) {
	var found string
	ok := Poll(timeout, func() bool {
		for _, l := range d.Stderr.Lines() {
			if match(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found, ok
}

// SanitizerReports returns the ASan/LSan/UBSan report lines found in a log.
func SanitizerReports(log string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.Contains(l, "ERROR: AddressSanitizer") || strings.Contains(l, "ERROR: LeakSanitizer") ||
			strings.Contains(l, "runtime error:") || strings.Contains(l, "SUMMARY: UndefinedBehaviorSanitizer") {
			out = append(out, l)
		}
	}
	return out
}

// Result is the outcome of a short command.
type Result struct {
	Code           int // -1 if killed or timed out
	Stdout, Stderr string
}

// RunCommand runs a short-lived command (through $SDP_EMULATOR when set, see Emulated) with a
// bound; it errors if the bound passes.
func RunCommand(timeout time.Duration, path string, env []string, args ...string) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	prog, argv := Emulated(path, args...)
	cmd := exec.CommandContext(ctx, prog, argv...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Code: -1, Stdout: out.String(), Stderr: errb.String()}
	if cmd.ProcessState != nil {
		r.Code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s %s did not finish within %v", path, strings.Join(args, " "), timeout)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return r, err
	}
	return r, nil
}
