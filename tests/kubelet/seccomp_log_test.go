package kubelet

// SDP_SECCOMP=log where the kernel has no seccomp log action (SECCOMP_RET_LOG, Linux 4.14): the
// daemon refuses to start, saying what is missing, rather than run unconfined or enforce what
// the operator did not ask for (docs/operations.md, "By log line"; docs/security.md). The
// kernel is made old by tests/fakes/oldkernel: a seccomp filter, loaded before it execs the
// daemon, answers seccomp(SECCOMP_GET_ACTION_AVAIL) with EINVAL as a kernel before 4.14 does.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const seccompLogMissing = "SDP_SECCOMP=log: this kernel has no seccomp log action"

func oldKernelWrapper(t *testing.T) string {
	t.Helper()
	w := filepath.Join(os.Getenv("SDP_BUILD_DIR"), "tests/fakes/oldkernel")
	if _, err := os.Stat(w); err != nil {
		t.Fatalf("%v (build it first)", err)
	}
	return w
}

// startOld starts bin through the old-kernel wrapper with the node's daemon environment.
func startOld(t *testing.T, node *Node, bin string, env ...string) *Daemon {
	t.Helper()
	if os.Getenv(DaemonWrapperEnv) != "" {
		// valgrind (make valgrind) would run the wrapper, not the daemon it execs
		t.Skipf("%s is set: the old-kernel wrapper execs the daemon itself", DaemonWrapperEnv)
	}
	d, err := StartDaemon(oldKernelWrapper(t), DaemonEnv(node.Root, env...), bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := d.Stop(exitBound); err != nil {
			t.Errorf("daemon cleanup: %v", err)
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", d.Log())
		}
	})
	return d
}

// expectLogRefused: the daemon exits 1 with one error line naming what the kernel lacks.
func expectLogRefused(t *testing.T, d *Daemon) {
	t.Helper()
	code, err := d.Wait(exitBound)
	if err != nil {
		t.Fatalf("the daemon did not exit with SDP_SECCOMP=log on a kernel without the log action: %v", err)
	}
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	lines := logLines(d, "error", "cannot confine the daemon")
	if len(lines) != 1 {
		t.Fatalf("%d error lines msg=\"cannot confine the daemon\", want 1; log:\n%s", len(lines), d.Log())
	}
	v, _ := logValue(lines[0], "error")
	for _, want := range []string{seccompLogMissing, "SECCOMP_RET_LOG", "Linux 4.14",
		"/proc/sys/kernel/seccomp/actions_avail", "SECCOMP_GET_ACTION_AVAIL", "EINVAL",
		"SDP_SECCOMP=enforce"} {
		if !strings.Contains(v, want) {
			t.Errorf("error=%q does not say %q", v, want)
		}
	}
	if strings.Contains(d.Log(), "Cannot allocate memory") || strings.Contains(d.Log(), "msg=confined") {
		t.Errorf("the log blames memory or says the daemon is confined; log:\n%s", d.Log())
	}
}

func TestSeccompLogUnavailableHyperlight(t *testing.T) {
	s := prepare(t, newNode(t, true))
	expectLogRefused(t, startOld(t, s.node, s.bin, "DEVICE_COUNT=3", "SDP_SECCOMP=log"))
}

func TestSeccompLogUnavailableKata(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	expectLogRefused(t, startOld(t, s.node, s.bin, "SDP_SECCOMP=log"))
}

// The same kernel still confines in the default mode: only the log action is missing.
func TestSeccompLogUnavailableEnforceStillConfines(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.d = startOld(t, s.node, s.bin, "DEVICE_COUNT=3")
	s.ready(3)
	if v := procStatus(t, s.d.Pid(), "Seccomp"); v != "2" {
		t.Errorf("/proc/%d/status Seccomp: %q, want 2", s.d.Pid(), v)
	}
	waitLine(t, s.d, eventBound, "info", "confined", "seccomp=enforce")
	s.allocateOK("on the old kernel")
}
