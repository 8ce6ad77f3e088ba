package kubelet

// Node labels follow the probe's verdict: hyperlight.dev/enabled is "true" while the device is
// usable and "false" once it has been unusable for NODE_LABELS_HOLD seconds, back to "true"
// once usable for as long; a verdict that flips back within the hold changes nothing. The
// device's health is moved by its host node (HOST_DEVICE_DIR, the pod layout), which the
// daemon watches: removed, Unhealthy at once; made again, Healthy.

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const labelHold = 2 * time.Second

// newVerdictLabelScenario starts the daemon in the pod layout (the host's /dev at
// <root>/host-dev, its kvm node made when hostNode) with NODE_LABELS_HOLD=2 and a stub API
// server that accepts every PATCH; it returns the host node's path.
func newVerdictLabelScenario(t *testing.T, hostNode bool) (*labelScenario, string) {
	t.Helper()
	var host string
	setup := func(n *Node) {
		host = filepath.Join(n.Root, "host-dev", "kvm")
		if err := os.Mkdir(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if hostNode {
			if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
				t.Fatal(err)
			}
		}
	}
	ok := func(_ *Node, _ int, _ *APIRequest) APIAnswer {
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	}
	s := newLabelScenarioNode(t, "", StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}}, labelNode, "token-1", nil,
		ok, setup, "HOST_DEVICE_DIR=/host-dev", "NODE_LABELS_HOLD="+
			strings.TrimSuffix(labelHold.String(), "s"))
	return s, host
}

// patchN waits for the stub's n-th request, answered, and checks it sets hyperlight.dev/enabled=enabled.
func (s *labelScenario) patchN(n int, enabled string, bound time.Duration, what string) APIRequest {
	s.t.Helper()
	reqs := s.waitRequests(n, bound, what, func(r []APIRequest) bool { return r[n-1].Status != 0 })
	checkLabelPatch(s.t, n-1, reqs[n-1], "token-1", enabled)
	return reqs[n-1]
}

// noNewPatch checks that the stub still holds exactly n requests after d.
func (s *labelScenario) noNewPatch(n int, d time.Duration, what string) {
	s.t.Helper()
	time.Sleep(d)
	if reqs := s.stub.Requests(); len(reqs) != n {
		s.fatalf("%s: %d PATCH requests, want still %d: %s", what, len(reqs), n, describeRequests(reqs))
	}
}

func TestLabelsFollowVerdict(t *testing.T) {
	s, host := newVerdictLabelScenario(t, true)
	s.devices(3, Healthy, startBound)
	s.patchN(1, "true", startBound, "the healthy node's label")

	// The host's node goes: Unhealthy at once, the label only after the hold.
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	s.devices(3, Unhealthy, watchBound)
	r := s.patchN(2, "false", labelHold+eventBound, "the broken node's label")
	if d := r.Time.Sub(gone); d < labelHold-100*time.Millisecond {
		t.Errorf("hyperlight.dev/enabled=false sent %v after the device broke, before the %v hold", d, labelHold)
	}
	line := s.logLine(eventBound, "level=info", `msg="node labelled"`, "hyperlight.dev/enabled=false")
	if !strings.Contains(line, "node="+labelNode) || !strings.Contains(line, "reason=") {
		t.Errorf("the log line of the withdrawn label: %s", line)
	}

	// A flap shorter than the hold: usable for a moment, then broken again. No PATCH.
	if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	s.devices(3, Healthy, watchBound)
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	s.devices(3, Unhealthy, watchBound)
	s.noNewPatch(2, labelHold+time.Second, "a flap shorter than the hold")

	// Back for good: "true" again after the hold.
	if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	s.devices(3, Healthy, watchBound)
	r = s.patchN(3, "true", labelHold+eventBound, "the repaired node's label")
	if d := r.Time.Sub(back); d < labelHold-100*time.Millisecond {
		t.Errorf("hyperlight.dev/enabled=true sent %v after the device came back, before the %v hold", d, labelHold)
	}
	s.stop()
	if n := len(s.stub.Requests()); n != 3 {
		t.Errorf("%d PATCH requests in total, want 3", n)
	}
}

// A node whose device is unusable from the start is never labelled enabled=true: its first
// (and only) PATCH says "false", without waiting for the hold.
func TestLabelsBrokenAtStart(t *testing.T) {
	s, _ := newVerdictLabelScenario(t, false)
	s.devices(3, Unhealthy, startBound)
	s.patchN(1, "false", startBound, "the label of a node broken at start")
	s.noNewPatch(1, labelHold+time.Second, "a node that stays broken")
	s.stop()
}
