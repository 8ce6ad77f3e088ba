package main

// The hyperlight plugin as a DRA driver (PLUGIN_API=dra) on another simulated node: a fake API
// server (kubelet.FakeAPI behind the HTTPS stub) keeps its ResourceSlices and a claim, and
// grpc-go does the kubelet's part: the plugin watcher's registration, NodePrepareResources
// (twice: the second answered from the checkpoint) and NodeUnprepareResources.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sdp/kubelet"
)

const draNode = "demo-node"

func (d *demo) dra() {
	fmt.Println("\nhyperlight as a DRA driver (PLUGIN_API=dra) demo")
	n, err := kubelet.NewNode()
	if err != nil {
		fail("dra setup", "%v", err)
	}
	d.node = n
	if err := n.MknodKVM(); err != nil {
		fail("dra setup", "%v", err)
	}
	api := kubelet.NewFakeAPI()
	stub, err := kubelet.StartAPIStub(api.Answer)
	if err != nil {
		fail("dra setup", "%v", err)
	}
	defer stub.Close()
	if err := kubelet.WriteServiceAccount(n.Root, "demo-token\n", stub.CAPEM); err != nil {
		fail("dra setup", "%v", err)
	}
	field("node root", "%s (SDP_TEST_ROOT)", n.Root)
	field("API server", "fake, https://%s (ResourceSlices and ResourceClaims kept in memory)", stub.Addr())
	d.started = time.Now()
	d.d, err = kubelet.StartDaemon(d.bin, kubelet.DaemonEnv(n.Root, "LOG_LEVEL=info", "PLUGIN_API=dra",
		"DEVICE_COUNT=3", "NODE_NAME="+draNode, "NODE_LABELS=false", "KUBERNETES_SERVICE_HOST="+stub.Host,
		"KUBERNETES_SERVICE_PORT="+stub.PortString(), "NO_PROXY=*", "no_proxy=*"))
	if err != nil {
		fail("dra start", "%v", err)
	}

	heading("D1. registration (the kubelet's plugin watcher)")
	c, err := kubelet.DRARegister(n.Root, kubelet.DRADriverHyperlight, startBound)
	if err != nil {
		d.daemonAlive("dra registration")
		fail("dra registration", "%v", err)
	}
	defer c.Close()
	field("GetInfo", "type %s, name %s, versions %s", c.Info.Type, c.Info.Name, strings.Join(c.Info.SupportedVersions, ","))
	field("endpoint", "%s", rel(n, c.Info.Endpoint))
	field("registered", "%s after start", ms(time.Since(d.started)))

	heading("D2. ResourceSlice published to the API server")
	if !kubelet.Poll(startBound, func() bool { return api.Device() != nil }) {
		fail("dra slice", "no ResourceSlice published within %v", startBound)
	}
	b, _ := json.Marshal(api.Device())
	field("device", "%s", b)

	heading("D3. NodePrepareResources (a claim allocated that device, one sandbox)")
	api.SetClaim("default", "sandbox-hv", "6f1d2c3b-0000-4000-8000-00000000d3m0", draNode, true)
	t := time.Now()
	r, err := c.Prepare("default", "sandbox-hv", "6f1d2c3b-0000-4000-8000-00000000d3m0")
	if err != nil || r.Error != "" || len(r.Devices) != 1 {
		fail("dra prepare", "%v %+v", err, r)
	}
	dv := r.Devices[0]
	field("answer", "%s after the call: pool %s, device %s, requests %s", ms(time.Since(t)), dv.PoolName, dv.DeviceName,
		strings.Join(dv.RequestNames, ","))
	field("cdi_device_ids", "%s", strings.Join(dv.CdiDeviceIds, " "))
	ckpt := filepath.Join(n.Root, "var/lib/kubelet/plugins", kubelet.DRADriverHyperlight, "claims", "6f1d2c3b-0000-4000-8000-00000000d3m0")
	text, err := os.ReadFile(ckpt)
	if err != nil {
		fail("dra prepare", "checkpoint: %v", err)
	}
	field("checkpoint", "%s: %q", rel(n, ckpt), text)
	t = time.Now()
	if r2, err := c.Prepare("default", "sandbox-hv", "6f1d2c3b-0000-4000-8000-00000000d3m0"); err != nil || r2.Error != "" {
		fail("dra prepare again", "%v %+v", err, r2)
	}
	field("again", "%s, from the checkpoint (the claim was fetched %d time)", ms(time.Since(t)),
		api.ClaimGets("default", "sandbox-hv"))

	heading("D4. NodeUnprepareResources (the pod is gone)")
	if e, err := c.Unprepare("default", "sandbox-hv", "6f1d2c3b-0000-4000-8000-00000000d3m0"); err != nil || e != "" {
		fail("dra unprepare", "%v %s", err, e)
	}
	if _, err := os.Stat(ckpt); !os.IsNotExist(err) {
		fail("dra unprepare", "the checkpoint is still there: %v", err)
	}
	field("checkpoint", "removed")
	if code, err := d.d.Stop(5 * time.Second); err != nil || code != 0 {
		fail("dra stop", "exit %d %v", code, err)
	}
	regSock := filepath.Join(n.Root, "var/lib/kubelet/plugins_registry", kubelet.DRADriverHyperlight+"-reg.sock")
	if _, err := os.Stat(regSock); !os.IsNotExist(err) {
		fail("dra stop", "%s is still there: %v", regSock, err)
	}
	field("SIGTERM", "exit 0; %s removed (the kubelet deregisters the driver)", rel(n, regSock))
}
