package kubelet

// DRA (PLUGIN_API=dra) for kata: the real kata daemon on a fake VFIO host (legacy groups on two
// PCIe root complexes, a companion, a PCIe switch, a device without NUMA node) as a DRA driver,
// with grpc-go in the kubelet's place and the fake API server (drakubelet.go). The real
// scheduler's view of the same slices is make test-cluster's (tests/cluster/dra.sh).

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	drahealth "sdp/drahealthv1"
)

// kataDRANode: GPU 41:00.0 with its audio companion (group 10) and GPU 42:00.0 (group 11) on
// root ports of the root complex pci0000:40, NUMA 0; GPU c3:00.0 (group 12, an A100) below the
// switch whose upstream port is c1:00.0 on pci0000:c0, NUMA 1; an NVSwitch on pci0000:00's root
// bus without a NUMA node (group 13).
var kataDRANode = []PCIFunc{
	GPU("0000:41:00.0", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	Audio("0000:41:00.1", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	GPU("0000:42:00.0", 0).InGroup(11).Below("pci0000:40/0000:40:02.0"),
	GPU("0000:c3:00.0", 1).InGroup(12).Model(0x20b0).Below("pci0000:c0/0000:c0:01.0/0000:c1:00.0/0000:c2:00.0"),
	NVSwitch("0000:05:00.0", -1).InGroup(13),
}

// kataDRAWant: the devices as the slices must hold them (JSON as the API server keeps them).
var kataDRAWant = map[string]string{
	"gpu-0000-41-00-0": `{"attributes":{"deviceID":{"string":"0x2330"},"functions":{"int":1},"iommuGroup":{"int":10},` +
		`"model":{"string":"GH100_H100_SXM5_80GB"},"pcieSwitch":{"string":"pci0000:40"},"resource":{"string":"nvidia.com/gpu"},` +
		`"resource.kubernetes.io/numaNode":{"int":0},"resource.kubernetes.io/pciBusID":{"string":"0000:41:00.0"},` +
		`"resource.kubernetes.io/pcieRoot":{"string":"pci0000:40"},"type":{"string":"gpu"},"vendorID":{"string":"0x10de"},` +
		`"vfioBackend":{"string":"legacy"}},"name":"gpu-0000-41-00-0"}`,
	"gpu-0000-42-00-0": `{"attributes":{"deviceID":{"string":"0x2330"},"functions":{"int":1},"iommuGroup":{"int":11},` +
		`"model":{"string":"GH100_H100_SXM5_80GB"},"pcieSwitch":{"string":"pci0000:40"},"resource":{"string":"nvidia.com/gpu"},` +
		`"resource.kubernetes.io/numaNode":{"int":0},"resource.kubernetes.io/pciBusID":{"string":"0000:42:00.0"},` +
		`"resource.kubernetes.io/pcieRoot":{"string":"pci0000:40"},"type":{"string":"gpu"},"vendorID":{"string":"0x10de"},` +
		`"vfioBackend":{"string":"legacy"}},"name":"gpu-0000-42-00-0"}`,
	"gpu-0000-c3-00-0": `{"attributes":{"deviceID":{"string":"0x20b0"},"functions":{"int":1},"iommuGroup":{"int":12},` +
		`"model":{"string":"GA100_A100_SXM4_40GB"},"pcieSwitch":{"string":"0000:c1:00.0"},"resource":{"string":"nvidia.com/gpu"},` +
		`"resource.kubernetes.io/numaNode":{"int":1},"resource.kubernetes.io/pciBusID":{"string":"0000:c3:00.0"},` +
		`"resource.kubernetes.io/pcieRoot":{"string":"pci0000:c0"},"type":{"string":"gpu"},"vendorID":{"string":"0x10de"},` +
		`"vfioBackend":{"string":"legacy"}},"name":"gpu-0000-c3-00-0"}`,
	"nvswitch-0000-05-00-0": `{"attributes":{"deviceID":{"string":"0x2330"},"functions":{"int":1},"iommuGroup":{"int":13},` +
		`"model":{"string":"GH100_H100_SXM5_80GB"},"pcieSwitch":{"string":"pci0000:00"},"resource":{"string":"nvidia.com/nvswitch"},` +
		`"resource.kubernetes.io/pciBusID":{"string":"0000:05:00.0"},` +
		`"resource.kubernetes.io/pcieRoot":{"string":"pci0000:00"},"type":{"string":"nvswitch"},"vendorID":{"string":"0x10de"},` +
		`"vfioBackend":{"string":"legacy"}},"name":"nvswitch-0000-05-00-0"}`,
}

type kataDRAScenario struct {
	*kataScenario
	api   *FakeAPI
	extra []string
}

// newKataDRA: the node's tree, the fake API server and the daemon with PLUGIN_API=dra.
func newKataDRA(t *testing.T, fs []PCIFunc, extra ...string) *kataDRAScenario {
	s := newLegacyKata(t, true, fs...)
	f := NewFakeAPI()
	stub, err := StartAPIStub(f.Answer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	s.must(WriteServiceAccount(s.node.Root, "dra-token\n", stub.CAPEM))
	env := append([]string{"PLUGIN_API=dra", "NODE_NAME=" + draNode, "KUBERNETES_SERVICE_HOST=" + stub.Host,
		"KUBERNETES_SERVICE_PORT=" + stub.PortString(), "NO_PROXY=*", "no_proxy=*"}, extra...)
	s.startDaemon(env...)
	return &kataDRAScenario{kataScenario: s, api: f, extra: env}
}

func (s *kataDRAScenario) pluginDir() string {
	return filepath.Join(s.node.Root, "var/lib/kubelet/plugins", DRADriverKata)
}

func (s *kataDRAScenario) register() *DRAConn {
	s.t.Helper()
	c, err := DRARegister(s.node.Root, DRADriverKata, startBound)
	if err != nil {
		s.fatalf("%v", err)
	}
	s.t.Cleanup(c.Close)
	if c.Info.Type != "DRAPlugin" || c.Info.Name != DRADriverKata || filepath.Dir(c.Info.Endpoint) != s.pluginDir() {
		s.fatalf("GetInfo: %+v", c.Info)
	}
	return c
}

// devices: the published devices as JSON by name (nil before the first publication).
func (s *kataDRAScenario) devices() map[string]string {
	devs := s.api.Devices()
	if devs == nil {
		return nil
	}
	out := map[string]string{}
	for n, d := range devs {
		b, _ := json.Marshal(d)
		out[n] = string(b)
	}
	return out
}

// taint: the device's taints as JSON ("" for none or no such device).
func (s *kataDRAScenario) taint(name string) string {
	d := s.api.Devices()[name]
	if d == nil || d["taints"] == nil {
		return ""
	}
	b, _ := json.Marshal(d["taints"])
	return string(b)
}

// nextDeviceHealth waits for a report that gives device h.
func nextDeviceHealth(t *testing.T, ch <-chan *drahealth.NodeWatchResourcesResponse, device string, h drahealth.HealthStatus, bound time.Duration) *drahealth.DeviceHealth {
	t.Helper()
	end := time.After(bound)
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("the health stream ended waiting for %s %v", device, h)
			}
			for _, d := range r.Devices {
				if d.Device.PoolName == draNode && d.Device.DeviceName == device && d.Health == h {
					return d
				}
			}
		case <-end:
			t.Fatalf("no %v report for %s within %v", h, device, bound)
		}
	}
}

