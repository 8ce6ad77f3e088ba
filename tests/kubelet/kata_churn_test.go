// kata through a node's churn (issue 27): every device unbound and rebound (the kernel removes
// /dev/vfio/devices with its last cdev and makes it again), /dev/vfio made again (a vfio module
// reload), the legacy container node removed and back, auto's choice with a stray file, and a
// device rebound to a host driver, each against the mock kubelet.
package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

// allDown: every ID Unhealthy.
func allDown(devs []*api.Device) error {
	for _, d := range devs {
		if d.Health != Unhealthy {
			return fmt.Errorf("device %s is %s, want every one Unhealthy: %s", d.ID, d.Health, DescribeDevices(devs))
		}
	}
	return nil
}

// kataGroupsResources: resource -> how many IDs kataGroupsNode gives it.
var kataGroupsResources = map[string]int{KataGPU: 3, KataNVSwitch: 1}

// newLegacyGroupsReady: kataGroupsNode on a legacy node (no /dev/vfio/devices), the daemon
// started, the GPUs registered and every ID Healthy.
func newLegacyGroupsReady(t *testing.T) *kataScenario {
	s := newLegacyKata(t, true, kataGroupsNode...)
	s.startDaemon()
	s.kataRegistered(KataGPU, 1, startBound)
	s.kataDevices(KataGPU, eventBound, onlyDown())
	return s
}

// everyID: every ID of every resource (n of each) reaches the state check wants; with allocate,
// each is then allocatable; the daemon still runs.
func (s *kataScenario) everyID(resources map[string]int, check func([]*api.Device) error, allocate bool) {
	s.t.Helper()
	for resource, n := range resources {
		s.kataDevices(resource, eventBound, check)
		if allocate {
			s.allocateEach(resource, n)
		}
	}
	if s.d.Exited() {
		s.t.Errorf("the daemon exited")
	}
}

// allocateEach: Allocate of every ID of resource succeeds.
func (s *kataScenario) allocateEach(resource string, n int) {
	s.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := s.k.Allocate(resource, []string{fmt.Sprint(i)}); err != nil {
			s.t.Errorf("Allocate %s %d: %v", resource, i, err)
		}
	}
}

// Every cdev unbound: the kernel removes /dev/vfio/devices with the last one; the rebind makes a
// new directory with the same nodes. Every ID is Healthy again, without a restart, and
// allocatable.
func TestKataAllUnboundRebound(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon()
	s.kataReady(want)
	type node struct {
		n            int
		major, minor uint32
	}
	var nodes []node
	for _, e := range kataMain {
		major, minor, err := s.tree.CdevNumber(e.N)
		s.must(err)
		nodes = append(nodes, node{e.N, major, minor})
	}
	counts := map[string]int{}
	for resource, devs := range want {
		counts[resource] = len(devs)
	}
	for _, nd := range nodes {
		s.must(s.tree.RemoveCdev(nd.n))
	}
	s.must(os.Remove(s.tree.DevicesDir))
	s.everyID(counts, allDown, false)
	s.must(os.Mkdir(s.tree.DevicesDir, 0o755))
	for _, nd := range nodes {
		s.must(s.tree.AddCdevNumber(nd.n, nd.major, nd.minor))
	}
	s.everyID(counts, onlyDown(), true)
}

// A vfio module reload on a legacy node: /dev/vfio goes with every group node and the container
// node, and comes back with the same nodes. Every ID Healthy again and allocatable.
func TestKataLegacyVFIODirRecreated(t *testing.T) {
	s := newLegacyGroupsReady(t)
	vfio := filepath.Join(s.tree.Root, "dev/vfio")
	s.must(os.RemoveAll(vfio))
	s.everyID(kataGroupsResources, allDown, false)
	s.must(os.Mkdir(vfio, 0o755))
	for _, g := range []int{10, 11, 12, 13, 14} {
		s.must(s.tree.AddGroupNode(g))
	}
	s.everyID(kataGroupsResources, onlyDown(), true)
}

