package kubelet

// Scenarios: the usability probe the daemon runs in its helper child, with the hypervisor
// ioctls faked by the preloaded shim (tests/fakes/libhvshim.so; Node.SetShim changes its knobs
// while the daemon runs): failure reasons in Allocate and on kubelet's stream, recovery through
// the retry back-off, the 2 s deadline, one helper at a time, Allocates joining the check in
// flight, HOST_DEVICE_DIR, invalid DEVICE_UID / DEVICE_COUNT, and readiness following kubelet's
// stream.
//
// Not here: "a helper that ignores SIGKILL keeps probes blocked until it is reaped". A scenario
// cannot make a real process survive SIGKILL (that takes a task stuck in the kernel);
// core/tests/test_helper.c (test_blocked_then_recovers) simulates it with a zero kill grace, so
// the killed child is not yet reaped when the next request arrives and that request fails with
// "previous helper (pid N) not reaped after SIGKILL; probes blocked" until the reap.

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	probeDeadline = 2 * time.Second
	// hangBound: an Allocate behind a hanging probe is answered at the probe's deadline.
	hangBound = probeDeadline + 3*time.Second
)

// ---- helpers shared with hyperlight_access_test.go

// shim replaces the shim's knobs for the running daemon and its next helpers.
func (s *scenario) shim(knobs ...string) {
	s.t.Helper()
	if err := s.node.SetShim(knobs...); err != nil {
		s.t.Fatal(err)
	}
}

// clearShim puts the shim back to the daemon's environment: the fake device, no fault.
func (s *scenario) clearShim() {
	s.t.Helper()
	if err := s.node.ClearShim(); err != nil {
		s.t.Fatal(err)
	}
}

// startWith starts a daemon process with args on the scenario's node (env: DaemonEnv plus
// extra), stopped at cleanup with its log checked for sanitizer reports and printed on failure.
// The first daemon started becomes s.d (waits give up when it exits).
func (s *scenario) startWith(args []string, extra ...string) *Daemon {
	t := s.t
	t.Helper()
	env := DaemonEnv(s.node.Root, extra...)
	d, err := StartDaemon(s.bin, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	if s.d == nil {
		s.d, s.env = d, env
	}
	t.Cleanup(func() {
		if _, err := d.Stop(exitBound); err != nil {
			t.Errorf("daemon %v cleanup: %v", args, err)
		}
		if r := SanitizerReports(d.Log()); len(r) > 0 {
			t.Errorf("sanitizer reports in the log of daemon %v:\n%s", args, strings.Join(r, "\n"))
		}
		if t.Failed() {
			t.Logf("daemon %v (pid %d, %s) log:\n%s", args, d.Pid(), d.ExitDescription(), d.Log())
		}
	})
	return d
}

// registeredAs waits for the count-th registration of resource and returns it.
func (s *scenario) registeredAs(resource string, count int, bound time.Duration) *Plugin {
	s.t.Helper()
	if !s.wait(bound, func() bool { return s.k.Registrations(resource) >= count && s.k.Current(resource) != nil }) {
		s.fatalf("%s registered %d time(s) within %v, want %d", resource, s.k.Registrations(resource), bound, count)
	}
	return s.k.Current(resource)
}

// devicesOf waits until the newest snapshot of resource's current endpoint has n devices of
// health h.
func (s *scenario) devicesOf(resource string, n int, h string, bound time.Duration) []*api.Device {
	s.t.Helper()
	var last []*api.Device
	if !s.wait(bound, func() bool {
		p := s.k.Current(resource)
		if p == nil {
			return false
		}
		snap, ok := p.Latest()
		last = snap.Devices
		return ok && CountHealth(n, h)(snap.Devices)
	}) {
		s.fatalf("%s: no snapshot of %d %s devices within %v; last: %s", resource, n, h, bound, DescribeDevices(last))
	}
	return last
}

// unavailable checks that err is UNAVAILABLE with a message containing every want.
func unavailable(t *testing.T, err error, want ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || st.Code() != codes.Unavailable {
		t.Errorf("Allocate: %v, want Unavailable naming %q", err, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("Allocate's message %q does not contain %q", st.Message(), w)
		}
	}
}

var (
	helperStartedRe = regexp.MustCompile(`msg="helper started" pid=([0-9]+)`)
	helperKilledRe  = regexp.MustCompile(`msg="helper timed out, killed" pid=([0-9]+)`)
	helperReapedRe  = regexp.MustCompile(`msg="helper reaped after SIGKILL" pid=([0-9]+)`)
)

// helperPids lists the helper children the daemon started so far, from its debug log.
func helperPids(d *Daemon) []int {
	var pids []int
	for _, l := range d.Stderr.Lines() {
		if m := helperStartedRe.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			pids = append(pids, n)
		}
	}
	return pids
}

