package kubelet

// Scenarios: the bootstrap --device-access mode (resource hyperlight.dev/device-access: one
// device, detected by stat only, Allocate grants only the node read/write, no CDI, no probe),
// its HOST_DEVICE_DIR variant, its --health-check, and both modes side by side on one node.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	AccessResource = "hyperlight.dev/device-access"
	AccessDeviceID = "device-access"
)

var accessEndpointRe = SocketRe(SocketPrefix(HyperlightSocketTag, AccessResource))

// accessScenario: a node (with <root>/dev/kvm when kvm), the mock kubelet and the daemon in
// --device-access mode.
func accessScenario(t *testing.T, kvm bool, env ...string) *scenario {
	s := prepare(t, newNode(t, kvm))
	s.startWith([]string{"--device-access"}, env...)
	return s
}

// checkAccessGrant checks a device-access answer: exactly the one read/write DeviceSpec for
// /dev/kvm and nothing else.
func checkAccessGrant(t *testing.T, full *api.AllocateResponse) {
	t.Helper()
	if len(full.ContainerResponses) != 1 {
		t.Fatalf("%d container responses, want 1", len(full.ContainerResponses))
	}
	c := full.ContainerResponses[0]
	if len(c.Devices) != 1 {
		t.Fatalf("devices %v, want exactly one", c.Devices)
	}
	d := c.Devices[0]
	if d.ContainerPath != "/dev/kvm" || d.HostPath != "/dev/kvm" || d.Permissions != "rw" {
		t.Errorf("DeviceSpec container_path=%q host_path=%q permissions=%q, want /dev/kvm /dev/kvm rw",
			d.ContainerPath, d.HostPath, d.Permissions)
	}
	if len(c.CdiDevices) != 0 || len(c.Annotations) != 0 || len(c.Envs) != 0 || len(c.Mounts) != 0 {
		t.Errorf("the answer carries more than the device: cdi_devices %v annotations %v envs %v mounts %v",
			c.CdiDevices, c.Annotations, c.Envs, c.Mounts)
	}
	if len(c.XXX_unrecognized) != 0 || len(d.XXX_unrecognized) != 0 || len(full.XXX_unrecognized) != 0 {
		t.Errorf("the answer carries fields unknown to v1beta1")
	}
}

// noCDI fails the test if anything was written to the CDI directory.
func noCDI(t *testing.T, n *Node) {
	t.Helper()
	entries, err := os.ReadDir(n.CDIDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("device-access mode wrote to the CDI directory: %v", names)
	}
}

func TestHyperlightDeviceAccess(t *testing.T) {
	s := accessScenario(t, true)
	p := s.registeredAs(AccessResource, 1, startBound)
	if !accessEndpointRe.MatchString(p.Endpoint) {
		t.Errorf("endpoint %q, want %s", p.Endpoint, accessEndpointRe)
	}
	if p.Request.Version != APIVersion || p.Options.PreStartRequired || p.Options.GetPreferredAllocationAvailable {
		t.Errorf("RegisterRequest version %q, options %+v; want v1beta1 and both options false", p.Request.Version, p.Options)
	}
	devs := s.devicesOf(AccessResource, 1, Healthy, eventBound)
	if devs[0].ID != AccessDeviceID {
		t.Errorf("device %q, want %q", devs[0].ID, AccessDeviceID)
	}
	if rs := s.k.Resources(); len(rs) != 1 {
		t.Errorf("registered resources %v, want only %s", rs, AccessResource)
	}

	a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID})
	if err != nil {
		s.fatalf("Allocate: %v", err)
	}
	checkAccessGrant(t, a.Full)
	_, err = s.k.Allocate(AccessResource, []string{"hyperlight-0"})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "hyperlight-0") {
		t.Errorf("Allocate of an unknown ID: %v, want InvalidArgument naming it", err)
	}

	// Stat only, no probe: a hypervisor that fails every probe changes nothing here.
	s.shim("HVSHIM_OPEN_ERRNO=EACCES", "HVSHIM_API_VERSION=11")
	if a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID}); err != nil {
		t.Errorf("Allocate with a failing hypervisor: %v (the bootstrap mode makes no usability claim)", err)
	} else {
		checkAccessGrant(t, a.Full)
	}
	if n := len(helperPids(s.d)); n != 0 {
		t.Errorf("device-access mode started %d probe helpers, want none", n)
	}
	s.clearShim()

	// The node goes away and comes back.
	removeKVM(t, s.node)
	s.devicesOf(AccessResource, 1, Unhealthy, eventBound)
	_, err = s.k.Allocate(AccessResource, []string{AccessDeviceID})
	unavailable(t, err, "/dev/kvm")
	start := time.Now()
	mknodKVM(t, s.node)
	s.devicesOf(AccessResource, 1, Healthy, backoffBound)
	t.Logf("Healthy again %v after the node came back", time.Since(start).Round(time.Millisecond))
	if a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID}); err != nil {
		t.Errorf("Allocate after the node came back: %v", err)
	} else {
		checkAccessGrant(t, a.Full)
	}
	if s.k.Current(AccessResource) != p {
		t.Errorf("the daemon re-registered; health changes go through the open stream")
	}
	noCDI(t, s.node)
}

