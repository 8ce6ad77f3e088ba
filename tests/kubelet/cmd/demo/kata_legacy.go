package main

// The kata demo's second node: a kernel without IOMMUFD (every Debian kernel), so VFIO_BACKEND=auto
// picks the legacy group nodes. Two GPUs on two NUMA nodes, one with its audio companion in its
// IOMMU group: one ID per group, the companion never counted, a topology-aware
// GetPreferredAllocation, the group node spec, and the group turned Unhealthy while the companion
// sits on its host driver.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sdp/kubelet"
	api "sdp/v1beta1"
)

var legacyNode = []struct {
	f    kubelet.PCIFunc
	what string
}{
	{kubelet.GPU("0000:41:00.0", 0).InGroup(10), "NVIDIA GPU, NUMA 0"},
	{kubelet.Audio("0000:41:00.1", 0).InGroup(10), "its HD audio function (class 0x040300)"},
	{kubelet.GPU("0000:c1:00.0", 1).InGroup(11), "NVIDIA GPU, NUMA 1"},
}

func (d *demo) kataLegacy(bin string) {
	n, err := kubelet.NewNode()
	if err != nil {
		fail("kata legacy setup", "%v", err)
	}
	d.node = n
	tree, err := kubelet.NewKataTree(n.Root)
	if err == nil {
		err = os.Remove(tree.DevicesDir) // no IOMMUFD cdevs on this kernel
	}
	if err != nil {
		fail("kata legacy setup", "%v", err)
	}
	fmt.Println("\n\nkata on a kernel without IOMMUFD (legacy VFIO group nodes)")
	field("node root", "%s (SDP_TEST_ROOT)", n.Root)
	for _, e := range legacyNode {
		if err := tree.AddLegacy(e.f); err != nil {
			fail("kata legacy setup", "%v", err)
		}
		field(e.f.BDF, "%s, IOMMU group %d, bound to vfio-pci", e.what, e.f.Group)
	}
	field("/dev/vfio", "10 11 vfio (no devices/)")
	if d.k, err = kubelet.New(n.KubeletDir); err != nil {
		fail("kata legacy setup", "%v", err)
	}
	heading("k6. VFIO_BACKEND=auto: the backend it chose and what it advertises")
	d.started = time.Now()
	if d.d, err = kubelet.StartDaemon(bin, kubelet.PlainDaemonEnv(n.Root, "LOG_LEVEL=info")); err != nil {
		fail("kata legacy start", "%v", err)
	}
	d.kataRegistered(kubelet.KataGPU)
	for _, l := range d.d.Stderr.Lines() {
		f := logFields(l)
		switch f["msg"] {
		case "VFIO backend":
			field("backend", "%s: %s", f["backend"], f["reason"])
		case "advertising":
			field("advertising", "%s: %s ID(s), ID:address/group %s", f["resource"], f["devices"], f["ids"])
		}
	}
	devs, err := d.k.WaitDevices(kubelet.KataGPU, kubelet.CountHealth(2, kubelet.Healthy), eventBound)
	if err != nil {
		fail("kata legacy ListAndWatch", "%v", err)
	}
	for _, dv := range devs {
		field("device", "%s (NUMA %s) %s: one ID per IOMMU group, the audio function is no device", dv.ID,
			numa(dv.Topology), dv.Health)
	}
	d.kataLegacyPrefer()
	spec := filepath.Join(n.CDIDir, kubelet.KataSpecFile(kubelet.KataGPU))
	heading("k8. CDI spec " + rel(n, spec) + " (the group node and the container node)")
	b, err := os.ReadFile(spec)
	if err != nil {
		fail("kata legacy CDI spec", "%v", err)
	}
	fmt.Printf("  %s\n", strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\n  "))
	d.kataLegacyViability(tree)
	heading("k10. SIGTERM")
	if err := d.d.Signal(syscall.SIGTERM); err != nil {
		fail("kata legacy SIGTERM", "%v", err)
	}
	if code, err := d.d.Wait(10 * time.Second); err != nil || code != 0 {
		fail("kata legacy SIGTERM", "exit status %d, want 0 (%v)", code, err)
	}
	field("exit", "status 0")
}

// kataLegacyPrefer: what kubelet sends GetPreferredAllocation and gets, in its three shapes.
func (d *demo) kataLegacyPrefer() {
	heading("k7. GetPreferredAllocation, as kubelet calls it")
	for _, c := range []struct {
		size int
		hint *int64
	}{{1, nil}, {1, ptr(1)}, {2, ptr(1)}} {
		p, err := d.k.Prefer(kubelet.KataGPU, c.size, nil, c.hint)
		if err != nil {
			fail("kata GetPreferredAllocation", "%v", err)
		}
		h := "no hint"
		if c.hint != nil {
			h = fmt.Sprintf("NUMA %d hint", *c.hint)
		}
		what := fmt.Sprintf("%d GPU(s), %s", c.size, h)
		if !p.Called {
			field(what, "no call: exactly as many aligned as asked, kubelet takes %v", p.Answer)
			continue
		}
		field(what, "available %v, must-include %v -> %v", p.Available, p.Must, p.Answer)
	}
}

func ptr(v int64) *int64 { return &v }

// kataLegacyViability: the companion bound to snd_hda_intel makes group 10 unusable; the daemon
// sees it on the next check (a kernel uevent, an Allocate, or the 30 s rescan): here an Allocate.
func (d *demo) kataLegacyViability(tree *kubelet.KataTree) {
	heading("k9. the audio function bound to snd_hda_intel: the kernel would refuse group 10")
	if err := tree.Bind("0000:41:00.1", "snd_hda_intel"); err != nil {
		fail("kata legacy bind", "%v", err)
	}
	_, err := d.k.Allocate(kubelet.KataGPU, []string{"0"})
	field("Allocate 0", "%v", err)
	if err == nil {
		fail("kata legacy viability", "Allocate in a group that is not viable succeeded")
	}
	down := func(devs []*api.Device) bool { return len(devs) == 2 && devs[0].Health == kubelet.Unhealthy }
	if _, err := d.k.WaitDevices(kubelet.KataGPU, down, eventBound); err != nil {
		fail("kata legacy viability", "%v", err)
	}
	for _, l := range d.d.Stderr.Lines() {
		if f := logFields(l); f["msg"] == "IOMMU group not viable, advertising the device Unhealthy" {
			field("log", "level=%s member=%s driver=%s", f["level"], f["member"], f["driver"])
			field("", "%s", f["reason"])
		}
	}
	if err := tree.Bind("0000:41:00.1", ""); err != nil {
		fail("kata legacy bind", "%v", err)
	}
	start := time.Now()
	if _, err := d.k.WaitDevices(kubelet.KataGPU, kubelet.CountHealth(2, kubelet.Healthy), eventBound); err != nil {
		fail("kata legacy viability", "%v", err)
	}
	field("rebound to vfio-pci", "ID 0 Healthy again after %v, no restart", time.Since(start).Round(time.Millisecond))
}
