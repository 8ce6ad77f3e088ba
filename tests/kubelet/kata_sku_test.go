package kubelet

// RESOURCE_NAMING=sku: one resource per PCI model (vendor, device ID), named from pci.ids as
// kata/sku.h sanitises it, with its own socket, registration and CDI spec; the Kata contract
// (CDI kind = resource name, device names = IDs "0".."n-1" in PCI order) per model. The node
// mixes two GPU models, NVSwitches, a model whose pci.ids name two device IDs share (each gets
// its ID appended), a device ID pci.ids does not have (the fallback name) and a NIC.

import (
	"bytes"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	api "sdp/v1beta1"
)

const kataSKUEnv = "RESOURCE_NAMING=sku"

// The models of the sku node and their names (pci.ids: Debian's pci.ids package, as built).
var kataSKUModels = map[uint16]string{
	0x2330: "nvidia.com/GH100_H100_SXM5_80GB",      // "GH100[H100 SXM5 80GB]"
	0x20b0: "nvidia.com/GA100_A100_SXM4_40GB",      // "GA100 [A100 SXM4 40GB]"
	0x1af1: "nvidia.com/GA100_A100_NVSwitch",       // "GA100 [A100 NVSwitch]"
	0x20b1: "nvidia.com/GA100_A100_PCIe_40GB_20b1", // "GA100 [A100 PCIe 40GB]", as 0x20f1 is
	0x2f00: "nvidia.com/pci_10de_2f00",             // not in pci.ids
}

// kataSKUNode: 3 H100, 2 A100 SXM4 (all 3D controllers), 2 NVSwitches, one A100 PCIe, one
// unknown GPU and a NIC, created out of PCI order.
var kataSKUNode = []kataEntry{
	{3, GPU("0001:01:00.0", 1).Model(0x2330)},
	{0, GPU("0000:c1:00.0", 1).Model(0x2330)},
	{6, NVSwitch("0000:05:00.0", -1).Model(0x1af1)},
	{4, PCIFunc{BDF: "0000:01:00.0", Vendor: 0x15b3, Class: 0x020700, NUMA: 0, Device: 0x101d}},
	{5, GPU("0000:42:00.0", 0).Model(0x2330)},
	{7, GPU("0000:43:00.0", 0).Model(0x20b0)},
	{2, NVSwitch("0000:06:00.0", 0).Model(0x1af1)},
	{1, GPU("0000:41:00.0", 0).Model(0x20b0)},
	{8, GPU("0000:81:00.0", 1).Model(0x20b1)},
	{9, GPU("0000:82:00.0", 1).Model(0x2f00)},
}

// kataSKUExpect: per model resource, ordered by PCI address, IDs "0".."n-1".
func kataSKUExpect(t *testing.T, entries []kataEntry) map[string][]kataDev {
	t.Helper()
	out := map[string][]kataDev{}
	for _, e := range entries {
		if kataResourceOf(e.F) == "" {
			continue
		}
		r, ok := kataSKUModels[e.F.deviceID()]
		if !ok {
			t.Fatalf("test bug: no name for model %04x", e.F.deviceID())
		}
		out[r] = append(out[r], kataDev{N: e.N, BDF: e.F.BDF, NUMA: e.F.NUMA})
	}
	return kataNumber(out)
}

// kataSKUDevice is the device ID of a sku resource.
func kataSKUDevice(resource string) uint16 {
	for id, r := range kataSKUModels {
		if r == resource {
			return id
		}
	}
	return 0
}

// kataRegs counts every resource's registrations so far (before a daemon starts).
func (s *kataScenario) kataRegs() map[string]int {
	out := map[string]int{}
	for _, r := range s.k.Resources() {
		out[r] = s.k.Registrations(r)
	}
	return out
}

// kataSKUReady waits until exactly the expected resources registered once more than before
// (kataRegs), each on its own socket of the shared prefix KataSKUPrefix, and list their devices; no other resource
// registered.
func (s *kataScenario) kataSKUReady(want map[string][]kataDev, before map[string]int) map[string]*Plugin {
	s.t.Helper()
	ps := map[string]*Plugin{}
	sockets := map[string]string{}
	for _, r := range keys(want) {
		p := s.kataRegistered(r, before[r]+1, startBound)
		s.kataDevices(r, eventBound, func(d []*api.Device) error { return checkKataDevices(d, want[r]) })
		if !IsSocketOf(p.Endpoint, KataSKUPrefix) {
			s.t.Errorf("%s registered endpoint %q, want %s-<n>.sock", r, p.Endpoint, KataSKUPrefix)
		}
		if other, dup := sockets[p.Endpoint]; dup {
			s.t.Errorf("%s and %s registered the same socket %s", r, other, p.Endpoint)
		}
		sockets[p.Endpoint] = r
		ps[r] = p
	}
	for _, r := range s.k.Resources() {
		if n := s.k.Registrations(r); want[r] == nil && n != before[r] {
			s.t.Errorf("resource %s registered, want only %v", r, keys(want))
		}
	}
	return ps
}

