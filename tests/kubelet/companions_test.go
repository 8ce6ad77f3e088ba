package kubelet

// Scenarios: the companion devices (COMPANIONS, hyperlight/companion.h) beside the hypervisor:
// each its own resource, CDI spec, probe and Allocate; their nodes missing, replaced, of
// another number, a symlink, or without a driver; the pod layout's host node; the bootstrap
// grant; the configuration the daemon refuses; readiness over every resource.

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// companionEnv enables every companion with counts 2, 3 and 4 (the hypervisor's: 3).
var companionEnv = []string{"DEVICE_COUNT=3", "COMPANIONS=vhost-vsock, tun,vhost-net", "TUN_COUNT=2",
	"VHOST_NET_COUNT=3", "VHOST_VSOCK_COUNT=4"}

var companionCounts = map[string]int{"tun": 2, "vhost-net": 3, "vhost-vsock": 4}

func companionResource(c Companion) string { return "hyperlight.dev/" + c.Name }

// companionNode: a node with /dev/kvm and every companion's node.
func companionNode(t *testing.T) *Node {
	n := newNode(t, true)
	for _, c := range Companions {
		if err := n.MknodCompanion(c); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// checkCompanionAllocation: the one CDI device <resource>=<name> and its annotation.
func checkCompanionAllocation(t *testing.T, c Companion, a *Allocation) {
	t.Helper()
	want := companionResource(c) + "=" + c.Name
	r := a.Response
	if len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != want {
		t.Errorf("%s: cdi_devices %v, want [%s]", c.Name, r.CdiDevices, want)
	}
	key := "cdi.k8s.io/hyperlight.dev-" + c.Name + "_"
	found := 0
	for k, v := range r.Annotations {
		if strings.HasPrefix(k, key) && v == want {
			found++
		}
	}
	if found != 1 || len(r.Annotations) != 1 {
		t.Errorf("%s: annotations %v, want one %s...=%s", c.Name, r.Annotations, key, want)
	}
	if len(r.Devices) != 0 || len(r.Mounts) != 0 || len(r.Envs) != 0 {
		t.Errorf("%s: the answer carries more than the CDI device: %v %v %v", c.Name, r.Devices, r.Mounts, r.Envs)
	}
}

// checkCompanionSpec: <root>/var/run/cdi/hyperlight-<name>.json names the node with the
// workload's owner and mode, and nothing else.
func checkCompanionSpec(t *testing.T, n *Node, c Companion, file, kind string, uid, gid, mode uint32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.CDIDir, file))
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	spec, err := ParseCDI(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if spec.Kind != kind || len(spec.Devices) != 1 || spec.Devices[0].Name != c.Name || spec.ContainerEdits != nil {
		t.Fatalf("%s: kind %q devices %+v, want kind %s and one device %s", file, spec.Kind, spec.Devices, kind, c.Name)
	}
	e := spec.Devices[0].ContainerEdits
	if len(e.DeviceNodes) != 1 || len(e.Env) != 0 || e.Mounts != nil || e.Hooks != nil {
		t.Fatalf("%s: edits %+v, want exactly one device node", file, e)
	}
	d := e.DeviceNodes[0]
	if d.Path != c.Path || d.Type != "c" || d.Permissions != "rw" || d.FileMode == nil || *d.FileMode != mode ||
		d.UID == nil || *d.UID != uid || d.GID == nil || *d.GID != gid || d.HostPath != "" || d.Major != nil {
		t.Errorf("%s: node %+v, want %s c rw mode %o owner %d:%d", file, d, c.Path, mode, uid, gid)
	}
	st, err := os.Stat(filepath.Join(n.CDIDir, file))
	if err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v (%v), want 0644", file, st.Mode(), err)
	}
}

