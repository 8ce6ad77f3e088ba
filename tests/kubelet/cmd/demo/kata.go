package main

// The kata part of the demo: kata-device-plugin on a simulated node with three VFIO-bound PCI
// functions (a GPU, an NVSwitch and a NIC the table does not name), the same mock kubelet:
// what it skips and why, what it advertises, an Allocate answer and the CDI spec Kata reads.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"sdp/kubelet"
	api "sdp/v1beta1"
)

type kataFunc struct {
	n    int
	f    kubelet.PCIFunc
	what string
}

var kataNode = []kataFunc{
	{0, kubelet.GPU("0000:41:00.0", 0), "NVIDIA GPU (class 0x030200, 3D controller)"},
	{1, kubelet.NVSwitch("0000:43:00.0", 0), "NVIDIA NVSwitch (class 0x068000, bridge)"},
	{2, kubelet.PCIFunc{BDF: "0000:01:00.0", Vendor: 0x15b3, Class: 0x020700, NUMA: 0},
		"Mellanox InfiniBand NIC (vendor 0x15b3, class 0x020700)"},
}

var logKV = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// logFields parses a logfmt line (quoted values unquoted).
func logFields(line string) map[string]string {
	m := map[string]string{}
	for _, kv := range logKV.FindAllStringSubmatch(line, -1) {
		v := kv[2]
		if strings.HasPrefix(v, `"`) {
			v = strings.ReplaceAll(strings.Trim(v, `"`), `\"`, `"`)
		}
		m[kv[1]] = v
	}
	return m
}

func (d *demo) kata(build string) {
	bin, err := kubelet.Executable(build, kubelet.KataBinary)
	if err != nil {
		fail("kata", "%v", err)
	}
	n, err := kubelet.NewNode()
	if err != nil {
		fail("kata setup", "%v", err)
	}
	d.node = n
	tree, err := kubelet.NewKataTree(n.Root)
	if err != nil {
		fail("kata setup", "%v", err)
	}
	fmt.Println("\n\nkata device plugin demo")
	field("node root", "%s (SDP_TEST_ROOT)", n.Root)
	for _, e := range kataNode {
		if err := tree.Add(e.n, e.f); err != nil {
			fail("kata setup", "%v", err)
		}
		field(kubelet.VFIOName(e.n), "%s at %s, bound to vfio-pci", e.what, e.f.BDF)
	}
	if d.k, err = kubelet.New(n.KubeletDir); err != nil {
		fail("kata setup", "%v", err)
	}
	heading("k1. daemon started: what the scan kept and skipped (its log)")
	d.started = time.Now()
	d.d, err = kubelet.StartDaemon(bin, kubelet.PlainDaemonEnv(n.Root, "LOG_LEVEL=info"))
	if err != nil {
		fail("kata start", "%v", err)
	}
	gpu := d.kataRegistered(kubelet.KataGPU)
	d.kataRegistered(kubelet.KataNVSwitch)
	for _, l := range d.d.Stderr.Lines() {
		f := logFields(l)
		switch f["msg"] {
		case "skipping VFIO device":
			field("skipped", "%s %s (vendor %s, class %s): %s (logged at %s)", f["device"], f["pci"],
				f["vendor"], f["class"], f["reason"], f["level"])
		case "advertising":
			field("advertising", "%s: %s device(s), ID:address/cdev %s", f["resource"], f["devices"], f["ids"])
		}
	}
	heading("k2. registration: one socket per resource")
	for _, res := range kubelet.KataResources {
		p := d.k.Current(res)
		devs, err := d.k.WaitDevices(res, kubelet.AllHealth(kubelet.Healthy), eventBound)
		if err != nil {
			fail("kata ListAndWatch", "%v", err)
		}
		var ids []string
		for _, dv := range devs {
			ids = append(ids, fmt.Sprintf("%s (NUMA %v)", dv.ID, numa(dv.Topology)))
		}
		field("resource", "%s on socket %s", res, p.Endpoint)
		field("", "devices %s, %s", strings.Join(ids, " "), kubelet.Healthy)
	}
	heading("k3. Allocate (one Kata pod asks for nvidia.com/gpu 0)")
	a, err := d.k.Allocate(kubelet.KataGPU, []string{"0"})
	if err != nil {
		fail("kata Allocate", "%v", err)
	}
	for _, c := range a.Response.CdiDevices {
		field("cdi_devices", "%s", c.Name)
	}
	for k, v := range a.Response.Annotations {
		field("annotation", "%s = %s", k, v)
	}
	if len(a.Response.CdiDevices) == 0 {
		fail("kata Allocate", "the answer has no cdi_devices")
	}
	spec := filepath.Join(n.CDIDir, kubelet.KataSpecFile(kubelet.KataGPU))
	heading("k4. CDI spec " + rel(n, spec) + " (the runtime injects the cdev into the VM)")
	b, err := os.ReadFile(spec)
	if err != nil {
		fail("kata CDI spec", "%v", err)
	}
	fmt.Printf("  %s\n", strings.ReplaceAll(strings.TrimRight(string(b), "\n"), "\n", "\n  "))
	heading("k5. SIGTERM")
	if err := d.d.Signal(syscall.SIGTERM); err != nil {
		fail("kata SIGTERM", "%v", err)
	}
	code, err := d.d.Wait(10 * time.Second)
	if err != nil || code != 0 {
		fail("kata SIGTERM", "exit status %d, want 0 (%v)", code, err)
	}
	if kubelet.IsSocket(gpu.Socket) {
		fail("kata SIGTERM", "socket %s left behind", gpu.Socket)
	}
	field("exit", "status 0, sockets removed, CDI specs kept")
	d.cleanup()
	d.kataLegacy(bin)
}

func (d *demo) kataRegistered(res string) *kubelet.Plugin {
	p, err := d.k.WaitRegistered(res, 1, startBound)
	if err != nil {
		d.daemonAlive("kata registration")
		fail("kata registration", "%v", err)
	}
	return p
}

func numa(t *api.TopologyInfo) string {
	var ids []string
	for _, n := range t.GetNodes() {
		ids = append(ids, fmt.Sprint(n.GetID()))
	}
	if len(ids) == 0 {
		return "unknown"
	}
	return strings.Join(ids, ",")
}
