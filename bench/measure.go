package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/golang/protobuf/proto"

	k "sdp/kubelet"
	api "sdp/v1beta1"
)

// startup is one run's start-up figures.
type startup struct {
	reg, law float64 // ms
	memReg   mem
	smaps    rssParts // when registered
	memAlloc mem
	allocs   []float64 // µs
	allocCPU float64   // the daemon's CPU time (schedstat) over the Allocates, µs per call
	prefs    []float64 // µs
	prefNA   bool
}

// reaction is one round's slice of a daemon's reaction figures (ms).
type reaction struct {
	restarts, cdiRepair, unhealthy []float64
}

// results of one daemon kind.
type results struct {
	runs        []startup  // one per round, in round order
	rounds      []reaction // one per round (not kata-static: its reactions are the dynamic build's)
	restarts    []float64  // ms, every round's
	cdiRepair   []float64  // ms; nil = not repaired
	cdiNote     string
	unhealthy   []float64 // ms
	healthNote  string
	idleNanos   int64 // CPU over the idle period, ns
	idleCtx     int64
	idleThreads int
	size        int64
}

func (nd *node) waitStarted() (reg, law time.Time, p *k.Plugin) {
	e, i := nd.waitEvent(0, 20*time.Second, isReg(nd.kind.resource))
	d, _ := nd.waitEvent(i, 20*time.Second, isDevices(nd.kind.resource))
	p = nd.kub.Current(nd.kind.resource)
	if p == nil {
		fatal("%s: registered but no current endpoint", nd.kind.name)
	}
	return e.Time, d.Time, p
}

// runStartup starts a daemon on a fresh node and measures start-up, memory and the RPCs.
// With keep the node is returned running for the once-per-daemon measurements.
func runStartup(kind daemonKind, keep bool) (startup, *node) {
	nd := newNode(kind)
	nd.launch()
	reg, law, p := nd.waitStarted()
	var s startup
	s.reg, s.law = ms(reg.Sub(nd.start)), ms(law.Sub(nd.start))
	s.memReg = readMem(nd.d.Pid())
	s.smaps = readSmaps(nd.d.Pid())
	snap, _ := p.Latest()
	id := snap.Devices[0].ID
	var all []string
	for _, d := range snap.Devices {
		all = append(all, d.ID)
	}
	c := p.Client()
	ctx := context.Background()
	areq := &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{id}}}}
	t0 := cpuNanos(nd.d.Pid())
	for i := 0; i < *allocs; i++ {
		t := time.Now()
		r, err := c.Allocate(ctx, areq)
		el := time.Since(t)
		if err != nil || len(r.ContainerResponses) != 1 {
			fatal("%s: Allocate %d: %v", kind.name, i, err)
		}
		s.allocs = append(s.allocs, us(el))
	}
	s.allocCPU = float64(cpuNanos(nd.d.Pid())-t0) / 1e3 / float64(*allocs)
	s.memAlloc = readMem(nd.d.Pid())
	if p.Options.GetGetPreferredAllocationAvailable() {
		preq := &api.PreferredAllocationRequest{ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: all, AllocationSize: 1}}}
		for i := 0; i < *allocs/10; i++ {
			t := time.Now()
			if _, err := c.GetPreferredAllocation(ctx, preq); err != nil {
				fatal("%s: GetPreferredAllocation: %v", kind.name, err)
			}
			s.prefs = append(s.prefs, us(time.Since(t)))
		}
	} else {
		s.prefNA = true
	}
	if keep {
		return s, nd
	}
	nd.close()
	return s, nil
}

