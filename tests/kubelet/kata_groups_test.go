// kata on legacy VFIO (/dev/vfio/<group>) and IOMMU groups, end to end against the mock kubelet:
// the backend choice, one ID per group, companions never counted, a group that is not viable
// advertised Unhealthy and back, and GetPreferredAllocation on a 2-NUMA, 2-switch tree in the
// three ways kubelet calls it (shared/reference/kubelet-allocation.md).
package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

// kataGroupsNode: GPU 41:00.0 with its audio companion 41:00.1 (group 10), GPU 42:00.0 (group
// 11), GPUs c1:00.0 and c1:01.0 behind one PCIe-to-PCI bridge (group 12, shared), an NVSwitch
// (group 13) and a NIC the table does not match (group 14), all bound to vfio-pci.
var kataGroupsNode = []PCIFunc{
	GPU("0000:c1:01.0", 1).InGroup(12),
	GPU("0000:41:00.0", 0).InGroup(10),
	Audio("0000:41:00.1", 0).InGroup(10),
	GPU("0000:42:00.0", 0).InGroup(11),
	GPU("0000:c1:00.0", 1).InGroup(12),
	NVSwitch("0000:05:00.0", -1).InGroup(13),
	{BDF: "0000:01:00.0", Vendor: 0x15b3, Class: 0x020700, NUMA: 0, Group: 14},
}

// kataGroupsIDs: per resource, ID -> its group, lowest PCI address first.
var kataGroupsIDs = map[string][]int{KataGPU: {10, 11, 12}, KataNVSwitch: {13}}

// newLegacyKata is a node with the functions fs behind group nodes and no IOMMUFD cdevs
// (/dev/vfio/devices removed when noDevicesDir, else left empty).
func newLegacyKata(t *testing.T, noDevicesDir bool, fs ...PCIFunc) *kataScenario {
	s := newKata(t)
	if noDevicesDir {
		s.must(os.Remove(s.tree.DevicesDir))
	}
	for _, f := range fs {
		s.must(s.tree.AddLegacy(f))
	}
	return s
}

// checkGroupIDs: the list holds exactly one Healthy ID per group, with the NUMA node of the
// group's lowest-addressed device.
func checkGroupIDs(groups []int, numa map[int]int) func([]*api.Device) error {
	return func(devs []*api.Device) error {
		if len(devs) != len(groups) {
			return fmt.Errorf("%d IDs, want one per group %v: %s", len(devs), groups, DescribeDevices(devs))
		}
		for _, d := range devs {
			var i int
			if _, err := fmt.Sscan(d.ID, &i); err != nil || i >= len(groups) || d.Health != Healthy {
				return fmt.Errorf("ID %q (%s): want 0..%d, Healthy", d.ID, d.Health, len(groups)-1)
			}
			want := numa[groups[i]]
			var nodes []int64
			if d.Topology != nil {
				for _, n := range d.Topology.Nodes {
					nodes = append(nodes, n.ID)
				}
			}
			if (want < 0 && len(nodes) != 0) || (want >= 0 && !reflect.DeepEqual(nodes, []int64{int64(want)})) {
				return fmt.Errorf("ID %q (group %d): NUMA nodes %v, want %d", d.ID, groups[i], nodes, want)
			}
		}
		return nil
	}
}

