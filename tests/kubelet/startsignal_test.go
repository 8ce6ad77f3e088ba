package kubelet

// SIGTERM during start-up, with the daemon as PID 1 of its PID namespace (as the images run it).
// An init process ignores a signal from an ancestor namespace while its disposition is SIG_DFL
// and the signal is not blocked (the kernel drops it), so a SIGTERM arriving before the daemon
// blocked SIGTERM for its signalfd was lost and the pod waited its whole grace period.
//
// To land the signal in that window every time, the daemon's stderr is a pipe the test filled
// before starting it: the daemon's first log line ("starting", written before any signal set-up
// of the unfixed code) blocks in write(2) until the test drains the pipe. The test waits until
// the daemon (not unshare's child before exec) is blocked writing to fd 2, sends one SIGTERM,
// then drains the pipe: the daemon must say why it stops, exit 0 and leave no socket.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullPipe returns a pipe whose write end is full (and blocking again), for a child's stderr.
func fullPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetNonblock(p[1], true); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for i := range chunk {
		chunk[i] = '#'
	}
	for {
		n, err := syscall.Write(p[1], chunk)
		if err == syscall.EAGAIN {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < len(chunk) {
			chunk = chunk[:len(chunk)-n]
		}
		if len(chunk) == 0 {
			chunk = []byte{'#'}
		}
	}
	// O_NONBLOCK belongs to the open file description the daemon inherits: clear it.
	if err := syscall.SetNonblock(p[1], false); err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(p[0]), "stderr-r"), os.NewFile(uintptr(p[1]), "stderr-w")
}

// childOf returns the only child of pid (0 while there is none).
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// blockedOnStderr reports whether pid runs bin and sits in write(2, ...). Under an emulator
// (SDP_EMULATOR: make test-arm64) pid is qemu-user running bin, its first argument (as
// binfmt_misc starts it), and qemu's write(2, ...) is the daemon's.
func blockedOnStderr(pid int, bin string) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false
	}
	if exe != bin {
		argv, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		words := strings.Split(string(argv), "\x00")
		if os.Getenv(EmulatorEnv) == "" || err != nil || len(words) < 2 || words[1] != bin {
			return false
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
	return err == nil && strings.HasPrefix(string(b), fmt.Sprintf("%d 0x2 ", syscall.SYS_WRITE))
}

// sigtermAtStart runs bin as PID 1 (unshare --pid --fork), sends SIGTERM while its first log
// line is blocked, and checks it stops cleanly; prefix names its sockets.
func sigtermAtStart(t *testing.T, s *scenario, bin string, env []string, prefix string) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not found")
	}
	r, w := fullPipe(t)
	defer r.Close()
	prog, argv := Emulated(unshare, "--pid", "--fork", "--kill-child", bin)
	cmd := exec.Command(prog, argv...)
	cmd.Env = env
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill() //nolint:errcheck // --kill-child ends the daemon too
			<-done
		}
	}()

	var pid int
	if !Poll(eventBound, func() bool {
		// asked again each time: under SDP_EMULATOR the first child seen may be the
		// emulator's own short-lived one (tests/arm64/qemu_user.c), not the daemon
		pid = childOf(cmd.Process.Pid)
		return pid != 0 && blockedOnStderr(pid, bin)
	}) {
		t.Fatalf("the daemon (pid %d under unshare %d) never blocked writing its first log line", pid,
			cmd.Process.Pid)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	log := &LogBuffer{}
	copied := make(chan struct{})
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				log.Write([]byte(strings.TrimLeft(string(buf[:n]), "#"))) //nolint:errcheck // in memory
			}
			if err != nil {
				close(copied)
				return
			}
		}
	}()

	// Generous: well under any grace period; the unfixed daemon never exits on its own.
	select {
	case err = <-done:
	case <-time.After(eventBound):
		t.Fatalf("SIGTERM during start-up was lost: still running after %v; log:\n%s", eventBound, log)
	}
	<-copied
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v, want status 0; log:\n%s", err, log)
	}
	found := false
	for _, l := range log.Lines() {
		found = found || (logField(l, "msg") == "shutting down" && strings.Contains(l, " signal=TERM"))
	}
	if !found {
		t.Errorf("no msg=\"shutting down\" signal=TERM line; log:\n%s", log)
	}
	left, _ := filepath.Glob(filepath.Join(s.node.KubeletDir, prefix+"-*.sock"))
	if len(left) > 0 {
		t.Errorf("sockets left after SIGTERM: %v", left)
	}
}

func TestSigtermDuringStartAsPID1(t *testing.T) {
	s := prepare(t, newNode(t, true))
	sigtermAtStart(t, s, s.bin, DaemonEnv(s.node.Root, "DEVICE_COUNT=3"), "hyperlight")
}

func TestKataSigtermDuringStartAsPID1(t *testing.T) {
	k := newKata(t)
	sigtermAtStart(t, k.scenario, k.bin, PlainDaemonEnv(k.node.Root), "kata")
}
