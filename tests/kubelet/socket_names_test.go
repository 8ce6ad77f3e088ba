package kubelet

import (
	"fmt"
	"strings"
	"testing"
)

// Socket names are at most SocketNameMax bytes whatever the resource name, so both daemons
// work in a kubelet directory of SocketDirMax bytes (docs/operations.md, "The kubelet
// directory"): the socket path kubelet dials is then 107 bytes, the most a sockaddr_un holds.
// One byte more is a start-up error: one error line naming the directory, its length and the
// maximum, exit 1, not a bind retried forever.

const dirTooLongMsg = "kubelet directory too long for the plugin sockets"

// checkLongestPath: the registered endpoint is one of prefix's names and its path fills sun_path.
func checkLongestPath(t *testing.T, node *Node, p *Plugin, prefix string) {
	t.Helper()
	if len(node.KubeletDir) != SocketDirMax {
		t.Fatalf("test bug: kubelet directory of %d bytes, want %d", len(node.KubeletDir), SocketDirMax)
	}
	if !IsSocketOf(p.Endpoint, prefix) {
		t.Errorf("endpoint %q, want %s-<n>.sock", p.Endpoint, prefix)
	}
	if n := len(node.SocketPath(p.Endpoint)); n > 107 {
		t.Errorf("socket path %s is %d bytes, more than sun_path holds", node.SocketPath(p.Endpoint), n)
	}
}

// checkDirTooLong: the daemon exits 1 at start with the one error line; nothing is served.
func checkDirTooLong(t *testing.T, s *scenario) {
	t.Helper()
	if len(s.node.KubeletDir) != SocketDirMax+1 {
		t.Fatalf("test bug: kubelet directory of %d bytes, want %d", len(s.node.KubeletDir), SocketDirMax+1)
	}
	code, err := s.d.Wait(startBound)
	if err != nil {
		t.Fatal(err)
	}
	if code != 1 {
		t.Errorf("exit %s, want exit status 1", s.d.ExitDescription())
	}
	var errs []string
	for _, l := range strings.Split(s.d.Log(), "\n") {
		if logField(l, "level") == "error" {
			errs = append(errs, l)
		}
	}
	want := []string{"dir=" + s.node.KubeletDir + " ", fmt.Sprintf("length=%d ", SocketDirMax+1),
		fmt.Sprintf("max=%d", SocketDirMax)}
	if len(errs) != 1 || logField(errs[0], "msg") != dirTooLongMsg {
		t.Fatalf("error lines %q, want one msg=%q", errs, dirTooLongMsg)
	}
	for _, w := range want {
		if !strings.Contains(errs[0]+" ", w) {
			t.Errorf("error line %q does not say %q", errs[0], w)
		}
	}
	if strings.Contains(s.d.Log(), "registration failed") || strings.Contains(s.d.Log(), "cannot serve") {
		t.Errorf("the daemon tried to serve:\n%s", s.d.Log())
	}
	if socks, _ := s.node.PluginSockets(); len(socks) != 0 {
		t.Errorf("plugin sockets %v, want none", socks)
	}
	// The exec probe says why, and is not healthy.
	r := s.run(s.env, "--health-check")
	if r.Code != 1 || !strings.Contains(r.Stderr, fmt.Sprintf("too long: %d bytes, at most %d", SocketDirMax+1, SocketDirMax)) {
		t.Errorf("--health-check: exit %d, stderr %q; want 1 and the limit", r.Code, r.Stderr)
	}
}

// probeOK waits until each health check exits 0.
func probeOK(t *testing.T, s *scenario, env []string, argss ...[]string) {
	t.Helper()
	for _, args := range argss {
		var r Result
		if !Poll(eventBound, func() bool { r = s.run(env, args...); return r.Code == 0 }) {
			t.Errorf("%v: exit %d, stderr %q; want 0", args, r.Code, r.Stderr)
		}
	}
}

var bothProbes = [][]string{{"--health-check"}, {"--health-check=readiness"}}