// countLines counts the log lines containing every part.
func countLines(d *Daemon, parts ...string) int {
	n := 0
	for _, l := range d.Stderr.Lines() {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			n++
		}
	}
	return n
}

// waitCount waits (bounded) until at least want log lines contain every part and returns the
// count then: the daemon's stderr reaches the buffer through a pipe and a copying goroutine, so
// a line written before an answer may arrive after it.
func waitCount(d *Daemon, want int, parts ...string) int {
	var n int
	Poll(eventBound, func() bool { n = countLines(d, parts...); return n >= want })
	return n
}

// helpersSoFar counts the helpers started by a daemon that has reported its device usable, once
// that line (written after the first probe) is in the buffer.
func helpersSoFar(d *Daemon) int {
	waitCount(d, 1, `msg="device usable"`)
	return len(helperPids(d))
}

// checkHelperSequence checks in the daemon's log that no helper started while the previous one
// was still a child: a normal run ends with "helper finished" (logged when the child has been
// reaped), a killed one with "helper reaped after SIGKILL pid=N".
func checkHelperSequence(t *testing.T, lines []string) {
	t.Helper()
	busy, dying := 0, false
	for _, l := range lines {
		switch {
		case helperStartedRe.MatchString(l):
			pid, _ := strconv.Atoi(helperStartedRe.FindStringSubmatch(l)[1])
			if busy != 0 {
				t.Errorf("helper pid %d started while helper pid %d was not reaped:\n%s", pid, busy, l)
			}
			busy, dying = pid, false
		case helperKilledRe.MatchString(l):
			dying = true
		case strings.Contains(l, `msg="helper finished"`):
			if !dying {
				busy = 0
			}
		case helperReapedRe.MatchString(l):
			busy, dying = 0, false
		}
	}
}

// childSampler samples a process's children (/proc/<pid>/task/<pid>/children; the daemon is
// single-threaded) until stopped: the most seen at once, and how many samples saw any.
type childSampler struct {
	stop     chan struct{}
	done     chan struct{}
	max      int
	nonEmpty int
	samples  int
	errs     []string
}

func sampleChildren(pid int) *childSampler {
	c := &childSampler{stop: make(chan struct{}), done: make(chan struct{})}
	path := fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil {
				c.errs = append(c.errs, err.Error())
				return
			}
			n := len(strings.Fields(string(b)))
			c.samples++
			if n > 0 {
				c.nonEmpty++
			}
			if n > c.max {
				c.max = n
			}
			// A sampling period, not a wait: there is no event for "two children at once" to
			// wait on (checkHelperSequence reads the same rule from the daemon's own log lines).
			time.Sleep(time.Millisecond)
		}
	}()
	return c
}

func (c *childSampler) finish() {
	close(c.stop)
	<-c.done
}

type allocResult struct {
	a   *Allocation
	err error
}

