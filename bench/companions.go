package main

// Companions: the cost of COMPANIONS=tun,vhost-net,vhost-vsock (hyperlight/companion.h) against
// the hypervisor alone. hyperlight as the image ships it (the musl build with the musl shim,
// which fakes the companions' nodes too: HVSHIM_TUN, HVSHIM_VHOST_NET, HVSHIM_VHOST_VSOCK from
// DaemonEnv) on a simulated node with the mock kubelet, in rounds: each round runs both
// configurations, which first alternating; the second starts while the first idles (it
// wakes only for its 30 s ticks), then both idle side by side, so the idle ratio of a round is
// taken over the same minute.

import (
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/protobuf/proto"

	k "sdp/kubelet"
	api "sdp/v1beta1"
)

var (
	companionsOnly   = flag.Bool("companions-only", false, "run only the companions figures (hyperlight alone against COMPANIONS="+companionsList+"), print them and rewrite their section of -out")
	companionsRounds = flag.Int("companions-rounds", 5, "companions: rounds, each runs both configurations once (which first alternates)")
	companionsIdle   = flag.Int("companions-idle", 60, "companions: idle period in seconds (both configurations side by side, after the warm-up)")
)

const (
	companionsHeading = "## Companions: the cost"
	companionsNext    = "## Allocate and GetPreferredAllocation"
	companionsList    = "tun,vhost-net,vhost-vsock"
	companionsCount   = 2000 // DEVICE_COUNT and each companion's default count
)

// compConfig is one configuration: the hypervisor alone, or with every companion.
type compConfig struct {
	name       string
	companions bool
}

var compConfigs = []compConfig{{"alone", false}, {"companions", true}}

func (c compConfig) resources() []string {
	r := []string{k.HyperlightResource}
	if c.companions {
		for _, cp := range k.Companions {
			r = append(r, "hyperlight.dev/"+cp.Name)
		}
	}
	return r
}

// compRun is one configuration's figures in one round.
type compRun struct {
	hvReg, allReg, allHealthy float64            // ms from start
	lastHealthyRes            string             // the resource whose all-Healthy list came last
	resReg, resHealthy        map[string]float64 // each resource's, ms from start
	mem                       mem                // when every resource is registered with every device Healthy
	smaps                     rssParts
	threads, procs, fds       int // the daemon's threads, its process and live children, its open fds
	sockets, cdiBytes         int // its sockets in the kubelet directory; its CDI specs' bytes
	lawBytes                  int // the first all-Healthy lists' protobuf bytes, summed over the resources
	idleNanos                 int64
	idleTicks, idleChildTicks int64 // utime+stime; cutime+cstime (reaped children), clock ticks
	idleCtx                   int64
	idleThreads, idleProcs    int // at the end of the idle period
	idleChildrenSeen          int // the most live children seen at once, sampled every 10 ms
	idleChildSamples          int // samples that saw a live child
	memIdle                   mem // after the idle period
	fdKinds                   map[string]int
}

// compRound: both configurations' runs of one round, and which ran first.
type compRound struct {
	first string
	runs  map[string]compRun
	host  hostSpan
}

// userHZ is the unit of /proc/<pid>/stat's times (clock ticks, USER_HZ: 100 on Linux).
const userHZ = 100

type compFigures struct {
	bin, shim string // relative to the source tree when under it
	probes    []probeCost
	rounds    []compRound
	ticks     int64 // clock ticks per second (USER_HZ)
	took      time.Duration
}

