package kubelet

// Tests of the mock kubelet itself, against a small grpc-go device plugin (fakeplugin_test.go),
// so the mock is proven independently of the C daemons.

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const bound = 5 * time.Second

func TestMockExtendedResourceNames(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	valid := []string{"example.com/foo", "hyperlight.dev/hypervisor", "nvidia.com/gpu", "a/b",
		"example.com/" + long63, "example.com/F_o.o-1", "sub.example.com/x"}
	invalid := []string{"", "foo", "/foo", "example.com/", "kubernetes.io/foo", "sub.kubernetes.io/foo",
		"requests.example.com/foo", "example.com/-foo", "example.com/foo-", "example.com/fo o",
		"Example.com/foo", "example..com/foo", "example.com/a/b", "example.com/" + long63 + "a",
		"-example.com/foo", strings.Repeat("a", 250) + ".com/foo"}
	for _, n := range valid {
		if !IsExtendedResourceName(n) {
			t.Errorf("IsExtendedResourceName(%q) = false, want true", n)
		}
	}
	for _, n := range invalid {
		if IsExtendedResourceName(n) {
			t.Errorf("IsExtendedResourceName(%q) = true, want false", n)
		}
	}
}

func TestMockRegisterRejects(t *testing.T) {
	k := newMock(t, Config{DialTimeout: 300 * time.Millisecond})
	cases := []struct {
		version, resource, endpoint, want string
	}{
		{"v1alpha", "example.com/foo", "x.sock",
			`requested API version "v1alpha" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{"", "example.com/foo", "x.sock",
			`requested API version "" is not supported by kubelet. Supported version is ["v1beta1"]`},
		{"v1beta1", "foo", "x.sock", `the ResourceName "foo" is invalid`},
		{"v1beta1", "kubernetes.io/foo", "x.sock", `the ResourceName "kubernetes.io/foo" is invalid`},
		{"v1beta1", "requests.example.com/foo", "x.sock", `the ResourceName "requests.example.com/foo" is invalid`},
		// valid request, nothing serves the endpoint: the dial-back fails inside Register
		{"v1beta1", "example.com/foo", "missing.sock", "failed to dial device plugin: context deadline exceeded"},
	}
	for _, c := range cases {
		_, err := registerAs(k.SocketPath(), &api.RegisterRequest{Version: c.version, ResourceName: c.resource, Endpoint: c.endpoint})
		st, _ := status.FromError(err)
		if err == nil || st.Code() != codes.Unknown || st.Message() != c.want {
			t.Errorf("Register(%q, %q): %v, want code Unknown with %q", c.version, c.resource, err, c.want)
		}
	}
	if n := k.Registrations("example.com/foo"); n != 0 {
		t.Errorf("%d registrations after rejected requests, want 0", n)
	}
}

func TestMockRegisterDialsBackBeforeReturning(t *testing.T) {
	k := newMock(t, Config{})
	opts := api.DevicePluginOptions{PreStartRequired: true}
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/foo", opts, dev("a", Healthy))
	returned, err := f.register(k.SocketPath(), APIVersion)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	calls := f.Calls()
	if len(calls) == 0 || calls[0].Method != "GetDevicePluginOptions" {
		t.Fatalf("calls %v: want GetDevicePluginOptions first", f.methods())
	}
	if !calls[0].At.Before(returned) {
		t.Errorf("GetDevicePluginOptions at %v, not before Register returned at %v", calls[0].At, returned)
	}
	if calls[0].HasDeadline {
		t.Errorf("GetDevicePluginOptions carried a deadline; kubelet sends none")
	}
	p := k.Current("example.com/foo")
	if p == nil || p.Endpoint != "fake-1.sock" || p.Socket != f.socket || !p.Options.PreStartRequired {
		t.Fatalf("current registration %+v, want endpoint fake-1.sock with pre_start_required", p)
	}
	if _, err := k.WaitDevices("example.com/foo", CountHealth(1, Healthy), bound); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Calls() {
		if c.Method == "ListAndWatch" && c.HasDeadline {
			t.Errorf("ListAndWatch carried a deadline; kubelet sends none")
		}
	}
	conns := f.lis.connections()
	if len(conns) != 1 {
		t.Fatalf("%d connections to the plugin, want 1", len(conns))
	}
	hs, err := conns[0].requestHeaders()
	if err != nil || len(hs) < 2 {
		t.Fatalf("request headers %v, %v: want at least 2 requests", hs, err)
	}
	for _, h := range hs {
		if h[":authority"] != "localhost" {
			t.Errorf("request %s has :authority %q, want localhost", h[":path"], h[":authority"])
		}
	}
	if hs[0][":path"] != "/v1beta1.DevicePlugin/GetDevicePluginOptions" || hs[1][":path"] != "/v1beta1.DevicePlugin/ListAndWatch" {
		t.Errorf("paths %q, %q: want GetDevicePluginOptions then ListAndWatch", hs[0][":path"], hs[1][":path"])
	}
	if _, ok := hs[0]["grpc-timeout"]; ok {
		t.Errorf("GetDevicePluginOptions sent grpc-timeout %q", hs[0]["grpc-timeout"])
	}
}

func TestMockRegisterOptionsFailure(t *testing.T) {
	k := newMock(t, Config{})
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/foo", api.DevicePluginOptions{})
	f.failOpts = status.Error(codes.Internal, "boom")
	_, err := f.register(k.SocketPath(), APIVersion)
	if err == nil || !strings.Contains(err.Error(), "failed to get device plugin options") {
		t.Fatalf("Register: %v, want failed to get device plugin options", err)
	}
	if k.Registrations("example.com/foo") != 0 {
		t.Errorf("failed registration was counted")
	}
}

func TestMockListAndWatchSnapshots(t *testing.T) {
	k := newMock(t, Config{})
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/foo", api.DevicePluginOptions{},
		dev("a", Healthy), dev("b", Healthy), dev("c", Healthy))
	if _, err := f.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices("example.com/foo", CountHealth(3, Healthy), bound); err != nil {
		t.Fatal(err)
	}
	f.setDevices(dev("a", Healthy), dev("b", Unhealthy), dev("c", Healthy))
	devs, err := k.WaitDevices("example.com/foo", func(d []*api.Device) bool { return len(d) == 3 && d[1].Health == Unhealthy }, bound)
	if err != nil {
		t.Fatal(err)
	}
	if devs[0].Health != Healthy || devs[2].Health != Healthy {
		t.Errorf("snapshot %s", DescribeDevices(devs))
	}
	f.setDevices(dev("a", Healthy)) // a full snapshot: b and c disappear
	if _, err := k.WaitDevices("example.com/foo", CountHealth(1, Healthy), bound); err != nil {
		t.Fatal(err)
	}
	p := k.Current("example.com/foo")
	if n := len(p.Snapshots()); n != 3 {
		t.Errorf("%d snapshots recorded, want 3", n)
	}
	// The plugin ends the stream with OK: kubelet records it and closes the connection.
	f.endStreams()
	endErr, ok := p.WaitEnded(bound)
	if !ok || endErr == nil || !strings.Contains(endErr.Error(), "EOF") {
		t.Fatalf("stream end %v (ended %v), want EOF", endErr, ok)
	}
	if !Poll(bound, func() bool { return f.lis.connections()[0].peerClosed() }) {
		t.Errorf("kubelet did not close the connection after the stream ended")
	}
	if _, err := k.Allocate("example.com/foo", []string{"a"}); err == nil || !strings.Contains(err.Error(), "has been stopped") {
		t.Errorf("Allocate on a stopped endpoint: %v, want \"has been stopped\"", err)
	}
	found := false
	for _, e := range k.Events() {
		if e.Kind == "stream-ended" && strings.HasPrefix(e.Text, "stream ended: ") {
			found = true
		}
	}
	if !found {
		t.Errorf("no stream-ended event in:\n%s", k.EventLog())
	}
}

func TestMockAllocateOrder(t *testing.T) {
	k := newMock(t, Config{})
	all := api.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/all", all,
		dev("a", Healthy), dev("b", Unhealthy), dev("c", Healthy))
	g := newFakePlugin(t, k.Dir, "fake-2.sock", "example.com/none", api.DevicePluginOptions{}, dev("x", Healthy))
	for _, p := range []*fakePlugin{f, g} {
		if _, err := p.register(k.SocketPath(), APIVersion); err != nil {
			t.Fatal(err)
		}
		if _, err := k.WaitDevices(p.resource, func(d []*api.Device) bool { return len(d) > 0 }, bound); err != nil {
			t.Fatal(err)
		}
	}
	a, err := k.Allocate("example.com/all", []string{"c"})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	want := []string{"GetPreferredAllocation", "Allocate", "PreStartContainer"}
	if !reflect.DeepEqual(a.Calls, want) {
		t.Errorf("kubelet calls %v, want %v", a.Calls, want)
	}
	var got []string
	for _, c := range f.Calls() {
		switch c.Method {
		case "GetPreferredAllocation":
			r := c.Request.(*api.PreferredAllocationRequest)
			if len(r.ContainerRequests) != 1 || !reflect.DeepEqual(r.ContainerRequests[0].AvailableDeviceIDs, []string{"a", "c"}) ||
				r.ContainerRequests[0].AllocationSize != 1 || c.HasDeadline {
				t.Errorf("GetPreferredAllocation request %v (deadline %v)", r, c.HasDeadline)
			}
		case "Allocate":
			r := c.Request.(*api.AllocateRequest)
			if len(r.ContainerRequests) != 1 || !reflect.DeepEqual(r.ContainerRequests[0].DevicesIds, []string{"c"}) || c.HasDeadline {
				t.Errorf("Allocate request %v (deadline %v), want one container with [c] and no deadline", r, c.HasDeadline)
			}
		case "PreStartContainer":
			left := time.Until(c.Deadline)
			if !c.HasDeadline || left > 30*time.Second || left < 20*time.Second {
				t.Errorf("PreStartContainer deadline %v away (has %v), want about 30 s", left, c.HasDeadline)
			}
		default:
			continue
		}
		got = append(got, c.Method)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("plugin saw %v, want %v", got, want)
	}
	if a.Response == nil || len(a.Response.CdiDevices) != 1 || a.Response.CdiDevices[0].Name != "example.com/all=c" {
		t.Errorf("allocation response %v", a.Response)
	}
	b, err := k.Allocate("example.com/none", []string{"x"})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	if !reflect.DeepEqual(b.Calls, []string{"Allocate"}) {
		t.Errorf("calls %v, want only Allocate when the options ask for nothing else", b.Calls)
	}
	if m := g.methods(); !reflect.DeepEqual(m, []string{"GetDevicePluginOptions", "ListAndWatch", "Allocate"}) {
		t.Errorf("plugin without options saw %v", m)
	}
}

func TestMockReRegistrationNewestWins(t *testing.T) {
	k := newMock(t, Config{})
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/foo", api.DevicePluginOptions{}, dev("a", Healthy))
	g := newFakePlugin(t, k.Dir, "fake-2.sock", "example.com/foo", api.DevicePluginOptions{}, dev("b", Healthy))
	if _, err := f.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatal(err)
	}
	first, err := k.WaitRegistered("example.com/foo", 1, bound)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatal(err)
	}
	second, err := k.WaitRegistered("example.com/foo", 2, bound)
	if err != nil {
		t.Fatal(err)
	}
	if second.Endpoint != "fake-2.sock" || second.Seq != 2 {
		t.Fatalf("current %s seq %d, want fake-2.sock seq 2", second.Endpoint, second.Seq)
	}
	if _, ok := first.WaitEnded(bound); !ok {
		t.Fatalf("the replaced registration's stream did not end")
	}
	if !Poll(bound, func() bool { return f.lis.connections()[0].peerClosed() }) {
		t.Errorf("the replaced plugin's connection was not closed")
	}
	if _, err := k.WaitDevices("example.com/foo", func(d []*api.Device) bool { return len(d) == 1 && d[0].ID == "b" }, bound); err != nil {
		t.Fatal(err)
	}
	if ended, _ := second.Ended(); ended {
		t.Errorf("the newest registration's stream ended")
	}
}

func TestMockRestart(t *testing.T) {
	k, f, p := registeredFake(t)
	keep := []string{filepath.Join(k.Dir, CheckpointFile), filepath.Join(k.Dir, "DEPRECATION")}
	for _, path := range keep {
		if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(k.Dir, "subdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if IsSocket(f.socket) {
		t.Errorf("plugin socket %s survived the restart", f.socket)
	}
	for _, path := range append(keep, filepath.Join(k.Dir, "subdir")) {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("restart removed %s: %v", path, err)
		}
	}
	if !IsSocket(k.SocketPath()) {
		t.Fatalf("kubelet.sock missing after restart")
	}
	if _, ok := p.WaitEnded(bound); !ok {
		t.Errorf("kubelet's stream to the plugin did not end")
	}
	if !Poll(bound, func() bool { open, ended := f.streamState(); return open == 0 && len(ended) == 1 }) {
		t.Errorf("the plugin's ListAndWatch did not see the kubelet go away")
	}
	if k.Current("example.com/foo") != nil {
		t.Errorf("a restarted kubelet still has an endpoint for the resource")
	}
	// The plugin comes back on a fresh socket and registers with the new kubelet.
	f2 := newFakePlugin(t, k.Dir, "fake-2.sock", "example.com/foo", api.DevicePluginOptions{}, dev("a", Healthy))
	if _, err := f2.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatalf("Register after restart: %v", err)
	}
	if _, err := k.WaitRegistered("example.com/foo", 2, bound); err != nil {
		t.Fatal(err)
	}
	if _, err := k.WaitDevices("example.com/foo", CountHealth(1, Healthy), bound); err != nil {
		t.Fatal(err)
	}
}

func TestMockRecreateSocketOnly(t *testing.T) {
	k, f, p := registeredFake(t)
	if err := k.RecreateSocketOnly(); err != nil {
		t.Fatal(err)
	}
	if !IsSocket(f.socket) || !IsSocket(k.SocketPath()) {
		t.Fatalf("plugin socket %v, kubelet.sock %v: both must exist", IsSocket(f.socket), IsSocket(k.SocketPath()))
	}
	// The connection and the stream are untouched: a device change still arrives.
	f.setDevices(dev("a", Unhealthy))
	if _, err := k.WaitDevices("example.com/foo", CountHealth(1, Unhealthy), bound); err != nil {
		t.Fatal(err)
	}
	if ended, err := p.Ended(); ended {
		t.Errorf("stream ended (%v) by a kubelet.sock re-creation", err)
	}
	// The new listener serves Register.
	if _, err := f.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatalf("Register on the new kubelet.sock: %v", err)
	}
	if _, err := k.WaitRegistered("example.com/foo", 2, bound); err != nil {
		t.Fatal(err)
	}
}

func TestMockEndStream(t *testing.T) {
	for _, keepConn := range []bool{true, false} {
		t.Run(map[bool]string{true: "keep-conn", false: "close-conn"}[keepConn], func(t *testing.T) {
			_, f, p := registeredFake(t)
			p.EndStream(keepConn)
			if err, ok := p.WaitEnded(bound); !ok || status.Code(err) != codes.Canceled {
				t.Fatalf("kubelet side: stream end %v (%v), want Canceled", err, ok)
			}
			if !Poll(bound, func() bool { _, ended := f.streamState(); return len(ended) == 1 }) {
				t.Fatalf("the plugin did not see its stream end")
			}
			if keepConn {
				// The same connection still carries calls.
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				if _, err := p.Client().GetDevicePluginOptions(ctx, &api.Empty{}); err != nil {
					t.Errorf("call on the kept connection: %v", err)
				}
				if n := len(f.lis.connections()); n != 1 || f.lis.connections()[0].peerClosed() {
					t.Errorf("%d connections, first closed: want the one original connection open", n)
				}
			} else if !Poll(bound, func() bool { return f.lis.connections()[0].peerClosed() }) {
				t.Errorf("kubelet did not close the connection after the stream ended")
			}
		})
	}
}