// checkLegacySpec: every ID of resource is its group node plus the container node, nothing else.
func (s *kataScenario) checkLegacySpec(resource string, groups []int) {
	s.t.Helper()
	b := s.readSpec(resource)
	spec, err := parseCDIYAML(b)
	if err == nil {
		err = checkCDIRules(spec)
	}
	if err != nil {
		s.fatalf("%s: %v\n%s", resource, err, b)
	}
	if len(spec.Devices) != len(groups) || spec.Kind != resource {
		s.fatalf("%s: kind %q, %d devices, want %d:\n%s", resource, spec.Kind, len(spec.Devices), len(groups), b)
	}
	for i, d := range spec.Devices {
		var paths []string
		for _, n := range d.ContainerEdits.DeviceNodes {
			paths = append(paths, n.Path)
			if n.Type != "c" {
				s.t.Errorf("%s %s: node %s of type %q", resource, d.Name, n.Path, n.Type)
			}
		}
		want := []string{fmt.Sprintf("/dev/vfio/%d", groups[i]), LegacyContainer}
		if d.Name != fmt.Sprint(i) || !reflect.DeepEqual(paths, want) {
			s.t.Errorf("%s: device %q nodes %v, want %q nodes %v", resource, d.Name, paths, fmt.Sprint(i), want)
		}
		if strings.Contains(string(b), "/dev/vfio/devices") {
			s.t.Errorf("%s: a legacy spec names an IOMMUFD cdev:\n%s", resource, b)
		}
	}
}

func TestKataLegacyAdvertise(t *testing.T) {
	numa := map[int]int{10: 0, 11: 0, 12: 1, 13: -1}
	for _, tc := range []struct {
		name, env, reason string
		noDevicesDir      bool
	}{
		{"auto-no-devices-dir", "VFIO_BACKEND=auto", "auto: no /dev/vfio/devices", true},
		{"auto-empty-devices-dir", "", "auto: /dev/vfio/devices holds no character device", false},
		{"legacy", "VFIO_BACKEND=legacy", "VFIO_BACKEND=legacy", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newLegacyKata(t, tc.noDevicesDir, kataGroupsNode...)
			s.startDaemon(tc.env)
			l := s.waitLogMsg(startBound, "info", "VFIO backend", "backend=legacy")
			if !strings.Contains(l, tc.reason) {
				t.Errorf("backend line %q: want the reason %q", l, tc.reason)
			}
			for _, r := range KataResources {
				s.kataRegistered(r, 1, startBound)
				s.kataDevices(r, eventBound, checkGroupIDs(kataGroupsIDs[r], numa))
				s.checkLegacySpec(r, kataGroupsIDs[r])
			}
			// the companion and the NIC are no devices; the shared group is one ID
			if l := s.waitLogMsg(eventBound, "info", "advertising", "resource="+KataGPU); !strings.Contains(l, "devices=3") {
				t.Errorf("advertising line %q: want devices=3 (three groups)", l)
			}
			for _, l := range s.d.Stderr.Lines() {
				if logField(l, "level") == "warn" {
					t.Errorf("a warning on a sound node: %s", l)
				}
			}
			a, err := s.k.Allocate(KataGPU, []string{"2"})
			if err != nil {
				t.Fatalf("Allocate of the shared group's ID: %v", err)
			}
			checkKataAllocation(t, a.Response, KataGPU, []string{"2"})
		})
	}
}

func TestKataBackendInvalid(t *testing.T) {
	s := newLegacyKata(t, false, kataGroupsNode...)
	s.startDaemon("VFIO_BACKEND=vfio")
	if code := s.waitExit(startBound); code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	l := s.waitLogMsg(eventBound, "error", "invalid configuration", "VFIO_BACKEND=")
	if !strings.Contains(l, "auto, iommufd or legacy") {
		t.Errorf("line %q: want the valid values", l)
	}
	if len(s.k.Resources()) != 0 || len(s.cdiFiles()) != 0 {
		t.Errorf("an invalid configuration registered %v or wrote %v", s.k.Resources(), s.cdiFiles())
	}
}

// kernelPCIUevent makes the kernel emit a PCI uevent (ACTION=add, as `udevadm trigger` does) for
// one of the machine's own PCI functions, a bridge when there is one: a driver change in the fake
// tree raises none, and the daemon acts on any PCI uevent from the kernel.
func kernelPCIUevent(t *testing.T) {
	t.Helper()
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	if len(devs) == 0 {
		t.Fatalf("no PCI function in /sys/bus/pci/devices: the kernel uevent path cannot be driven on this machine")
	}
	pick := devs[0]
	for _, d := range devs {
		if c, err := os.ReadFile(filepath.Join(d, "class")); err == nil && strings.HasPrefix(string(c), "0x06") {
			pick = d
			break
		}
	}
	if err := os.WriteFile(filepath.Join(pick, "uevent"), []byte("add"), 0); err != nil {
		t.Fatalf("trigger a kernel uevent: %v", err)
	}
}

