package kubelet

// DRA's other side for the tests and the demo: a fake API server's ResourceSlices and
// ResourceClaims (FakeAPI, behind an APIStub), and grpc-go doing what the kubelet does with a
// DRA driver: its plugin watcher's GetInfo and NotifyRegistrationStatus (DRARegister), then
// NodePrepareResources and NodeUnprepareResources as its DRA manager calls them.

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
	"time"

	"google.golang.org/grpc"

	drahealth "sdp/drahealthv1"
	dra "sdp/drav1"
	reg "sdp/pluginregistration"
)

// DRADriverHyperlight is hyperlight-device-plugin's DRA driver name (PLUGIN_API=dra).
const DRADriverHyperlight = "hyperlight.dev"

// DRADriverKata is kata-device-plugin's DRA driver name (PLUGIN_API=dra).
const DRADriverKata = "kata.nvidia.com"

// FakeAPI: the ResourceSlices and ResourceClaims of a fake API server, by name.
type FakeAPI struct {
	Mu     sync.Mutex
	rv     int
	slices map[string]map[string]interface{}
	Claims map[string]string // "<ns>/<name>": the claim's JSON
	gets   map[string]int    // claim GETs by "<ns>/<name>"
	writes int               // slice creates and updates
}

// NewFakeAPI: an empty store.
func NewFakeAPI() *FakeAPI {
	return &FakeAPI{slices: map[string]map[string]interface{}{}, Claims: map[string]string{}, gets: map[string]int{}}
}

const slicesPath = "/apis/resource.k8s.io/v1/resourceslices"

// Answer is the APIStub's answer function.
func (f *FakeAPI) Answer(n int, r *APIRequest) APIAnswer {
	f.Mu.Lock()
	defer f.Mu.Unlock()
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
		if c, ok := f.Claims[key]; ok {
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

// Device: the one device of the one slice, or nil.
func (f *FakeAPI) Device() map[string]interface{} {
	f.Mu.Lock()
	defer f.Mu.Unlock()
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

// Devices: every device of every slice, by name (nil when there is no slice).
func (f *FakeAPI) Devices() map[string]map[string]interface{} {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if len(f.slices) == 0 {
		return nil
	}
	out := map[string]map[string]interface{}{}
	for _, s := range f.slices {
		devs, _ := s["spec"].(map[string]interface{})["devices"].([]interface{})
		for _, d := range devs {
			m := d.(map[string]interface{})
			out[m["name"].(string)] = m
		}
	}
	return out
}

// SetClaimDevices stores an allocated claim of request "gpus": one result per device of pool,
// for driver.
func (f *FakeAPI) SetClaimDevices(ns, name, uid, driver, pool string, devices ...string) {
	var results []string
	for _, d := range devices {
		results = append(results, fmt.Sprintf(`{"request":"gpus","driver":%q,"pool":%q,"device":%q}`, driver, pool, d))
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Claims[ns+"/"+name] = fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",`+
		`"metadata":{"name":%q,"namespace":%q,"uid":%q},"spec":{},"status":{"allocation":{"devices":{"results":[%s]}}}}`,
		name, ns, uid, strings.Join(results, ","))
}

// SetClaim stores an allocated claim of one result: request "hv", the device "kvm" of pool
// (driver hyperlight.dev), with a share ID when shared.
func (f *FakeAPI) SetClaim(ns, name, uid, pool string, shared bool) {
	share := ""
	if shared {
		share = `,"shareID":"5c1e0a00-0000-4000-8000-000000000001"`
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Claims[ns+"/"+name] = fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",`+
		`"metadata":{"name":%q,"namespace":%q,"uid":%q},"spec":{},"status":{"allocation":{"devices":{"results":[`+
		`{"request":"hv","driver":%q,"pool":%q,"device":"kvm"%s,"consumedCapacity":{"sandboxes":"1"}}]}}}}`,
		name, ns, uid, DRADriverHyperlight, pool, share)
}

// ClaimGets: how many times the claim was fetched.
func (f *FakeAPI) ClaimGets(ns, name string) int {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.gets[ns+"/"+name]
}

// DRAConn: the connections DRARegister opened.
type DRAConn struct {
	Info   *reg.PluginInfo
	Client dra.DRAPluginClient
	Health drahealth.DRAResourceHealthClient // on the same connection, as the kubelet's
	conns  []*grpc.ClientConn
}

// Close closes both connections.
func (c *DRAConn) Close() {
	for _, cc := range c.conns {
		cc.Close()
	}
}

func unixConn(sock string) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return grpc.DialContext(ctx, "passthrough:///dra", grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
}

// DRARegister waits (up to bound) for driver's registration socket in the kubelet directory
// under root, asks GetInfo, answers registered, and dials the DRA service it names.
func DRARegister(root, driver string, bound time.Duration) (*DRAConn, error) {
	sock := filepath.Join(root, "var/lib/kubelet/plugins_registry", driver+"-reg.sock")
	if !Poll(bound, func() bool { _, err := os.Stat(sock); return err == nil }) {
		return nil, fmt.Errorf("no registration socket %s within %v", sock, bound)
	}
	rc, err := unixConn(sock)
	if err != nil {
		return nil, err
	}
	c := &DRAConn{conns: []*grpc.ClientConn{rc}}
	r := reg.NewRegistrationClient(rc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.Info, err = r.GetInfo(ctx, &reg.InfoRequest{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("GetInfo: %v", err)
	}
	if _, err = r.NotifyRegistrationStatus(ctx, &reg.RegistrationStatus{PluginRegistered: true}); err != nil {
		c.Close()
		return nil, fmt.Errorf("NotifyRegistrationStatus: %v", err)
	}
	dc, err := unixConn(c.Info.Endpoint)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("dial %s: %v", c.Info.Endpoint, err)
	}
	c.conns = append(c.conns, dc)
	c.Client = dra.NewDRAPluginClient(dc)
	c.Health = drahealth.NewDRAResourceHealthClient(dc)
	return c, nil
}

// Prepare calls NodePrepareResources for one claim, with the kubelet's 45 s deadline; the
// answer must hold exactly that claim.
func (c *DRAConn) Prepare(ns, name, uid string) (*dra.NodePrepareResourceResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r, err := c.Client.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: []*dra.Claim{{Namespace: ns, Uid: uid, Name: name}}})
	if err != nil {
		return nil, err
	}
	got, ok := r.Claims[uid]
	if !ok || len(r.Claims) != 1 {
		return nil, fmt.Errorf("answer for %v, want exactly %s", r.Claims, uid)
	}
	return got, nil
}

// Unprepare calls NodeUnprepareResources for one claim; the claim's error ("" when none).
func (c *DRAConn) Unprepare(ns, name, uid string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	r, err := c.Client.NodeUnprepareResources(ctx, &dra.NodeUnprepareResourcesRequest{Claims: []*dra.Claim{{Namespace: ns, Uid: uid, Name: name}}})
	if err != nil {
		return "", err
	}
	got, ok := r.Claims[uid]
	if !ok {
		return "", fmt.Errorf("no answer for %s", uid)
	}
	if got == nil {
		return "", nil
	}
	return got.Error, nil
}