func TestKataSKUNaming(t *testing.T) {
	s := newKata(t)
	s.add(kataSKUNode...)
	want := kataSKUExpect(t, kataSKUNode)
	if got := fmt.Sprint(want["nvidia.com/GH100_H100_SXM5_80GB"]); got != "[{0 5 0000:42:00.0 0} {1 0 0000:c1:00.0 1} {2 3 0001:01:00.0 1}]" {
		t.Fatalf("test bug: expected H100s %s", got)
	}
	s.startDaemon(kataSKUEnv)
	ps := s.kataSKUReady(want, nil)
	if len(ps) != 5 {
		t.Fatalf("test bug: %d resources", len(ps))
	}

	// One CDI spec per model, checked against the CDI rules; nothing else in the directory.
	var files []string
	for r, devs := range want {
		s.checkKataSpec(r, devs)
		files = append(files, KataSpecFile(r))
	}
	sort.Strings(files)
	if got := s.cdiFiles(); !reflect.DeepEqual(got, files) {
		t.Errorf("CDI directory holds %v, want %v", got, files)
	}

	// Allocate answers the model's CDI names; the annotation key is the model's plugin name.
	for r, ids := range map[string][]string{
		"nvidia.com/GH100_H100_SXM5_80GB": {"2", "0"},
		"nvidia.com/GA100_A100_SXM4_40GB": {"1"},
		"nvidia.com/GA100_A100_NVSwitch":  {"0", "1"},
		"nvidia.com/pci_10de_2f00":        {"0"},
	} {
		a, err := s.k.Allocate(r, ids)
		if err != nil {
			t.Errorf("Allocate %s %v: %v", r, ids, err)
			continue
		}
		key := fmt.Sprintf("cdi.k8s.io/kata.sku-10de-%04x_%s", kataSKUDevice(r), ids[0])
		checkKataAllocationKey(t, a.Response, r, key, ids)
	}
	// An ID of another model is unknown here.
	if _, err := s.k.Allocate("nvidia.com/GA100_A100_SXM4_40GB", []string{"2"}); err == nil {
		t.Errorf("Allocate of ID 2 on a model with 2 devices succeeded")
	}

	// The start-up line lists every resource with its count, by device ID.
	s.waitLogMsg(eventBound, "info", "resource naming", "naming=sku ",
		`resources="nvidia.com/GA100_A100_NVSwitch=2 nvidia.com/GA100_A100_SXM4_40GB=2 `+
			`nvidia.com/GA100_A100_PCIe_40GB_20b1=1 nvidia.com/GH100_H100_SXM5_80GB=3 nvidia.com/pci_10de_2f00=1"`,
		"not_in_pci_ids=10de:2f00")
	for r, devs := range want {
		s.waitLogMsg(eventBound, "info", "advertising", "resource="+r+" ", fmt.Sprintf("devices=%d", len(devs)))
	}
	// The probes see the sku sockets (they are not in the table's socket names).
	s.waitProbe(0, eventBound, "--health-check=readiness")
	s.waitProbe(0, eventBound, "--health-check")
	if socks, _ := s.node.PluginSockets(); len(socks) != len(want) {
		t.Errorf("plugin sockets %v, want one per model", socks)
	}
}

// In sku mode a device without a readable "device" file is skipped, saying why; in table mode
// the file is not read.
func TestKataSKUDeviceFile(t *testing.T) {
	for _, mode := range []string{"sku", "table"} {
		t.Run(mode, func(t *testing.T) {
			s := newKata(t)
			gpus := []kataEntry{{0, GPU("0000:41:00.0", 0)}, {1, GPU("0000:42:00.0", 0)}}
			s.add(gpus...)
			s.must(s.tree.RemovePCIAttr("0000:42:00.0", "device"))
			s.startDaemon("RESOURCE_NAMING=" + mode)
			if mode == "table" {
				s.kataReady(kataExpect(gpus))
				return
			}
			s.kataSKUReady(kataSKUExpect(t, gpus[:1]), nil)
			s.waitLogMsg(eventBound, "warn", "skipping VFIO device", "device=vfio1 ", "/device is missing")
		})
	}
}