// measureRestarts restarts the mock kubelet n times: sockets deleted, kubelet.sock recreated;
// from the deletion to the next registration.
func measureRestarts(nd *node, n int) []float64 {
	var out []float64
	for i := 0; i < n; i++ {
		from := nd.eventCount()
		if err := nd.kub.Restart(); err != nil {
			fatal("restart: %v", err)
		}
		r, j := nd.waitEvent(from, 20*time.Second, func(e k.Event) bool { return e.Kind == "restart" })
		reg, j2 := nd.waitEvent(j, 20*time.Second, isReg(nd.kind.resource))
		nd.waitEvent(j2, 20*time.Second, isDevices(nd.kind.resource))
		out = append(out, ms(reg.Time.Sub(r.Time)))
	}
	return out
}

// measureCDI deletes the CDI file and polls (50 µs) until it is back.
func measureCDI(path string, n int) ([]float64, string) {
	var out []float64
	for i := 0; i < n; i++ {
		if _, err := os.Stat(path); err != nil {
			return nil, "no CDI file at " + path
		}
		t := time.Now()
		if err := os.Remove(path); err != nil {
			fatal("%v", err)
		}
		for {
			if _, err := os.Stat(path); err == nil {
				break
			}
			if time.Since(t) > 3*time.Second {
				return nil, "not repaired within 3 s (the plugin writes it once at start)"
			}
			time.Sleep(50 * time.Microsecond)
		}
		out = append(out, ms(time.Since(t)))
		time.Sleep(20 * time.Millisecond)
	}
	return out, ""
}

// flipHealth removes <root>/dev/kvm and waits for an all-Unhealthy snapshot at the kubelet, then
// puts it back and waits for all Healthy; returns the removal → Unhealthy time.
func flipHealth(nd *node) time.Duration {
	from := nd.eventCount()
	t := time.Now()
	if err := os.Remove(nd.n.KVMPath()); err != nil {
		fatal("%v", err)
	}
	unhealthy := func(e k.Event) bool {
		if e.Kind != "devices" || e.Resource != nd.kind.resource {
			return false
		}
		s, _ := nd.kub.Current(nd.kind.resource).Latest()
		return k.AllHealth(k.Unhealthy)(s.Devices)
	}
	e, i := nd.waitEvent(from, 30*time.Second, unhealthy)
	if err := nd.n.MknodKVM(); err != nil {
		fatal("%v", err)
	}
	nd.waitEvent(i+1, 30*time.Second, func(e k.Event) bool {
		if e.Kind != "devices" || e.Resource != nd.kind.resource {
			return false
		}
		s, _ := nd.kub.Current(nd.kind.resource).Latest()
		return k.AllHealth(k.Healthy)(s.Devices)
	})
	return e.Time.Sub(t)
}

// scalePoint is ListAndWatch at one DEVICE_COUNT.
type scalePoint struct {
	count      int
	bytes      int
	firstLAW   float64 // ms from start
	flip       []float64
	rss, hwm   int64
	rssAfter   int64
	notStarted string
	goDecode   float64 // ms: grpc-go's protobuf decode of the full response (golang/protobuf), median
}

func measureScale(kind daemonKind, count, flips int) scalePoint {
	sp := scalePoint{count: count}
	nd := newNode(kind)
	defer nd.close()
	nd.launch("DEVICE_COUNT=" + strconv.Itoa(count))
	_, law, p := nd.waitStarted()
	sp.firstLAW = ms(law.Sub(nd.start))
	snap, _ := p.Latest()
	if len(snap.Devices) != count {
		fatal("%s: %d devices advertised, want %d", kind.name, len(snap.Devices), count)
	}
	resp := &api.ListAndWatchResponse{Devices: snap.Devices}
	sp.bytes = proto.Size(resp)
	wire, err := proto.Marshal(resp)
	if err != nil {
		fatal("%v", err)
	}
	var dec []float64
	for i := 0; i < flips; i++ {
		var back api.ListAndWatchResponse
		t := time.Now()
		if err := proto.Unmarshal(wire, &back); err != nil {
			fatal("%v", err)
		}
		dec = append(dec, ms(time.Since(t)))
	}
	sp.goDecode = summarize(dec).med
	m := readMem(nd.d.Pid())
	sp.rss, sp.hwm = m.rss, m.hwm
	for i := 0; i < flips; i++ {
		sp.flip = append(sp.flip, ms(flipHealth(nd)))
	}
	sp.rssAfter = readMem(nd.d.Pid()).rss
	return sp
}