// The bootstrap pod sees the host's nodes only under HOST_DEVICE_DIR; it grants /dev/kvm.
func TestHyperlightDeviceAccessHostDeviceDir(t *testing.T) {
	node := newNode(t, false)
	hostDir := filepath.Join(node.Root, "host-dev")
	if err := os.Mkdir(hostDir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(hostDir, "kvm")
	if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	s := prepare(t, node)
	s.startWith([]string{"--device-access"}, "HOST_DEVICE_DIR=/host-dev")
	p := s.registeredAs(AccessResource, 1, startBound)
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	if _, ok := s.d.WaitLog(eventBound, func(l string) bool {
		return strings.Contains(l, "hypervisor device found") && strings.Contains(l, "node="+host)
	}); !ok {
		t.Errorf("no log line saying the device was found at %s", host)
	}
	a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID})
	if err != nil {
		s.fatalf("Allocate: %v", err)
	}
	checkAccessGrant(t, a.Full)
	// The host node is the one watched.
	if err := os.Remove(host); err != nil {
		t.Fatal(err)
	}
	s.devicesOf(AccessResource, 1, Unhealthy, eventBound)
	if err := Mknod(host, KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	s.devicesOf(AccessResource, 1, Healthy, backoffBound)
	if s.k.Current(AccessResource) != p {
		t.Errorf("the daemon re-registered")
	}
	noCDI(t, node)
}

func TestHyperlightDeviceAccessNoNode(t *testing.T) {
	bin := daemonBinary(t)
	node := newNode(t, false)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, node.KVMPath()},
		{[]string{"HOST_DEVICE_DIR=/host-dev"}, filepath.Join(node.Root, "host-dev/kvm")},
	} {
		r, err := RunCommand(exitBound, bin, DaemonEnv(node.Root, tc.env...), "--device-access")
		if err != nil {
			t.Fatalf("%v\nstderr: %s", err, r.Stderr)
		}
		if r.Code != 1 || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("--device-access %v without a node: exit %d, stderr:\n%s\nwant exit 1 naming %s", tc.env, r.Code, r.Stderr, tc.want)
		}
	}
	if socks, _ := node.PluginSockets(); len(socks) != 0 {
		t.Errorf("a refused start left sockets %v", socks)
	}
	noCDI(t, node)
}

func TestHyperlightDeviceAccessHealthCheck(t *testing.T) {
	s := prepare(t, newNode(t, true))
	env := DaemonEnv(s.node.Root)
	probe := func(args ...string) int { return s.run(env, args...).Code }
	waitProbe := func(want int, bound time.Duration, args ...string) {
		t.Helper()
		var got int
		if !Poll(bound, func() bool { got = probe(args...); return got == want }) {
			s.fatalf("%s: exit %d within %v, want %d", strings.Join(args, " "), got, bound, want)
		}
	}
	if c := probe("--device-access", "--health-check"); c != 1 {
		t.Errorf("--device-access --health-check with no daemon: exit %d, want 1", c)
	}
	s.startWith([]string{"--device-access"})
	s.registeredAs(AccessResource, 1, startBound)
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	waitProbe(0, eventBound, "--device-access", "--health-check")
	waitProbe(0, eventBound, "--device-access", "--health-check=readiness")
	// The main mode's probe does not take the bootstrap plugin's socket for its own.
	for _, args := range [][]string{{"--health-check"}, {"--health-check=readiness"}} {
		if c := probe(args...); c != 1 {
			t.Errorf("%v with only the device-access daemon running: exit %d, want 1", args, c)
		}
	}
	// Node gone: not ready, still live.
	removeKVM(t, s.node)
	s.devicesOf(AccessResource, 1, Unhealthy, eventBound)
	waitProbe(1, eventBound, "--device-access", "--health-check=readiness")
	if c := probe("--device-access", "--health-check"); c != 0 {
		t.Errorf("device-access liveness while the node is gone: exit %d, want 0", c)
	}
	mknodKVM(t, s.node)
	s.devicesOf(AccessResource, 1, Healthy, backoffBound)
	waitProbe(0, eventBound, "--device-access", "--health-check=readiness")
	if _, err := s.d.Stop(exitBound); err != nil {
		t.Error(err)
	}
	if c := probe("--device-access", "--health-check"); c != 1 {
		t.Errorf("--device-access --health-check after the daemon stopped: exit %d, want 1", c)
	}
}