func TestKataGroupViability(t *testing.T) {
	s := newLegacyKata(t, false, kataGroupsNode...)
	s.startDaemon()
	s.kataRegistered(KataGPU, 1, startBound)
	s.kataDevices(KataGPU, eventBound, onlyDown())

	// the companion on its host driver: the kernel refuses group 10; seen through the uevent
	s.must(s.tree.Bind("0000:41:00.1", "snd_hda_intel"))
	start := time.Now()
	kernelPCIUevent(t)
	s.kataDevices(KataGPU, eventBound, onlyDown("0"))
	t.Logf("group 10 Unhealthy %v after the uevent", time.Since(start).Round(time.Millisecond))
	l := s.waitLogMsg(eventBound, "warn", "IOMMU group not viable, advertising the device Unhealthy", "id=0 ")
	for _, want := range []string{"group=10", "member=0000:41:00.1", "driver=snd_hda_intel", "resource=" + KataGPU} {
		if !strings.Contains(l, want) {
			t.Errorf("line %q lacks %s", l, want)
		}
	}
	if _, err := s.k.Allocate(KataGPU, []string{"0"}); status.Code(err) != codes.Unavailable {
		t.Errorf("Allocate in a group that is not viable: %v, want UNAVAILABLE", err)
	}
	if _, err := s.k.Allocate(KataGPU, []string{"1"}); err != nil {
		t.Errorf("Allocate of another group: %v", err)
	}

	// back on vfio-pci: Healthy again without a restart (the check of a down ID, every second)
	s.must(s.tree.Bind("0000:41:00.1", ""))
	start = time.Now()
	s.kataDevices(KataGPU, eventBound, onlyDown())
	t.Logf("group 10 Healthy %v after the rebind", time.Since(start).Round(time.Millisecond))
	s.waitLogMsg(eventBound, "info", "device usable again", "id=0 ")
	if n := len(logLines(s.d, "warn", "IOMMU group not viable, advertising the device Unhealthy")); n != 1 {
		t.Errorf("%d not-viable warnings for one episode, want 1", n)
	}

	// a device unbound from vfio-pci: its ID Unhealthy, naming why
	s.must(s.tree.Bind("0000:42:00.0", NoDriver))
	kernelPCIUevent(t)
	s.kataDevices(KataGPU, eventBound, onlyDown("1"))
	s.waitLogMsg(eventBound, "warn", "device unusable, advertising it Unhealthy", "id=1 ", "group=11")
	s.must(s.tree.Bind("0000:42:00.0", ""))
	s.kataDevices(KataGPU, eventBound, onlyDown())

	// the shared group's node removed (inotify), then back
	s.must(s.tree.RemoveGroupNode(12))
	start = time.Now()
	s.kataDevices(KataGPU, eventBound, onlyDown("2"))
	t.Logf("group 12 Unhealthy %v after its node was removed", time.Since(start).Round(time.Millisecond))
	s.must(s.tree.AddGroupNode(12))
	s.kataDevices(KataGPU, eventBound, onlyDown())
	if s.d.Exited() {
		t.Errorf("the daemon exited")
	}
}

// kataTopoNode: NUMA 0 holds a PCIe switch (upstream port 01:00.0) with GPUs 03:00.0 and
// 04:00.0 and a GPU on a root port (10:00.0); NUMA 1 a switch (81:00.0) with 83:00.0, 84:00.0
// and 85:00.0. IDs 0..5 in that order.
var kataTopoNode = []PCIFunc{
	GPU("0000:03:00.0", 0).Below("0000:00:01.0/0000:01:00.0/0000:02:00.0"),
	GPU("0000:04:00.0", 0).Below("0000:00:01.0/0000:01:00.0/0000:02:01.0"),
	GPU("0000:10:00.0", 0).Below("0000:00:02.0"),
	GPU("0000:83:00.0", 1).Below("0000:80:01.0/0000:81:00.0/0000:82:00.0"),
	GPU("0000:84:00.0", 1).Below("0000:80:01.0/0000:81:00.0/0000:82:01.0"),
	GPU("0000:85:00.0", 1).Below("0000:80:01.0/0000:81:00.0/0000:82:02.0"),
}