// allocateAtOnce runs n kubelet Allocates of resource from n goroutines released together and
// waits (bounded) for every answer; ids(i) names the devices of the i-th.
func allocateAtOnce(t *testing.T, k *MockKubelet, resource string, n int, ids func(int) []string, bound time.Duration) []allocResult {
	t.Helper()
	res := make([]allocResult, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-gate
			res[i].a, res[i].err = k.Allocate(resource, ids(i))
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	close(gate)
	select {
	case <-done:
		return res
	case <-time.After(bound):
		t.Fatalf("%d concurrent Allocates not all answered within %v", n, bound)
		return nil
	}
}

// ---- probe failures

func TestHyperlightProbeFailures(t *testing.T) {
	for _, tc := range []struct {
		name, knob, reason string // reason: %s is the injected node's path
	}{
		{"api-version-11", "HVSHIM_API_VERSION=11", "API version 11"},
		{"create-vm-enomem", "HVSHIM_CREATE_VM_ERRNO=ENOMEM", "KVM_CREATE_VM: ENOMEM"},
		{"open-eacces", "HVSHIM_OPEN_ERRNO=EACCES", "EACCES opening %s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "DEVICE_COUNT=3")
			p := s.ready(3)
			reason := tc.reason
			if strings.Contains(reason, "%s") {
				reason = fmt.Sprintf(reason, s.node.KVMPath())
			}
			s.shim(tc.knob)
			_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
			unavailable(t, err, "/dev/kvm", reason)
			// The check run for the Allocate also told kubelet's stream.
			s.devices(3, Unhealthy, eventBound)
			waitCount(s.d, 1, "level=warn", "device unusable", reason)

			// The daemon retries by itself (1 s back-off, doubling): a retry fails the same way;
			// then, the fault removed, a later retry finds the device usable again.
			if n := len(helperPids(s.d)); !s.wait(backoffBound, func() bool {
				return len(helperPids(s.d)) > n && countLines(s.d, `msg="helper finished"`) == len(helperPids(s.d))
			}) {
				s.fatalf("no finished retry of the probe within %v while unhealthy", backoffBound)
			}
			s.clearShim()
			start := time.Now()
			s.devices(3, Healthy, backoffBound)
			t.Logf("Healthy again %v after the fault was removed", time.Since(start).Round(time.Millisecond))
			if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
				t.Errorf("Allocate after recovery: %v", err)
			} else {
				checkAllocation(t, a.Response)
			}

			// Logged once per change, not at every failed check; the stream hears only of changes.
			if n := waitCount(s.d, 1, "level=warn", "device unusable", reason); n != 1 {
				t.Errorf("the reason %q was logged %d times over two failed checks, want once", reason, n)
			}
			if n := waitCount(s.d, 2, "level=info", `msg="device usable"`); n != 2 {
				t.Errorf("\"device usable\" logged %d times, want 2 (start, recovery)", n)
			}
			var seq []string
			for _, snap := range p.Snapshots() {
				seq = append(seq, snap.Devices[0].Health)
			}
			if want := []string{Healthy, Unhealthy, Healthy}; fmt.Sprint(seq) != fmt.Sprint(want) {
				t.Errorf("ListAndWatch sent %v, want %v", seq, want)
			}
			if s.k.Current(HyperlightResource) != p {
				t.Errorf("the daemon re-registered; health changes go through the open stream")
			}
		})
	}
}

// An arm64 host whose KVM IPA limit is below 40 bits (Apple M1/M2: 36) refuses KVM_CREATE_VM(0),
// the default size, with EINVAL (issue 30). The shim answers KVM_CHECK_EXTENSION and judges the
// VM type as such a kernel does (HVSHIM_IPA_LIMIT, arm64 builds only): the arm64 daemon (make
// test-arm64) asks for the host's size, its devices are Healthy and its log says the size; with a
// limit of 40 bits or more it asks for the default as before. On amd64 the knob changes nothing.
func TestHyperlightProbeSmallIPA(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "HVSHIM_IPA_LIMIT=36")
	arm64 := isARM64(t, s.bin)
	want := `probe="KVM API version 12, VM created"`
	if arm64 {
		want = `probe="KVM API version 12, VM created (IPA 36 bits, the host's limit)"`
	}
	s.ready(3)
	if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Fatalf("Allocate on a host with a 36-bit IPA limit: %v", err)
	} else {
		checkAllocation(t, a.Response)
	}
	if n := waitCount(s.d, 1, "level=info", `msg="device usable"`, want); n != 1 {
		t.Errorf("\"device usable\" with %s logged %d times, want once", want, n)
	}
	s.shim("HVSHIM_IPA_LIMIT=48")
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
		t.Errorf("Allocate on a host with a 48-bit IPA limit: %v", err)
	}
	s.devices(3, Healthy, eventBound)
	t.Logf("arm64 daemon: %v; %s", arm64, want)
}

