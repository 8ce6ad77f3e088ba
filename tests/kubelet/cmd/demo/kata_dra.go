package main

// kata-device-plugin as a DRA driver (PLUGIN_API=dra) on another simulated node: two GPUs on two
// PCIe root complexes, each with its audio function in its IOMMU group (legacy VFIO); the fake
// API server keeps the slices and claims, grpc-go does the kubelet's part. What the scheduler
// would see (each group a device, its topology as attributes), a claim of both GPUs prepared as
// their CDI devices, and a companion bound to its host driver: the device tainted, a claim on it
// refused with the kernel's reason.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"sdp/kubelet"
)

var kataDRANode = []kubelet.PCIFunc{
	kubelet.GPU("0000:41:00.0", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	kubelet.Audio("0000:41:00.1", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	kubelet.GPU("0000:c1:00.0", 1).InGroup(11).Model(0x20b0).Below("pci0000:c0/0000:c0:01.0"),
	kubelet.Audio("0000:c1:00.1", 1).InGroup(11).Below("pci0000:c0/0000:c0:01.0"),
}

// attr: a device attribute's value as text.
func attr(dev map[string]interface{}, name string) string {
	a, _ := dev["attributes"].(map[string]interface{})[name].(map[string]interface{})
	for _, v := range a {
		return fmt.Sprint(v)
	}
	return "-"
}

func (d *demo) kataDRA(build string) {
	fmt.Println("\nkata-device-plugin as a DRA driver (PLUGIN_API=dra) demo")
	bin, err := kubelet.Executable(build, kubelet.KataBinary)
	if err != nil {
		fail("kata dra", "%v", err)
	}
	n, err := kubelet.NewNode()
	if err != nil {
		fail("kata dra setup", "%v", err)
	}
	d.node = n
	tree, err := kubelet.NewKataTree(n.Root)
	if err == nil {
		err = os.Remove(tree.DevicesDir)
	}
	for _, f := range kataDRANode {
		if err == nil {
			err = tree.AddLegacy(f)
		}
	}
	if err != nil {
		fail("kata dra setup", "%v", err)
	}
	api := kubelet.NewFakeAPI()
	stub, err := kubelet.StartAPIStub(api.Answer)
	if err != nil {
		fail("kata dra setup", "%v", err)
	}
	defer stub.Close()
	if err := kubelet.WriteServiceAccount(n.Root, "demo-token\n", stub.CAPEM); err != nil {
		fail("kata dra setup", "%v", err)
	}
	field("node", "GPUs 0000:41:00.0 (H100, pci0000:40, group 10) and 0000:c1:00.0 (A100, pci0000:c0, group 11), each with its audio function")
	d.started = time.Now()
	d.d, err = kubelet.StartDaemon(bin, kubelet.DaemonEnv(n.Root, "LOG_LEVEL=info", "PLUGIN_API=dra", "NODE_NAME="+draNode,
		"KUBERNETES_SERVICE_HOST="+stub.Host, "KUBERNETES_SERVICE_PORT="+stub.PortString(), "NO_PROXY=*", "no_proxy=*"))
	if err != nil {
		fail("kata dra start", "%v", err)
	}

	heading("K1. registration (driver " + kubelet.DRADriverKata + ")")
	c, err := kubelet.DRARegister(n.Root, kubelet.DRADriverKata, startBound)
	if err != nil {
		d.daemonAlive("kata dra registration")
		fail("kata dra registration", "%v", err)
	}
	defer c.Close()
	field("endpoint", "%s", rel(n, c.Info.Endpoint))

	heading("K2. ResourceSlice: one device per IOMMU group, its topology as attributes")
	if !kubelet.Poll(startBound, func() bool { return len(api.Devices()) == 2 }) {
		fail("kata dra slice", "no ResourceSlice of 2 devices within %v", startBound)
	}
	devs := api.Devices()
	var names []string
	for name := range devs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		dv := devs[name]
		field(name, "pcieRoot %s, pciBusID %s, numaNode %s, model %s, iommuGroup %s, pcieSwitch %s",
			attr(dv, "resource.kubernetes.io/pcieRoot"), attr(dv, "resource.kubernetes.io/pciBusID"),
			attr(dv, "resource.kubernetes.io/numaNode"), attr(dv, "model"), attr(dv, "iommuGroup"), attr(dv, "pcieSwitch"))
	}

	heading("K3. NodePrepareResources (a claim allocated both GPUs)")
	api.SetClaimDevices("default", "vm-gpus", "6f1d2c3b-0000-4000-8000-00000000d3m1", kubelet.DRADriverKata, draNode, names...)
	r, err := c.Prepare("default", "vm-gpus", "6f1d2c3b-0000-4000-8000-00000000d3m1")
	if err != nil || r.Error != "" || len(r.Devices) != 2 {
		fail("kata dra prepare", "%v %+v", err, r)
	}
	for _, dv := range r.Devices {
		field(dv.DeviceName, "%s", strings.Join(dv.CdiDeviceIds, " "))
	}
	spec := filepath.Join(n.CDIDir, "kata-dra.nvidia.com-gpu.yaml")
	b, err := os.ReadFile(spec)
	if err != nil {
		fail("kata dra prepare", "%v", err)
	}
	fmt.Printf("  %s:\n", rel(n, spec))
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		fmt.Printf("    %s\n", l)
	}

	heading("K4. the H100's audio function bound to snd_hda_intel: the kernel would refuse group 10")
	if err := tree.Bind("0000:41:00.1", "snd_hda_intel"); err != nil {
		fail("kata dra bind", "%v", err)
	}
	api.SetClaimDevices("default", "vm-gpu", "6f1d2c3b-0000-4000-8000-00000000d3m2", kubelet.DRADriverKata, draNode, names[0])
	r, err = c.Prepare("default", "vm-gpu", "6f1d2c3b-0000-4000-8000-00000000d3m2")
	if err != nil || r.Error == "" {
		fail("kata dra refusal", "a claim on the group that is not viable was prepared: %v %+v", err, r)
	}
	field("prepare", "refused: %s", r.Error)
	tainted := func() bool { return api.Devices()[names[0]]["taints"] != nil }
	if !kubelet.Poll(eventBound, tainted) {
		fail("kata dra taint", "%s not tainted within %v", names[0], eventBound)
	}
	field("slice", "%s taints %v (no new claim is allocated it)", names[0], api.Devices()[names[0]]["taints"])
	if err := tree.Bind("0000:41:00.1", ""); err != nil {
		fail("kata dra bind", "%v", err)
	}
	start := time.Now()
	if !kubelet.Poll(eventBound, func() bool { return !tainted() }) {
		fail("kata dra taint", "%s still tainted %v after the rebind", names[0], eventBound)
	}
	field("rebound", "to vfio-pci: the taint gone %v later (a down group is checked every second)", time.Since(start).Round(time.Millisecond))
	if code, err := d.d.Stop(5 * time.Second); err != nil || code != 0 {
		fail("kata dra stop", "exit %d %v", code, err)
	}
	field("SIGTERM", "exit 0")
}
