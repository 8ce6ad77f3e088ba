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
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	dra "sdp/drav1"
	reg "sdp/pluginregistration"
)

const (
	draDriver = "hyperlight.dev"
	draNode   = "node-a"
)

// fakeAPI: the ResourceSlices and ResourceClaims of a fake API server, by name.
type fakeAPI struct {
	mu     sync.Mutex
	rv     int
	slices map[string]map[string]interface{}
	claims map[string]string // "<ns>/<name>": the claim's JSON
	gets   map[string]int    // claim GETs by "<ns>/<name>"
	writes int               // slice creates and updates
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{slices: map[string]map[string]interface{}{}, claims: map[string]string{}, gets: map[string]int{}}
}

const slicesPath = "/apis/resource.k8s.io/v1/resourceslices"

func (f *fakeAPI) answer(n int, r *APIRequest) APIAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.HasPrefix(r.Path, "/api/v1/nodes/") {
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	}
	if strings.HasPrefix(r.Path, "/apis/resource.k8s.io/v1/namespaces/") {
		p := strings.Split(strings.TrimPrefix(r.Path, "/apis/resource.k8s.io/v1/namespaces/"), "/")
		if len(p) != 3 || p[1] != "resourceclaims" || r.Method != "GET" {
			return APIAnswer{Status: 400, Body: `{"kind":"Status","message":"bad claim request"}`}
		}
		key := p[0] + "/" + p[2]
		f.gets[key]++
		if c, ok := f.claims[key]; ok {
			return APIAnswer{Status: 200, Body: c}
		}
		return APIAnswer{Status: 404, Body: `{"kind":"Status","reason":"NotFound"}`}
	}
	if r.Path == slicesPath && r.Method == "GET" {
		items := []interface{}{}
		for _, s := range f.slices {
			items = append(items, s)
		}
		b, _ := json.Marshal(map[string]interface{}{"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1", "items": items})
		return APIAnswer{Status: 200, Body: string(b)}
	}
	if r.Path == slicesPath && r.Method == "POST" {
		var s map[string]interface{}
		if json.Unmarshal(r.Body, &s) != nil {
			return APIAnswer{Status: 400, Body: `{"message":"not JSON"}`}
		}
		name := s["metadata"].(map[string]interface{})["name"].(string)
		if _, ok := f.slices[name]; ok {
			return APIAnswer{Status: 409, Body: `{"reason":"AlreadyExists"}`}
		}
		f.rv++
		s["metadata"].(map[string]interface{})["resourceVersion"] = strconv.Itoa(f.rv)
		f.slices[name] = s
		f.writes++
		b, _ := json.Marshal(s)
		return APIAnswer{Status: 201, Body: string(b)}
	}
	if strings.HasPrefix(r.Path, slicesPath+"/") {
		name := strings.TrimPrefix(r.Path, slicesPath+"/")
		old, ok := f.slices[name]
		if !ok {
			return APIAnswer{Status: 404, Body: `{"reason":"NotFound"}`}
		}
		switch r.Method {
		case "DELETE":
			delete(f.slices, name)
			return APIAnswer{Status: 200, Body: `{"kind":"Status","status":"Success"}`}
		case "PUT":
			var s map[string]interface{}
			if json.Unmarshal(r.Body, &s) != nil {
				return APIAnswer{Status: 400, Body: `{"message":"not JSON"}`}
			}
			if s["metadata"].(map[string]interface{})["resourceVersion"] != old["metadata"].(map[string]interface{})["resourceVersion"] {
				return APIAnswer{Status: 409, Body: `{"reason":"Conflict"}`}
			}
			f.rv++
			s["metadata"].(map[string]interface{})["resourceVersion"] = strconv.Itoa(f.rv)
			f.slices[name] = s
			f.writes++
			return APIAnswer{Status: 200, Body: string(r.Body)}
		}
	}
	return APIAnswer{Status: 404, Body: `{"reason":"NotFound"}`}
}

// device: the one device of the one slice, or nil.
func (f *fakeAPI) device() map[string]interface{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.slices) != 1 {
		return nil
	}
	for _, s := range f.slices {
		devs, _ := s["spec"].(map[string]interface{})["devices"].([]interface{})
		if len(devs) == 1 {
			return devs[0].(map[string]interface{})
		}
	}
	return nil
}

func (f *fakeAPI) setClaim(ns, name, uid, pool string, shared bool) {
	share := ""
	if shared {
		share = `,"shareID":"5c1e0a00-0000-4000-8000-000000000001"`
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims[ns+"/"+name] = fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",`+
		`"metadata":{"name":%q,"namespace":%q,"uid":%q},"spec":{},"status":{"allocation":{"devices":{"results":[`+
		`{"request":"hv","driver":%q,"pool":%q,"device":"kvm"%s,"consumedCapacity":{"sandboxes":"1"}}]}}}}`,
		name, ns, uid, draDriver, pool, share)
}

func (f *fakeAPI) claimGets(ns, name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets[ns+"/"+name]
}

type draScenario struct {
	*scenario
	api   *fakeAPI
	stub  *APIStub
	extra []string // the daemon's environment beyond DaemonEnv
}

