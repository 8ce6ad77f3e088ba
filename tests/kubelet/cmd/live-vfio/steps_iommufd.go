package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The steps' cdev-backend halves (make test-live-vfio-iommufd).

// groupCdevs are the cdev paths of group g's pci-testdevs bound to vfio-pci, by PCI address: what
// the daemon's CDI spec must name for the group's ID (a companion function is no table device).
func (r *vfioRun) groupCdevs(g int) []string {
	var out []string
	for _, bdf := range r.members[g] {
		if driverOf(bdf) != "vfio-pci" {
			continue
		}
		name, err := cdevOf(bdf)
		r.check(err)
		out = append(out, filepath.Join(cdevDir, name))
	}
	return out
}

// kernelRefusesBind: the kernel agrees with the daemon: with 05:00.1 on snd_hda_intel (a kernel
// DMA owner of the group), the cdev of 05:00.0 cannot be bound to an iommufd.
func (r *vfioRun) kernelRefusesBind() string {
	id := r.idOf[r.l.mf]
	b, err := os.ReadFile(specPath)
	r.check(err)
	_, nodes, _ := parseSpec(b)
	n := nodes[id]
	want := r.groupCdevs(r.l.group[r.l.mf])
	if strings.Join(n, " ") != strings.Join(want, " ") || len(n) != 1 {
		r.fail("spec nodes of ID %s: %v, want %v", id, n, want)
	}
	where, kerr, err := bindRefused(n[0])
	r.check(err)
	if kerr == nil {
		r.fail("%s: VFIO_DEVICE_BIND_IOMMUFD succeeded while %s is on snd_hda_intel", n[0], r.l.hda)
	}
	if where == "open" {
		r.fail("%s: open refused (%s), want the open to succeed and the bind to fail", n[0], errnoName(kerr))
	}
	// 6.12: iommufd_device_bind -> iommu_device_claim_dma_owner finds the group owned by the
	// kernel (snd_hda_intel's default-domain use: owner_cnt 1, no owner) and says -EPERM.
	if kerr != syscall.EPERM {
		r.fail("%s: VFIO_DEVICE_BIND_IOMMUFD: %s, want EPERM (the group's DMA owner is a kernel driver)", n[0], errnoName(kerr))
	}
	return fmt.Sprintf("%s (ID %s, %s): open ok, VFIO_DEVICE_BIND_IOMMUFD refused: %s", n[0], id, r.l.mf, errnoName(kerr))
}

// openCdevs checks that the spec's nodes n of id are exactly the cdevs of its group's vfio-pci
// testdevs now (each a character device that sysfs maps back into the group), then opens them.
func (r *vfioRun) openCdevs(id string, n []string) string {
	i, _ := strconv.Atoi(id)
	g := r.groups[i]
	want := r.groupCdevs(g)
	if len(n) == 0 || strings.Join(n, " ") != strings.Join(want, " ") {
		r.fail("spec nodes of ID %s: %v, want the group's cdevs %v", id, n, want)
	}
	var pcis []string
	for _, node := range n {
		pci, err := cdevPCI(node)
		r.check(err)
		gg, err := groupOf(pci)
		r.check(err)
		if gg != g {
			r.fail("%s is %s in group %d, want group %d", node, pci, gg, g)
		}
		pcis = append(pcis, pci[5:])
	}
	msg, err := iommufdOpen(n)
	r.check(err)
	// A companion on vfio-pci has a cdev of its own, which no ID names (it is no table device):
	// the consumer gets the testdev's cdev alone, and the kernel binds it alone.
	var comp []string
	for _, m := range groupMembers(g) {
		if driverOf(m) == "vfio-pci" && !contains(r.members[g], m) {
			name, err := cdevOf(m)
			r.check(err)
			comp = append(comp, fmt.Sprintf("%s=%s", m[5:], name))
		}
	}
	if len(comp) > 0 {
		msg += fmt.Sprintf("; companion %v on vfio-pci, its cdev not in the spec", comp)
	}
	return fmt.Sprintf("%v; %s", pcis, msg)
}