// compNode starts one configuration on a fresh node and waits until every resource is
// registered and has sent a list with every device Healthy.
func compNode(hl daemonKind, c compConfig) (*node, compRun) {
	kd := hl
	kd.name = "hyperlight " + c.name
	nd := newNode(kd)
	extra := []string{}
	if c.companions {
		for _, cp := range k.Companions {
			if err := nd.n.MknodCompanion(cp); err != nil {
				fatal("%v", err)
			}
		}
		extra = append(extra, "COMPANIONS="+companionsList)
	}
	nd.launch(extra...)
	res := c.resources()
	firstHealthy := func(r string) (k.Snapshot, bool) {
		p := nd.kub.Current(r)
		if p == nil {
			return k.Snapshot{}, false
		}
		for _, s := range p.Snapshots() {
			if len(s.Devices) == companionsCount && k.AllHealth(k.Healthy)(s.Devices) {
				return s, true
			}
		}
		return k.Snapshot{}, false
	}
	nd.waitEvent(0, 30*time.Second, func(k.Event) bool {
		for _, r := range res {
			if _, ok := firstHealthy(r); !ok {
				return false
			}
		}
		return true
	})
	run := compRun{resReg: map[string]float64{}, resHealthy: map[string]float64{}}
	for _, r := range res {
		e, _ := nd.waitEvent(0, time.Second, isReg(r))
		t := ms(e.Time.Sub(nd.start))
		if r == k.HyperlightResource {
			run.hvReg = t
		}
		run.allReg = maxf(run.allReg, t)
		s, _ := firstHealthy(r)
		run.resReg[r], run.resHealthy[r] = t, ms(s.Time.Sub(nd.start))
		if h := ms(s.Time.Sub(nd.start)); h > run.allHealthy {
			run.allHealthy, run.lastHealthyRes = h, r
		}
		run.lawBytes += lawSize(s)
	}
	pid := nd.d.Pid()
	run.mem = readMem(pid)
	run.smaps = readSmaps(pid)
	run.threads = threads(pid)
	run.procs = 1 + len(children(pid))
	run.fds = countDir(fmt.Sprintf("/proc/%d/fd", pid))
	run.fdKinds = fdKinds(pid)
	socks, _ := nd.n.PluginSockets()
	run.sockets = len(socks)
	if ents, err := os.ReadDir(nd.n.CDIDir); err == nil {
		for _, e := range ents {
			if fi, err := e.Info(); err == nil {
				run.cdiBytes += int(fi.Size())
			}
		}
	}
	return nd, run
}

// children are the live child processes of pid (/proc/<pid>/task/<pid>/children).
func children(pid int) []string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	return strings.Fields(string(b))
}

// fdKinds counts pid's open file descriptors by what they are (their /proc/<pid>/fd link):
// socket, pipe, anon_inode:[timerfd], anon_inode:inotify, ..., or "file" for a path.
func fdKinds(pid int) map[string]int {
	m := map[string]int{}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(l, "socket:"):
			l = "socket"
		case strings.HasPrefix(l, "pipe:"):
			l = "pipe"
		case strings.HasPrefix(l, "anon_inode:"):
		case strings.HasPrefix(l, "/"):
			l = "file or path"
		}
		m[l]++
	}
	return m
}

// fdKindNames: every kind of descriptor in the runs, sorted.
func fdKindNames(alone, comp []compRun) []string {
	seen := map[string]bool{}
	for _, r := range append(append([]compRun{}, alone...), comp...) {
		for kd := range r.fdKinds {
			seen[kd] = true
		}
	}
	var names []string
	for kd := range seen {
		names = append(names, kd)
	}
	sort.Strings(names)
	return names
}

// probeCost is the probe helper of one kind run alone (as the daemon runs it, under the shim):
// its CPU (user+system from wait4's rusage, µs) and its wall time from the driver (µs).
type probeCost struct {
	kind      string
	cpu, wall stats
}

// measureProbeCosts runs each kind's probe helper n times on a node with every node.
func measureProbeCosts(hl daemonKind, n int) []probeCost {
	nd, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	defer nd.Remove()
	if err := nd.MknodKVM(); err != nil {
		fatal("%v", err)
	}
	paths := map[string]string{"kvm": nd.KVMPath()}
	kinds := []string{"kvm"}
	for _, c := range k.Companions {
		if err := nd.MknodCompanion(c); err != nil {
			fatal("%v", err)
		}
		paths[c.Name] = nd.CompanionPath(c)
		kinds = append(kinds, c.Name)
	}
	env := k.DaemonEnv(nd.Root, hl.env...)
	var out []probeCost
	for _, kind := range kinds {
		var cpu, wall []float64
		for i := 0; i < n; i++ {
			cmd := exec.Command(hl.bin, "--dp-helper", "probe", kind, paths[kind])
			cmd.Env = env
			t := time.Now()
			b, err := cmd.Output()
			el := time.Since(t)
			if err != nil {
				fatal("probe helper %s: %v (%s)", kind, err, b)
			}
			cpu = append(cpu, us(cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime()))
			wall = append(wall, us(el))
		}
		out = append(out, probeCost{kind: kind, cpu: summarize(cpu), wall: summarize(wall)})
	}
	return out
}

