package kubelet

// A flood of inotify events (issue 27, item 5): while one node of a watched directory is
// recreated in a tight loop (kata's /dev/vfio, hyperlight's /dev, the kubelet directory of
// either), kubelet's Allocate calls are answered and SIGTERM is honoured (exit 0). Before, the
// loop read inotify until its queue was empty, which a flood never lets happen: the calls got no
// answer and SIGTERM waited for the flood to end. The bounds here are those of a wait, not
// timings; the figures (the flood's rate, the longest call, SIGTERM to exit) come from make
// bench (bench/flood.go, docs/reliability.md).

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	floodCalls   = 20    // Allocates made while the flood runs
	floodChanges = 20000 // changes the flood has made before the first call
)

// allocateWithin is kubelet's Allocate (mock.Allocate), waited for at most bound.
func allocateWithin(k *MockKubelet, resource string, ids []string, bound time.Duration) (*Allocation, time.Duration, error) {
	type result struct {
		a   *Allocation
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		a, err := k.Allocate(resource, ids)
		done <- result{a, err}
	}()
	select {
	case r := <-done:
		return r.a, time.Since(start), r.err
	case <-time.After(bound):
		return nil, bound, fmt.Errorf("no answer within %v", bound)
	}
}

// underFlood recreates path (mknod with mode and dev, unlink) in a loop, makes floodCalls
// Allocates of ids through the mock kubelet while it runs, each answered within eventBound, with
// the endpoint p kept (no re-registration), then sends SIGTERM: exit 0 within exitBound, the
// flood still running. check judges each answer.
func (s *scenario) underFlood(p *Plugin, path string, mode uint32, dev int, resource string, ids []string,
	check func(*Allocation) error) {
	t := s.t
	t.Helper()
	f := StartFlood(path, mode, dev)
	defer f.Stop()
	if !f.Running(floodChanges, eventBound) {
		s.fatalf("the flood of %s made %d changes within %v: %v", path, f.Changes(), eventBound, f.Stop())
	}
	var longest time.Duration
	for i := 0; i < floodCalls; i++ {
		a, took, err := allocateWithin(s.k, resource, ids, eventBound)
		if err != nil {
			s.fatalf("Allocate %d of %d while %s is recreated in a loop: %v", i+1, floodCalls, path, err)
		}
		if err := check(a); err != nil {
			t.Errorf("Allocate %d: %v", i+1, err)
		}
		if took > longest {
			longest = took
		}
	}
	if s.k.Current(resource) != p {
		t.Errorf("the daemon re-registered during the flood of %s", path)
	}
	sent := time.Now()
	if err := s.d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code, err := s.d.Wait(exitBound)
	exited := time.Since(sent)
	if err != nil {
		s.fatalf("SIGTERM during the flood of %s: %v", path, err)
	}
	if code != 0 {
		t.Errorf("exit %s after SIGTERM during the flood, want 0", s.d.ExitDescription())
	}
	if err := f.Stop(); err != nil {
		t.Errorf("the flood of %s ended early: %v", path, err)
	}
	t.Logf("%s recreated at %.0f changes/s; %d Allocates answered, the longest in %v; SIGTERM to exit %v",
		path, f.Rate(), floodCalls, longest.Round(time.Microsecond), exited.Round(time.Microsecond))
}

// tmpfsAt mounts a tmpfs on dir (empty afterwards) for the test: /dev is one on a node, and a
// flood on this machine's ext4 /tmp runs at half the rate.
func tmpfsAt(t *testing.T, dir string) {
	t.Helper()
	privateMountNamespace(t)
	mount(t, dir, "-t", "tmpfs", "-o", "mode=0755,size=1m", "tmpfs", dir)
}

// floodKata: kata on the legacy groups of kataGroupsNode, /dev/vfio and the kubelet directory
// on tmpfs, registered with its GPUs Healthy.
func floodKata(t *testing.T) (*kataScenario, *Plugin) {
	node := newNodeDirLen(t, false, 0)
	tmpfsAt(t, node.KubeletDir)
	tmpfsAt(t, node.DevDir)
	tree, err := NewKataTree(node.Root)
	if err != nil {
		t.Fatal(err)
	}
	s := &kataScenario{scenario: prepare(t, node), tree: tree}
	s.scenario.bin = kataBinary(t)
	for _, f := range kataGroupsNode {
		s.must(s.tree.AddLegacy(f))
	}
	s.startDaemon()
	p := s.kataRegistered(KataGPU, 1, startBound)
	s.kataDevices(KataGPU, eventBound, onlyDown())
	return s, p
}

// floodHyperlight: hyperlight with 3 devices, /dev and the kubelet directory on tmpfs, ready.
func floodHyperlight(t *testing.T) (*scenario, *Plugin) {
	node := newNode(t, false)
	tmpfsAt(t, node.KubeletDir)
	tmpfsAt(t, node.DevDir)
	if err := node.MknodKVM(); err != nil {
		t.Fatal(err)
	}
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3")
	return s, s.ready(3)
}

func TestKataFloodVFIO(t *testing.T) {
	s, p := floodKata(t)
	// group 99 has no sysfs entry: not a device, and the rescans the flood asks for find nothing new
	s.underFlood(p, filepath.Join(s.node.DevDir, "vfio/99"), syscall.S_IFCHR|0o600,
		int(unix.Mkdev(KataVFIOMajor, 99)), KataGPU, []string{"1"}, kataAllocated("1"))
}

