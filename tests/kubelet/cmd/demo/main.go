// Command demo runs both plugins, one after the other. First the hyperlight device plugin on
// a simulated node (a temporary root with /dev/kvm, the kubelet device-plugins directory and
// the CDI directory) against the in-process mock kubelet, with the hypervisor ioctls faked by
// tests/fakes/libhvshim.so (so the transcript never depends on the host's own /dev/kvm), and
// prints a readable transcript: start, registration, the advertised resource, an Allocate
// answer, the CDI spec, a kubelet restart, a deleted CDI spec being repaired, and SIGTERM;
// then with the micro-VM sandbox's companions (companions.go), then the same plugin as a DRA
// driver (dra.go).
// Then kata-device-plugin on another simulated node (kata.go), and as a DRA driver
// (kata_dra.go). Every wait is bounded; any failed step exits non-zero.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"sdp/kubelet"
)

const (
	startBound = 15 * time.Second
	eventBound = 5 * time.Second
)

type demo struct {
	build   string
	bin     string
	started time.Time
	node    *kubelet.Node
	k       *kubelet.MockKubelet
	d       *kubelet.Daemon
	showLog bool
}

type stepError struct{ step, msg string }

func (e *stepError) Error() string { return e.step + ": " + e.msg }

func fail(step, format string, args ...interface{}) {
	panic(&stepError{step, fmt.Sprintf(format, args...)})
}

func heading(s string) { fmt.Printf("\n== %s\n", s) }

func field(name string, format string, args ...interface{}) {
	fmt.Printf("  %-14s %s\n", name, fmt.Sprintf(format, args...))
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

func main() {
	build := flag.String("build", "", "build directory holding "+kubelet.HyperlightBinary+" (required)")
	showLog := flag.Bool("log", false, "print the daemon's log at the end")
	flag.Parse()
	if *build == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: sdp-demo -build BUILD_DIR [-log]")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: must run as root (it creates the /dev/kvm character device of the simulated node with mknod)")
		os.Exit(1)
	}
	abs, err := filepath.Abs(*build)
	if err == nil {
		*build = abs
	}
	bin, err := kubelet.Executable(*build, kubelet.HyperlightBinary)
	if err == nil {
		_, err = kubelet.ShimPath(*build)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	// kubelet.DaemonEnv finds the shim through SDP_BUILD_DIR.
	os.Setenv("SDP_BUILD_DIR", *build)
	d := &demo{build: *build, bin: bin, showLog: *showLog}
	os.Exit(d.run())
}

func (d *demo) run() (code int) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		se, ok := r.(*stepError)
		if !ok {
			d.cleanup()
			panic(r)
		}
		fmt.Printf("\ndemo FAILED at %s\n", se)
		if d.d != nil && !d.d.Exited() {
			d.d.Stop(5 * time.Second)
		}
		d.printLog(40)
		d.cleanup()
		code = 1
	}()
	d.setup()
	d.start()
	p := d.registration()
	d.resource()
	d.allocate()
	d.spec()
	d.restart(p)
	d.repair()
	d.sigterm()
	if d.showLog {
		d.printLog(0)
	}
	d.cleanup()
	d.companions()
	if d.showLog {
		d.printLog(0)
	}
	d.cleanup()
	d.dra()
	if d.showLog {
		d.printLog(0)
	}
	d.cleanup()
	d.kata(d.build)
	if d.showLog {
		d.printLog(0)
	}
	d.cleanup()
	d.kataDRA(d.build)
	if d.showLog {
		d.printLog(0)
	}
	d.cleanup()
	fmt.Println("\ndemo finished: every step succeeded")
	return 0
}

func (d *demo) setup() {
	n, err := kubelet.NewNode()
	if err != nil {
		fail("setup", "%v", err)
	}
	d.node = n
	if err := n.MknodKVM(); err != nil {
		fail("setup", "%v", err)
	}
	k, err := kubelet.New(n.KubeletDir)
	if err != nil {
		fail("setup", "%v", err)
	}
	d.k = k
	fmt.Println("hyperlight device plugin demo")
	field("node root", "%s (SDP_TEST_ROOT)", n.Root)
	field("hypervisor", "%s (character device %d:%d)", rel(n, n.KVMPath()), kubelet.KVMMajor, kubelet.KVMMinor)
	field("ioctls", "hypervisor ioctls faked by %s (LD_PRELOAD)", kubelet.ShimLibrary)
	field("kubelet", "mock kubelet (grpc-go) serving %s", rel(n, k.SocketPath()))
}