var ceilingRe = regexp.MustCompile(`out of range 1\.\.([0-9]+)`)

// ceiling asks the hyperlight daemon for its DEVICE_COUNT ceiling (its error message names it).
func ceiling(kind daemonKind) int {
	n, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	defer n.Remove()
	n.MknodKVM()
	env := append(append([]string{}, kind.env...), "DEVICE_COUNT=4294967295") // kind.env: its shim
	r, err := k.RunCommand(10*time.Second, kind.bin, k.DaemonEnv(n.Root, env...))
	if err != nil {
		fatal("%v", err)
	}
	m := ceilingRe.FindStringSubmatch(r.Stderr)
	if m == nil {
		fatal("no ceiling in the daemon's error: %s", r.Stderr)
	}
	c, _ := strconv.Atoi(m[1])
	return c
}

// probeAlone runs the probe helper of kind by itself n times, as the daemon does, with the
// shim (kind.env's).
func probeAlone(kind daemonKind, n int) []float64 {
	bin := kind.bin
	nd, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	defer nd.Remove()
	if err := nd.MknodKVM(); err != nil {
		fatal("%v", err)
	}
	env := k.DaemonEnv(nd.Root, kind.env...)
	var out []float64
	for i := 0; i < n; i++ {
		cmd := exec.Command(bin, "--dp-helper", "probe", "kvm", nd.KVMPath())
		cmd.Env = env
		t := time.Now()
		b, err := cmd.Output()
		el := time.Since(t)
		if err != nil {
			fatal("probe helper: %v (%s)", err, b)
		}
		out = append(out, us(el))
	}
	return out
}

// idleWarmUp: the daemons' first periodic tick (30 s after start, rounded to the 5 s grid,
// at most 34 s) is behind them before the idle period begins: the period measures the ticks a
// daemon repeats for days, not its first one's one-time costs (pages first touched).
const idleWarmUp = 35 * time.Second

// measureIdle runs every kind side by side for the idle period; with -idle-trace it also
// returns each daemon's wake-ups (idle.go). The period begins half-way between two instants of
// the coarse timers' 5 s grid, after idleWarmUp: a 60 s period then holds exactly two of every
// 30 s tick (begun on the grid at a random phase, it held one to three).
func measureIdle(kinds []daemonKind, res map[string]*results, secs int) [][]wake {
	var nodes []*node
	for _, kd := range kinds {
		nd := newNode(kd)
		nd.launch()
		nd.waitStarted()
		nodes = append(nodes, nd)
	}
	time.Sleep(idleWarmUp)
	time.Sleep(time.Duration((7.5-gridSecond())*float64(time.Second)) % (5 * time.Second))
	t0 := make([]int64, len(nodes))
	c0 := make([]int64, len(nodes))
	pids := make([]int, len(nodes))
	for i, nd := range nodes {
		pids[i] = nd.d.Pid()
		t0[i], c0[i] = cpuNanos(pids[i]), ctxSwitches(pids[i])
	}
	var traces [][]wake
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		if *idleTrace {
			traces = traceIdle(pids, stop)
		}
	}()
	time.Sleep(time.Duration(secs) * time.Second)
	close(stop)
	<-done
	for i, nd := range nodes {
		r := res[nd.kind.name]
		r.idleNanos = cpuNanos(nd.d.Pid()) - t0[i]
		r.idleCtx = ctxSwitches(nd.d.Pid()) - c0[i]
		r.idleThreads = threads(nd.d.Pid())
		nd.close()
	}
	return traces
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// staticKata builds the static kata binary (bounded) and returns the size of what the image
// ships (stripped), or -1 and why not.
func staticKata(src string) (int64, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(src, "scripts/build-static.sh"), staticPath(src, "."))
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return -1, fmt.Sprintf("did not build: %v %s", err, tail(string(out), 200))
	}
	return fileSize(staticPath(src, staticKataPath)), ""
}