func countDir(p string) int {
	ents, err := os.ReadDir(p)
	if err != nil {
		return -1
	}
	return len(ents)
}

// statTicks is utime+stime and cutime+cstime (the children it reaped) of pid, in clock ticks.
func statTicks(pid int) (own, reaped int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fatal("%v", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	v := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	return v(11) + v(12), v(13) + v(14)
}

// measureCompanions runs the rounds.
func measureCompanions(hl daemonKind, rounds, idleSecs int) compFigures {
	began := time.Now()
	f := compFigures{ticks: userHZ, bin: hl.bin}
	for _, e := range hl.env {
		if strings.HasPrefix(e, "LD_PRELOAD=") {
			f.shim = strings.TrimPrefix(e, "LD_PRELOAD=")
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for _, p := range []*string{&f.bin, &f.shim} {
			if r, err := filepath.Rel(wd, *p); err == nil && !strings.HasPrefix(r, "..") {
				*p = r
			}
		}
	}
	host := newHostLog()
	for i := 0; i < rounds; i++ {
		order := []compConfig{compConfigs[i%2], compConfigs[(i+1)%2]}
		rd := compRound{first: order[0].name, runs: map[string]compRun{}}
		var nodes []*node
		for _, c := range order {
			nd, run := compNode(hl, c)
			nodes = append(nodes, nd)
			rd.runs[c.name] = run
		}
		// Past the first periodic tick of the later one, then the period begins half-way between
		// two instants of the 5 s grid (as measureIdle: it then holds exactly idleSecs/30 of every
		// 30 s tick of each resource).
		time.Sleep(idleWarmUp)
		time.Sleep(time.Duration((7.5-gridSecond())*float64(time.Second)) % (5 * time.Second))
		type at struct{ ns, own, reaped, ctx int64 }
		before := make([]at, len(nodes))
		for j, nd := range nodes {
			p := nd.d.Pid()
			before[j].ns, before[j].ctx = cpuNanos(p), ctxSwitches(p)
			before[j].own, before[j].reaped = statTicks(p)
		}
		seen := make([]int, len(nodes))
		samples := make([]int, len(nodes))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				for j, nd := range nodes {
					if n := len(children(nd.d.Pid())); n > 0 {
						samples[j]++
						if n > seen[j] {
							seen[j] = n
						}
					}
				}
			}
		}()
		time.Sleep(time.Duration(idleSecs) * time.Second)
		close(stop)
		wg.Wait()
		for j, nd := range nodes {
			p := nd.d.Pid()
			r := rd.runs[order[j].name]
			r.idleNanos = cpuNanos(p) - before[j].ns
			r.idleCtx = ctxSwitches(p) - before[j].ctx
			own, reaped := statTicks(p)
			r.idleTicks, r.idleChildTicks = own-before[j].own, reaped-before[j].reaped
			r.idleThreads, r.idleProcs = threads(p), 1+len(children(p))
			r.idleChildrenSeen, r.idleChildSamples = seen[j], samples[j]
			r.memIdle = readMem(p)
			rd.runs[order[j].name] = r
			nd.close()
		}
		rd.host = host.mark(strconv.Itoa(i+1), "")
		f.rounds = append(f.rounds, rd)
		fmt.Fprintf(os.Stderr, "companions round %d of %d done (%v)\n", i+1, rounds, time.Since(began).Round(time.Second))
	}
	f.probes = measureProbeCosts(hl, 50)
	f.took = time.Since(began)
	return f
}

// lawSize is the protobuf size of a ListAndWatch response of s's devices.
func lawSize(s k.Snapshot) int {
	return proto.Size(&api.ListAndWatchResponse{Devices: s.Devices})
}