func rel(n *kubelet.Node, p string) string { return strings.TrimPrefix(p, n.Root) }

func (d *demo) start() {
	heading("1. daemon started")
	r, err := kubelet.RunCommand(eventBound, d.bin, kubelet.DaemonEnv(d.node.Root), "--version")
	if err != nil || r.Code != 0 {
		fail("--version", "exit %d %v: %s", r.Code, err, r.Stderr)
	}
	field("version", "%s", strings.TrimSpace(r.Stdout))
	d.started = time.Now()
	d.d, err = kubelet.StartDaemon(d.bin, kubelet.DaemonEnv(d.node.Root, "LOG_LEVEL=info"))
	if err != nil {
		fail("start", "%v", err)
	}
	field("pid", "%d", d.d.Pid())
}

func (d *demo) daemonAlive(step string) {
	if d.d.Exited() {
		fail(step, "the daemon exited (%s)", d.d.ExitDescription())
	}
}

func (d *demo) registration() *kubelet.Plugin {
	heading("2. registration")
	p, err := d.k.WaitRegistered(kubelet.HyperlightResource, 1, startBound)
	if err != nil {
		d.daemonAlive("registration")
		fail("registration", "%v", err)
	}
	field("resource", "%s", p.Request.ResourceName)
	field("version", "%s", p.Request.Version)
	field("socket", "%s (in %s)", p.Endpoint, rel(d.node, d.node.KubeletDir))
	field("options", "pre_start_required=%v get_preferred_allocation_available=%v",
		p.Options.PreStartRequired, p.Options.GetPreferredAllocationAvailable)
	field("registered", "%s after start (kubelet dialed back and called GetDevicePluginOptions inside Register)",
		ms(p.Registered.Sub(d.started)))
	return p
}

func (d *demo) resource() {
	heading("3. advertised resource (ListAndWatch)")
	devs, err := d.k.WaitDevices(kubelet.HyperlightResource, kubelet.AllHealth(kubelet.Healthy), eventBound)
	if err != nil {
		fail("ListAndWatch", "%v", err)
	}
	var ids []string
	for i, dv := range devs {
		if i < 3 {
			ids = append(ids, dv.ID)
		}
	}
	if len(devs) > 3 {
		ids = append(ids, "...", devs[len(devs)-1].ID)
	}
	field("devices", "%d", len(devs))
	field("IDs", "%s", strings.Join(ids, " "))
	field("health", "all %s", kubelet.Healthy)
	field("node status", "capacity %s: %d, allocatable: %d", kubelet.HyperlightResource, len(devs), len(devs))
}

func (d *demo) allocate() {
	heading("4. Allocate (one container asks for hyperlight-0)")
	a, err := d.k.Allocate(kubelet.HyperlightResource, []string{"hyperlight-0"})
	if err != nil {
		fail("Allocate", "%v", err)
	}
	field("calls", "%s", strings.Join(a.Calls, " -> "))
	for _, c := range a.Response.CdiDevices {
		field("cdi_devices", "%s", c.Name)
	}
	keys := make([]string, 0, len(a.Response.Annotations))
	for k := range a.Response.Annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field("annotation", "%s = %s", k, a.Response.Annotations[k])
	}
	for k, v := range a.Response.Envs {
		field("env", "%s=%s", k, v)
	}
	for _, dv := range a.Response.Devices {
		field("device", "%s -> %s (%s)", dv.HostPath, dv.ContainerPath, dv.Permissions)
	}
	if len(a.Response.CdiDevices) == 0 {
		fail("Allocate", "the answer has no cdi_devices")
	}
}

