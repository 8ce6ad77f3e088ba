package main

// DRA for kata (PLUGIN_API=dra): kata as the image ships it (the static build beside its static
// sdp-kube-api), on a simulated legacy VFIO node of four GPUs (each with its audio companion in
// its IOMMU group) and an NVSwitch, with the fake API server and grpc-go as in dra.go. Per round:
// start → ResourceSlices published; NodePrepareResources of -dra-claims one-GPU claims the first
// time and again; and the time from a companion bound to its host driver (the driver link
// changed, then one PCI uevent from the kernel, as a real bind sends) to the slice's taint, and
// from its rebind to the taint gone (the fake's store, polled every millisecond).

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	k "sdp/kubelet"
)

// draKataNode: the GPUs a, b (one root complex), c, d (another) and an NVSwitch.
var draKataNode = []k.PCIFunc{
	k.GPU("0000:41:00.0", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	k.Audio("0000:41:00.1", 0).InGroup(10).Below("pci0000:40/0000:40:01.0"),
	k.GPU("0000:42:00.0", 0).InGroup(11).Below("pci0000:40/0000:40:02.0"),
	k.Audio("0000:42:00.1", 0).InGroup(11).Below("pci0000:40/0000:40:02.0"),
	k.GPU("0000:c1:00.0", 1).InGroup(12).Below("pci0000:c0/0000:c0:01.0"),
	k.Audio("0000:c1:00.1", 1).InGroup(12).Below("pci0000:c0/0000:c0:01.0"),
	k.GPU("0000:c2:00.0", 1).InGroup(13).Below("pci0000:c0/0000:c0:02.0"),
	k.Audio("0000:c2:00.1", 1).InGroup(13).Below("pci0000:c0/0000:c0:02.0"),
	k.NVSwitch("0000:05:00.0", 0).InGroup(14),
}

// pciUevent asks the kernel for a PCI uevent (ACTION=add) on one of the machine's own bridges.
func pciUevent() error {
	devs, _ := filepath.Glob("/sys/bus/pci/devices/*")
	for _, d := range devs {
		if c, err := os.ReadFile(filepath.Join(d, "class")); err == nil && strings.HasPrefix(string(c), "0x06") {
			return os.WriteFile(filepath.Join(d, "uevent"), []byte("add"), 0)
		}
	}
	if len(devs) > 0 {
		return os.WriteFile(filepath.Join(devs[0], "uevent"), []byte("add"), 0)
	}
	return fmt.Errorf("no PCI function in /sys/bus/pci/devices to raise a uevent with")
}

func draKataOneRound(kata daemonKind, claims int) (r draRound) {
	n, err := k.NewNode()
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer n.Remove()
	t, err := k.NewKataTree(n.Root)
	if err == nil {
		err = os.Remove(t.DevicesDir) // legacy
	}
	for _, f := range draKataNode {
		if err == nil {
			err = t.AddLegacy(f)
		}
	}
	if err != nil {
		return draRound{note: err.Error()}
	}
	api := k.NewFakeAPI()
	stub, err := k.StartAPIStub(api.Answer)
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer stub.Close()
	if err := k.WriteServiceAccount(n.Root, "bench-token\n", stub.CAPEM); err != nil {
		return draRound{note: err.Error()}
	}
	env := append(append([]string{"LOG_LEVEL=info"}, kata.env...), "PLUGIN_API=dra", "NODE_NAME=bench-node",
		"KUBERNETES_SERVICE_HOST="+stub.Host, "KUBERNETES_SERVICE_PORT="+stub.PortString(), "NO_PROXY=*", "no_proxy=*")
	start := time.Now()
	d, err := k.StartDaemon(kata.bin, k.DaemonEnv(n.Root, env...))
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer d.Stop(10 * time.Second)
	regSock := filepath.Join(n.Root, "var/lib/kubelet/plugins_registry", k.DRADriverKata+"-reg.sock")
	if !k.PollEvery(draPoll, draBound, func() bool { _, err := os.Stat(regSock); return err == nil }) {
		return draRound{note: "no registration socket: " + d.Log()}
	}
	r.reg = ms(time.Since(start))
	if !k.PollEvery(draPoll, draBound, func() bool { return len(api.Devices()) == 5 }) {
		return draRound{note: "no ResourceSlice of 5 devices: " + d.Log()}
	}
	r.slice = ms(time.Since(start))
	c, err := k.DRARegister(n.Root, k.DRADriverKata, draBound)
	if err != nil {
		return draRound{note: err.Error()}
	}
	defer c.Close()
	gpus := []string{"gpu-0000-41-00-0", "gpu-0000-42-00-0", "gpu-0000-c1-00-0", "gpu-0000-c2-00-0"}
	for i := 0; i < claims; i++ {
		uid := fmt.Sprintf("bench-%04d-0000-4000-8000-000000000000", i)
		name := fmt.Sprintf("c%d", i)
		api.SetClaimDevices("bench", name, uid, k.DRADriverKata, "bench-node", gpus[i%len(gpus)])
		t0 := time.Now()
		p, err := c.Prepare("bench", name, uid)
		if err != nil || p.Error != "" {
			return draRound{note: fmt.Sprintf("prepare %s: %v %+v", name, err, p)}
		}
		r.prepare = append(r.prepare, ms(time.Since(t0)))
		t0 = time.Now()
		if p, err = c.Prepare("bench", name, uid); err != nil || p.Error != "" {
			return draRound{note: fmt.Sprintf("prepare %s again: %v %+v", name, err, p)}
		}
		r.again = append(r.again, ms(time.Since(t0)))
	}
	tainted := func() bool { dv := api.Devices()["gpu-0000-41-00-0"]; return dv != nil && dv["taints"] != nil }
	t0 := time.Now()
	if err := t.Bind("0000:41:00.1", "snd_hda_intel"); err != nil {
		return draRound{note: err.Error()}
	}
	if err := pciUevent(); err != nil {
		return draRound{note: err.Error()}
	}
	if !k.PollEvery(draPoll, draBound, tainted) {
		return draRound{note: "no taint after the companion was bound to its host driver: " + d.Log()}
	}
	r.taint = ms(time.Since(t0))
	t0 = time.Now()
	if err := t.Bind("0000:41:00.1", ""); err != nil {
		return draRound{note: err.Error()}
	}
	if err := pciUevent(); err != nil {
		return draRound{note: err.Error()}
	}
	if !k.PollEvery(draPoll, draBound, func() bool { return len(api.Devices()) == 5 && !tainted() }) {
		return draRound{note: "the taint stayed after the companion went back to vfio-pci: " + d.Log()}
	}
	r.untaint = ms(time.Since(t0))
	return r
}