// podmanArgs address the image store images/build.sh writes (BUILD/podman).
func podmanArgs(build string, args ...string) []string {
	return append([]string{"--root", filepath.Join(build, "podman/root"), "--runroot", filepath.Join(build, "podman/runroot"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file"}, args...)
}

// buildImages runs images/build.sh (bounded) when podman is installed; "" on success, else why
// the images are not measured.
func buildImages(src, build string) string {
	if _, err := exec.LookPath("podman"); err != nil {
		return "podman is not installed (scripts/install-deps.sh runtime)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(src, "images/build.sh"), build)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Sprintf("images/build.sh failed: %v %s", err, tail(string(out), 200))
	}
	return ""
}

var versionRe = regexp.MustCompile(`(?m)^  version: '([^']+)',$`)

// imageSize is the size podman reports for localhost/name:VERSION in images/build.sh's store,
// or -1.
func imageSize(src, build, name string) int64 {
	b, err := os.ReadFile(filepath.Join(src, "meson.build"))
	m := versionRe.FindSubmatch(b)
	if err != nil || m == nil {
		return -1
	}
	out, err := exec.Command("podman", podmanArgs(build, "image", "inspect", "--format", "{{.Size}}",
		"localhost/"+name+":"+string(m[1]))...).Output()
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// encodePoint is one line of sdp-encode-bench.
type encodePoint struct {
	count, bytes  int
	med, min, max float64 // ms
	reps          int
}

var encodeRe = regexp.MustCompile(`count=(\d+) bytes=(\d+) reps=(\d+) median_ms=([0-9.]+) min_ms=([0-9.]+) max_ms=([0-9.]+)`)

// encodeBench runs bench/encode_bench.c for the counts.
func encodeBench(build string, counts []int) []encodePoint {
	args := []string{}
	for _, c := range counts {
		args = append(args, strconv.Itoa(c))
	}
	out, err := exec.Command(filepath.Join(build, "bench/encode/sdp-encode-bench"), args...).Output()
	if err != nil {
		fatal("sdp-encode-bench: %v", err)
	}
	var pts []encodePoint
	for _, m := range encodeRe.FindAllStringSubmatch(string(out), -1) {
		var p encodePoint
		p.count, _ = strconv.Atoi(m[1])
		p.bytes, _ = strconv.Atoi(m[2])
		p.reps, _ = strconv.Atoi(m[3])
		p.med, _ = strconv.ParseFloat(m[4], 64)
		p.min, _ = strconv.ParseFloat(m[5], 64)
		p.max, _ = strconv.ParseFloat(m[6], 64)
		pts = append(pts, p)
	}
	if len(pts) != len(counts) {
		fatal("sdp-encode-bench: %d results for %d counts: %s", len(pts), len(counts), out)
	}
	return pts
}

// staticDir is where scripts/build-static.sh builds the images' binaries (-static; relative: to
// the source tree): build-static, as make bench has it; another one keeps a concurrent make test's
// build-static out of a run (tests/run.sh rebuilds it).
var staticDir = flag.String("static", "build-static", "scripts/build-static.sh's output directory the shipped binaries are built into and taken from (relative: to the source tree)")

// staticPath is rel (one of the paths below) under the -static directory.
func staticPath(src, rel string) string {
	if filepath.IsAbs(*staticDir) {
		return filepath.Join(*staticDir, rel)
	}
	return filepath.Join(src, *staticDir, rel)
}

// staticKataPath is the static kata binary as the image ships it (stripped), relative to the
// -static directory (scripts/build-static.sh).
const staticKataPath = "image-context-kata/kata-device-plugin"

// muslHyperlightPath is the hyperlight binary as its image ships it (musl, stripped), and
// muslShimPath the hypervisor shim built against musl (scripts/build-static.sh).
const (
	muslHyperlightPath = "image-context-hyperlight/rootfs/hyperlight-device-plugin"
	muslShimPath       = "musl-dynamic/libhvshim.so"
)

// scanPoint is one line of sdp-scan-bench.
type scanPoint struct {
	devices, reps, gapMs int
	med, min, max        float64 // µs
}

var scanRe = regexp.MustCompile(`devices=(\d+) reps=(\d+) median_us=([0-9.]+) min_us=([0-9.]+) max_us=([0-9.]+)`)

// scanBench runs bench/scan/scan_bench.c (kata's rescan alone, with its cache) on a tree like
// the kata node's (4 GPUs), reps times with gapMs between scans.
func scanBench(build string, reps, gapMs int) scanPoint {
	n, kt := benchTree()
	defer n.Remove()
	addGPUs(kt)
	p, _ := runScanBench(build, n.Root, reps, gapMs)
	return p
}

// benchTree is a temporary node with an empty fake VFIO host.
func benchTree() (*k.Node, *k.KataTree) {
	n, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	kt, err := k.NewKataTree(n.Root)
	if err != nil {
		n.Remove()
		fatal("%v", err)
	}
	return n, kt
}

// runScanBench runs sdp-scan-bench on the tree under root (env: more of its environment) once
// the tree is older than the cache's settle time (kata/scan_cache.h, 2 s), as a node's sysfs
// files are: the rescan reads a younger file again every time. Its figures, and its output.
func runScanBench(build, root string, reps, gapMs int, env ...string) (scanPoint, string) {
	time.Sleep(2500 * time.Millisecond)
	cmd := exec.Command(filepath.Join(build, "bench/scan/sdp-scan-bench"), strconv.Itoa(reps), strconv.Itoa(gapMs))
	cmd.Env = append(append(os.Environ(), "SDP_TEST_ROOT="+root), env...)
	out, err := cmd.Output()
	m := scanRe.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		fatal("sdp-scan-bench: %v: %s", err, out)
	}
	p := scanPoint{gapMs: gapMs}
	p.devices, _ = strconv.Atoi(m[1])
	p.reps, _ = strconv.Atoi(m[2])
	p.med, _ = strconv.ParseFloat(m[3], 64)
	p.min, _ = strconv.ParseFloat(m[4], 64)
	p.max, _ = strconv.ParseFloat(m[5], 64)
	return p, string(out)
}

// preferPoint is one line of sdp-prefer-bench.
type preferPoint struct {
	topo, kase    string // kase: nohint, numa or must
	size, reps    int
	p50, p99, max float64 // µs
}

var preferRe = regexp.MustCompile(`^prefer topo=(\S+) case=(\S+) size=(\d+) reps=(\d+) p50_us=([0-9.]+) p99_us=([0-9.]+) max_us=([0-9.]+)$`)

// preferBench runs bench/prefer/prefer_bench.c: kata's GetPreferredAllocation order alone
// (kata_prefer), in kubelet's three shapes of call, on an HGX-like node and on 4096 devices.
func preferBench(build string) []preferPoint {
	cmd := exec.Command(filepath.Join(build, "bench/prefer/sdp-prefer-bench"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		fatal("sdp-prefer-bench: %v: %s", err, out)
	}
	var pts []preferPoint
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		m := preferRe.FindStringSubmatch(line)
		if m == nil {
			fatal("sdp-prefer-bench: unexpected line %q", line)
		}
		p := preferPoint{topo: m[1], kase: m[2]}
		p.size, _ = strconv.Atoi(m[3])
		p.reps, _ = strconv.Atoi(m[4])
		p.p50, _ = strconv.ParseFloat(m[5], 64)
		p.p99, _ = strconv.ParseFloat(m[6], 64)
		p.max, _ = strconv.ParseFloat(m[7], 64)
		pts = append(pts, p)
	}
	return pts
}
