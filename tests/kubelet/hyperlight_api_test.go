package kubelet

// Scenarios: registration, the advertised devices, DEVICE_COUNT, Allocate, and gRPC edge cases,
// all against the real hyperlight daemon through the mock kubelet.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

func TestHyperlightRegistration(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.registered(1, startBound)
	r := p.Request
	if r.Version != APIVersion || r.ResourceName != HyperlightResource {
		t.Errorf("RegisterRequest version %q resource %q", r.Version, r.ResourceName)
	}
	if !endpointRe.MatchString(r.Endpoint) {
		t.Fatalf("endpoint %q does not match %s", r.Endpoint, endpointRe)
	}
	if len(r.Endpoint) > SocketNameMax {
		t.Errorf("endpoint %q is longer than %d bytes", r.Endpoint, SocketNameMax)
	}
	if !IsSocket(p.Socket) {
		t.Errorf("%s is not a socket", p.Socket)
	}
	if p.Options.PreStartRequired || p.Options.GetPreferredAllocationAvailable {
		t.Errorf("GetDevicePluginOptions %+v, want both false", p.Options)
	}
	if o := r.Options; o != nil && (o.PreStartRequired || o.GetPreferredAllocationAvailable) {
		t.Errorf("RegisterRequest options %+v, want both false", o)
	}
	if socks, _ := s.node.PluginSockets(); len(socks) != 1 {
		t.Errorf("plugin sockets %v, want exactly one", socks)
	}
	s.devices(3, Healthy, eventBound)
	if n := s.k.Registrations(HyperlightResource); n != 1 {
		t.Errorf("%d registrations, want 1", n)
	}
}

func TestHyperlightInitialDeviceList(t *testing.T) {
	s := newScenario(t) // DEVICE_COUNT defaults to 2000
	p := s.registered(1, startBound)
	snaps, err := p.WaitSnapshots(1, eventBound)
	if err != nil {
		s.fatalf("%v", err)
	}
	// The first response comes after the first check: it already says Healthy.
	devs := snaps[0].Devices
	if len(devs) != 2000 {
		t.Fatalf("first snapshot has %d devices, want 2000", len(devs))
	}
	seen := map[string]bool{}
	for i, d := range devs {
		if d.Health != Healthy {
			t.Errorf("device %s is %q in the first snapshot", d.ID, d.Health)
		}
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			t.Errorf("device %s has topology %v", d.ID, d.Topology)
		}
		if seen[d.ID] {
			t.Errorf("duplicate ID %s", d.ID)
		}
		seen[d.ID] = true
		if t.Failed() && i > 5 {
			break
		}
	}
	for i := 0; i < 2000; i++ {
		if !seen[fmt.Sprintf("hyperlight-%d", i)] {
			t.Fatalf("hyperlight-%d not advertised", i)
		}
	}
}

func TestHyperlightDeviceCount(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.registered(1, startBound)
	devs := s.devices(3, Healthy, eventBound)
	for i, d := range devs {
		if want := fmt.Sprintf("hyperlight-%d", i); d.ID != want {
			t.Errorf("device %d is %q, want %q", i, d.ID, want)
		}
	}
}

func TestHyperlightInvalidDeviceCount(t *testing.T) {
	bin := daemonBinary(t)
	node := newNode(t, true)
	for _, v := range []string{"0", "abc", "-1", "99999999999", "3x"} {
		t.Run(strconv.Quote(v), func(t *testing.T) {
			r, err := RunCommand(exitBound, bin, DaemonEnv(node.Root, "DEVICE_COUNT="+v))
			if err != nil {
				t.Fatalf("%v\nstderr: %s", err, r.Stderr)
			}
			if r.Code != 1 || !strings.Contains(r.Stderr, "DEVICE_COUNT") {
				t.Errorf("DEVICE_COUNT=%q: exit %d, stderr:\n%s\nwant exit 1 and an error naming DEVICE_COUNT", v, r.Code, r.Stderr)
			}
		})
	}
	if socks, _ := node.PluginSockets(); len(socks) != 0 {
		t.Errorf("a rejected start left sockets %v", socks)
	}
}

func TestHyperlightNoHypervisorNode(t *testing.T) {
	bin := daemonBinary(t)
	node := newNode(t, false)
	r, err := RunCommand(exitBound, bin, DaemonEnv(node.Root, "DEVICE_COUNT=3"))
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, r.Stderr)
	}
	if r.Code != 1 || !strings.Contains(r.Stderr, "/dev/kvm") {
		t.Errorf("no hypervisor node: exit %d, stderr:\n%s\nwant exit 1 and an error naming /dev/kvm", r.Code, r.Stderr)
	}
}

func checkAllocation(t *testing.T, c *api.ContainerAllocateResponse) {
	t.Helper()
	if len(c.CdiDevices) != 1 || c.CdiDevices[0].Name != HyperlightCDIName {
		t.Errorf("cdi_devices %v, want [%s]", c.CdiDevices, HyperlightCDIName)
	}
	found := false
	for k, v := range c.Annotations {
		if strings.HasPrefix(k, "cdi.k8s.io/") {
			found = true
			if v != HyperlightCDIName {
				t.Errorf("annotation %s=%q, want %q", k, v, HyperlightCDIName)
			}
		}
	}
	if !found {
		t.Errorf("no cdi.k8s.io/ annotation in %v", c.Annotations)
	}
}