func TestCompanionsServed(t *testing.T) {
	s := prepare(t, companionNode(t))
	s.startDaemon(append(companionEnv, "DEVICE_UID=1000", "DEVICE_GID=2000", "DEVICE_MODE=0600")...)
	s.ready(3)
	for _, c := range Companions {
		res := companionResource(c)
		s.registeredAs(res, 1, startBound)
		devs := s.devicesOf(res, companionCounts[c.Name], Healthy, eventBound)
		var ids []string
		for _, d := range devs {
			ids = append(ids, d.ID)
		}
		var want []string
		for i := 0; i < companionCounts[c.Name]; i++ {
			want = append(want, fmt.Sprintf("%s-%d", c.Name, i))
		}
		if !reflect.DeepEqual(ids, want) {
			t.Errorf("%s: IDs %v, want %v", res, ids, want)
		}
		if waitCount(s.d, 1, `msg="device usable"`, "resource="+res, "device="+c.Path) < 1 {
			t.Errorf("%s: no \"device usable\" line naming its node", res)
		}
		checkCompanionSpec(t, s.node, c, "hyperlight-"+c.Name+".json", res, 1000, 2000, 0o600)
		a, err := s.k.Allocate(res, want[len(want)-2:])
		if err != nil {
			t.Errorf("Allocate %s: %v", res, err)
			continue
		}
		checkCompanionAllocation(t, c, a)
	}
	// the probes' own results, from the stand-in's features
	for _, w := range []string{`probe="tun features 0x7173 (tap, tun, no_pi, vnet_hdr, multi_queue)"`,
		`probe="vhost-net features 0x`, `probe="vhost-vsock features 0x`} {
		if waitCount(s.d, 1, w) < 1 {
			t.Errorf("no log line with %s", w)
		}
	}
	// the hypervisor is unchanged beside them
	s.allocateOK("beside the companions")
	r := s.run(s.env, "--health-check=readiness")
	if r.Code != 0 {
		t.Errorf("--health-check=readiness with every resource healthy: exit %d, %s", r.Code, r.Stderr)
	}
}

// companionFault: one fault of c's node, the Unhealthy it gives (every device, the reason in the
// log and in Allocate's UNAVAILABLE), and the repair back to Healthy.
type companionFault struct {
	name   string
	break_ func(n *Node, path string) error
	reason string // %s: the node's path
	repair func(n *Node, path string) error
	watch  bool // seen by the watch at once (a shim fault is seen at the next check: Allocate's)
}