func TestKataSKUInvalidNaming(t *testing.T) {
	for _, v := range []string{"", "SKU", "per-model"} {
		s := newKata(t)
		s.add(kataSKUNode[:2]...)
		s.startDaemon("RESOURCE_NAMING=" + v)
		if code := s.waitExit(exitBound); code != 2 {
			t.Errorf("RESOURCE_NAMING=%q: exit %s, want 2", v, s.d.ExitDescription())
		}
		l := s.waitLogMsg(eventBound, "error", "invalid configuration", "RESOURCE_NAMING=")
		if !strings.Contains(l, "is not table or sku") {
			t.Errorf("error line %q does not say what is accepted", l)
		}
		if n := len(s.k.Resources()); n != 0 || len(s.cdiFiles()) != 0 {
			t.Errorf("RESOURCE_NAMING=%q: %d resources registered, CDI files %v; want nothing", v, n, s.cdiFiles())
		}
	}
}

// The life cycle. A device of a model not served yet is served at once beside the others: a
// new resource, no restart, the other registrations untouched. Any other change (a device more
// for a model served, the last device of a model gone) is a changed device set: exit 3, and the
// restarted daemon serves the set it finds. Switching the naming mode between restarts keeps
// the other mode's specs as they were (the plugin never deletes CDI files) and registers only
// the current mode's resources.
func TestKataSKULifeCycle(t *testing.T) {
	s := newKata(t)
	node := kataSKUNode[:5] // 2 H100, 1 NVSwitch, the NIC, 1 H100
	s.add(node...)
	s.startDaemon() // table mode first
	s.kataReady(kataExpect(node))
	tableSpecs := map[string][]byte{}
	for _, r := range KataResources {
		tableSpecs[r] = s.readSpec(r)
	}
	s.must(s.d.Signal(syscall.SIGTERM))
	if code := s.waitExit(exitBound); code != 0 {
		t.Fatalf("exit %s after SIGTERM", s.d.ExitDescription())
	}

	// sku: the same devices as two models.
	before := s.kataRegs()
	s.startDaemon(kataSKUEnv)
	ps := s.kataSKUReady(kataSKUExpect(t, node), before)
	for r, b := range tableSpecs {
		if got, err := os.ReadFile(s.kataSpecPath(r)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("table-mode spec of %s not kept as it was (%v)", r, err)
		}
	}

	// A model that was not there: served at once, the others not re-registered.
	a100 := kataEntry{7, GPU("0000:43:00.0", 0).Model(0x20b0)}
	before = s.kataRegs()
	s.add(a100)
	node = append(append([]kataEntry(nil), node...), a100)
	want := kataSKUExpect(t, node)
	a100Res := "nvidia.com/GA100_A100_SXM4_40GB"
	p := s.kataRegistered(a100Res, 1, eventBound)
	s.kataDevices(a100Res, eventBound, func(d []*api.Device) error { return checkKataDevices(d, want[a100Res]) })
	s.checkKataSpec(a100Res, want[a100Res])
	if !IsSocketOf(p.Endpoint, KataSKUPrefix) {
		t.Errorf("%s registered endpoint %q, want %s-<n>.sock", a100Res, p.Endpoint, KataSKUPrefix)
	}
	s.waitLogMsg(eventBound, "info", "new PCI model, advertising it beside the others", "resource="+a100Res+" ", "devices=1")
	for r, old := range ps {
		if s.k.Current(r) != old || s.k.Registrations(r) != before[r] {
			t.Errorf("%s re-registered when another model appeared", r)
		}
	}
	if a, err := s.k.Allocate(a100Res, []string{"0"}); err != nil {
		t.Errorf("Allocate on the new model: %v", err)
	} else {
		checkKataAllocationKey(t, a.Response, a100Res, "cdi.k8s.io/kata.sku-10de-20b0_0", []string{"0"})
	}
	if s.d.Exited() {
		t.Fatalf("the daemon exited: %s", s.d.ExitDescription())
	}

	// One more device of a model served: its IDs would change; exit 3.
	s.add(kataEntry{8, GPU("0000:44:00.0", 0).Model(0x20b0)})
	s.checkSetChangeExit(eventBound, "vfio8", "added")
	node = append(node, kataEntry{8, GPU("0000:44:00.0", 0).Model(0x20b0)})
	before = s.kataRegs()
	s.startDaemon(kataSKUEnv)
	want = kataSKUExpect(t, node)
	ps = s.kataSKUReady(want, before)
	nvswitch := "nvidia.com/GA100_A100_NVSwitch"
	spec := s.readSpec(nvswitch)

	// The last NVSwitch gone: its ID turns Unhealthy, nothing restarts; the next start does
	// not register the model and keeps its spec.
	s.must(s.tree.RemoveCdev(6))
	s.kataDevices(nvswitch, eventBound, onlyDown("0"))
	s.must(s.d.Signal(syscall.SIGTERM))
	if code := s.waitExit(exitBound); code != 0 {
		t.Fatalf("exit %s after SIGTERM", s.d.ExitDescription())
	}
	if _, ok := ps[nvswitch].WaitEnded(eventBound); !ok {
		t.Errorf("kubelet's %s stream did not end when the daemon exited", nvswitch)
	}
	before = s.kataRegs()
	s.startDaemon(kataSKUEnv)
	node = append(node[:2:2], node[3:]...)
	s.kataSKUReady(kataSKUExpect(t, node), before) // the NVSwitch model not registered again
	if got, err := os.ReadFile(s.kataSpecPath(nvswitch)); err != nil || !bytes.Equal(got, spec) {
		t.Errorf("the spec of the gone model was changed or removed (%v)", err)
	}
}