// isARM64: path is an aarch64 ELF program (the arm64 build under qemu-user).
func isARM64(t *testing.T, path string) bool {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	return f.Machine == elf.EM_AARCH64
}

// The shim is really in the way: without it the mknod'ed node would reach the host's KVM.
func TestHyperlightShimPreloaded(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", s.d.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(maps), "libhvshim.so") {
		t.Errorf("libhvshim.so is not mapped in the daemon (pid %d)", s.d.Pid())
	}
}

// ---- the deadline, one helper at a time, joining

func TestHyperlightProbeHang(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	children := sampleChildren(s.d.Pid())
	before := helpersSoFar(s.d)
	s.shim("HVSHIM_HANG=1")

	// Several Allocates at once join the one hanging probe and get its deadline's verdict.
	const n = 5
	start := time.Now()
	res := allocateAtOnce(t, s.k, HyperlightResource, n, func(i int) []string {
		return []string{fmt.Sprintf("hyperlight-%d", i%3)}
	}, hangBound+eventBound)
	took := time.Since(start)
	started := len(helperPids(s.d)) - before
	for _, r := range res {
		unavailable(t, r.err, "/dev/kvm", "timeout after 2 s")
	}
	if took > hangBound {
		t.Errorf("Allocates behind a hanging probe answered after %v, want within %v (2 s deadline)", took, hangBound)
	}
	if started != 1 {
		t.Errorf("%d concurrent Allocates started %d helpers, want 1 (they join the check in flight)", n, started)
	}
	t.Logf("%d Allocates answered after %v", n, took.Round(time.Millisecond))
	s.devices(3, Unhealthy, eventBound)

	// While the hang lasts the daemon keeps retrying, each helper killed at its deadline and
	// reaped before the next one starts. One failed check (joined by n Allocates) doubles the
	// 1 s retry back-off once: the next probe starts about 1 s later, not 2^n s.
	if !s.wait(eventBound, func() bool { return len(helperPids(s.d)) >= before+2 }) {
		t.Errorf("no retry within %v of a failed check joined by %d Allocates (the retry back-off starts at 1 s "+
			"and one failed check must double it once, not once per joined Allocate)", eventBound, n)
	}
	if !s.wait(backoffBound+periodBound, func() bool { return len(helperPids(s.d)) >= before+3 }) {
		s.fatalf("%d helpers started while the probe hangs, want at least 3 (retries)", len(helperPids(s.d))-before)
	}
	s.clearShim()
	s.devices(3, Healthy, backoffBound)
	s.allocateOK("after the hang ended")
	children.finish()
	if len(children.errs) > 0 {
		t.Fatalf("sampling the daemon's children: %v", children.errs)
	}
	t.Logf("%d samples of the daemon's children, %d saw a helper, at most %d at once; %d helpers started",
		children.samples, children.nonEmpty, children.max, len(helperPids(s.d))-before)
	if children.max > 1 {
		t.Errorf("the daemon had %d children at once, want at most one helper", children.max)
	}
	if children.nonEmpty == 0 {
		t.Errorf("no sample saw the hanging helper: the sampler is not watching the daemon's children")
	}
	checkHelperSequence(t, s.d.Stderr.Lines())
	if n := waitCount(s.d, 1, "device unusable", "timeout after 2 s"); n != 1 {
		t.Errorf("the timeout was logged %d times, want once (logged per change)", n)
	}
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered; health changes go through the open stream")
	}
	if !Poll(eventBound, func() bool { return len(daemonChildren(s.d.Pid())) == 0 }) {
		t.Errorf("the daemon still has children after the last probe")
	}
}

func TestHyperlightProbeConcurrentAllocates(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	before := helpersSoFar(s.d)
	// A slow but successful probe (well inside its 2 s deadline): every Allocate sent while it
	// runs joins it.
	s.shim("HVSHIM_DELAY_MS=1000")
	const n = 20
	res := allocateAtOnce(t, s.k, HyperlightResource, n, func(i int) []string {
		return []string{fmt.Sprintf("hyperlight-%d", i%3)}
	}, hangBound+eventBound)
	if started := len(helperPids(s.d)) - before; started != 1 {
		t.Errorf("%d concurrent Allocates started %d helpers, want exactly 1", n, started)
	}
	for i, r := range res {
		if r.err != nil {
			t.Errorf("Allocate %d: %v", i, r.err)
			continue
		}
		checkAllocation(t, r.a.Response)
	}
	s.devices(3, Healthy, eventBound)
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered")
	}
}