func TestKataPreferredTopology(t *testing.T) {
	s := newLegacyKata(t, false, kataTopoNode...)
	s.startDaemon()
	s.kataRegistered(KataGPU, 1, startBound)
	s.kataDevices(KataGPU, eventBound, func(d []*api.Device) error {
		if len(d) != 6 {
			return fmt.Errorf("%d IDs, want 6", len(d))
		}
		return onlyDown()(d)
	})
	numa := func(n int64) *int64 { return &n }
	for _, tc := range []struct {
		name   string
		size   int
		taken  []string
		hint   *int64
		called bool
		want   []string
	}{
		// no hint: every free ID; the fewest nodes, then switches, then the lowest addresses
		{"no-hint-2", 2, nil, nil, true, []string{"0", "1"}},
		{"no-hint-3", 3, nil, nil, true, []string{"3", "4", "5"}},          // one switch on NUMA 1
		{"no-hint-4", 4, nil, nil, true, []string{"0", "1", "3", "4"}},     // two switches, not three
		{"no-hint-taken", 2, []string{"0"}, nil, true, []string{"3", "4"}}, // a whole switch
		// a hint with more aligned free IDs than asked: only those are offered
		{"hint-more", 2, nil, numa(1), true, []string{"3", "4"}},
		// fewer aligned than asked: the aligned as must-include, every free ID available
		{"hint-fewer", 2, []string{"0", "1"}, numa(0), true, []string{"2", "3"}},
		{"hint-fewer-3", 3, []string{"3", "4"}, numa(1), true, []string{"0", "1", "5"}},
		// exactly as many: kubelet takes them without asking
		{"hint-exact", 3, nil, numa(0), false, []string{"0", "1", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := s.k.Prefer(KataGPU, tc.size, tc.taken, tc.hint)
			if err != nil {
				t.Fatalf("GetPreferredAllocation: %v", err)
			}
			got := append([]string(nil), p.Answer...)
			sortIDs(got)
			if p.Called != tc.called || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("called %v, answer %v (available %v, must %v); want called %v, %v", p.Called, got,
					p.Available, p.Must, tc.called, tc.want)
			}
		})
	}
}

// sortIDs orders numeric IDs by value.
func sortIDs(ids []string) {
	sort.Slice(ids, func(i, j int) bool {
		return len(ids[i]) < len(ids[j]) || len(ids[i]) == len(ids[j]) && ids[i] < ids[j]
	})
}

// RESOURCE_NAMING=sku works the same on group nodes: one resource per model, one ID per group.
func TestKataLegacySKU(t *testing.T) {
	s := newLegacyKata(t, true,
		GPU("0000:42:00.0", 0).Model(0x2330).InGroup(21),
		GPU("0000:41:00.0", 0).Model(0x2330).InGroup(20),
		Audio("0000:41:00.1", 0).InGroup(20),
		GPU("0000:43:00.0", 1).Model(0x20b0).InGroup(22))
	s.startDaemon(kataSKUEnv)
	for res, groups := range map[string][]int{
		"nvidia.com/GH100_H100_SXM5_80GB": {20, 21},
		"nvidia.com/GA100_A100_SXM4_40GB": {22},
	} {
		s.kataRegistered(res, 1, startBound)
		s.kataDevices(res, eventBound, checkGroupIDs(groups, map[int]int{20: 0, 21: 0, 22: 1}))
		s.checkLegacySpec(res, groups)
	}
	if n := len(s.k.Resources()); n != 2 {
		t.Errorf("%d resources registered (%v), want the two models", n, s.k.Resources())
	}
}