// writeCompanions is the section; rerun is the command that measures it alone.
func writeCompanions(d *doc, f compFigures, rerun string) {
	d.p("%s", companionsHeading)
	d.p("")
	if len(f.rounds) == 0 {
		d.p("Not measured.")
		d.p("")
		return
	}
	idle := *companionsIdle
	d.p("What serving the companions costs: hyperlight as the image ships it (above) with `COMPANIONS=%s`", companionsList)
	d.p("(docs/operations.md, \"Micro-VM sandboxes\": three more resources hyperlight.dev/tun, /vhost-net, /vhost-vsock, each")
	d.p("with its own socket, CDI spec, endpoint and probe; their nodes mknod'ed under the simulated root and faked by the")
	d.p("musl shim, which answers TUNGETFEATURES and VHOST_GET_FEATURES) against the hypervisor alone (`DEVICE_COUNT=%d`,", companionsCount)
	d.p("no COMPANIONS), every resource at its default %d devices. %d rounds, each running both on fresh nodes, which first", companionsCount, len(f.rounds))
	d.p("alternating; the second starts while the first idles; then both idle side by side: %d s past the later start", int(idleWarmUp.Seconds()))
	d.p("(every resource's first 30 s check behind it), then %d s begun half-way between two instants of the daemon's 5 s", idle)
	d.p("timer grid, so the period holds exactly %d of each resource's 30 s checks. Figures: median (min–max) of the rounds;", idle/30)
	d.p("ratio: companions/alone within each round, median (min–max) of the rounds. This run: %v; the binary", f.took.Round(time.Second))
	d.p("%s with the shim %s.", f.bin, f.shim)
	d.p("")
	d.p("Re-run: %s. This section alone takes about %d minutes; `-companions-rounds N` and `-companions-idle SECONDS` change", rerun,
		int((time.Duration(len(f.rounds))*(idleWarmUp+time.Duration(idle+5)*time.Second)).Minutes()+0.5))
	d.p("its rounds and idle period.")
	d.p("")
	d.p("Start → the hypervisor registered: the fork/exec to the mock kubelet accepting hyperlight.dev/hypervisor's")
	d.p("Register. Start → every resource registered: to the last of them. Start → every resource Healthy: to the last")
	d.p("resource's first ListAndWatch response with all %d devices Healthy arriving at the kubelet. Memory: VmRSS and VmHWM", companionsCount)
	d.p("(/proc/<pid>/status) at that instant, and VmRSS after the idle period. Processes: the daemon and its live children")
	d.p("(/proc/<pid>/task/<pid>/children), threads: /proc/<pid>/task. Idle CPU: the daemon's own time on CPU, every")
	d.p("thread's schedstat (ns); and utime+stime from /proc/<pid>/stat with the children it reaped (cutime+cstime: its")
	d.p("probe helpers), in clock ticks of %d ms, so a figure below a tick reads 0 and each carries ±1 tick; all scaled to", 1000/f.ticks)
	d.p("one minute.")
	d.p("")
	var alone, comp []compRun
	for _, r := range f.rounds {
		alone, comp = append(alone, r.runs["alone"]), append(comp, r.runs["companions"])
	}
	perMin := 60 / float64(idle)
	tickMs := 1000 / float64(f.ticks)
	type fig struct {
		name string
		v    func(compRun) float64
	}
	figs := []fig{
		{"start → the hypervisor registered (ms)", func(r compRun) float64 { return r.hvReg }},
		{"start → every resource registered (ms)", func(r compRun) float64 { return r.allReg }},
		{"start → every resource's first ListAndWatch all Healthy (ms)", func(r compRun) float64 { return r.allHealthy }},
		{"VmRSS, all registered and Healthy (KiB)", func(r compRun) float64 { return float64(r.mem.rss) }},
		{"VmHWM, all registered and Healthy (KiB)", func(r compRun) float64 { return float64(r.mem.hwm) }},
		{fmt.Sprintf("VmRSS after the %d s idle (KiB)", idle), func(r compRun) float64 { return float64(r.memIdle.rss) }},
		{"processes (the daemon + live children), when Healthy", func(r compRun) float64 { return float64(r.procs) }},
		{"processes at the idle period's end", func(r compRun) float64 { return float64(r.idleProcs) }},
		{"threads of the daemon", func(r compRun) float64 { return float64(r.idleThreads) }},
		{"idle CPU per minute, the daemon (schedstat, ms)", func(r compRun) float64 { return float64(r.idleNanos) / 1e6 * perMin }},
		{"idle CPU per minute, the daemon (utime+stime, ms)", func(r compRun) float64 { return float64(r.idleTicks) * tickMs * perMin }},
		{"idle CPU per minute, its probe helpers (cutime+cstime, ms)", func(r compRun) float64 { return float64(r.idleChildTicks) * tickMs * perMin }},
		{"idle CPU per minute, daemon + helpers (utime+stime+cutime+cstime, ms)", func(r compRun) float64 {
			return float64(r.idleTicks+r.idleChildTicks) * tickMs * perMin
		}},
		{"context switches per idle minute (the daemon's threads)", func(r compRun) float64 { return float64(r.idleCtx) * perMin }},
	}
	col := func(rs []compRun, v func(compRun) float64) []float64 {
		var out []float64
		for _, r := range rs {
			out = append(out, v(r))
		}
		return out
	}
	d.p("| Figure | hypervisor alone | with the three companions | companions/alone |")
	d.p("|---|---|---|---|")
	for _, g := range figs {
		a, c := col(alone, g.v), col(comp, g.v)
		d.p("| %s | %s | %s | %s |", g.name, rng(summarize(a)), rng(summarize(c)), roundRatio(c, a))
	}
	d.p("")
	d.p("Round by round (a: alone, c: companions; ms from start; KiB; CPU: ms per idle minute, schedstat; first: the")
	d.p("configuration started first), with the host during the round (steal, others, load and the marks as in Host during")
	d.p("the run, above: this machine's neighbours share the two CPUs, and both configurations of a round met the same):")
	d.p("")
	d.p("| round | first | hypervisor registered a / c | all registered a / c | all Healthy a / c (last Healthy of c) | VmRSS a / c | VmHWM a / c | idle CPU a / c | duration (s) | steal (%%) | others (%%) | load avg, 1 min | marked |")
	d.p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for i, r := range f.rounds {
		a, c := r.runs["alone"], r.runs["companions"]
		h := r.host
		d.p("| %d | %s | %s / %s | %s / %s | %s / %s (%s) | %d / %d | %d / %d | %s / %s | %.1f | %s | %s | %s | %s |", i+1, r.first, f1(a.hvReg), f1(c.hvReg),
			f1(a.allReg), f1(c.allReg), f1(a.allHealthy), f1(c.allHealthy), strings.TrimPrefix(c.lastHealthyRes, "hyperlight.dev/"),
			a.mem.rss, c.mem.rss, a.mem.hwm, c.mem.hwm, f1(float64(a.idleNanos)/1e6*perMin), f1(float64(c.idleNanos)/1e6*perMin),
			h.dur.Seconds(), pct(h.steal), pct(h.others), h.loadCell(), h.flag())
	}
	d.p("")
	// Where it goes: the medians of what grows with the resources.
	med := func(rs []compRun, v func(compRun) float64) float64 { return summarize(col(rs, v)).med }
	part := func(p func(rssParts) int64) func(compRun) float64 {
		return func(r compRun) float64 { return float64(p(r.smaps)) }
	}
	d.p("Each resource's own times (ms from start, median (min–max) of the rounds):")
	d.p("")
	d.p("| resource | alone: registered | alone: first list all Healthy | companions: registered | companions: first list all Healthy |")
	d.p("|---|---|---|---|---|")
	for _, r := range compConfigs[1].resources() {
		cell := func(rs []compRun, m func(compRun) map[string]float64) string {
			var v []float64
			for _, x := range rs {
				if t, ok := m(x)[r]; ok {
					v = append(v, t)
				}
			}
			if len(v) == 0 {
				return "—"
			}
			return rng(summarize(v))
		}
		reg := func(x compRun) map[string]float64 { return x.resReg }
		hl := func(x compRun) map[string]float64 { return x.resHealthy }
		d.p("| %s | %s | %s | %s | %s |", r, cell(alone, reg), cell(alone, hl), cell(comp, reg), cell(comp, hl))
	}
	d.p("")
	d.p("Where the difference is (median of the rounds, alone → companions):")
	d.p("")
	d.p("| | alone | companions | difference |")
	d.p("|---|---|---|---|")
	rowI := func(name string, v func(compRun) float64) {
		a, c := med(alone, v), med(comp, v)
		d.p("| %s | %s | %s | %s |", name, f1(a), f1(c), f1(c-a))
	}
	rowI("resources served (sockets in the kubelet directory)", func(r compRun) float64 { return float64(r.sockets) })
	rowI("the daemon's open file descriptors", func(r compRun) float64 { return float64(r.fds) })
	for _, kd := range fdKindNames(alone, comp) {
		kd := kd
		rowI("… of them "+kd, func(r compRun) float64 { return float64(r.fdKinds[kd]) })
	}
	rowI("CDI specs in <root>/var/run/cdi (bytes)", func(r compRun) float64 { return float64(r.cdiBytes) })
	rowI("first all-Healthy ListAndWatch responses, summed (protobuf bytes)", func(r compRun) float64 { return float64(r.lawBytes) })
	rowI("Rss: heap (KiB, smaps)", part(func(p rssParts) int64 { return p.heap }))
	rowI("Rss: other anonymous: .data/.bss, mmap'ed allocations (KiB)", part(func(p rssParts) int64 { return p.anon }))
	rowI("Rss: the executable's file pages (KiB)", part(func(p rssParts) int64 { return p.exe }))
	rowI("Rss: musl's libc.so and the shim (KiB)", part(func(p rssParts) int64 { return p.libs }))
	rowI("Rss: stack (KiB)", part(func(p rssParts) int64 { return p.stack }))
	rowI("idle: samples (every 10 ms) that saw a live probe helper", func(r compRun) float64 { return float64(r.idleChildSamples) })
	rowI("idle: the most live probe helpers seen at once", func(r compRun) float64 { return float64(r.idleChildrenSeen) })
	d.p("")
	d.p("The probe helpers alone (`hyperlight-device-plugin --dp-helper probe KIND NODE` under the musl shim, as the daemon")
	d.p("spawns them, %d runs each from Go's os/exec): their CPU, user+system from wait4's rusage (µs), and the wall time", f.probes[0].cpu.n)
	d.p("of each fork+exec+wait seen from the driver (µs), median (min–max):")
	d.p("")
	d.p("| probe | CPU (µs) | wall (µs) |")
	d.p("|---|---|---|")
	var helperCPU float64
	for _, p := range f.probes {
		d.p("| %s | %s | %s |", p.kind, rng(p.cpu), rng(p.wall))
		helperCPU += p.cpu.med
	}
	d.p("")
	d.p("Each resource's 30 s check spawns its helper, twice a minute: %s ms a minute of helper CPU for the hypervisor", f1(2*f.probes[0].cpu.med/1000))
	d.p("alone and %s ms with the three companions (medians above); cutime+cstime resolves only whole %s ms ticks over", f1(2*helperCPU/1000), f1(1000/float64(f.ticks)))
	d.p("the %d s period (%s ms a minute), so its row is the coarser of the two.", idle, f1(1000/float64(f.ticks)*perMin))
	d.p("")
	writeCompanionsWhy(d, alone, comp)
}