func TestHyperlightAllocate(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	for _, ids := range [][]string{{"hyperlight-0"}, {"hyperlight-1", "hyperlight-2"}} {
		a, err := s.k.Allocate(HyperlightResource, ids)
		if err != nil {
			s.fatalf("Allocate %v: %v", ids, err)
		}
		if len(a.Calls) != 1 || a.Calls[0] != "Allocate" {
			t.Errorf("kubelet called %v, want only Allocate (the options ask for nothing else)", a.Calls)
		}
		if len(a.Full.ContainerResponses) != 1 {
			t.Errorf("%d container responses for one container request", len(a.Full.ContainerResponses))
		}
		checkAllocation(t, a.Response)
	}
}

func TestHyperlightAllocateUnknownID(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.ready(3)
	_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0", "nope-1", "hyperlight-3"})
	st, _ := status.FromError(err)
	if st.Code() != codes.InvalidArgument {
		s.fatalf("Allocate with unknown IDs: %v, want InvalidArgument", err)
	}
	for _, id := range []string{"nope-1", "hyperlight-3"} {
		if !strings.Contains(st.Message(), id) {
			t.Errorf("message %q does not name %s", st.Message(), id)
		}
	}
	if strings.Contains(st.Message(), "hyperlight-0") {
		t.Errorf("message %q names the known ID hyperlight-0", st.Message())
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"}); err != nil {
		t.Errorf("Allocate after the rejected one: %v", err)
	}
}

func TestHyperlightAllocateEmptyRequest(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	for name, req := range map[string]*api.AllocateRequest{
		"no container requests":   {},
		"a container with no IDs": {ContainerRequests: []*api.ContainerAllocateRequest{{}}},
		"a second container with no IDs": {ContainerRequests: []*api.ContainerAllocateRequest{
			{DevicesIds: []string{"hyperlight-0"}}, {}}},
	} {
		_, err := p.Client().Allocate(ctx, req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	if ended, err := p.Ended(); ended {
		t.Errorf("kubelet's stream ended: %v", err)
	}
}

func TestHyperlightUnknownMethod(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	conn := s.dial(p)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	for _, method := range []string{"/v1beta1.DevicePlugin/NoSuchMethod", "/no.such.Service/Call", "/v1beta1.Registration/Register"} {
		err := conn.Invoke(ctx, method, &api.Empty{}, &api.Empty{})
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", method, err)
		}
	}
	// The connection and the daemon keep serving.
	if _, err := api.NewDevicePluginClient(conn).Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"hyperlight-0"}}}}); err != nil {
		t.Errorf("Allocate on the same connection afterwards: %v", err)
	}
}

func TestHyperlightOversizedRequest(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	conn := s.dial(p)
	id := strings.Repeat("x", 100)
	ids := make([]string, 5*1024*1024/len(id)+1)
	for i := range ids {
		ids[i] = id
	}
	req := &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}}}
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	_, err := api.NewDevicePluginClient(conn).Allocate(ctx, req, grpc.MaxCallSendMsgSize(64<<20))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("5 MiB Allocate: %v, want ResourceExhausted", err)
	}
	// The daemon keeps serving: kubelet's Allocate works, a new connection works, and kubelet's
	// stream is still the same one.
	a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
	if err != nil {
		s.fatalf("kubelet Allocate after the oversized request: %v", err)
	}
	checkAllocation(t, a.Response)
	conn2 := s.dial(p)
	if _, err := api.NewDevicePluginClient(conn2).GetDevicePluginOptions(ctx, &api.Empty{}); err != nil {
		t.Errorf("a new connection after the oversized request: %v", err)
	}
	if ended, err := p.Ended(); ended || s.k.Registrations(HyperlightResource) != 1 {
		t.Errorf("kubelet's stream ended (%v, %v) or the daemon re-registered (%d registrations)",
			ended, err, s.k.Registrations(HyperlightResource))
	}
}

func TestHyperlightClientCancelMidStream(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=debug")
	p := s.ready(3)
	conn := s.dial(p)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := api.NewDevicePluginClient(conn).ListAndWatch(ctx, &api.Empty{})
	if err != nil {
		s.fatalf("extra ListAndWatch: %v", err)
	}
	first, err := stream.Recv()
	if err != nil || len(first.Devices) != 3 {
		s.fatalf("extra ListAndWatch first response %v, %v", first, err)
	}
	cancel() // RST_STREAM(CANCEL) mid-stream
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want Canceled", err)
	}
	if line, ok := s.d.WaitLog(eventBound, func(l string) bool {
		return strings.Contains(strings.ToLower(l), "cancel") && strings.Contains(l, "ListAndWatch")
	}); !ok {
		t.Errorf("no log line about the cancelled ListAndWatch call within %v", eventBound)
	} else {
		t.Logf("daemon: %s", line)
	}
	// The daemon keeps serving, and the next change reaches kubelet's stream (which would
	// touch a freed stream if the cancelled one had been left in the list).
	ctx2, cancel2 := context.WithTimeout(context.Background(), eventBound)
	defer cancel2()
	if _, err := api.NewDevicePluginClient(conn).GetDevicePluginOptions(ctx2, &api.Empty{}); err != nil {
		t.Errorf("call on the same connection after the cancel: %v", err)
	}
	removeKVM(t, s.node)
	s.devices(3, Unhealthy, eventBound)
	mknodKVM(t, s.node)
	s.devices(3, Healthy, periodBound)
	if ended, err := p.Ended(); ended || s.k.Registrations(HyperlightResource) != 1 {
		t.Errorf("kubelet's stream ended (%v, %v) or the daemon re-registered", ended, err)
	}
}

func removeKVM(t *testing.T, n *Node) {
	t.Helper()
	if err := os.Remove(n.KVMPath()); err != nil {
		t.Fatal(err)
	}
}

func mknodKVM(t *testing.T, n *Node) {
	t.Helper()
	if err := n.MknodKVM(); err != nil {
		t.Fatal(err)
	}
}