func (d *demo) spec() {
	heading("5. CDI spec " + rel(d.node, d.node.CDIPath()))
	b, err := os.ReadFile(d.node.CDIPath())
	if err != nil {
		fail("CDI spec", "%v", err)
	}
	if _, err := kubelet.ParseCDI(b); err != nil {
		fail("CDI spec", "%v", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "  ", "  "); err != nil {
		fail("CDI spec", "%v", err)
	}
	fmt.Printf("  %s\n", strings.TrimRight(out.String(), "\n"))
}

func (d *demo) restart(old *kubelet.Plugin) {
	heading("6. kubelet restart")
	start := time.Now()
	if err := d.k.Restart(); err != nil {
		fail("restart", "%v", err)
	}
	field("kubelet", "stopped, every socket in the directory deleted, kubelet.sock served again")
	p, err := d.k.WaitRegistered(kubelet.HyperlightResource, old.Seq+1, eventBound)
	if err != nil {
		d.daemonAlive("re-registration")
		fail("re-registration", "%v", err)
	}
	took := p.Registered.Sub(start)
	devs, err := d.k.WaitDevices(kubelet.HyperlightResource, kubelet.AllHealth(kubelet.Healthy), eventBound)
	if err != nil {
		fail("re-registration", "%v", err)
	}
	field("socket", "%s (was %s, deleted by the restart)", p.Endpoint, old.Endpoint)
	field("re-registered", "%s after the restart", ms(took))
	field("devices", "%d, all %s again", len(devs), kubelet.Healthy)
	if p.Endpoint == old.Endpoint {
		fail("re-registration", "the daemon reused its old socket name %s", old.Endpoint)
	}
}

func (d *demo) repair() {
	heading("7. CDI spec deleted")
	path := d.node.CDIPath()
	want, err := os.ReadFile(path)
	if err != nil {
		fail("CDI repair", "%v", err)
	}
	start := time.Now()
	if err := os.Remove(path); err != nil {
		fail("CDI repair", "%v", err)
	}
	field("removed", "%s", rel(d.node, path))
	deadline := start.Add(eventBound)
	for {
		got, err := os.ReadFile(path)
		if err == nil && bytes.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			fail("CDI repair", "not rewritten within %v", eventBound)
		}
		time.Sleep(time.Millisecond)
	}
	field("repaired", "%s later, byte-identical (%d bytes)", ms(time.Since(start)), len(want))
}

func (d *demo) sigterm() {
	heading("8. SIGTERM")
	p := d.k.Current(kubelet.HyperlightResource)
	start := time.Now()
	if err := d.d.Signal(syscall.SIGTERM); err != nil {
		fail("SIGTERM", "%v", err)
	}
	code, err := d.d.Wait(10 * time.Second)
	if err != nil {
		fail("SIGTERM", "%v", err)
	}
	field("exit", "status %d after %s", code, ms(time.Since(start)))
	if code != 0 {
		fail("SIGTERM", "exit status %d, want 0", code)
	}
	if p != nil && kubelet.IsSocket(p.Socket) {
		fail("SIGTERM", "socket %s left behind", p.Socket)
	}
	field("socket", "removed")
	if _, err := os.Stat(d.node.CDIPath()); err != nil {
		fail("SIGTERM", "CDI spec not kept: %v", err)
	}
	field("CDI spec", "kept (pods starting during a rolling update still resolve it)")
}

func (d *demo) printLog(tail int) {
	if d.d == nil {
		return
	}
	lines := d.d.Stderr.Lines()
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	fmt.Printf("\n== daemon log (%d lines)\n", len(lines))
	for _, l := range lines {
		fmt.Println("  " + l)
	}
}

func (d *demo) cleanup() {
	if d.d != nil && !d.d.Exited() {
		d.d.Stop(5 * time.Second)
	}
	d.d = nil
	if d.k != nil {
		d.k.Stop()
		d.k = nil
	}
	if d.node != nil {
		if err := d.node.Remove(); err != nil {
			fmt.Fprintf(os.Stderr, "demo: cleanup: %v\n", err)
		} else {
			fmt.Printf("\ncleaned up %s\n", d.node.Root)
		}
		d.node = nil
	}
}