// Every IOMMU group is a device with the attributes of the node tree; a claim of two GPUs is
// prepared as their CDI devices in kata-dra.nvidia.com-gpu.yaml (the groups' nodes and the
// container node), checkpointed, answered again without the API, and unprepared. No
// device-plugin socket, no registration with the kubelet's device manager.
func TestDRAKataPublishPrepare(t *testing.T) {
	s := newKataDRA(t, kataDRANode)
	if !s.wait(startBound, func() bool { return len(s.devices()) == len(kataDRAWant) }) {
		s.fatalf("published devices: %v", s.devices())
	}
	got := s.devices()
	for name, want := range kataDRAWant {
		if got[name] != want {
			t.Errorf("device %s:\n%s\nwant\n%s", name, got[name], want)
		}
	}
	c := s.register()
	s.api.SetClaimDevices("ns", "pair", "uid-k1", DRADriverKata, draNode, "gpu-0000-41-00-0", "gpu-0000-c3-00-0")
	r := prepareClaim(t, c, "ns", "pair", "uid-k1")
	var ids []string
	for _, d := range r.Devices {
		if d.PoolName != draNode || strings.Join(d.RequestNames, ",") != "gpus" {
			t.Fatalf("prepared device: %+v", d)
		}
		ids = append(ids, d.CdiDeviceIds...)
	}
	if r.Error != "" || strings.Join(ids, " ") != "nvidia.com/gpu=gpu-0000-41-00-0 nvidia.com/gpu=gpu-0000-c3-00-0" {
		t.Fatalf("prepared: %+v (CDI IDs %v)", r, ids)
	}
	// the CDI devices: each group's node and the container node, by the stable names
	b, err := os.ReadFile(filepath.Join(s.node.CDIDir, "kata-dra.nvidia.com-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseCDIYAML(b)
	if err == nil {
		err = checkCDIRules(spec)
	}
	if err != nil || spec.Kind != KataGPU {
		t.Fatalf("kata-dra.nvidia.com-gpu.yaml: %v, %+v", err, spec)
	}
	nodes := map[string]string{}
	for _, d := range spec.Devices {
		var p []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			p = append(p, n.Path)
		}
		nodes[d.Name] = strings.Join(p, " ")
	}
	want := map[string]string{"gpu-0000-41-00-0": "/dev/vfio/10 /dev/vfio/vfio", "gpu-0000-42-00-0": "/dev/vfio/11 /dev/vfio/vfio",
		"gpu-0000-c3-00-0": "/dev/vfio/12 /dev/vfio/vfio"}
	if len(nodes) != len(want) {
		t.Errorf("spec devices %v, want %v", nodes, want)
	}
	for n, p := range want {
		if nodes[n] != p {
			t.Errorf("spec device %s: %q, want %q", n, nodes[n], p)
		}
	}
	if files := s.cdiFiles(); strings.Join(files, " ") != "kata-dra.nvidia.com-gpu.yaml kata-dra.nvidia.com-nvswitch.yaml" {
		t.Errorf("CDI files %v: want the two DRA specs only", files)
	}
	if n, _ := filepath.Glob(filepath.Join(s.node.KubeletDir, "kata-*")); len(n) != 0 || len(s.k.Resources()) != 0 {
		t.Errorf("device-plugin sockets %v, registrations %v: PLUGIN_API=dra serves neither", n, s.k.Resources())
	}
	ckpt := filepath.Join(s.pluginDir(), "claims", "uid-k1")
	if b, err := os.ReadFile(ckpt); err != nil || string(b) != "sdp-claim 1\ngpus\tgpu-0000-41-00-0\t\t0\ngpus\tgpu-0000-c3-00-0\t\t0\n" {
		t.Fatalf("checkpoint: %q, %v", b, err)
	}
	prepareClaim(t, c, "ns", "pair", "uid-k1")
	if n := s.api.ClaimGets("ns", "pair"); n != 1 {
		t.Errorf("the claim was fetched %d times for two prepares, want 1", n)
	}
	if e := unprepareClaim(t, c, "ns", "pair", "uid-k1"); e != "" {
		t.Fatalf("unprepare: %s", e)
	}
	if _, err := os.Stat(ckpt); !os.IsNotExist(err) {
		t.Fatalf("checkpoint after unprepare: %v", err)
	}
	// a device not on this node
	s.api.SetClaimDevices("ns", "ghost", "uid-k2", DRADriverKata, draNode, "gpu-0000-99-00-0")
	if r := prepareClaim(t, c, "ns", "ghost", "uid-k2"); !strings.Contains(r.Error, "gpu-0000-99-00-0") || !strings.Contains(r.Error, "no such device on this node") {
		t.Fatalf("prepare of an unknown device: %+v", r)
	}
}

// The companion bound to its host driver makes group 10 not viable: within one uevent its device
// is tainted NoSchedule (the others not), its health turns UNHEALTHY with the kernel's reason,
// and a claim on it is refused; bound back to vfio-pci, all of it goes.
func TestDRAKataCompanionTainted(t *testing.T) {
	s := newKataDRA(t, kataDRANode)
	c := s.register()
	if !s.wait(startBound, func() bool { return len(s.devices()) == len(kataDRAWant) }) {
		s.fatalf("published devices: %v", s.devices())
	}
	health := healthStream(t, c)
	nextDeviceHealth(t, health, "gpu-0000-41-00-0", drahealth.HealthStatus_HEALTHY, eventBound)
	s.must(s.tree.Bind("0000:41:00.1", "snd_hda_intel"))
	start := time.Now()
	kernelPCIUevent(t)
	if !s.wait(eventBound, func() bool { return s.taint("gpu-0000-41-00-0") != "" }) {
		s.fatalf("no taint within %v: %v", eventBound, s.devices())
	}
	t.Logf("group 10 tainted in its slice %v after the uevent", time.Since(start).Round(time.Millisecond))
	if tt := s.taint("gpu-0000-41-00-0"); !strings.Contains(tt, `"key":"kata.nvidia.com/unhealthy"`) || !strings.Contains(tt, `"effect":"NoSchedule"`) || !strings.Contains(tt, `"timeAdded":"`) {
		t.Fatalf("taint: %s", tt)
	}
	for _, other := range []string{"gpu-0000-42-00-0", "gpu-0000-c3-00-0", "nvswitch-0000-05-00-0"} {
		if tt := s.taint(other); tt != "" {
			t.Errorf("%s tainted too: %s", other, tt)
		}
	}
	h := nextDeviceHealth(t, health, "gpu-0000-41-00-0", drahealth.HealthStatus_UNHEALTHY, eventBound)
	if !strings.Contains(h.Message, "IOMMU group 10 is not viable: member 0000:41:00.1 is bound to snd_hda_intel") {
		t.Fatalf("unhealthy report's message: %q", h.Message)
	}
	s.api.SetClaimDevices("ns", "c1", "uid-k3", DRADriverKata, draNode, "gpu-0000-41-00-0")
	if r := prepareClaim(t, c, "ns", "c1", "uid-k3"); !strings.Contains(r.Error, "device gpu-0000-41-00-0 is unusable: IOMMU group 10 is not viable") {
		t.Fatalf("prepare on the tainted device: %+v", r)
	}
	s.must(s.tree.Bind("0000:41:00.1", ""))
	if !s.wait(eventBound, func() bool { return s.taint("gpu-0000-41-00-0") == "" }) {
		s.fatalf("the taint stayed after the rebind: %s", s.taint("gpu-0000-41-00-0"))
	}
	nextDeviceHealth(t, health, "gpu-0000-41-00-0", drahealth.HealthStatus_HEALTHY, eventBound)
	if r := prepareClaim(t, c, "ns", "c1", "uid-k3"); r.Error != "" || len(r.Devices) != 1 {
		t.Fatalf("prepare after the rebind: %+v", r)
	}
}

// A host bridge below a platform device (many arm64 hosts: /sys/devices/platform/<ctrl>/pci0000:00):
// its pcieRoot is still the host bridge's name, and a GPU on a root port's switch is the root complex.
func TestDRAKataPlatformRoot(t *testing.T) {
	s := newKataDRA(t, []PCIFunc{GPU("0002:01:00.0", -1).InGroup(20).Below("platform/4010000000.pcie/pci0002:00/0002:00:01.0")})
	if !s.wait(startBound, func() bool { return len(s.devices()) == 1 }) {
		s.fatalf("published devices: %v", s.devices())
	}
	d := s.api.Devices()["gpu-0002-01-00-0"]
	b, _ := json.Marshal(d["attributes"])
	for _, want := range []string{`"resource.kubernetes.io/pcieRoot":{"string":"pci0002:00"}`, `"pcieSwitch":{"string":"pci0002:00"}`,
		`"resource.kubernetes.io/pciBusID":{"string":"0002:01:00.0"}`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("attributes %s lack %s", b, want)
		}
	}
	if strings.Contains(string(b), "numaNode") {
		t.Errorf("attributes %s: a numaNode for numa_node -1", b)
	}
}