// An Allocate whose caller gives up (deadline) neither cancels the shared check nor changes its
// verdict: the probe runs to its end and kubelet's stream hears of it.
func TestHyperlightProbeRequesterGoesAway(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	conn := s.dial(p)
	before := helpersSoFar(s.d)
	s.shim("HVSHIM_DELAY_MS=1000", "HVSHIM_CREATE_VM_ERRNO=ENOMEM")
	// kubelet's Allocate (no deadline) and ours (300 ms) join one 1 s probe.
	kubelet := make(chan error, 1)
	go func() {
		_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"})
		kubelet <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := api.NewDevicePluginClient(conn).Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"hyperlight-0"}}}})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Allocate with a 300 ms deadline behind a 1 s probe: %v, want DeadlineExceeded", err)
	}
	// The probe still ends; its verdict answers the Allocate that stayed and reaches the stream.
	select {
	case err := <-kubelet:
		unavailable(t, err, "KVM_CREATE_VM: ENOMEM")
	case <-time.After(hangBound):
		s.fatalf("kubelet's Allocate got no answer within %v", hangBound)
	}
	s.devices(3, Unhealthy, eventBound)
	if n := waitCount(s.d, 1, "level=warn", "device unusable", "KVM_CREATE_VM: ENOMEM"); n != 1 {
		t.Errorf("the check's verdict was logged %d times, want once", n)
	}
	if started := len(helperPids(s.d)) - before; started != 1 {
		t.Errorf("two Allocates sent together started %d helpers, want 1", started)
	}
	s.clearShim()
	s.devices(3, Healthy, backoffBound)
	s.allocateOK("after recovery")
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered")
	}
}

// daemonChildren lists the children of a single-threaded process.
func daemonChildren(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	return strings.Fields(string(b))
}

// SIGTERM while a probe hangs: the daemon exits 0 at once, the pending Allocate gets an error,
// the helper child does not outlive it, and nothing leaks (under ASan a leak fails the exit).
func TestHyperlightSIGTERMDuringProbe(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	s.shim("HVSHIM_HANG=1")
	errc := make(chan error, 1)
	go func() {
		_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
		errc <- err
	}()
	var kids []string
	if !s.wait(eventBound, func() bool { kids = daemonChildren(s.d.Pid()); return len(kids) == 1 }) {
		s.fatalf("no helper child while the probe hangs (children %v)", kids)
	}
	helper := kids[0]
	start := time.Now()
	if err := s.d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := s.d.Wait(exitBound)
	t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	if err != nil {
		s.fatalf("SIGTERM during a probe: %v", err)
	}
	if code != 0 {
		t.Errorf("exit %s after SIGTERM during a probe, want 0", s.d.ExitDescription())
	}
	start = time.Now()
	select {
	case err := <-errc:
		t.Logf("the Allocate got %v %v after the exit", err, time.Since(start).Round(time.Millisecond))
		if err == nil {
			t.Errorf("the Allocate waiting on the probe succeeded although the daemon stopped")
		}
	case <-time.After(eventBound):
		t.Errorf("the Allocate waiting on the probe got no answer within %v of the daemon's exit", eventBound)
	}
	// Killed: gone, or a zombie until its new parent reaps it.
	start = time.Now()
	if !Poll(eventBound, func() bool {
		b, err := os.ReadFile("/proc/" + helper + "/stat")
		if os.IsNotExist(err) {
			return true
		}
		i := strings.LastIndexByte(string(b), ')')
		return err == nil && i > 0 && strings.HasPrefix(string(b[i:]), ") Z")
	}) {
		t.Errorf("the hanging helper (pid %s) outlived the daemon", helper)
	}
	t.Logf("helper dead %v after", time.Since(start).Round(time.Millisecond))
}

// ---- HOST_DEVICE_DIR