// The legacy container node /dev/vfio/vfio, named in every spec entry: removed, an Allocate is
// refused at once and the IDs turn Unhealthy (not ~30 s later); back, Healthy and allocatable.
func TestKataContainerNodeRemoved(t *testing.T) {
	s := newLegacyGroupsReady(t)
	node := filepath.Join(s.tree.Root, LegacyContainer)
	s.must(os.Remove(node))
	_, err := s.k.Allocate(KataGPU, []string{"0"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), LegacyContainer) {
		t.Errorf("Allocate without the container node: %v, want UNAVAILABLE naming %s", err, LegacyContainer)
	}
	s.everyID(kataGroupsResources, allDown, false)
	s.must(Mknod(node, 10, 196))
	s.everyID(kataGroupsResources, onlyDown(), true)
}

// auto on a legacy node whose /dev/vfio/devices holds a stray file and directory (no cdev):
// legacy, the GPUs advertised; another stray entry there while it runs is no reason to restart.
func TestKataAutoStrayFile(t *testing.T) {
	s := newLegacyKata(t, false, kataGroupsNode...)
	s.must(os.WriteFile(filepath.Join(s.tree.DevicesDir, "vfio0"), nil, 0o644))
	s.must(os.Mkdir(filepath.Join(s.tree.DevicesDir, "stray"), 0o755))
	s.startDaemon()
	s.kataRegistered(KataGPU, 1, startBound)
	s.kataDevices(KataGPU, eventBound, checkGroupIDs(kataGroupsIDs[KataGPU], map[int]int{10: 0, 11: 0, 12: 1}))
	s.waitLogMsg(eventBound, "info", "VFIO backend", "backend=legacy",
		`reason="auto: /dev/vfio/devices holds no character device"`)
	s.must(os.WriteFile(filepath.Join(s.tree.DevicesDir, "vfio9"), nil, 0o644))
	// a cdev does end it (auto picks iommufd at restart): its exit shows the stray file did not
	s.must(s.tree.Add(7, GPU("0000:e1:00.0", 1)))
	s.checkSetChangeExit(eventBound, "vfio7", "added")
	if l := linesNaming(s.d, "vfio9"); len(l) != 0 {
		t.Errorf("the stray file was taken for a cdev: %q", l)
	}
}

// A GPU rebound to its host driver is "device unusable" (not a group made unusable by another
// member); a companion's driver name holding a newline is quoted, never a record of its own.
func TestKataRebindToHostDriver(t *testing.T) {
	s := newLegacyGroupsReady(t)

	s.must(s.tree.Bind("0000:42:00.0", "nvidia"))
	kernelPCIUevent(t)
	s.kataDevices(KataGPU, eventBound, onlyDown("1"))
	l := s.waitLogMsg(eventBound, "warn", "device unusable, advertising it Unhealthy", "id=1 ")
	if !strings.Contains(l, "no longer bound to vfio-pci (driver: nvidia)") {
		t.Errorf("line %q: want the device's own driver named", l)
	}
	if n := len(logLines(s.d, "warn", "IOMMU group not viable, advertising the device Unhealthy")); n != 0 {
		t.Errorf("a device on its host driver was called a group not viable (%d lines)", n)
	}
	s.must(s.tree.Bind("0000:42:00.0", ""))
	s.kataDevices(KataGPU, eventBound, onlyDown())

	s.must(s.tree.Bind("0000:41:00.1", "snd\nlevel=error msg=forged"))
	kernelPCIUevent(t)
	s.kataDevices(KataGPU, eventBound, onlyDown("0"))
	l = s.waitLogMsg(eventBound, "warn", "IOMMU group not viable, advertising the device Unhealthy", "id=0 ")
	if !strings.Contains(l, `driver="snd\nlevel=error msg=forged"`) {
		t.Errorf("line %q: want the driver quoted", l)
	}
	for _, line := range s.d.Stderr.Lines() {
		if strings.HasPrefix(line, "level=error msg=forged") {
			t.Errorf("a driver name forged a log record: %q", line)
		}
	}
}