func TestKataFloodKubeletDir(t *testing.T) {
	s, p := floodKata(t)
	s.underFlood(p, filepath.Join(s.node.KubeletDir, "flood"), syscall.S_IFREG|0o600, 0,
		KataGPU, []string{"1"}, kataAllocated("1"))
}

func TestHyperlightFloodDev(t *testing.T) {
	s, p := floodHyperlight(t)
	s.underFlood(p, filepath.Join(s.node.DevDir, "flood0"), syscall.S_IFCHR|0o600, int(unix.Mkdev(1, 3)),
		HyperlightResource, []string{"hyperlight-0"}, hyperlightAllocated())
}

func TestHyperlightFloodKubeletDir(t *testing.T) {
	s, p := floodHyperlight(t)
	s.underFlood(p, filepath.Join(s.node.KubeletDir, "flood"), syscall.S_IFREG|0o600, 0,
		HyperlightResource, []string{"hyperlight-0"}, hyperlightAllocated())
}

func kataAllocated(id string) func(*Allocation) error {
	return func(a *Allocation) error {
		if a == nil || a.Response == nil || len(a.Response.CdiDevices) != 1 ||
			a.Response.CdiDevices[0].Name != KataGPU+"="+id {
			return fmt.Errorf("answer %v, want the CDI device %s=%s", a, KataGPU, id)
		}
		return nil
	}
}

func hyperlightAllocated() func(*Allocation) error {
	return func(a *Allocation) error {
		if a == nil || a.Response == nil || len(a.Response.CdiDevices) != 1 ||
			a.Response.CdiDevices[0].Name != HyperlightCDIName {
			return fmt.Errorf("answer %v, want the CDI device %s", a, HyperlightCDIName)
		}
		return nil
	}
}

// kubelet.sock recreated in a loop (a socket node nobody listens on) while kubelet is down: the
// plugin keeps serving between its re-registrations (the exec liveness probe answers: never 3
// failures in a row), which are spaced (100 ms after the first, doubling to 5 s) rather than one
// per creation, each told by one "re-registering" line; once a kubelet serves again it registers
// with it; SIGTERM during the flood: exit 0. Before, every creation restarted the server and
// logged a line at info (over 100000 lines a second), and the probe found no socket that stayed
// long enough to answer.
func TestHyperlightFloodKubeletSock(t *testing.T) {
	s, p := floodHyperlight(t)
	s.k.Stop()
	if !s.wait(eventBound, func() bool { return len(linesNaming(s.d, "kubelet.sock")) > 0 }) {
		s.fatalf("the daemon did not notice kubelet going away")
	}
	sock := filepath.Join(s.node.KubeletDir, "kubelet.sock")
	before := len(s.d.Stderr.Lines())
	start := time.Now()
	f := StartFlood(sock, syscall.S_IFSOCK|0o600, 0)
	defer f.Stop()
	if !f.Running(floodChanges, eventBound) {
		s.fatalf("the flood of %s made %d changes within %v: %v", sock, f.Changes(), eventBound, f.Stop())
	}
	// kubelet's verdict: the pod is restarted after 3 failed probes in a row (the charts'
	// failureThreshold). One probe can fail: it lists the sockets in the instant a restart
	// replaces ours, and the client retries the vanished name until its deadline.
	env := DaemonEnv(s.node.Root, "DEVICE_COUNT=3")
	inRow := 0
	for i := 0; i < 6 && inRow < 3; i++ {
		if r := s.run(env, "--health-check"); r.Code != 0 {
			inRow++
			t.Logf("liveness probe %d during the flood: exit %d: %s", i+1, r.Code, r.Stderr)
		} else {
			inRow = 0
		}
	}
	if inRow >= 3 {
		t.Errorf("3 liveness probes in a row failed during the flood: kubelet would restart the plugin")
	}
	if err := f.Stop(); err != nil {
		t.Fatalf("the flood ended early: %v", err)
	}
	took := time.Since(start)
	restarts := 0
	for _, l := range s.d.Stderr.Lines()[before:] {
		if logField(l, "level") == "info" && logField(l, "msg") == "re-registering" {
			restarts++
		}
	}
	t.Logf("%d creations of kubelet.sock in %v: %d re-registrations", f.Changes()/2, took.Round(time.Millisecond), restarts)
	// the first at once, the next told when scheduled (100 ms later), then one per 100 ms at most
	if limit := 2 + int(took/(100*time.Millisecond)); restarts > limit {
		t.Errorf("%d re-registrations during %v of creations, want at most %d (100 ms apart at least)",
			restarts, took.Round(time.Millisecond), limit)
	}

	// a kubelet again: registered, within the spacing (5 s at most)
	if err := s.k.Restart(); err != nil {
		t.Fatal(err)
	}
	s.settled(p.Seq, p.Endpoint, 3, backoffBound)

	// SIGTERM while kubelet.sock is recreated again
	s.k.Stop()
	f = StartFlood(sock, syscall.S_IFSOCK|0o600, 0)
	defer f.Stop()
	if !f.Running(floodChanges, eventBound) {
		s.fatalf("the second flood made %d changes within %v: %v", f.Changes(), eventBound, f.Stop())
	}
	if err := s.d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := s.d.Wait(exitBound); err != nil || code != 0 {
		s.fatalf("SIGTERM during the flood of kubelet.sock: exit %d %v (%s)", code, err, s.d.ExitDescription())
	}
}