func TestHyperlightHostDeviceDir(t *testing.T) {
	node := newNode(t, true)
	hostDir := filepath.Join(node.Root, "host-dev")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(hostDir, "kvm")
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev")
	p := s.registered(1, startBound)
	// The injected node works, the host's is missing: no allocation.
	s.devices(3, Unhealthy, eventBound)
	_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
	unavailable(t, err, "host device "+host+" missing")

	// Another device in its place.
	if err := Mknod(host, KVMMajor, KVMMinor+1); err != nil {
		t.Fatal(err)
	}
	_, err = s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
	unavailable(t, err, host, fmt.Sprintf("%d:%d", KVMMajor, KVMMinor+1), fmt.Sprintf("%d:%d", KVMMajor, KVMMinor))

	// Not a device at all.
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
	unavailable(t, err, host, "not a character device")
	s.devices(3, Unhealthy, eventBound)

	// Fixed: the next Allocate's check passes and tells the stream.
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	s.allocateOK("with the host node fixed")
	s.devices(3, Healthy, eventBound)
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered")
	}
}

// ---- configuration

// DEVICE_UID/DEVICE_GID are unsigned 32-bit: anything else keeps 65534 with a warning naming
// the value; the extremes of the range are taken as they are.
func TestHyperlightCDIOwnerRange(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		uid, gid uint32
		warn     []string // values each named in a warning
	}{
		{[]string{"DEVICE_UID=-1"}, 65534, 65534, []string{"DEVICE_UID", "-1"}},
		{[]string{"DEVICE_UID=4294967296"}, 65534, 65534, []string{"DEVICE_UID", "4294967296"}},
		{[]string{"DEVICE_GID=4294967296", "DEVICE_UID=1000"}, 1000, 65534, []string{"DEVICE_GID", "4294967296"}},
		{[]string{"DEVICE_UID=4294967295", "DEVICE_GID=0"}, 4294967295, 0, nil},
	} {
		t.Run(strings.Join(tc.env, ","), func(t *testing.T) {
			s := newScenario(t, append([]string{"DEVICE_COUNT=3"}, tc.env...)...)
			s.ready(3)
			s.checkCDI(tc.uid, tc.gid, HyperlightDefaultMode)
			warnings := countLines(s.d, "level=warn", "DEVICE_")
			if tc.warn == nil {
				if warnings != 0 {
					t.Errorf("%d warnings about DEVICE_* for valid values", warnings)
				}
				return
			}
			if waitCount(s.d, 1, append([]string{"level=warn"}, tc.warn...)...) != 1 {
				t.Errorf("no single warning naming %q", tc.warn)
			}
		})
	}
}

// DEVICE_MODE is 3 or 4 octal digits up to 0777, the spec's fileMode; anything else keeps 0660
// with one warning naming the value and the default, the daemon serving on (as DEVICE_UID).
func TestHyperlightCDIModeRange(t *testing.T) {
	for _, tc := range []struct {
		value string
		mode  uint32
		warn  string // the warning's error=, "" for a valid value
	}{
		{"0666", 0o666, ""},
		{"600", 0o600, ""},
		{"0o660", HyperlightDefaultMode, `error="DEVICE_MODE=\"0o660\" is not an octal mode of 3 or 4 digits" default=0660`},
		{"", HyperlightDefaultMode, `error="DEVICE_MODE=\"\" is not an octal mode of 3 or 4 digits" default=0660`},
		{"1666", HyperlightDefaultMode, `error="DEVICE_MODE=1666 is out of range 0000..0777 (no setuid, setgid or sticky bit)" default=0660`},
	} {
		t.Run("DEVICE_MODE="+tc.value, func(t *testing.T) {
			s := newScenario(t, "DEVICE_COUNT=3", "DEVICE_MODE="+tc.value)
			s.ready(3)
			s.checkCDI(65534, 65534, tc.mode)
			s.advertisedOwner(fmt.Sprintf("device_uid=65534 device_gid=65534 device_mode=%04o", tc.mode))
			if tc.warn == "" {
				if n := countLines(s.d, "level=warn", "DEVICE_"); n != 0 {
					t.Errorf("%d warnings about DEVICE_* for a valid value", n)
				}
				return
			}
			want := `level=warn msg="invalid value ignored, default kept" ` + tc.warn
			if waitCount(s.d, 1, want) != 1 || countLines(s.d, "DEVICE_MODE") != 1 {
				t.Errorf("want a single line ending %q:\n%s", want, s.d.Log())
			}
		})
	}
}