// No device matches the table: an empty pool is published and the DRA socket is Ready;
// RESOURCE_NAMING=sku is told to have no effect; an invalid PLUGIN_API exits 2.
func TestDRAKataEmptyAndSettings(t *testing.T) {
	s := newKataDRA(t, nil, "RESOURCE_NAMING=sku")
	s.register()
	if !s.wait(startBound, func() bool { return s.devices() != nil }) {
		// the helper deletes nothing and creates one slice with no devices
		s.fatalf("no slice published for an empty pool")
	}
	if d := s.devices(); len(d) != 0 {
		t.Fatalf("devices %v, want none", d)
	}
	// the probe as the chart runs it: in the daemon's container, with its environment
	var r Result
	if !Poll(startBound, func() bool { r = s.run(s.env, "--health-check=readiness"); return r.Code == 0 }) {
		s.fatalf("--health-check=readiness: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if r = s.run(s.env, "--health-check"); r.Code != 0 {
		t.Fatalf("--health-check: exit %d, stderr %q", r.Code, r.Stderr)
	}
	s.waitLogMsg(eventBound, "warn", "RESOURCE_NAMING=sku has no effect with PLUGIN_API=dra")

	b := newLegacyKata(t, true, kataDRANode...)
	b.startDaemon("PLUGIN_API=yes")
	if code := b.waitExit(exitBound); code != 2 || !strings.Contains(b.d.Log(), `PLUGIN_API=\"yes\" is neither device-plugin nor dra`) {
		t.Fatalf("exit %d, log: %s", code, b.d.Log())
	}
	names := b.cdiFiles()
	sort.Strings(names)
	if len(names) != 0 {
		t.Fatalf("CDI files written by a refused configuration: %v", names)
	}
}