func newDRAScenario(t *testing.T) *draScenario {
	t.Helper()
	node := newNode(t, true)
	f := newFakeAPI()
	stub, err := StartAPIStub(f.answer)
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

func unixDial(t *testing.T, sock string) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := grpc.DialContext(ctx, "passthrough:///dra", grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// register does what the kubelet's plugin watcher does with the registration socket; returns
// a client of the DRA service it names.
func (s *draScenario) register() dra.DRAPluginClient {
	s.t.Helper()
	sock := filepath.Join(s.node.Root, "var/lib/kubelet/plugins_registry", draDriver+"-reg.sock")
	if !s.wait(startBound, func() bool { _, err := os.Stat(sock); return err == nil }) {
		s.fatalf("no registration socket %s within %v", sock, startBound)
	}
	c := reg.NewRegistrationClient(unixDial(s.t, sock))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.GetInfo(ctx, &reg.InfoRequest{})
	if err != nil {
		s.fatalf("GetInfo: %v", err)
	}
	if info.Type != "DRAPlugin" || info.Name != draDriver || strings.Join(info.SupportedVersions, ",") != "v1.DRAPlugin" ||
		filepath.Dir(info.Endpoint) != s.pluginDir() || !strings.HasPrefix(filepath.Base(info.Endpoint), "dra-") {
		s.fatalf("GetInfo: %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &reg.RegistrationStatus{PluginRegistered: true}); err != nil {
		s.fatalf("NotifyRegistrationStatus: %v", err)
	}
	return dra.NewDRAPluginClient(unixDial(s.t, info.Endpoint))
}

func prepareClaim(t *testing.T, c dra.DRAPluginClient, ns, name, uid string) *dra.NodePrepareResourceResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second) // the kubelet's
	defer cancel()
	r, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: []*dra.Claim{{Namespace: ns, Uid: uid, Name: name}}})
	if err != nil {
		t.Fatalf("NodePrepareResources %s/%s: %v", ns, name, err)
	}
	got, ok := r.Claims[uid]
	if !ok || len(r.Claims) != 1 {
		t.Fatalf("NodePrepareResources %s/%s: answer for %v, want exactly %s", ns, name, r.Claims, uid)
	}
	return got
}

func unprepareClaim(t *testing.T, c dra.DRAPluginClient, ns, name, uid string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r, err := c.NodeUnprepareResources(ctx, &dra.NodeUnprepareResourcesRequest{Claims: []*dra.Claim{{Namespace: ns, Uid: uid, Name: name}}})
	if err != nil {
		t.Fatalf("NodeUnprepareResources %s/%s: %v", ns, name, err)
	}
	if got, ok := r.Claims[uid]; !ok {
		t.Fatalf("NodeUnprepareResources: no answer for %s", uid)
	} else if got != nil {
		return got.Error
	}
	return ""
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
	if !s.wait(startBound, func() bool { return s.api.device() != nil }) {
		s.fatalf("no ResourceSlice published within %v", startBound)
	}
	dev, _ := json.Marshal(s.api.device())
	want := `{"allowMultipleAllocations":true,"attributes":{"hypervisor":{"string":"kvm"},"path":{"string":"/dev/kvm"},` +
		`"type":{"string":"hypervisor"}},"capacity":{"sandboxes":{"requestPolicy":{"default":"1","validRange":{"min":"1"}},"value":"3"}},"name":"kvm"}`
	if string(dev) != want {
		t.Fatalf("published device:\n%s\nwant\n%s", dev, want)
	}
	c := s.register()
	s.api.setClaim("ns", "c1", "uid-1", draNode, true)
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), true)
	ckpt := filepath.Join(s.pluginDir(), "claims", "uid-1")
	if b, err := os.ReadFile(ckpt); err != nil || string(b) != "sdp-claim 1\nhv\tkvm\t5c1e0a00-0000-4000-8000-000000000001\t0\n" {
		t.Fatalf("checkpoint %s: %q, %v", ckpt, b, err)
	}
	checkPrepared(t, prepareClaim(t, c, "ns", "c1", "uid-1"), true)
	if n := s.api.claimGets("ns", "c1"); n != 1 {
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
	if n := s.api.claimGets("ns", "c1"); n != 1 {
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
	s.api.setClaim("ns", "remade", "uid-new", draNode, false)
	s.api.setClaim("ns", "elsewhere", "uid-b", "node-b", false)
	s.api.mu.Lock()
	s.api.claims["ns/pending"] = `{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":"pending","namespace":"ns","uid":"uid-p"},"spec":{}}`
	s.api.mu.Unlock()
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

// The probe fails: the published device carries the NoSchedule taint and a claim on it is not
// prepared ("unusable"); the probe passes again: the taint goes and it is.
func TestDRAHyperlightUnhealthyTainted(t *testing.T) {
	s := newDRAScenario(t)
	c := s.register()
	if !s.wait(startBound, func() bool { return s.api.device() != nil }) {
		s.fatalf("no ResourceSlice published within %v", startBound)
	}
	if err := s.node.SetShim("HVSHIM_CREATE_VM_ERRNO=ENOMEM"); err != nil {
		t.Fatal(err)
	}
	taint := func() string {
		d := s.api.device()
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
	s.api.setClaim("ns", "c1", "uid-1", draNode, false)
	if r := prepareClaim(t, c, "ns", "c1", "uid-1"); !strings.Contains(r.Error, "device kvm is unusable: KVM_CREATE_VM: ENOMEM") {
		t.Fatalf("prepare on the unhealthy device: %+v", r)
	}
	s.clearShim()
	if !s.wait(periodBound, func() bool { return taint() == "" }) {
		s.fatalf("the taint stayed %v after the probe passed again: %s", periodBound, taint())
	}
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