// writeCompanionsWhy: where the difference comes from, as the daemon does it (hyperlight/daemon.c
// start_plugin, plugin.c plugin_new, core/src/endpoint), with this run's medians.
func writeCompanionsWhy(d *doc, alone, comp []compRun) {
	med := func(rs []compRun, v func(compRun) float64) float64 {
		var x []float64
		for _, r := range rs {
			x = append(x, v(r))
		}
		return summarize(x).med
	}
	diff := func(v func(compRun) float64) string { return f1(med(comp, v) - med(alone, v)) }
	rss := func(r compRun) float64 { return float64(r.mem.rss) }
	anon := func(r compRun) float64 { return float64(r.smaps.anon + r.smaps.heap) }
	fds := func(r compRun) float64 { return float64(r.fds) }
	law := func(r compRun) float64 { return float64(r.lawBytes) }
	cdi := func(r compRun) float64 { return float64(r.cdiBytes) }
	hv := func(r compRun) float64 { return r.hvReg }
	d.p("Where it goes. Each companion is one more plugin of the hypervisor's code (hyperlight/plugin.c), set up by")
	d.p("start_plugin (hyperlight/daemon.c) one after the other before the event loop first runs: its CDI spec written")
	d.p("(a temporary file, fsync, rename, the directory's fsync; on the tmpfs here, as on a node), the O_PATH fd of the")
	d.p("executable its probe helper is spawned from, its endpoint (its %d device IDs `tun-0`…`vhost-vsock-%d` made and", companionsCount, companionsCount-1)
	d.p("copied, its socket bound and listening), its inotify watches, and its Register sent to the kubelet. A Register")
	d.p("completes in the loop (the kubelet dials back inside it), so the hypervisor's registration waits for the three")
	spread := func(r compRun) float64 {
		lo := r.allReg
		for _, t := range r.resReg {
			lo = math.Min(lo, t)
		}
		return r.allReg - lo
	}
	d.p("companions' set-up and shares the loop with their registrations: here it came %s ms later (median), and the four", diff(hv))
	d.p("resources registered within %s ms of each other (median; each resource's times above). Each first", f1(med(comp, spread)))
	d.p("check is held until its registration ends (first_check_hold_usec), then four probe helpers run, one fork+exec")
	d.p("each, and four lists of %d devices are encoded and sent (%s more protobuf bytes); the last all-Healthy list", companionsCount, diff(law))
	files := func(r compRun) float64 { return float64(r.smaps.exe + r.smaps.libs) }
	d.p("decides start → every resource Healthy. Memory: VmRSS %s KiB more; anonymous memory (heap and mmap'ed", diff(rss))
	d.p("allocations: each endpoint's device IDs, its list encoded for each response, each connection's HTTP/2 session and")
	d.p("buffers for the kubelet's registration, dial-back and ListAndWatch) %s KiB more; file pages (the executable,", diff(anon))
	d.p("musl's libc.so, the shim; one copy serves all four resources) %s KiB, a few pages' difference from run to run.", diff(files))
	var per []string
	for _, kd := range fdKindNames(alone, comp) {
		v := func(r compRun) float64 { return float64(r.fdKinds[kd]) }
		if dv := med(comp, v) - med(alone, v); dv != 0 {
			per = append(per, fmt.Sprintf("%s %s", f1(dv/float64(len(k.Companions))), kd))
		}
	}
	d.p("Descriptors: %s more, per companion %s (the endpoint's listening and kubelet sockets, its", diff(fds), strings.Join(per, ", "))
	d.p("timers, its watches, its helper's executable fd). CDI: %s more bytes in three more files. Idle: every resource's 30 s check,", diff(cdi))
	d.p("on the one 5 s timer grid, so one wake-up serves all four, each check a stat of the node and its spec and one")
	d.p("probe helper (its spawn, then its pidfd and pipe events): the daemon's own idle CPU and the helpers' grow with the")
	d.p("number of checks. Still one process, one thread: the helpers are children that live for a probe only.")
	d.p("")
}

// companionsOnlyMode builds the shipped binaries (scripts/build-static.sh into -static), measures,
// prints and rewrites the section of -out in place.
func companionsOnlyMode(src string, hl daemonKind) {
	if _, note := staticKata(src); note != "" {
		fatal("scripts/build-static.sh: %s", note)
	}
	f := measureCompanions(hl, *companionsRounds, *companionsIdle)
	var d doc
	writeCompanions(&d, f, companionsRerun())
	fmt.Print(d.b.String())
	rewriteSection(*outPath, companionsHeading, companionsNext, d.b.Bytes())
}

// companionsRerun: the command line that re-runs the section alone.
func companionsRerun() string {
	return "`make bench-companions` (as root; `build/sdp-bench -build build -companions-only` after `make build`; it runs scripts/build-static.sh" +
		" first, as make bench does; `-static DIR` builds and takes the shipped binaries in DIR instead of build-static), or the whole `make bench`"
}
