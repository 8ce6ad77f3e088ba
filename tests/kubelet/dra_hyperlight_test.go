package kubelet

// DRA (PLUGIN_API=dra): the real hyperlight daemon as a DRA driver, with grpc-go in the
// kubelet's place (the plugin watcher's GetInfo and NotifyRegistrationStatus, then
// NodePrepareResources / NodeUnprepareResources as the kubelet's DRA manager calls them) and a
// fake API server (apistub.go) that keeps ResourceSlices and ResourceClaims as the real one
// does: resourceVersions, a conflict for a stale one, 404 for what is not there. The real API
// server, scheduler and kubelet are make test-cluster's (tests/cluster/dra.sh).

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	drahealth "sdp/drahealthv1"
	dra "sdp/drav1"
)

const (
	draDriver = DRADriverHyperlight
	draNode   = "node-a"
)

type draScenario struct {
	*scenario
	api   *FakeAPI
	stub  *APIStub
	extra []string // the daemon's environment beyond DaemonEnv
}

func newDRAScenario(t *testing.T) *draScenario {
	t.Helper()
	node := newNode(t, true)
	f := NewFakeAPI()
	stub, err := StartAPIStub(f.Answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	if err := WriteServiceAccount(node.Root, "dra-token\n", stub.CAPEM); err != nil {
		t.Fatal(err)
	}
	s := prepare(t, node)
	extra := []string{"DEVICE_COUNT=3", "PLUGIN_API=dra", "NODE_NAME=" + draNode, "NODE_LABELS=false",
		"KUBERNETES_SERVICE_HOST=" + stub.Host, "KUBERNETES_SERVICE_PORT=" + stub.PortString(), "NO_PROXY=*", "no_proxy=*"}
	s.startDaemon(extra...)
	return &draScenario{scenario: s, api: f, stub: stub, extra: extra}
}

func (s *draScenario) pluginDir() string {
	return filepath.Join(s.node.Root, "var/lib/kubelet/plugins", draDriver)
}

// register does what the kubelet's plugin watcher does with the registration socket and checks
// what GetInfo says; returns the DRA service's client (closed at cleanup).
func (s *draScenario) register() *DRAConn {
	s.t.Helper()
	c, err := DRARegister(s.node.Root, draDriver, startBound)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.t.Cleanup(c.Close)
	info := c.Info
	if info.Type != "DRAPlugin" || info.Name != draDriver || strings.Join(info.SupportedVersions, ",") != "v1.DRAPlugin,v1.DRAResourceHealth" ||
		filepath.Dir(info.Endpoint) != s.pluginDir() || !strings.HasPrefix(filepath.Base(info.Endpoint), "dra-") {
		s.fatalf("GetInfo: %+v", info)
	}
	return c
}

func prepareClaim(t *testing.T, c *DRAConn, ns, name, uid string) *dra.NodePrepareResourceResponse {
	t.Helper()
	r, err := c.Prepare(ns, name, uid)
	if err != nil {
		t.Fatalf("NodePrepareResources %s/%s: %v", ns, name, err)
	}
	return r
}

func unprepareClaim(t *testing.T, c *DRAConn, ns, name, uid string) string {
	t.Helper()
	e, err := c.Unprepare(ns, name, uid)
	if err != nil {
		t.Fatalf("NodeUnprepareResources %s/%s: %v", ns, name, err)
	}
	return e
}

// checkPrepared: the claim's one device is the hypervisor, injected by its CDI name.
func checkPrepared(t *testing.T, r *dra.NodePrepareResourceResponse, share bool) {
	t.Helper()
	if r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("prepared: %+v, want one device", r)
	}
	d := r.Devices[0]
	if d.PoolName != draNode || d.DeviceName != "kvm" || strings.Join(d.RequestNames, ",") != "hv" ||
		strings.Join(d.CdiDeviceIds, ",") != "hyperlight.dev/hypervisor=kvm" {
		t.Fatalf("prepared device: %+v", d)
	}
	if id, ok := d.Share.(*dra.Device_ShareId); share != ok || (ok && id.ShareId != "5c1e0a00-0000-4000-8000-000000000001") {
		t.Fatalf("prepared device's share ID: %+v, want one: %v", d.Share, share)
	}
}

