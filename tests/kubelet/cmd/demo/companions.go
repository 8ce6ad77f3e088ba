package main

// The micro-VM sandbox's companions (COMPANIONS=tun,vhost-net,vhost-vsock) beside the
// hypervisor on another simulated node: /dev/net/tun and /dev/vhost-net are there,
// /dev/vhost-vsock is not (its module not loaded) until the demo makes it. The shim fakes
// their ioctls as it does the hypervisor's.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sdp/kubelet"
)

var probeRe = regexp.MustCompile(`resource=(\S+) .*(?:probe|reason)=("[^"]*"|\S+)`)

// companionVerdict is the newest "device usable" or "device unusable" line of resource.
func (d *demo) companionVerdict(resource string) string {
	lines := d.d.Stderr.Lines()
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if !strings.Contains(l, "resource="+resource+" ") || !strings.Contains(l, `msg="device `) {
			continue
		}
		if m := probeRe.FindStringSubmatch(l); m != nil {
			return m[2]
		}
	}
	return "(no verdict logged yet)"
}

func (d *demo) companions() {
	fmt.Println("\nhyperlight with the micro-VM sandbox's companions demo")
	n, err := kubelet.NewNode()
	if err != nil {
		fail("companions setup", "%v", err)
	}
	d.node = n
	if err := n.MknodKVM(); err != nil {
		fail("companions setup", "%v", err)
	}
	for _, c := range kubelet.Companions[:2] {
		if err := n.MknodCompanion(c); err != nil {
			fail("companions setup", "%v", err)
		}
	}
	if d.k, err = kubelet.New(n.KubeletDir); err != nil {
		fail("companions setup", "%v", err)
	}
	field("node root", "%s (SDP_TEST_ROOT)", n.Root)
	field("nodes", "/dev/kvm, /dev/net/tun 10:200, /dev/vhost-net 10:238; no /dev/vhost-vsock (module not loaded)")
	field("environment", "COMPANIONS=tun,vhost-net,vhost-vsock DEVICE_COUNT=100 TUN_COUNT=100 VHOST_NET_COUNT=100 VHOST_VSOCK_COUNT=100")
	d.d, err = kubelet.StartDaemon(d.bin, kubelet.DaemonEnv(n.Root, "LOG_LEVEL=info", "DEVICE_COUNT=100",
		"COMPANIONS=tun,vhost-net,vhost-vsock", "TUN_COUNT=100", "VHOST_NET_COUNT=100", "VHOST_VSOCK_COUNT=100"))
	if err != nil {
		fail("companions start", "%v", err)
	}

	heading("C1. four resources registered, each probed on its own")
	resources := []string{kubelet.HyperlightResource}
	for _, c := range kubelet.Companions {
		resources = append(resources, "hyperlight.dev/"+c.Name)
	}
	for i, res := range resources {
		if _, err := d.k.WaitRegistered(res, 1, startBound); err != nil {
			d.daemonAlive("companions registration")
			fail("companions registration", "%s: %v", res, err)
		}
		want := kubelet.Healthy
		if i == 3 {
			want = kubelet.Unhealthy
		}
		devs, err := d.k.WaitDevices(res, kubelet.AllHealth(want), eventBound)
		if err != nil {
			fail("companions ListAndWatch", "%s: %v", res, err)
		}
		verdict := ""
		kubelet.Poll(eventBound, func() bool {
			verdict = d.companionVerdict(res)
			return !strings.HasPrefix(verdict, "(")
		})
		field(res, "%d %s: %s", len(devs), want, verdict)
	}

	heading("C2. Allocate hyperlight.dev/tun (tun-0)")
	a, err := d.k.Allocate("hyperlight.dev/tun", []string{"tun-0"})
	if err != nil {
		fail("companions Allocate", "%v", err)
	}
	for _, c := range a.Response.CdiDevices {
		field("cdi_devices", "%s", c.Name)
	}
	for k, v := range a.Response.Annotations {
		field("annotation", "%s = %s", k, v)
	}
	spec := filepath.Join(n.CDIDir, "hyperlight-tun.json")
	b, err := os.ReadFile(spec)
	if err != nil {
		fail("companions CDI", "%v", err)
	}
	if _, err := kubelet.ParseCDI(b); err != nil {
		fail("companions CDI", "%v", err)
	}
	field("CDI spec", "%s (%d bytes; kind hyperlight.dev/tun, device tun, node /dev/net/tun)", rel(n, spec), len(b))

	heading("C3. modprobe vhost_vsock: /dev/vhost-vsock appears")
	start := time.Now()
	if err := n.MknodCompanion(kubelet.Companions[2]); err != nil {
		fail("companions vsock", "%v", err)
	}
	devs, err := d.k.WaitDevices("hyperlight.dev/vhost-vsock", kubelet.AllHealth(kubelet.Healthy), eventBound)
	if err != nil {
		fail("companions vsock", "%v", err)
	}
	field("vhost-vsock", "%d %s %s after the node was made: %s", len(devs), kubelet.Healthy, ms(time.Since(start)),
		d.companionVerdict("hyperlight.dev/vhost-vsock"))
	r, err := kubelet.RunCommand(eventBound, d.bin, kubelet.DaemonEnv(n.Root, "COMPANIONS=tun,vhost-net,vhost-vsock"),
		"--health-check=readiness")
	if err != nil || r.Code != 0 {
		fail("companions readiness", "exit %d %v: %s", r.Code, err, r.Stderr)
	}
	field("readiness", "--health-check=readiness exit 0: all four registered, streaming, healthy")
	code, err := d.d.Stop(10 * time.Second)
	if err != nil || code != 0 {
		fail("companions SIGTERM", "exit %d %v", code, err)
	}
	if socks, err := n.PluginSockets(); err != nil || len(socks) != 0 {
		fail("companions SIGTERM", "sockets left: %v %v", socks, err)
	}
	entries, err := os.ReadDir(n.CDIDir)
	if err != nil || len(entries) != 4 {
		fail("companions SIGTERM", "CDI specs %v %v, want the four kept", entries, err)
	}
	field("SIGTERM", "exit 0, the four sockets removed, the four CDI specs kept")
}
