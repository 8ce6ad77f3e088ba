package kubelet

// Node labels of the companions (COMPANIONS): hyperlight.dev/<resource>=true|false beside the
// hypervisor's two, each following its own device's verdict with the same hold, all in one
// merge patch; a companion missing at start is labelled "false" from the first patch and never
// "true" before its node comes; the hypervisor's label never moves with a companion's.

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// patchLabels: the labels request i's merge patch sets (the whole body must be that object).
func patchLabels(t *testing.T, i int, r APIRequest) map[string]string {
	t.Helper()
	var body struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || dec.More() {
		t.Fatalf("request #%d: body %q is not one merge patch of labels (%v)", i+1, r.Body, err)
	}
	return body.Metadata.Labels
}

// waitLabels waits for an answered PATCH whose labels are exactly want; it returns its index
// and every request so far.
func (s *labelScenario) waitLabels(want map[string]string, bound time.Duration, what string) (int, []APIRequest) {
	s.t.Helper()
	found := -1
	reqs := s.waitRequests(1, bound, what, func(r []APIRequest) bool {
		for i := range r {
			if r[i].Status != 0 && maps.Equal(patchLabels(s.t, i, r[i]), want) {
				found = i
				return true
			}
		}
		return false
	})
	return found, reqs
}

func TestLabelsCompanions(t *testing.T) {
	vsock := Companions[2]
	setup := func(n *Node) {
		for _, c := range Companions[:2] { // tun and vhost-net; vhost-vsock's module not loaded yet
			if err := n.MknodCompanion(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	ok := func(_ *Node, _ int, _ *APIRequest) APIAnswer {
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	}
	env := append(append([]string{}, companionEnv...), "TUN_RESOURCE=tap", "NODE_LABELS_HOLD="+
		strings.TrimSuffix(labelHold.String(), "s"))
	s := newLabelScenarioNode(t, "", StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}}, labelNode, "token-1", nil, ok, setup, env...)
	s.logLine(startBound, "level=info", `msg="node labelling enabled"`,
		"companions=hyperlight.dev/tap,hyperlight.dev/vhost-net,hyperlight.dev/vhost-vsock")

	// every device's first verdict: at once, in one patch or a few (the first waits for the
	// hypervisor's), never a companion "true" whose node is missing
	all := map[string]string{"hyperlight.dev/enabled": "true", "hyperlight.dev/hypervisor": "kvm",
		"hyperlight.dev/tap": "true", "hyperlight.dev/vhost-net": "true", "hyperlight.dev/vhost-vsock": "false"}
	first, reqs := s.waitLabels(all, startBound, "the first verdicts' labels")
	for i := 0; i <= first; i++ {
		l := patchLabels(t, i, reqs[i])
		checkLabelHeaders(t, i, reqs[i], "token-1")
		if l["hyperlight.dev/enabled"] != "true" || l["hyperlight.dev/hypervisor"] != "kvm" ||
			l["hyperlight.dev/vhost-vsock"] == "true" || l["hyperlight.dev/tap"] == "false" ||
			l["hyperlight.dev/vhost-net"] == "false" {
			t.Errorf("request #%d before the first verdicts were all in: %v", i+1, l)
		}
	}
	s.noNewPatch(first+1, labelHold/2, "the labels as they should be")

	// tun's node goes: its devices Unhealthy at once, its label after the hold; the rest stays
	tun := Companions[0]
	if err := os.Remove(s.node.CompanionPath(tun)); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	s.devicesOf("hyperlight.dev/tap", 2, Unhealthy, watchBound)
	all["hyperlight.dev/tap"] = "false"
	i, reqs := s.waitLabels(all, labelHold+eventBound, "tun's label after its node went")
	if i != first+1 {
		t.Errorf("tun's label came in request #%d, want the next one (#%d): %s", i+1, first+2, describeRequests(reqs))
	}
	if d := reqs[i].Time.Sub(gone); d < labelHold-100*time.Millisecond {
		t.Errorf("hyperlight.dev/tap=false sent %v after its node went, before the %v hold", d, labelHold)
	}
	s.logLine(eventBound, "level=info", `msg="node label follows the device"`, "hyperlight.dev/tap=false",
		"held=2s", `/dev/net/tun missing"`)
	s.logLine(eventBound, "level=info", `msg="node labelled"`, "hyperlight.dev/enabled=true",
		"hyperlight.dev/tap=false", "hyperlight.dev/vhost-vsock=false")

	// vhost-vsock's node comes: "true" after the hold
	if err := s.node.MknodCompanion(vsock); err != nil {
		t.Fatal(err)
	}
	came := time.Now()
	s.devicesOf("hyperlight.dev/vhost-vsock", 4, Healthy, watchBound)
	all["hyperlight.dev/vhost-vsock"] = "true"
	i, reqs = s.waitLabels(all, labelHold+eventBound, "vhost-vsock's label after its node came")
	if d := reqs[i].Time.Sub(came); d < labelHold-100*time.Millisecond {
		t.Errorf("hyperlight.dev/vhost-vsock=true sent %v after its node came, before the %v hold", d, labelHold)
	}

	// a flap of vhost-net shorter than the hold: no patch
	vnet := Companions[1]
	if err := os.Remove(s.node.CompanionPath(vnet)); err != nil {
		t.Fatal(err)
	}
	s.devicesOf("hyperlight.dev/vhost-net", 3, Unhealthy, watchBound)
	if err := s.node.MknodCompanion(vnet); err != nil {
		t.Fatal(err)
	}
	s.devicesOf("hyperlight.dev/vhost-net", 3, Healthy, watchBound)
	s.noNewPatch(i+1, labelHold+time.Second, "a flap of vhost-net shorter than the hold")
	s.stop()
}
