package kubelet

// Fault injection against the hyperlight daemon: 500 kubelet restarts in a row with the
// daemon's open fds and resident memory measured before and after, the whole CDI directory
// removed, the probe helper crashing / exiting with a bad status / printing garbage, and the
// daemon SIGSTOPed for 20 s while kubelet's calls time out.
//
// Covered elsewhere (not repeated here):
//   SIGTERM -> GOAWAY, sockets removed, spec kept, exit 0   TestHyperlightSIGTERM (lifecycle),
//                                                           TestHyperlightSIGTERMDuringProbe (probe)
//   CDI directory on a full tmpfs                           TestHyperlightCDIDiskFull (cdi)
//   CDI directory read-only                                 TestHyperlightCDIReadOnlyDir (cdi)
//   CDI spec replaced by a symlink                          TestHyperlightCDISymlink (cdi)
//   CDI spec deleted / truncated / modified                 TestHyperlightCDIDeleted, ...Truncated, ...Modified
//   device node deleted and recreated                       TestHyperlightDeviceNodeRemoved (lifecycle)
//   probe helper hanging past its deadline                  TestHyperlightProbeHang (probe)

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	restartRounds = 500
	// restartWarmup restarts run before the "before" figures are taken: the first few
	// registrations grow heap arenas and stdio buffers once.
	restartWarmup = 10
	rssGrowthMax  = 512 // KiB over restartRounds restarts
)