var countRangeRe = regexp.MustCompile(`DEVICE_COUNT=0 is out of range 1\.\.([0-9]+)`)

// The DEVICE_COUNT ceiling is the largest device list whose ListAndWatch response (all
// "Unhealthy", the longer word) fits kubelet's 4 MiB receive limit: the ceiling works, one
// more is refused at start.
func TestHyperlightDeviceCountCeiling(t *testing.T) {
	bin := daemonBinary(t)
	node := newNode(t, true)
	r, err := RunCommand(exitBound, bin, DaemonEnv(node.Root, "DEVICE_COUNT=0"))
	if err != nil {
		t.Fatal(err)
	}
	m := countRangeRe.FindStringSubmatch(r.Stderr)
	if r.Code != 1 || m == nil {
		t.Fatalf("DEVICE_COUNT=0: exit %d, stderr:\n%s\nwant exit 1 and \"DEVICE_COUNT=0 is out of range 1..N\"", r.Code, r.Stderr)
	}
	ceiling, _ := strconv.Atoi(m[1])
	over := strconv.Itoa(ceiling + 1)
	r, err = RunCommand(exitBound, bin, DaemonEnv(node.Root, "DEVICE_COUNT="+over))
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 1 || !strings.Contains(r.Stderr, "DEVICE_COUNT="+over) {
		t.Errorf("DEVICE_COUNT=%s: exit %d, stderr:\n%s\nwant exit 1 naming the value", over, r.Code, r.Stderr)
	}
	if _, err := os.Lstat(node.CDIPath()); !os.IsNotExist(err) {
		t.Errorf("a refused start wrote the CDI spec (%v)", err)
	}

	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=" + m[1])
	p := s.registered(1, startBound)
	s.devices(ceiling, Healthy, startBound)
	removeKVM(t, node)
	s.devices(ceiling, Unhealthy, eventBound)
	if ended, err := p.Ended(); ended {
		t.Errorf("kubelet's stream ended with %d devices: %v", ceiling, err)
	}
	t.Logf("ceiling %d devices: Healthy and Unhealthy lists received by grpc-go with its 4 MiB limit", ceiling)
}

// ---- readiness

func TestHyperlightReadinessFollowsStream(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	probe := func(args ...string) Result { return s.run(s.env, args...) }
	waitProbe := func(want int, bound time.Duration, args ...string) {
		t.Helper()
		var got Result
		if !Poll(bound, func() bool { got = probe(args...); return got.Code == want }) {
			s.fatalf("%s: exit %d within %v, want %d (stderr %q)", strings.Join(args, " "), got.Code, bound, want, got.Stderr)
		}
	}
	waitProbe(0, eventBound, "--health-check=readiness")

	// kubelet ends the stream and, its registration service down, cannot take the plugin back:
	// not ready (still live).
	s.k.stopServer()
	p.EndStream(false)
	if _, ok := p.WaitEnded(eventBound); !ok {
		t.Fatal("kubelet's stream did not end")
	}
	waitProbe(1, eventBound, "--health-check=readiness")
	// Live within the bound, not at every instant: each failed Register stops that server and
	// removes its socket for the back-off (docs/architecture.md, "Failure"); a single probe can
	// land in that gap (under valgrind it did).
	waitProbe(0, eventBound, "--health-check")
	// kubelet serves again: the plugin registers, the stream reopens, ready again.
	if err := s.k.serve(); err != nil {
		t.Fatal(err)
	}
	cur := s.settled(p.Seq, "", 3, backoffBound)
	waitProbe(0, eventBound, "--health-check=readiness")

	// A kubelet restart: the stream ends, the plugin registers again at once; ready again.
	if err := s.k.Restart(); err != nil {
		t.Fatal(err)
	}
	s.settled(cur.Seq, cur.Endpoint, 3, eventBound)
	waitProbe(0, eventBound, "--health-check=readiness")
}