// A node without devices idles (live, never ready); the first device, in sku mode, is served
// at once and the idle socket goes.
func TestKataSKUFromIdle(t *testing.T) {
	s := newKata(t)
	// iommufd set: auto would pick legacy on this empty node and restart when a cdev appears
	s.startDaemon(kataSKUEnv, "VFIO_BACKEND=iommufd")
	s.waitLogMsg(startBound, "warn", "no VFIO device matches the table; nothing to advertise")
	s.waitProbe(0, startBound, "--health-check")
	gpu := []kataEntry{{0, GPU("0000:41:00.0", 0)}}
	s.add(gpu...)
	s.kataSKUReady(kataSKUExpect(t, gpu), nil)
	s.waitProbe(0, eventBound, "--health-check=readiness")
	if !s.wait(eventBound, func() bool {
		socks, _ := s.node.PluginSockets()
		for _, n := range socks {
			if IsSocketOf(n, KataIdlePrefix) {
				return false
			}
		}
		return len(socks) == 1
	}) {
		socks, _ := s.node.PluginSockets()
		t.Errorf("plugin sockets %v, want the new model's only", socks)
	}
}

// A Grace node: a GB200 compute tray's four Blackwell GPUs (10de:2941, one per PCI domain, two
// per Grace CPU's NUMA node) beside a Grace Hopper superchip's GPU (10de:2342), the 3D
// controllers the table's nvidia.com/gpu row matches. Table naming advertises them as
// nvidia.com/gpu; sku naming with Debian 12's pci.ids (2023.04.10, older than these models)
// gives each model the fallback name and the start-up line says which models pci.ids lacks
// (docs/kata.md "Grace"). kata/tests/test_kata_sku_grace checks the names a newer pci.ids gives.
var kataGraceNode = []kataEntry{
	{0, GPU("0008:01:00.0", 0).Model(0x2941)},
	{1, GPU("0009:01:00.0", 0).Model(0x2941)},
	{2, GPU("0018:01:00.0", 1).Model(0x2941)},
	{3, GPU("0019:01:00.0", 1).Model(0x2941)},
	{4, GPU("0029:01:00.0", 2).Model(0x2342)},
}

func TestKataGrace(t *testing.T) {
	t.Run("table", func(t *testing.T) {
		s := newKata(t)
		s.add(kataGraceNode...)
		s.startDaemon()
		want := kataExpect(kataGraceNode)
		if len(want[KataGPU]) != 5 {
			t.Fatalf("test bug: %v", want)
		}
		s.kataReady(want)
		s.checkKataSpec(KataGPU, want[KataGPU])
		a, err := s.k.Allocate(KataGPU, []string{"0", "3"})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		checkKataAllocation(t, a.Response, KataGPU, []string{"0", "3"})
	})
	t.Run("sku", func(t *testing.T) {
		s := newKata(t)
		s.add(kataGraceNode...)
		s.startDaemon(kataSKUEnv)
		gb200, gh200 := "nvidia.com/pci_10de_2941", "nvidia.com/pci_10de_2342"
		want := map[string][]kataDev{}
		for _, e := range kataGraceNode {
			r := gb200
			if e.F.deviceID() == 0x2342 {
				r = gh200
			}
			want[r] = append(want[r], kataDev{N: e.N, BDF: e.F.BDF, NUMA: e.F.NUMA})
		}
		want = kataNumber(want)
		s.kataSKUReady(want, nil)
		for r, devs := range want {
			s.checkKataSpec(r, devs)
		}
		s.waitLogMsg(eventBound, "info", "resource naming", "naming=sku pci_ids=2023.04.10 ",
			`resources="nvidia.com/pci_10de_2342=1 nvidia.com/pci_10de_2941=4"`,
			`not_in_pci_ids="10de:2342 10de:2941"`)
		a, err := s.k.Allocate(gb200, []string{"1", "2"})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		checkKataAllocationKey(t, a.Response, gb200, "cdi.k8s.io/kata.sku-10de-2941_1", []string{"1", "2"})
	})
}