// The daemon publishes its device (capacity sandboxes = DEVICE_COUNT, shared), registers, and
// prepares a claim once: a second NodePrepareResources, and one after a kill -9 and restart,
// is answered from the checkpoint without asking the API server again; unprepare removes it.
func TestDRAHyperlightPrepareCheckpointed(t *testing.T) {
	s := newDRAScenario(t)
	if !s.wait(startBound, func() bool { return s.api.Device() != nil }) {
		s.fatalf("no ResourceSlice published within %v", startBound)
	}
	dev, _ := json.Marshal(s.api.Device())
	want := `{"allowMultipleAllocations":true,"attributes":{"hypervisor":{"string":"kvm"},"path":{"string":"/dev/kvm"},` +
		`"type":{"string":"hypervisor"}},"capacity":{"sandboxes":{"requestPolicy":{"default":"1","validRange":{"min":"1"}},"value":"3"}},"name":"kvm"}`
	if string(dev) != want {
		t.Fatalf("published device:\n%s\nwant\n%s", dev, want)
	}
	c := s.register()
	s.api.SetClaim("ns", "c1", "uid-1", draNode, true)
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), true)
	ckpt := filepath.Join(s.pluginDir(), "claims", "uid-1")
	if b, err := os.ReadFile(ckpt); err != nil || string(b) != "sdp-claim 1\nhv\tkvm\t5c1e0a00-0000-4000-8000-000000000001\t0\n" {
		t.Fatalf("checkpoint %s: %q, %v", ckpt, b, err)
	}
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), true)
	if n := s.api.ClaimGets("ns", "c1"); n != 1 {
		t.Fatalf("the claim was fetched %d times for two prepares, want 1", n)
	}
	// kill -9 and a new instance: the same answer, from the checkpoint
	first := s.d
	if err := s.d.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := s.d.Wait(exitBound); err != nil {
		t.Fatal(err)
	}
	s.startDaemon(s.extra...)
	c = s.register()
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), true)
	if n := s.api.ClaimGets("ns", "c1"); n != 1 {
		t.Fatalf("the claim was fetched %d times across a restart, want 1", n)
	}
	if e := unprepareClaim(t, c, "ns", "c1", "uid-1"); e != "" {
		t.Fatalf("unprepare: %s", e)
	}
	if _, err := os.Stat(ckpt); !os.IsNotExist(err) {
		t.Fatalf("checkpoint after unprepare: %v", err)
	}
	if e := unprepareClaim(t, c, "ns", "c1", "uid-1"); e != "" {
		t.Fatalf("a second unprepare (nothing left): %s", e)
	}
	// prepared once in all: by the first instance; the second answered from the checkpoint
	if n, m := strings.Count(first.Log(), `msg="claim prepared"`), strings.Count(s.d.Log(), `msg="claim prepared"`); n != 1 || m != 0 {
		t.Fatalf("'claim prepared' lines: %d by the first instance, %d by the second; want 1 and 0", n, m)
	}
}