func TestSocketNamesLongestKubeletDirHyperlight(t *testing.T) {
	s := prepare(t, newNodeDirLen(t, true, SocketDirMax))
	s.startDaemon("DEVICE_COUNT=3")
	p := s.registered(1, startBound)
	checkLongestPath(t, s.node, p, SocketPrefix(HyperlightSocketTag, HyperlightResource))
	s.devices(3, Healthy, eventBound)
	s.allocateOK("in the longest kubelet directory")
	probeOK(t, s, s.env, bothProbes...)
	// The bootstrap mode beside it, on its own prefix.
	s.startWith([]string{"--device-access"})
	ap := s.registeredAs(AccessResource, 1, startBound)
	checkLongestPath(t, s.node, ap, SocketPrefix(HyperlightSocketTag, AccessResource))
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	if a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID}); err != nil {
		t.Errorf("device-access Allocate: %v", err)
	} else {
		checkAccessGrant(t, a.Full)
	}
	probeOK(t, s, DaemonEnv(s.node.Root), []string{"--device-access", "--health-check"},
		[]string{"--device-access", "--health-check=readiness"})
}

func TestSocketNamesKubeletDirTooLongHyperlight(t *testing.T) {
	s := prepare(t, newNodeDirLen(t, true, SocketDirMax+1))
	s.startDaemon("DEVICE_COUNT=3")
	checkDirTooLong(t, s)
}

// kata in table mode, with RESOURCE_NAMING=sku (long resource names, one shared prefix) and
// idle: every socket it serves fits.
func TestSocketNamesLongestKubeletDirKata(t *testing.T) {
	s := newKataDirLen(t, SocketDirMax)
	s.add(kataMain...)
	s.startDaemon()
	want := kataExpect(kataMain)
	ps := s.kataReady(want)
	for _, r := range KataResources {
		checkLongestPath(t, s.node, ps[r], KataSocketPrefix(r))
	}
	if a, err := s.k.Allocate(KataGPU, []string{"1"}); err != nil {
		t.Errorf("Allocate: %v", err)
	} else if len(a.Full.ContainerResponses) != 1 {
		t.Errorf("Allocate: %d container responses, want 1", len(a.Full.ContainerResponses))
	}
	s.waitProbe(0, eventBound, "--health-check")
	s.waitProbe(0, eventBound, "--health-check=readiness")
}

func TestSocketNamesLongestKubeletDirKataSKU(t *testing.T) {
	s := newKataDirLen(t, SocketDirMax)
	node := []kataEntry{{0, GPU("0000:41:00.0", 0)}, {1, GPU("0000:43:00.0", 0).Model(0x20b0)}}
	s.add(node...)
	s.startDaemon(kataSKUEnv)
	ps := s.kataSKUReady(kataSKUExpect(t, node), nil)
	if len(ps) != 2 {
		t.Fatalf("%d resources registered, want two models", len(ps))
	}
	for r, p := range ps {
		t.Logf("%s (%d bytes) on %s", r, len(r), s.node.SocketPath(p.Endpoint))
		checkLongestPath(t, s.node, p, KataSKUPrefix)
		if a, err := s.k.Allocate(r, []string{"0"}); err != nil {
			t.Errorf("Allocate %s: %v", r, err)
		} else if len(a.Full.ContainerResponses) != 1 {
			t.Errorf("Allocate %s: %d container responses, want 1", r, len(a.Full.ContainerResponses))
		}
	}
	s.waitProbe(0, eventBound, "--health-check")
	s.waitProbe(0, eventBound, "--health-check=readiness")
}

func TestSocketNamesLongestKubeletDirKataIdle(t *testing.T) {
	s := newKataDirLen(t, SocketDirMax)
	s.startDaemon("VFIO_BACKEND=iommufd")
	s.waitLogMsg(startBound, "info", "serving health only, not registered with kubelet")
	socks, _ := s.node.PluginSockets()
	if len(socks) != 1 || !IsSocketOf(socks[0], KataIdlePrefix) {
		t.Fatalf("plugin sockets %v, want one %s-<n>.sock", socks, KataIdlePrefix)
	}
	s.waitProbe(0, eventBound, "--health-check")
	s.waitProbe(1, eventBound, "--health-check=readiness") // idle is never ready
}

func TestSocketNamesKubeletDirTooLongKata(t *testing.T) {
	s := newKataDirLen(t, SocketDirMax+1)
	s.add(kataMain...)
	s.startDaemon()
	checkDirTooLong(t, s.scenario)
}