func replaceWith(path string, make func(tmp string) error) error {
	tmp := filepath.Join(filepath.Dir(path), ".new")
	if err := make(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func companionFaults(c Companion) []companionFault {
	remake := func(n *Node, p string) error {
		return replaceWith(p, func(tmp string) error { return Mknod(tmp, c.Major, c.Minor) })
	}
	module := strings.ReplaceAll(c.Name, "-", "_")
	return []companionFault{
		{"node removed", func(n *Node, p string) error { return os.Remove(p) }, "%s missing",
			func(n *Node, p string) error { return Mknod(p, c.Major, c.Minor) }, true},
		{"module unloaded", func(n *Node, p string) error {
			return n.SetShim(c.ShimKnob + "_OPEN_ERRNO=ENODEV")
		}, "ENODEV opening %s (no driver: module " + module + " not loaded?)",
			func(n *Node, p string) error { return n.ClearShim() }, false},
		{"regular file", func(n *Node, p string) error {
			return replaceWith(p, func(tmp string) error { return os.WriteFile(tmp, nil, 0o666) })
		}, "%s is not a character device", remake, true},
		{"symlink to the right node", func(n *Node, p string) error {
			real := filepath.Join(n.Root, "real-"+c.Name)
			if err := Mknod(real, c.Major, c.Minor); err != nil {
				return err
			}
			return replaceWith(p, func(tmp string) error { return os.Symlink(real, tmp) })
		}, "%s is a symbolic link, not the device node", remake, true},
		{"another device number", func(n *Node, p string) error {
			return replaceWith(p, func(tmp string) error { return Mknod(tmp, c.Major, c.Minor+1) })
		}, fmt.Sprintf("%%s has device number %d:%d, expected %d:%d", c.Major, c.Minor+1, c.Major, c.Minor), remake, true},
	}
}

func TestCompanionFaults(t *testing.T) {
	for _, c := range Companions {
		c := c
		t.Run(c.Name, func(t *testing.T) {
			s := prepare(t, companionNode(t))
			s.startDaemon("DEVICE_COUNT=3", "COMPANIONS="+c.Name)
			s.ready(3)
			res := companionResource(c)
			p := s.registeredAs(res, 1, startBound)
			s.devicesOf(res, 2000, Healthy, eventBound)
			path := s.node.CompanionPath(c)
			for _, f := range companionFaults(c) {
				if err := f.break_(s.node, path); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				reason := strings.ReplaceAll(f.reason, "%s", path)
				start := time.Now()
				if f.watch {
					s.devicesOf(res, 2000, Unhealthy, watchBound)
					t.Logf("%s: Unhealthy after %v", f.name, time.Since(start).Round(time.Millisecond))
				}
				_, err := s.k.Allocate(res, []string{c.Name + "-0"})
				unavailable(t, err, c.Path+" is not usable", reason)
				s.devicesOf(res, 2000, Unhealthy, eventBound)
				if waitCount(s.d, 1, "device unusable", "resource="+res, reason) < 1 {
					t.Errorf("%s: no warning with the reason %q", f.name, reason)
				}
				// the hypervisor is not touched by a companion's fault
				s.devicesOf(HyperlightResource, 3, Healthy, eventBound)
				if err := f.repair(s.node, path); err != nil {
					t.Fatalf("%s repair: %v", f.name, err)
				}
				start = time.Now()
				if f.watch {
					s.devicesOf(res, 2000, Healthy, watchBound)
					t.Logf("%s repaired: Healthy after %v", f.name, time.Since(start).Round(time.Millisecond))
				}
				if a, err := s.k.Allocate(res, []string{c.Name + "-1"}); err != nil {
					t.Errorf("%s repaired: Allocate %v", f.name, err)
				} else {
					checkCompanionAllocation(t, c, a)
				}
				s.devicesOf(res, 2000, Healthy, eventBound)
			}
			if s.k.Current(res) != p {
				t.Errorf("%s re-registered; health changes go through the open stream", res)
			}
		})
	}
}

// A companion whose node is missing at start (module not loaded): the daemon starts, the
// hypervisor is served, the companion registered Unhealthy; the node made (modprobe): Healthy
// through the watch, well before the periodic check.
func TestCompanionMissingAtStart(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.startDaemon("DEVICE_COUNT=3", "COMPANIONS=tun,vhost-net", "TUN_COUNT=1", "VHOST_NET_COUNT=1")
	s.ready(3)
	for _, c := range Companions[:2] {
		res := companionResource(c)
		s.registeredAs(res, 1, startBound)
		s.devicesOf(res, 1, Unhealthy, eventBound)
		if waitCount(s.d, 1, "device unusable", "resource="+res, s.node.CompanionPath(c)+" missing") < 1 {
			t.Errorf("%s: no warning naming the missing node", res)
		}
	}
	r := s.run(s.env, "--health-check=readiness")
	if r.Code == 0 {
		t.Errorf("--health-check=readiness with companions Unhealthy: exit 0, want not ready")
	}
	for _, c := range Companions[:2] {
		if err := s.node.MknodCompanion(c); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		s.devicesOf(companionResource(c), 1, Healthy, watchBound)
		t.Logf("%s: Healthy %v after its node was made", c.Name, time.Since(start).Round(time.Millisecond))
	}
	if !Poll(eventBound, func() bool { return s.run(s.env, "--health-check=readiness").Code == 0 }) {
		t.Errorf("--health-check=readiness still failing with every resource Healthy")
	}
}

// The pod layout: the companion's node in the pod's /dev and the host's under HOST_DEVICE_DIR;
// the host's going, a symlink or another number there, each Unhealthy with the host's reason.
func TestCompanionHostDeviceDir(t *testing.T) {
	c := Companions[0] // tun: a node in a subdirectory (/dev/net)
	node := companionNode(t)
	host := filepath.Join(node.Root, "host-dev", "net", "tun")
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Mknod(host, c.Major, c.Minor); err != nil {
		t.Fatal(err)
	}
	if err := Mknod(filepath.Join(node.Root, "host-dev", "kvm"), KVMMajor, KVMMinor); err != nil {
		t.Fatal(err)
	}
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev", "COMPANIONS=tun", "TUN_RESOURCE=tap")
	res := "hyperlight.dev/tap"
	s.ready(3)
	s.registeredAs(res, 1, startBound)
	s.devicesOf(res, 2000, Healthy, eventBound)
	checkCompanionSpec(t, node, c, "hyperlight-tap.json", res, 65534, 65534, 0o660)
	steps := []struct {
		name   string
		do     func() error
		health string
		reason string
	}{
		{"host node removed", func() error { return os.Remove(host) }, Unhealthy, "host device " + host + " missing"},
		{"host node back", func() error { return Mknod(host, c.Major, c.Minor) }, Healthy, ""},
		{"host node a symlink", func() error {
			return replaceWith(host, func(tmp string) error { return os.Symlink(node.CompanionPath(c), tmp) })
		}, Unhealthy, "host device " + host + " is a symbolic link, not the device node"},
		{"host node made again", func() error {
			return replaceWith(host, func(tmp string) error { return Mknod(tmp, c.Major, c.Minor) })
		}, Healthy, ""},
		{"host directory removed", func() error { return os.RemoveAll(filepath.Dir(host)) }, Unhealthy,
			"host device " + host + " missing"},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		start := time.Now()
		s.devicesOf(res, 2000, st.health, watchBound)
		t.Logf("%s: %s after %v", st.name, st.health, time.Since(start).Round(time.Millisecond))
		if st.reason != "" && waitCount(s.d, 1, "device unusable", "resource="+res, st.reason) < 1 {
			t.Errorf("%s: no warning with %q", st.name, st.reason)
		}
	}
}

// The real kernel's answers, with the stand-in only for the hypervisor: a mknod'ed tun node
// reaches the host's tun driver (every Linux this runs on has it), a vhost-net node the host's
// vhost_net or, without that driver, ENODEV: the daemon says which it met.
func TestCompanionsRealKernel(t *testing.T) {
	s := prepare(t, companionNode(t))
	s.startDaemon("DEVICE_COUNT=3", "COMPANIONS=tun,vhost-net", "TUN_COUNT=1", "VHOST_NET_COUNT=1",
		"HVSHIM_TUN=", "HVSHIM_VHOST_NET=")
	s.ready(3)
	tun, vnet := Companions[0], Companions[1]
	fd, err := syscall.Open(s.node.CompanionPath(tun), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("this machine cannot open a tun node (%v): the test needs the tun driver", err)
	}
	syscall.Close(fd)
	s.registeredAs(companionResource(tun), 1, startBound)
	s.devicesOf(companionResource(tun), 1, Healthy, eventBound)
	if waitCount(s.d, 1, `msg="device usable"`, "resource=hyperlight.dev/tun", `probe="tun features 0x`, "tap") < 1 {
		t.Errorf("no probe line with the kernel's tun features")
	}
	s.registeredAs(companionResource(vnet), 1, startBound)
	fd, err = syscall.Open(s.node.CompanionPath(vnet), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err == nil {
		syscall.Close(fd)
		s.devicesOf(companionResource(vnet), 1, Healthy, eventBound)
		if waitCount(s.d, 1, `msg="device usable"`, `probe="vhost-net features 0x`) < 1 {
			t.Errorf("no probe line with the kernel's vhost-net features")
		}
		t.Logf("this kernel has vhost_net: Healthy")
		return
	}
	if err != syscall.ENODEV {
		t.Fatalf("open of a 10:238 node: %v, want success or ENODEV", err)
	}
	s.devicesOf(companionResource(vnet), 1, Unhealthy, eventBound)
	want := "ENODEV opening " + s.node.CompanionPath(vnet) + " (no driver: module vhost_net not loaded?)"
	if waitCount(s.d, 1, "device unusable", want) < 1 {
		t.Errorf("no warning %q", want)
	}
	t.Logf("this kernel has no vhost_net: Unhealthy, %s", want)
}

// The configuration the daemon refuses: exit 1 before anything is served, one error line.
func TestCompanionConfigRefused(t *testing.T) {
	node := companionNode(t)
	bin := daemonBinary(t)
	cases := []struct {
		env  []string
		want string
	}{
		{[]string{"COMPANIONS=tun,kvm"}, `\"kvm\" is not a companion device (valid: tun, vhost-net, vhost-vsock)`},
		{[]string{"COMPANIONS=tun,,vhost-net"}, "has an empty item"},
		{[]string{"COMPANIONS=tun,tun"}, "tun is listed twice"},
		{[]string{"COMPANIONS=tun", "PLUGIN_API=dra"}, "not with PLUGIN_API=dra"},
		{[]string{"COMPANIONS=tun", "TUN_RESOURCE=hypervisor"}, "hyperlight.dev/hypervisor is the plugin's own resource"},
		{[]string{"COMPANIONS=tun", "TUN_RESOURCE=Tap"}, `TUN_RESOURCE=\"Tap\" is not a resource name`},
		{[]string{"COMPANIONS=tun", "TUN_COUNT=0"}, "TUN_COUNT=0 is out of range"},
		{[]string{"COMPANIONS=tun,vhost-net", "VHOST_NET_RESOURCE=tun"}, "tun and vhost-net are both advertised as hyperlight.dev/tun"},
	}
	for _, c := range cases {
		r, err := RunCommand(exitBound, bin, DaemonEnv(node.Root, c.env...))
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if r.Code != 1 || !strings.Contains(r.Stderr, `msg="invalid configuration"`) || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 1 and an invalid configuration line with %q", c.env, r.Code, r.Stderr, c.want)
		}
		if socks, _ := node.PluginSockets(); len(socks) != 0 {
			t.Errorf("%v: sockets %v left", c.env, socks)
		}
	}
}

// The bootstrap grant: /dev/kvm and each companion's node that is on the host now; one missing
// is left out with a warning naming it, and granted again once it is back.
func TestCompanionsDeviceAccessGrant(t *testing.T) {
	node := newNode(t, false)
	hostDev := filepath.Join(node.Root, "host-dev")
	for _, p := range []string{"kvm", "net/tun", "vhost-vsock"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(hostDev, p)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(Mknod(filepath.Join(hostDev, "kvm"), KVMMajor, KVMMinor))
	must(Mknod(filepath.Join(hostDev, "net/tun"), 10, 200))
	must(Mknod(filepath.Join(hostDev, "vhost-vsock"), 10, 242)) // not the vsock device
	s := prepare(t, node)
	s.startWith([]string{"--device-access"}, "HOST_DEVICE_DIR=/host-dev", "COMPANIONS=tun,vhost-net,vhost-vsock")
	s.registeredAs(AccessResource, 1, startBound)
	s.devicesOf(AccessResource, 1, Healthy, eventBound)
	paths := func() []string {
		a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		var got []string
		for _, d := range a.Response.Devices {
			if d.ContainerPath != d.HostPath || d.Permissions != "rw" {
				t.Errorf("DeviceSpec %+v, want the same path both sides, rw", d)
			}
			got = append(got, d.HostPath)
		}
		if len(a.Response.CdiDevices) != 0 || len(a.Response.Annotations) != 0 {
			t.Errorf("the grant carries CDI: %v %v", a.Response.CdiDevices, a.Response.Annotations)
		}
		return got
	}
	if got, want := paths(), []string{"/dev/kvm", "/dev/net/tun"}; !reflect.DeepEqual(got, want) {
		t.Errorf("granted %v, want %v", got, want)
	}
	for _, w := range []string{"device=/dev/vhost-net", "device=/dev/vhost-vsock", "has device number 10:242, expected 10:241"} {
		if waitCount(s.d, 1, `msg="companion not granted"`, w) < 1 {
			t.Errorf("no warning \"companion not granted\" with %s", w)
		}
	}
	must(Mknod(filepath.Join(hostDev, "vhost-net"), 10, 238))
	if got, want := paths(), []string{"/dev/kvm", "/dev/net/tun", "/dev/vhost-net"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after vhost-net came: granted %v, want %v", got, want)
	}
	noCDI(t, node)
}

// The pod layout with the companion's node on the host but not in the plugin's container (its
// pod made before the module was loaded, or granted by a bootstrap plugin without COMPANIONS):
// Unhealthy with a reason that says only a new pod mends it; the host's node going makes the
// plain "missing" reason again, and the container's node made (what a new pod would have):
// Healthy.
func TestCompanionNotGranted(t *testing.T) {
	c := Companions[1] // vhost-net
	node := newNode(t, true)
	host := filepath.Join(node.Root, "host-dev")
	for _, p := range []string{"kvm", "vhost-net"} {
		if err := os.MkdirAll(host, 0o755); err != nil {
			t.Fatal(err)
		}
		maj, min := uint32(KVMMajor), uint32(KVMMinor)
		if p == "vhost-net" {
			maj, min = c.Major, c.Minor
		}
		if err := Mknod(filepath.Join(host, p), maj, min); err != nil {
			t.Fatal(err)
		}
	}
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev", "COMPANIONS=vhost-net", "VHOST_NET_COUNT=1")
	s.ready(3)
	res := companionResource(c)
	s.registeredAs(res, 1, startBound)
	s.devicesOf(res, 1, Unhealthy, eventBound)
	want := "/dev/vhost-net is not in this container but the host has it: the pod's device grant lacks it " +
		"(the pod was made before the node was there, or granted by a bootstrap plugin without COMPANIONS): recreate the pod"
	if waitCount(s.d, 1, "device unusable", "resource="+res, want) < 1 {
		t.Errorf("no warning %q", want)
	}
	_, err := s.k.Allocate(res, []string{"vhost-net-0"})
	unavailable(t, err, "recreate the pod")
	// the host's node gone too: the container's node is simply missing
	if err := os.Remove(filepath.Join(host, "vhost-net")); err != nil {
		t.Fatal(err)
	}
	_, err = s.k.Allocate(res, []string{"vhost-net-0"})
	unavailable(t, err, s.node.CompanionPath(c)+" missing")
	// both there, as in a new pod: Healthy
	if err := Mknod(filepath.Join(host, "vhost-net"), c.Major, c.Minor); err != nil {
		t.Fatal(err)
	}
	if err := node.MknodCompanion(c); err != nil {
		t.Fatal(err)
	}
	s.devicesOf(res, 1, Healthy, watchBound)
}