// openFDs counts the entries of /proc/<pid>/fd.
func openFDs(pid int) (int, error) {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// fdList names the daemon's open fds and their targets, for a failure message.
func fdList(pid int) string {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, e := range entries {
		target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		out = append(out, e.Name()+"->"+target)
	}
	return strings.Join(out, " ")
}

// tightPoll is Poll with a 1 ms interval, for the loop of 500 restarts.
func tightPoll(bound time.Duration, cond func() bool) bool {
	return PollEvery(time.Millisecond, bound, cond)
}

// restartOnce restarts the mock kubelet and waits until the daemon registered again (a newer
// registration than prev on a live endpoint whose stream sent n Healthy devices).
func (s *scenario) restartOnce(prev *Plugin, n int) *Plugin {
	s.t.Helper()
	if err := s.k.Restart(); err != nil {
		s.t.Fatal(err)
	}
	var cur *Plugin
	if !tightPoll(eventBound, func() bool {
		if s.d.Exited() {
			return true
		}
		cur = s.k.Current(HyperlightResource)
		if cur == nil || cur.Seq <= prev.Seq {
			return false
		}
		snap, ok := cur.Latest()
		return ok && CountHealth(n, Healthy)(snap.Devices)
	}) || s.d.Exited() {
		s.fatalf("no re-registration with %d Healthy devices within %v of a kubelet restart "+
			"(registrations so far: %d)", n, eventBound, s.k.Registrations(HyperlightResource))
	}
	return cur
}

// quiescentFDs waits (bounded) until the daemon's fd count equals want and returns the count
// then: right after a registration a helper pipe or the old connection may still be open.
func quiescentFDs(pid, want int) (int, error) {
	var n int
	var err error
	tightPoll(eventBound, func() bool {
		n, err = openFDs(pid)
		return err == nil && n == want
	})
	return n, err
}

// stableFDs returns the daemon's fd count once 20 samples 1 ms apart agree (bounded): right
// after a registration the old connection or a helper pipe may still be open.
func stableFDs(pid int) (int, error) {
	var n, same int
	var err error
	ok := tightPoll(eventBound, func() bool {
		var m int
		if m, err = openFDs(pid); err != nil {
			return true
		}
		if m == n {
			same++
		} else {
			n, same = m, 0
		}
		return same >= 20
	})
	if err == nil && !ok {
		err = fmt.Errorf("the fd count of pid %d did not settle within %v", pid, eventBound)
	}
	return n, err
}

// quarantineOff turns off the checkers' retention of freed memory for a daemon whose resident
// size is measured: ASan's quarantine (global and per-thread, when make asan sets ASAN_OPTIONS:
// by design up to 256 MiB of freed blocks stay resident) and valgrind's freed-blocks queue
// (VALGRIND_OPTS, read by valgrind when make valgrind wraps the daemon: 20 MB by default).
// Leaks are still reported at exit.
func quarantineOff() []string {
	env := []string{"VALGRIND_OPTS=--freelist-vol=0 --freelist-big-blocks=0"}
	if v, ok := os.LookupEnv("ASAN_OPTIONS"); ok {
		env = append(env, "ASAN_OPTIONS="+v+":quarantine_size_mb=0:thread_local_quarantine_size_kb=0")
	}
	return env
}

func TestFaultKubeletRestart500(t *testing.T) {
	s := newScenario(t, append([]string{"DEVICE_COUNT=3"}, quarantineOff()...)...)
	p := s.ready(3)
	pid := s.d.Pid()
	for i := 0; i < restartWarmup; i++ {
		p = s.restartOnce(p, 3)
	}
	fdsBefore, err := stableFDs(pid)
	if err != nil {
		t.Fatal(err)
	}
	listBefore := fdList(pid)
	rssBefore, err := ProcStatus(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	regsBefore := s.k.Registrations(HyperlightResource)
	start := time.Now()
	for i := 0; i < restartRounds; i++ {
		next := s.restartOnce(p, 3)
		if next.Endpoint == "" || !IsSocket(next.Socket) {
			s.fatalf("restart %d: registration #%d names %q, which is not a socket", i+1, next.Seq, next.Socket)
		}
		p = next
	}
	took := time.Since(start)
	if got := s.k.Registrations(HyperlightResource) - regsBefore; got != restartRounds {
		t.Errorf("%d kubelet restarts gave %d registrations, want exactly %d (one each)", restartRounds, got, restartRounds)
	}
	fdsAfter, err := quiescentFDs(pid, fdsBefore)
	if err != nil {
		t.Fatal(err)
	}
	rssAfter, err := ProcStatus(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kubelet restarts in %v (%v each): open fds %d before, %d after; VmRSS %d KiB before, %d KiB after (%+d KiB)",
		restartRounds, took.Round(time.Millisecond), (took / restartRounds).Round(time.Microsecond),
		fdsBefore, fdsAfter, rssBefore, rssAfter, rssAfter-rssBefore)
	if fdsAfter != fdsBefore {
		t.Errorf("open fds %d after %d restarts, %d before\nbefore: %s\nafter:  %s",
			fdsAfter, restartRounds, fdsBefore, listBefore, fdList(pid))
	}
	if rssAfter-rssBefore > rssGrowthMax {
		t.Errorf("VmRSS grew by %d KiB over %d restarts (%d -> %d), want at most %d KiB",
			rssAfter-rssBefore, restartRounds, rssBefore, rssAfter, rssGrowthMax)
	}
	socks, err := s.node.PluginSockets()
	if err != nil || len(socks) != 1 || socks[0] != p.Endpoint {
		t.Errorf("plugin sockets after the restarts: %v (%v), want only %s", socks, err, p.Endpoint)
	}
	if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"}); err != nil {
		t.Errorf("Allocate after %d restarts: %v", restartRounds, err)
	} else {
		checkAllocation(t, a.Response)
	}
}

// removeCDIDir makes the CDI directory vanish at once (renamed aside, then deleted with its
// content): a plain recursive delete races with the daemon rewriting its spec into it.
func removeCDIDir(t *testing.T, n *Node) {
	t.Helper()
	gone := n.CDIDir + ".removed"
	if err := os.Rename(n.CDIDir, gone); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
}

// The whole CDI directory removed: the daemon recreates it and writes its spec again.
func TestFaultCDIDirRemoved(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	want := s.readCDI()
	removeCDIDir(t, s.node)
	took := s.waitCDI(want, backoffBound)
	t.Logf("CDI directory recreated and spec rewritten %v after the directory was removed", took.Round(time.Millisecond))
	fi, err := os.Lstat(s.node.CDIDir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		t.Errorf("recreated CDI directory: %v (%v), want a directory 0755", fi.Mode(), err)
	}
	if fi, err := os.Lstat(s.node.CDIPath()); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("rewritten spec: %v (%v), want 0644", fi.Mode(), err)
	}
	// The repair is stable: removing it a second time works the same way.
	removeCDIDir(t, s.node)
	s.waitCDI(want, backoffBound)
	s.allocateOK("after the CDI directory was recreated")
	s.devices(3, Healthy, eventBound)
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered; a CDI repair needs no new registration")
	}
}

