// Command sdp-katatree lays out the VFIO host make test-cluster gives the kata chart: a legacy
// VFIO tree in the kernel's layout (sdp/kubelet's KataTree) under ROOT, with the group nodes
// and the container node made with mknod under ROOT/dev/vfio, and prints what it made as JSON
// on stdout (tests/cluster/run.sh reads it).
//
//	sdp-katatree ROOT
//
// The tree has two NUMA nodes. On NUMA node 0, below the root complex pci0000:00: GPU a alone
// under one PCIe switch, GPUs b and c under another, and an NVSwitch; on NUMA node 1, below its
// own root complex pci0000:80: GPU d. a has the lowest address, so the pair the kubelet takes in
// its own order (the lowest IDs) is a and b, on two switches; the packed pair, the one kata's
// GetPreferredAllocation answers, is b and c. a, b and c are H100s (GH100_H100_SXM5_80GB), d an
// A100 (GA100_A100_SXM4_40GB); each GPU has its HD audio function in its IOMMU group, bound to
// vfio-pci (the companions: the test binds one to snd_hda_intel).
//
// ROOT/sys is the sysfs the chart's pod is given at /sys (by the test's post-renderer), and
// ROOT/dev/vfio is bind-mounted at the host's /dev/vfio, where the chart's hostPath and the CDI
// specs' host paths find it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	k "sdp/kubelet"
)

// device is one advertised unit as the test sees it.
type device struct {
	Name     string `json:"name"` // a, b, c, d, nvswitch
	Resource string `json:"resource"`
	BDF      string `json:"bdf"`
	Group    int    `json:"group"`
	NUMA     int    `json:"numa"`
	// for DRA: the device's name and attributes as kata publishes them
	DRAName   string `json:"dra_name"`
	PCIeRoot  string `json:"pcie_root"`
	Model     string `json:"model"`
	Companion string `json:"companion,omitempty"` // its audio function's driver link, below ROOT
}

type tree struct {
	Root       string   `json:"root"`
	Devices    []device `json:"devices"`
	PackedPair []string `json:"packed_pair"` // the names kata's preference gives 2 GPUs on NUMA node 0
	OwnPair    []string `json:"own_pair"`    // the names the kubelet's own order gives
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: sdp-katatree ROOT")
		os.Exit(2)
	}
	t, err := build(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sdp-katatree: %v\n", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(t); err != nil {
		fmt.Fprintf(os.Stderr, "sdp-katatree: %v\n", err)
		os.Exit(1)
	}
}

func build(root string) (*tree, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	kt, err := k.NewKataTree(root)
	if err != nil {
		return nil, err
	}
	// The legacy backend: no /dev/vfio/devices (VFIO_BACKEND=auto picks legacy then).
	if err := os.Remove(kt.DevicesDir); err != nil {
		return nil, err
	}
	const (
		switch1  = "0000:00:01.0/0000:10:00.0/0000:11:00.0"
		switch2a = "0000:00:02.0/0000:20:00.0/0000:21:00.0"
		switch2b = "0000:00:02.0/0000:20:00.0/0000:21:01.0"
		switch3  = "pci0000:80/0000:80:00.0/0000:81:00.0"
	)
	funcs := []struct {
		name string
		res  string
		f    k.PCIFunc
	}{
		{"a", k.KataGPU, k.GPU("0000:12:00.0", 0).Below(switch1)},
		{"b", k.KataGPU, k.GPU("0000:22:00.0", 0).Below(switch2a)},
		{"c", k.KataGPU, k.GPU("0000:23:00.0", 0).Below(switch2b)},
		{"d", k.KataGPU, k.GPU("0000:82:00.0", 1).Model(0x20b0).Below(switch3)},
		{"nvswitch", k.KataNVSwitch, k.NVSwitch("0000:30:00.0", 0)},
	}
	t := &tree{Root: root, PackedPair: []string{"b", "c"}, OwnPair: []string{"a", "b"}}
	for _, x := range funcs {
		if err := kt.AddLegacy(x.f); err != nil {
			return nil, fmt.Errorf("%s: %v", x.f.BDF, err)
		}
		dev := device{Name: x.name, Resource: x.res, BDF: x.f.BDF, Group: kt.GroupOf(x.f.BDF), NUMA: x.f.NUMA,
			DRAName: strings.NewReplacer(":", "-", ".", "-").Replace(strings.TrimPrefix(x.res, "nvidia.com/") + "-" + x.f.BDF),
			PCIeRoot: "pci0000:00", Model: "GH100_H100_SXM5_80GB"}
		if strings.HasPrefix(x.f.Under, "pci") {
			dev.PCIeRoot = strings.SplitN(x.f.Under, "/", 2)[0]
		}
		if x.f.Device == 0x20b0 {
			dev.Model = "GA100_A100_SXM4_40GB"
		}
		if x.res == k.KataGPU {
			audio := k.Audio(strings.TrimSuffix(x.f.BDF, ".0")+".1", x.f.NUMA).InGroup(dev.Group).Below(x.f.Under)
			if err := kt.AddLegacy(audio); err != nil {
				return nil, fmt.Errorf("%s: %v", audio.BDF, err)
			}
			rel, err := filepath.Rel(root, filepath.Join(kt.PCIPath(audio.BDF), "driver"))
			if err != nil {
				return nil, err
			}
			dev.Companion = rel
		}
		t.Devices = append(t.Devices, dev)
	}
	return t, nil
}
