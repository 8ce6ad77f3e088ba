package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// The emulated PCI layout of tests/live/run-vfio.sh, found again in the guest's sysfs by what
// each stand-in GPU (QEMU's pci-testdev, 1b36:0005, which no guest driver claims) hangs from.
const (
	testdevID    = "0x1b36:0x0005" // pci-testdev
	downstreamID = "0x104c:0x8233" // xio3130-downstream
	pciBridgeID  = "0x1b36:0x000e" // pcie-pci-bridge
	hdaID        = "0x8086:0x2668" // intel-hda (ICH6)
)

// layout names the stand-in GPUs by their place.
type layout struct {
	all      []string // every pci-testdev, sorted
	switched []string // behind the two downstream ports of the x3130 switch
	mf       string   // function 0 of the multi-function device
	hda      string   // its function 1, intel-hda
	bridged  []string // behind the pcie-pci-bridge
	numa0    []string // behind the root ports of the expander bridge of NUMA node 0
	numa1    []string // of NUMA node 1
	group    map[string]int
	numa     map[string]int
}

func ids(bdf string) string { return readAttr(bdf, "vendor") + ":" + readAttr(bdf, "device") }

// parentBDF is the PCI function above bdf in its sysfs path ("" on a root bus).
func parentBDF(bdf string) string {
	p, err := filepath.EvalSymlinks(filepath.Join(sysPCI, "devices", bdf))
	if err != nil {
		return ""
	}
	up := filepath.Base(filepath.Dir(p))
	if regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`).MatchString(up) {
		return up
	}
	return ""
}

func findLayout() (*layout, error) {
	entries, err := os.ReadDir(filepath.Join(sysPCI, "devices"))
	if err != nil {
		return nil, err
	}
	l := &layout{group: map[string]int{}, numa: map[string]int{}}
	for _, e := range entries {
		bdf := e.Name()
		if ids(bdf) != testdevID {
			continue
		}
		l.all = append(l.all, bdf)
		g, err := groupOf(bdf)
		if err != nil {
			return nil, fmt.Errorf("%s has no IOMMU group: %v", bdf, err)
		}
		l.group[bdf] = g
		var n int
		if _, err := fmt.Sscanf(readAttr(bdf, "numa_node"), "%d", &n); err != nil {
			return nil, fmt.Errorf("%s/numa_node: %v", bdf, err)
		}
		l.numa[bdf] = n
		parent := parentBDF(bdf)
		fn1 := bdf[:len(bdf)-1] + "1"
		switch {
		case n == 0:
			l.numa0 = append(l.numa0, bdf)
		case n == 1:
			l.numa1 = append(l.numa1, bdf)
		case parent != "" && ids(parent) == downstreamID:
			l.switched = append(l.switched, bdf)
		case parent != "" && ids(parent) == pciBridgeID:
			l.bridged = append(l.bridged, bdf)
		case strings.HasSuffix(bdf, ".0") && ids(fn1) == hdaID:
			l.mf, l.hda = bdf, fn1
		default:
			return nil, fmt.Errorf("pci-testdev %s (parent %s, NUMA node %d) is in no known place", bdf, parent, n)
		}
	}
	if len(l.all) != 8 || len(l.switched) != 2 || l.mf == "" || len(l.bridged) != 2 || len(l.numa0) != 2 || len(l.numa1) != 1 {
		return nil, fmt.Errorf("layout %+v: want 8 pci-testdevs (2 switched, 1 multi-function, 2 bridged, 2 on NUMA 0, 1 on NUMA 1)", l)
	}
	return l, nil
}

// groupsOf are the distinct groups of bdfs, in the order of their lowest member: the daemon's
// IDs "0".."n-1" (docs/kata.md, "IDs").
func (l *layout) expectedIDs() (groups []int, byGroup map[int][]string) {
	byGroup = map[int][]string{}
	for _, bdf := range l.all { // sorted: the first seen is the lowest
		g := l.group[bdf]
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], bdf)
	}
	return groups, byGroup
}

// hasACS reports whether bdf's config space lists the ACS extended capability (ID 0x000d).
func hasACS(bdf string) (bool, error) {
	cfg, err := os.ReadFile(filepath.Join(sysPCI, "devices", bdf, "config"))
	if err != nil {
		return false, err
	}
	if len(cfg) < 4096 {
		return false, fmt.Errorf("%s/config: %d bytes, no extended space", bdf, len(cfg))
	}
	for off, n := 0x100, 0; off >= 0x100 && off+4 <= len(cfg) && n < 64; n++ {
		h := binary.LittleEndian.Uint32(cfg[off:])
		if h == 0 {
			break
		}
		if h&0xffff == 0x000d {
			return true, nil
		}
		off = int(h >> 20)
	}
	return false, nil
}

func sameSet(a, b []string) bool {
	x, y := append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(x)
	sort.Strings(y)
	return strings.Join(x, " ") == strings.Join(y, " ")
}

// The daemon's CDI spec in its fixed layout: `- name: "ID"` then its `- path: "..."` lines.
func parseSpec(b []byte) (kind string, nodes map[string][]string, order []string) {
	nodes = map[string][]string{}
	var cur string
	q := regexp.MustCompile(`"([^"]*)"`)
	for _, line := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(line)
		m := q.FindStringSubmatch(t)
		switch {
		case strings.HasPrefix(t, "kind:") && m != nil:
			kind = m[1]
		case strings.HasPrefix(t, "- name:") && m != nil:
			cur = m[1]
			order = append(order, cur)
		case strings.HasPrefix(t, "- path:") && m != nil && cur != "":
			nodes[cur] = append(nodes[cur], m[1])
		}
	}
	return kind, nodes, order
}