// Claims that must not be prepared: another claim under the same name, another node's pool,
// not allocated, gone. Each gets the reason, nothing is checkpointed.
func TestDRAHyperlightClaimsRefused(t *testing.T) {
	s := newDRAScenario(t)
	c := s.register()
	s.api.SetClaim("ns", "remade", "uid-new", draNode, false)
	s.api.SetClaim("ns", "elsewhere", "uid-b", "node-b", false)
	s.api.Mu.Lock()
	s.api.Claims["ns/pending"] = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"pending","namespace":"ns","uid":"uid-p"},"spec":{}}`
	s.api.Mu.Unlock()
	cases := []struct{ name, uid, want string }{
		{"remade", "uid-old", "deleted and made again"},
		{"elsewhere", "uid-b", "not this node's pool " + draNode},
		{"pending", "uid-p", "not allocated"},
		{"gone", "uid-g", "ResourceClaim ns/gone not found"},
	}
	for _, tc := range cases {
		r := prepareClaim(t, c, "ns", tc.name, tc.uid)
		if !strings.Contains(r.Error, tc.want) || len(r.Devices) != 0 {
			t.Errorf("claim %s: %+v, want the error %q", tc.name, r, tc.want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(s.pluginDir(), "claims"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("claims directory after refusals: %v, %v", entries, err)
	}
	if !strings.Contains(s.d.Log(), `msg="claim not prepared" claim=ns/remade uid=uid-old`) {
		t.Fatalf("no warn line for the refused claim: %s", s.d.Log())
	}
}

// healthStream opens NodeWatchResources as the kubelet does; its reports arrive on the channel.
func healthStream(t *testing.T, c *DRAConn) <-chan *drahealth.NodeWatchResourcesResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := c.Health.NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err != nil {
		t.Fatalf("NodeWatchResources: %v", err)
	}
	ch := make(chan *drahealth.NodeWatchResourcesResponse, 16)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				close(ch)
				return
			}
			ch <- r
		}
	}()
	return ch
}

// nextHealth waits for a report whose one device is kvm of draNode with health h.
func nextHealth(t *testing.T, ch <-chan *drahealth.NodeWatchResourcesResponse, h drahealth.HealthStatus, bound time.Duration) *drahealth.DeviceHealth {
	t.Helper()
	end := time.After(bound)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("the health stream ended waiting for %v", h)
			}
			if len(r.Devices) != 1 || r.Devices[0].Device.PoolName != draNode || r.Devices[0].Device.DeviceName != "kvm" ||
				r.Devices[0].HealthCheckTimeoutSeconds != 90 || r.Devices[0].LastUpdatedTime < time.Now().Unix()-60 {
				t.Fatalf("health report: %+v", r)
			}
			if r.Devices[0].Health == h {
				return r.Devices[0]
			}
		case <-end:
			t.Fatalf("no %v report within %v", h, bound)
		}
	}
}

// The probe fails: the published device carries the NoSchedule taint, the kubelet's health
// stream says UNHEALTHY with the probe's reason, and a claim on it is not prepared ("unusable");
// the probe passes again: the taint goes, HEALTHY, and it is.
func TestDRAHyperlightUnhealthyTainted(t *testing.T) {
	s := newDRAScenario(t)
	c := s.register()
	if !s.wait(startBound, func() bool { return s.api.Device() != nil }) {
		s.fatalf("no ResourceSlice published within %v", startBound)
	}
	health := healthStream(t, c)
	nextHealth(t, health, drahealth.HealthStatus_HEALTHY, eventBound)
	if err := s.node.SetShim("HVSHIM_CREATE_VM_ERRNO=ENOMEM"); err != nil {
		t.Fatal(err)
	}
	taint := func() string {
		d := s.api.Device()
		if d == nil || d["taints"] == nil {
			return ""
		}
		b, _ := json.Marshal(d["taints"])
		return string(b)
	}
	// the next periodic check (30 s) sees it
	if !s.wait(periodBound, func() bool { return strings.Contains(taint(), `"key":"hyperlight.dev/unhealthy"`) }) {
		s.fatalf("no taint within %v: %s", periodBound, taint())
	}
	if !strings.Contains(taint(), `"effect":"NoSchedule"`) || !strings.Contains(taint(), `"timeAdded":"`) {
		t.Fatalf("taint: %s", taint())
	}
	if h := nextHealth(t, health, drahealth.HealthStatus_UNHEALTHY, eventBound); !strings.Contains(h.Message, "KVM_CREATE_VM: ENOMEM") {
		t.Fatalf("unhealthy report's message: %q", h.Message)
	}
	s.api.SetClaim("ns", "c1", "uid-1", draNode, false)
	if r := prepareClaim(t, c, "ns", "c1", "uid-1"); !strings.Contains(r.Error, "device kvm is unusable: KVM_CREATE_VM: ENOMEM") {
		t.Fatalf("prepare on the unhealthy device: %+v", r)
	}
	s.clearShim()
	if !s.wait(periodBound, func() bool { return taint() == "" }) {
		s.fatalf("the taint stayed %v after the probe passed again: %s", periodBound, taint())
	}
	nextHealth(t, health, drahealth.HealthStatus_HEALTHY, eventBound)
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), false)
}

// PLUGIN_API with any other value: the daemon refuses to start and says why.
func TestDRAHyperlightBadAPIValue(t *testing.T) {
	node := newNode(t, true)
	s := prepare(t, node)
	s.startDaemon("PLUGIN_API=DRA")
	if !s.wait(exitBound, func() bool { return s.d.Exited() }) {
		s.fatalf("the daemon did not exit on PLUGIN_API=DRA")
	}
	if code := s.d.ExitCode(); code != 1 || !strings.Contains(s.d.Log(), `PLUGIN_API=\"DRA\" is neither device-plugin nor dra`) {
		t.Fatalf("exit %d, log: %s", code, s.d.Log())
	}
}

// At most 8 NodeWatchResources streams at once: the ninth is refused RESOURCE_EXHAUSTED and the
// others keep their reports; a closed stream's place is free again.
func TestDRAHyperlightHealthStreamsBounded(t *testing.T) {
	s := newDRAScenario(t)
	c := s.register()
	if !s.wait(startBound, func() bool { return s.api.Device() != nil }) {
		s.fatalf("no ResourceSlice published within %v", startBound)
	}
	var cancels []context.CancelFunc
	for i := 0; i < 8; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels = append(cancels, cancel)
		st, err := c.Health.NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		if r, err := st.Recv(); err != nil || len(r.Devices) != 1 || r.Devices[0].Health != drahealth.HealthStatus_HEALTHY {
			t.Fatalf("stream %d's first report: %+v, %v", i+1, r, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Health.NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the ninth stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	cancels[0]()
	// a new stream is accepted once the server has seen the closed one go; the accepted one is
	// kept open (opening and closing streams in the check would race the next check)
	accepted := Poll(eventBound, func() bool {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.Health.NodeWatchResources(ctx, &drahealth.NodeWatchResourcesRequest{})
		if err == nil {
			if _, err = st.Recv(); err == nil {
				t.Cleanup(cancel)
				return true
			}
		}
		cancel()
		return false
	})
	if !accepted {
		s.fatalf("no stream accepted after one of the eight closed")
	}
}