// The probe helper dies or answers nonsense: the resource goes Unhealthy with the precise
// reason in Allocate's answer, and comes back when the fault is cleared.
func TestFaultProbeHelper(t *testing.T) {
	for _, tc := range []struct {
		name, knob, reason string
	}{
		{"killed-by-sigsegv", "HVSHIM_CRASH=SIGSEGV", "helper killed by signal 11 (SIGSEGV)"},
		{"killed-by-sigkill", "HVSHIM_CRASH=SIGKILL", "helper killed by signal 9 (SIGKILL)"},
		{"exit-status-3", "HVSHIM_EXIT=3", "helper exited with status 3"},
		{"exit-0-silent", "HVSHIM_EXIT=0", "helper exited without a result"},
		{"prints-garbage", "HVSHIM_GARBAGE=1", "helper printed an invalid result: ?? garbage ? not a result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "DEVICE_COUNT=3")
			p := s.ready(3)
			s.shim(tc.knob)
			_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
			unavailable(t, err, "/dev/kvm", tc.reason)
			s.devices(3, Unhealthy, eventBound)
			waitCount(s.d, 1, "level=warn", "device unusable", tc.reason)
			// A second request while the fault lasts gets the same precise reason.
			_, err = s.k.Allocate(HyperlightResource, []string{"hyperlight-1"})
			unavailable(t, err, "/dev/kvm", tc.reason)

			s.clearShim()
			start := time.Now()
			s.devices(3, Healthy, backoffBound)
			t.Logf("Healthy again %v after the fault was cleared", time.Since(start).Round(time.Millisecond))
			if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"}); err != nil {
				t.Errorf("Allocate after recovery: %v", err)
			} else {
				checkAllocation(t, a.Response)
			}
			if s.d.Exited() {
				s.fatalf("the daemon exited")
			}
			if s.k.Current(HyperlightResource) != p {
				t.Errorf("the daemon re-registered; health changes go through the open stream")
			}
			checkHelperSequence(t, s.d.Stderr.Lines())
		})
	}
}

// The daemon SIGSTOPed for 20 s: kubelet's calls time out meanwhile; after SIGCONT it answers
// again, with Healthy devices, registered.
func TestFaultSIGSTOP(t *testing.T) {
	const stopped = 20 * time.Second
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	if err := s.d.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { s.d.Signal(syscall.SIGCONT) }
	t.Cleanup(cont) // a failed test must not leave it stopped (Stop would wait for nothing)
	stopAt := time.Now()

	// kubelet's side: an Allocate with a 2 s deadline fails with DeadlineExceeded.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := p.Client().Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"hyperlight-0"}}},
	})
	cancel()
	if st, _ := status.FromError(err); err == nil || st.Code() != codes.DeadlineExceeded {
		t.Errorf("Allocate to a stopped daemon: %v, want DeadlineExceeded", err)
	}
	// A kubelet restart while it is stopped: the registration cannot happen until it runs.
	regs := s.k.Registrations(HyperlightResource)
	if err := s.k.Restart(); err != nil {
		t.Fatal(err)
	}
	// The stimulus: the daemon stays stopped for 20 s in all.
	time.Sleep(time.Until(stopAt.Add(stopped)))
	if got := s.k.Registrations(HyperlightResource); got != regs {
		t.Errorf("%d registrations while the daemon was stopped, want none", got-regs)
	}
	if err := s.d.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cur := s.settled(p.Seq, "", 3, backoffBound)
	t.Logf("re-registered (#%d, %s) %v after SIGCONT", cur.Seq, cur.Endpoint, time.Since(start).Round(time.Millisecond))
	s.allocateOK("after SIGCONT")
	if s.d.Exited() {
		s.fatalf("the daemon exited after SIGCONT")
	}
}