// Both DaemonSets on one node: two daemons, two resources, each on sockets of its own prefix.
func TestHyperlightBothModes(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.startWith(nil, "DEVICE_COUNT=3")
	access := s.startWith([]string{"--device-access"})
	hp := s.registeredAs(HyperlightResource, 1, startBound)
	ap := s.registeredAs(AccessResource, 1, startBound)
	s.devicesOf(HyperlightResource, 3, Healthy, eventBound)
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	if !endpointRe.MatchString(hp.Endpoint) {
		t.Errorf("hypervisor endpoint %q, want %s", hp.Endpoint, endpointRe)
	}
	if !accessEndpointRe.MatchString(ap.Endpoint) {
		t.Errorf("device-access endpoint %q, want %s", ap.Endpoint, accessEndpointRe)
	}
	allocateBoth := func(when string) {
		t.Helper()
		if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
			t.Errorf("%s: hypervisor Allocate: %v", when, err)
		} else {
			checkAllocation(t, a.Response)
			if len(a.Response.Devices) != 0 {
				t.Errorf("%s: the hypervisor answer carries DeviceSpecs %v (CDI only)", when, a.Response.Devices)
			}
		}
		if a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID}); err != nil {
			t.Errorf("%s: device-access Allocate: %v", when, err)
		} else {
			checkAccessGrant(t, a.Full)
		}
	}
	allocateBoth("side by side")
	env := DaemonEnv(s.node.Root)
	for _, args := range [][]string{{"--health-check=readiness"}, {"--device-access", "--health-check=readiness"}} {
		args := args
		var c int
		if !Poll(eventBound, func() bool { c = s.run(env, args...).Code; return c == 0 }) {
			t.Errorf("%v with both daemons running: exit %d, want 0", args, c)
		}
	}

	// A kubelet restart: both register again, each with a new socket of its own prefix.
	if err := s.k.Restart(); err != nil {
		t.Fatal(err)
	}
	hp2 := s.registeredAs(HyperlightResource, hp.Seq+1, eventBound)
	ap2 := s.registeredAs(AccessResource, ap.Seq+1, eventBound)
	s.devicesOf(HyperlightResource, 3, Healthy, eventBound)
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	if !endpointRe.MatchString(hp2.Endpoint) || !accessEndpointRe.MatchString(ap2.Endpoint) {
		t.Errorf("after the restart: endpoints %q and %q", hp2.Endpoint, ap2.Endpoint)
	}
	allocateBoth("after a kubelet restart")

	// One daemon stops: the other one's registration, stream and socket are untouched.
	if err := access.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := access.Wait(exitBound); err != nil || code != 0 {
		t.Errorf("device-access daemon after SIGTERM: exit %d %v, want 0", code, err)
	}
	if _, ok := ap2.WaitEnded(eventBound); !ok {
		t.Errorf("the device-access stream did not end when its daemon stopped")
	}
	socks, _ := s.node.PluginSockets()
	if fmt.Sprint(socks) != fmt.Sprint([]string{hp2.Endpoint}) {
		t.Errorf("plugin sockets %v, want only the hypervisor's %s", socks, hp2.Endpoint)
	}
	if ended, err := hp2.Ended(); ended || s.k.Current(HyperlightResource) != hp2 {
		t.Errorf("the hypervisor plugin's stream ended (%v) or it re-registered", err)
	}
	if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
		t.Errorf("hypervisor Allocate after the device-access daemon stopped: %v", err)
	} else {
		checkAllocation(t, a.Response)
	}
}
