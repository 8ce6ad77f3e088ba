package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	k "sdp/kubelet"
)

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(l[strings.IndexByte(l, ':')+1:])
		}
	}
	return "unknown"
}

func kernel() string {
	out, _ := exec.Command("uname", "-r").Output()
	return strings.TrimSpace(string(out))
}

type doc struct{ b bytes.Buffer }

func (d *doc) p(format string, a ...interface{}) { fmt.Fprintf(&d.b, format+"\n", a...) }

func f1(v float64) string {
	if v >= 1000 || v <= -1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

// rng renders "median (min–max)".
func rng(s stats) string {
	if s.n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s (%s–%s)", f1(s.med), f1(s.min), f1(s.max))
}

func ratio(a, b float64) string {
	if b == 0 || a < 0 || b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func collect(rs []startup, f func(startup) float64) stats {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return summarize(v)
}

func all(rs []startup, f func(startup) []float64) stats {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r)...)
	}
	return summarize(v)
}

func main() {
	flag.Parse()
	if os.Geteuid() != 0 {
		fatal("run as root (mknod under a temporary root)")
	}
	build, err := filepath.Abs(*buildDir)
	if err != nil {
		fatal("%v", err)
	}
	os.Setenv("SDP_BUILD_DIR", build)
	if _, err := k.BuildDir(); err != nil {
		fatal("%v", err)
	}
	src := filepath.Dir(filepath.Dir(build + "/x"))
	if wd, err := os.Getwd(); err == nil {
		src = wd
	}
	if *floodOnly { // the build's daemons only
		privateMountNS()
		floodOnlyMode(build)
		return
	}
	began := time.Now()
	host := newHostLog() // before anything of the run: the load it starts in
	bin := func(n string) string {
		p, err := k.Executable(build, n)
		if err != nil {
			fatal("%v", err)
		}
		return p
	}
	kinds := []daemonKind{
		{name: "kata-static", bin: staticPath(src, staticKataPath), resource: k.KataGPU},
		{name: "kata", bin: bin(k.KataBinary), resource: k.KataGPU},
		// hyperlight as the image ships it: the musl build, with the shim built for musl
		// (scripts/build-static.sh); the later LD_PRELOAD overrides DaemonEnv's glibc shim.
		{name: "hyperlight", bin: staticPath(src, muslHyperlightPath), resource: k.HyperlightResource,
			env: []string{"DEVICE_COUNT=2000", "LD_PRELOAD=" + staticPath(src, muslShimPath)}},
		{name: "reference", bin: bin("reference-go-plugin"), resource: refResource, env: []string{"DEVICE_COUNT=2000"}},
	}
	privateMountNS()
	if *asDeployedOnly {
		asDeployedOnlyMode(src, build)
		return
	}
	if *largeScanOnly {
		largeScanOnlyMode(build)
		return
	}
	if *restartsOnly != "" {
		restartsOnlyMode(kinds, build)
		return
	}
	if *kubeletRestartsOnly {
		kubeletRestartsOnlyMode(src, build, kinds[2])
		return
	}
	if *draOnly {
		draOnlyMode(src, kinds[2], kinds[0])
		return
	}
	if *companionsOnly {
		companionsOnlyMode(src, kinds[2])
		return
	}
	if *idleOnly != "" {
		idleOnlyMode(kinds)
		return
	}
	if *allocOnly != "" {
		allocOnlyMode(kinds)
		return
	}
	if *prof != "" {
		for _, kd := range kinds {
			if kd.name == *prof {
				profile(kd, time.Duration(*profWait)*time.Second, time.Duration(*profHold)*time.Second)
				return
			}
		}
		fatal("-profile %s: not kata-static, kata, hyperlight or reference", *prof)
	}
	// The static kata first: it is measured like the others.
	staticSize, staticNote := staticKata(src)
	if staticSize < 0 {
		fatal("static kata: %s", staticNote)
	}
	host.skip() // the static build is the bench's own work
	res := map[string]*results{}
	for _, kd := range kinds {
		res[kd.name] = &results{size: fileSize(kd.bin)}
	}
	// Round by round: each round runs every kind once, in an order rotated each round so that
	// no kind is always first, and the pinned runs; the reaction figures (kata: the dynamic
	// build, the same code as the static one) are split into per-round slices. A burst of
	// the neighbours' load then lands on ours and the reference alike, and each ratio to the
	// reference is taken within its round.
	for i := 0; i < *runs; i++ {
		var order []string
		for j := range kinds {
			kd := kinds[(i+j)%len(kinds)]
			order = append(order, kd.name)
			r := res[kd.name]
			s, nd := runStartup(kd, kd.name != "kata-static")
			r.runs = append(r.runs, s)
			if nd == nil {
				continue
			}
			var rc reaction
			rc.restarts = measureRestarts(nd, share(*restarts, *runs, i))
			if kd.name != "kata" { // see healthNote
				for j := 0; j < 2; j++ {
					rc.unhealthy = append(rc.unhealthy, ms(flipHealth(nd)))
				}
			}
			cdi := map[string]string{"kata": k.KataSpecFile(k.KataGPU), "hyperlight": k.HyperlightCDIFile, "reference": "reference.json"}[kd.name]
			// Four deletions per daemon and round (a fresh daemon each round): the daemon repairs
			// the first 4 drifts in a row at once (DP_CDI_BACKOFF_FREE); more within 120 s are a
			// fight it backs off from (docs/architecture.md), which is not what this figure measures.
			var note string
			rc.cdiRepair, note = measureCDI(filepath.Join(nd.n.CDIDir, cdi), cdiPerRound)
			if note != "" && r.cdiNote == "" {
				r.cdiNote = note
			}
			nd.close()
			r.rounds = append(r.rounds, rc)
			r.restarts = append(r.restarts, rc.restarts...)
			r.cdiRepair = append(r.cdiRepair, rc.cdiRepair...)
			r.unhealthy = append(r.unhealthy, rc.unhealthy...)
		}
		if i%2 == 0 {
			order = append(order, "pinned kata-static", "pinned reference")
			measurePinned("kata-static", "reference")
		} else {
			order = append(order, "pinned reference", "pinned kata-static")
			measurePinned("reference", "kata-static")
		}
		host.round(i, order)
		fmt.Fprintf(os.Stderr, "round %d of %d done (%v)\n", i+1, *runs, time.Since(began).Round(time.Second))
	}
	res["kata"].healthNote = "the kata daemon does not flip health: a removed VFIO device changes the fixed device set and the daemon exits with status 3 (by design, docs/kata.md)"
	hlKind, refKind := kinds[2], kinds[3]
	host.skip()
	kr := measureKubeletRestartsRuns(build, hlKind, *kubeletRestartsRuns, *kubeletRestartsN, "")
	if kr.note == "" {
		kr.host.figures = "the Kubelet restarts by the kubelet's own code section"
		host.parts = append(host.parts, kr.host)
	}
	host.skip()
	draf := measureDRA(hlKind, kinds[0], *draRounds, *draClaims)
	host.part("DRA", "the DRA section")
	probe := summarize(probeAlone(hlKind, *probes))
	host.part("probe helper alone", "the probe helper alone figure, and with it hyperlight's Allocate target (1.3 × it)")
	ceil := ceiling(hlKind)
	counts := []int{100, 2000, 20000, ceil}
	enc := encodeBench(build, counts)
	host.part("encode", "the encode column of the scale section (sdp-encode-bench)")
	scale := map[string][]scalePoint{}
	// hyperlight and the reference one after the other at each DEVICE_COUNT, the first
	// alternating.
	pair := []daemonKind{hlKind, refKind}
	for i := range pair {
		var keep []string // its shim, not its DEVICE_COUNT: measureScale sets that
		for _, e := range pair[i].env {
			if !strings.HasPrefix(e, "DEVICE_COUNT=") {
				keep = append(keep, e)
			}
		}
		pair[i].env = keep
	}
	for ci, c := range counts {
		for j := range pair {
			kd := pair[(ci+j)%2]
			scale[kd.name] = append(scale[kd.name], measureScale(kd, c, *runs))
		}
		fmt.Fprintf(os.Stderr, "scale %d done (%v)\n", c, time.Since(began).Round(time.Second))
	}
	host.part("scale", "the ListAndWatch at scale figures")
	fmt.Fprintf(os.Stderr, "idle %d s...\n", *idleSec)
	measureIdle(kinds, res, *idleSec)
	host.part("idle", "the idle figures (the four daemons side by side, so their ratios share it)")
	fmt.Fprintf(os.Stderr, "companions: %d rounds of about %v...\n", *companionsRounds, idleWarmUp+time.Duration(*companionsIdle+5)*time.Second)
	comp := measureCompanions(hlKind, *companionsRounds, *companionsIdle)
	host.part("companions", "the Companions: the cost section (its rounds' own host figures are in it)")
	scan := []scanPoint{scanBench(build, 2001, 0), scanBench(build, 21, 1000)}
	large := measureLargeScan(build)
	prefer := preferBench(build)
	host.part("scan, prefer", "kata's rescan (also on 10,000 IOMMU groups) and GetPreferredAllocation alone (the Idle and GetPreferredAllocation (kata) sections)")
	imgNote := buildImages(src, build)
	img := map[string]int64{}
	for _, n := range []string{"kata-device-plugin", "hyperlight-device-plugin"} {
		img[n] = -1
		if imgNote == "" {
			img[n] = imageSize(src, build, n)
		}
	}
	write(res, host, probe, ceil, scale, enc, scan, large, prefer, staticSize, img, imgNote, kr, draf, comp, time.Since(began))
	if *reliabilityPath != "" {
		writeAsDeployed(measureAsDeployed(src, build))
		floodBegan, floodHost := time.Now(), newHostLog()
		floods := measureFloods(build, floodHost)
		writeFlood(floods, floodHost, build, time.Since(floodBegan))
	}
}

// cdiPerRound: CDI file deletions per daemon and round.
const cdiPerRound = 4

// share is round i's part of n spread over rounds (the first n%rounds get one more).
func share(n, rounds, i int) int {
	v := n / rounds
	if i < n%rounds {
		v++
	}
	return v
}

// row is one line of a table: the figure, one cell per column, the target and whether it is met.
type row struct {
	metric string
	cells  []string
	target string
	ok     string
}

func (d *doc) table(cols []string, rows []row) {
	d.p("| Figure | %s | Target | Met |", strings.Join(cols, " | "))
	d.p("|---|%s---|---|", strings.Repeat("---|", len(cols)))
	for _, r := range rows {
		d.p("| %s | %s | %s | %s |", r.metric, strings.Join(r.cells, " | "), r.target, r.ok)
	}
	d.p("")
}

func medianOf(rs []startup, f func(startup) float64) float64 { return collect(rs, f).med }

// perRun is f of each run of r, in round order.
func perRun(r *results, f func(startup) float64) []float64 {
	var v []float64
	for _, s := range r.runs {
		v = append(v, f(s))
	}
	return v
}

// perRound is f of each round's reactions of r, in round order.
func perRound(r *results, f func(reaction) float64) []float64 {
	var v []float64
	for _, rc := range r.rounds {
		v = append(v, f(rc))
	}
	return v
}

// unmeasured marks a round's figure that was not measured (a negative one can be real: an RSS
// that shrank).
var unmeasured = math.NaN()

// roundRatios are a[i]/b[i] for the rounds where both are measured (b > 0).
func roundRatios(a, b []float64) []float64 {
	var v []float64
	for i := range a {
		if i < len(b) && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) && b[i] > 0 {
			v = append(v, a[i]/b[i])
		}
	}
	return v
}

// roundRatio is the median of the per-round ratios with their range, "median (min–max)".
func roundRatio(a, b []float64) string {
	v := roundRatios(a, b)
	if len(v) == 0 {
		return "n/a"
	}
	s := summarize(v)
	if s.n == 1 {
		return r2(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", r2(s.med), r2(s.min), r2(s.max))
}

// r2 is a ratio to two decimals, never "-0.00".
func r2(v float64) string {
	if v > -0.005 && v < 0.005 {
		v = 0
	}
	return fmt.Sprintf("%.2f", v)
}

// medianRatio is the median of the per-round ratios, or +Inf when there is none.
func medianRatio(a, b []float64) float64 {
	v := roundRatios(a, b)
	if len(v) == 0 {
		return math.Inf(1)
	}
	return summarize(v).med
}

// writeRoundRatios is the table of the main ratios round by round, beside the host's state.
func writeRoundRatios(d *doc, res map[string]*results, host *hostLog) {
	ks, kata, hl, ref := res["kata-static"], res["kata"], res["hyperlight"], res["reference"]
	reg := func(s startup) float64 { return s.reg }
	runMed := func(s startup) float64 { return summarize(s.allocs).med }
	cpu := func(s startup) float64 { return s.allocCPU }
	rsMed := func(rc reaction) float64 {
		if len(rc.restarts) == 0 {
			return unmeasured
		}
		return summarize(rc.restarts).med
	}
	cell := func(a, b []float64, i int) string {
		if i >= len(a) || i >= len(b) || math.IsNaN(a[i]) || math.IsNaN(b[i]) || b[i] <= 0 {
			return "n/a"
		}
		return r2(a[i] / b[i])
	}
	cols := []struct{ a, b []float64 }{
		{perRun(ks, reg), perRun(ref, reg)}, {perRun(hl, reg), perRun(ref, reg)},
		{perRun(ks, runMed), perRun(ref, runMed)}, {perRun(hl, runMed), perRun(ref, runMed)},
		{perRun(ks, cpu), perRun(ref, cpu)}, {perRun(hl, cpu), perRun(ref, cpu)},
		{pinned["kata-static"].med, pinned["reference"].med},
		{perRound(kata, rsMed), perRound(ref, rsMed)}, {perRound(hl, rsMed), perRound(ref, rsMed)},
	}
	d.p("The main ratios round by round (ours/reference in the same round; ks: kata static, hl: hyperlight, kata: kata dynamic):")
	d.p("")
	d.p("| round | marked | start → registered ks/ref | hl/ref | Allocate run median ks/ref | hl/ref | daemon CPU per Allocate ks/ref | hl/ref | pinned Allocate ks/ref | restart median kata/ref | hl/ref |")
	d.p("|---|---|---|---|---|---|---|---|---|---|---|")
	for i := 0; i < len(ks.runs); i++ {
		name, flag := fmt.Sprint(i+1), "—"
		if i < len(host.rounds) {
			flag = host.rounds[i].flag()
		}
		c := []string{name, flag}
		for _, col := range cols {
			c = append(c, cell(col.a, col.b, i))
		}
		d.p("| %s |", strings.Join(c, " | "))
	}
	d.p("")
}

func write(res map[string]*results, host *hostLog, probe stats, ceil int, scale map[string][]scalePoint, enc []encodePoint, scan []scanPoint, large largeScan, prefer []preferPoint,
	staticSize int64, img map[string]int64, imgNote string, kr kubeletRestarts, draf draFigures, comp compFigures, took time.Duration) {
	ks, kata, hl, ref := res["kata-static"], res["kata"], res["hyperlight"], res["reference"]
	var d doc
	d.p("# Benchmarks")
	d.p("")
	d.p("Generated by `%s` (bench/, driver `sdp-bench`); never edited by hand. Figures are \"median (min–max)\"", *command)
	d.p("over the runs named. The daemons run in %d rounds, each round every daemon once in a rotated order (Host during", *runs)
	d.p("the run, below); ratios are ours/reference (bench/reference-go: grpc-go + fsnotify from Debian, the same job")
	d.p("written the way most plugins are) taken within each round, and a ratio column shows the median of the per-round")
	d.p("ratios (min–max over the rounds), not a ratio of medians; the parts measured once (scale, idle, sizes) show the")
	d.p("ratio of that one measurement. Every daemon runs on a simulated node (temporary root, SDP_TEST_ROOT)")
	d.p("against the in-process mock kubelet (tests/kubelet); <root>/var/run/cdi is a tmpfs, as /var/run is on every node")
	d.p("(an fsync of a CDI spec on this machine's ext4 /tmp costs milliseconds no node pays); hyperlight runs with the")
	d.p("hypervisor shim preloaded (tests/fakes/hvshim.c, built for musl) so its probe helper really runs; kata sees a fake VFIO host")
	d.p("with 4 GPUs and runs without the shim; hyperlight and the reference advertise DEVICE_COUNT=2000 unless a section")
	d.p("says otherwise.")
	d.p("")
	d.p("Two kata builds: **kata static** is the binary the image ships (scripts/build-static.sh: musl, -Os, LTO,")
	d.p("stripped; build-static/image-context-kata/kata-device-plugin), and kata's targets are judged on it; **kata dynamic** is")
	d.p("build/kata-device-plugin (glibc, shared libraries; what the tests run), shown for comparison. The reaction, scale and")
	d.p("idle figures come from the dynamic build (the same code).")
	d.p("")
	d.p("**hyperlight** is the binary its image ships (scripts/build-static.sh: musl, every library but musl's libc.so")
	d.p("linked in, Mbed TLS included, -Os, LTO, stripped; build-static/image-context-hyperlight/rootfs), in every section.")
	d.p("")
	d.p("Machine: %d CPUs (nproc), %s, Linux %s, %s. Whole run: %v. Rounds (runs per start-up figure): %d.", runtime.NumCPU(), cpuModel(), kernel(), runtime.Version(), took.Round(time.Second), *runs)
	d.p("")
	writeHost(&d, host)
	writeRoundRatios(&d, res, host)

	st := func(r *results, f func(startup) float64) stats { return collect(r.runs, f) }
	four := []string{"kata static", "kata dynamic", "hyperlight", "reference", "kata static/ref", "hyperlight/ref"}
	// cells4: each daemon's figure shown from the runs' summary, and the per-round ratios of f.
	cells4 := func(f func(startup) float64, show func(stats) string) []string {
		return []string{show(st(ks, f)), show(st(kata, f)), show(st(hl, f)), show(st(ref, f)),
			roundRatio(perRun(ks, f), perRun(ref, f)), roundRatio(perRun(hl, f), perRun(ref, f))}
	}

	// Start-up and memory.
	d.p("## Start-up and memory")
	d.p("")
	d.p("Start → registered: from the daemon's fork/exec to the mock kubelet accepting Register (after its dial-back and")
	d.p("GetDevicePluginOptions). Start → first ListAndWatch: to the first response arriving at the kubelet. RSS: VmRSS and")
	d.p("VmHWM from /proc/<pid>/status after the first ListAndWatch response, and after %d sequential Allocate calls. %d runs each,", *allocs, *runs)
	d.p("one per round.")
	d.p("")
	reg := func(s startup) float64 { return s.reg }
	law := func(s startup) float64 { return s.law }
	rssF := func(s startup) float64 { return float64(s.memReg.rss) }
	hwmF := func(s startup) float64 { return float64(s.memReg.hwm) }
	rssA := func(s startup) float64 { return float64(s.memAlloc.rss) }
	grow := func(s startup) float64 { return float64(s.memAlloc.rss - s.memReg.rss) }
	regS, regH := st(ks, reg), st(hl, reg)
	rS, rH := st(ks, rssF), st(hl, rssF)
	rsRatioS, rsRatioH := medianRatio(perRun(ks, rssF), perRun(ref, rssF)), medianRatio(perRun(hl, rssF), perRun(ref, rssF))
	gS, gK, gH := st(ks, grow), st(kata, grow), st(hl, grow)
	d.table(four, []row{
		{"start → registered (ms)", cells4(reg, rng), "≤ 5 ms median", markEach(regS.med <= 5, regH.med <= 5)},
		{"start → first ListAndWatch (ms)", cells4(law, rng), "—", ""},
		{"VmRSS when registered (KiB)", cells4(rssF, rng), "kata ≤ 1536, hyperlight ≤ 3072; ratio ≤ 0.15",
			markEach(rS.med <= 1536 && rsRatioS <= 0.15, rH.med <= 3072 && rsRatioH <= 0.15)},
		{"VmHWM when registered (KiB)", cells4(hwmF, rng), "—", ""},
		{fmt.Sprintf("VmRSS after %d Allocates (KiB)", *allocs), cells4(rssA, rng), "—", ""},
		{"RSS growth over the Allocates (KiB)", cells4(grow, rng), "≤ 64 KiB", markEach(gS.max <= 64 && gK.max <= 64, gH.max <= 64)},
	})
	part := func(r *results, f func(rssParts) int64) string {
		return f1(medianOf(r.runs, func(s startup) float64 { return float64(f(s.smaps)) }))
	}
	d.p("Where the resident memory is when registered (KiB, Rss per mapping from /proc/<pid>/smaps, median of the runs):")
	d.p("")
	d.p("| mapping | kata static | kata dynamic | hyperlight |")
	d.p("|---|---|---|---|")
	for _, m := range []struct {
		name string
		f    func(rssParts) int64
	}{
		{"the executable's file pages (text, rodata)", func(p rssParts) int64 { return p.exe }},
		{"shared libraries' file pages (libc.so.6, ld.so, libnghttp2, libprotobuf-c, …; shared with every process using them)", func(p rssParts) int64 { return p.libs }},
		{"heap", func(p rssParts) int64 { return p.heap }},
		{"stack", func(p rssParts) int64 { return p.stack }},
		{"other anonymous (.data/.bss, mmap'ed allocations)", func(p rssParts) int64 { return p.anon }},
	} {
		d.p("| %s | %s | %s | %s |", m.name, part(ks, m.f), part(kata, m.f), part(hl, m.f))
	}
	d.p("")
	d.p("The kernel maps a file's pages around each fault (fault-around, large folios), so a binary's resident text is close")
	d.p("to its whole text once started: the static kata's RSS follows its size (Sizes below), and the dynamic build's is")
	d.p("mostly glibc's shared text.")
	d.p("")
	writeCompanions(&d, comp, companionsRerun())

	// RPCs.
	d.p("## Allocate and GetPreferredAllocation")
	d.p("")
	d.p("Round trips measured at the kubelet side (grpc-go client on kubelet's connection), %d sequential Allocate calls", *allocs)
	d.p("of one device per run. The target figure is the median of the %d per-run medians, with their range: on this", *runs)
	d.p("shared 2-CPU virtual machine the same binary's round trip moves by a factor of 3 or more between minutes (its")
	d.p("neighbours' load), so one slow run must not decide it, and its ratio is the median of the per-round ratios of the")
	d.p("run medians; the pooled median of all samples follows (within a round it is the run's median: no ratio of its own). %d", *allocs/10)
	d.p("GetPreferredAllocation calls per run (2,000 available, size 1; kata: 4 available).")
	d.p("Daemon CPU: the daemon's time on CPU (/proc/<pid>/task/*/schedstat, ns) over the calls, divided by their number; it")
	d.p("holds its system calls and scheduling, not the client's. hyperlight's Allocate waits for its probe helper (a")
	d.p("fork+exec of the daemon with `--dp-helper probe`, under the shim); the helper alone is")
	d.p("`hyperlight-device-plugin --dp-helper probe kvm <root>/dev/kvm` run %d times from Go's os/exec (fork+exec+wait", *probes)
	d.p("measured from the driver; it includes Go's own spawn cost; after the rounds).")
	d.p("Pinned: the same runs again for kata static and the reference with the driver (the grpc-go client) and the daemon")
	d.p("on one CPU (the driver re-run under `taskset -c 0 sdp-bench -alloc-only KIND -runs 1`, one run of each per round):")
	d.p("no round trip then waits for a wake-up on the other virtual CPU (an inter-processor interrupt, a VM exit on this")
	d.p("machine); each side still runs its own code, and the two alternate on the one CPU.")
	d.p("")
	pooled := func(r *results, f func(startup) []float64) stats { return all(r.runs, f) }
	al := func(s startup) []float64 { return s.allocs }
	pr := func(s startup) []float64 { return s.prefs }
	runMed := func(s startup) float64 { return summarize(s.allocs).med }
	runP99 := func(s startup) float64 { return summarize(s.allocs).p99 }
	cpuF := func(s startup) float64 { return s.allocCPU }
	prefMed := func(s startup) float64 {
		if len(s.prefs) == 0 {
			return unmeasured
		}
		return summarize(s.prefs).med
	}
	prefP99 := func(s startup) float64 {
		if len(s.prefs) == 0 {
			return unmeasured
		}
		return summarize(s.prefs).p99
	}
	prS, prH, prR := st(ks, runMed), st(hl, runMed), st(ref, runMed)
	cS := st(ks, cpuF)
	one := func(s stats) string { return f1(s.med) }
	p99 := func(s stats) string { return f1(s.p99) }
	mm := func(s stats) string { return f1(s.min) + "–" + f1(s.max) }
	na := func(show func(stats) string) func(stats) string {
		return func(s stats) string {
			if s.n == 0 {
				return "not offered"
			}
			return show(s)
		}
	}
	// pooled4: the samples of every run pooled, and the per-round ratios of f.
	pooled4 := func(samples func(startup) []float64, show func(stats) string, f func(startup) float64) []string {
		c := []string{show(pooled(ks, samples)), show(pooled(kata, samples)), show(pooled(hl, samples)), show(pooled(ref, samples)), "—", "—"}
		if f != nil {
			c[4], c[5] = roundRatio(perRun(ks, f), perRun(ref, f)), roundRatio(perRun(hl, f), perRun(ref, f))
		}
		return c
	}
	minmax := pooled4(al, mm, nil)
	minmax[4], minmax[5] = "", ""
	d.table(four, []row{
		{"Allocate median (µs): median (min–max) of the per-run medians", cells4(runMed, rng),
			fmt.Sprintf("kata ≤ 60; hyperlight ≤ 1.3 × helper alone (%s µs)", f1(1.3*probe.med)), markEach(prS.med <= 60, prH.med <= 1.3*probe.med)},
		{fmt.Sprintf("Allocate median (µs), all runs pooled (%d samples)", *runs**allocs), pooled4(al, one, nil), "—", ""},
		{"Allocate p99 (µs), all runs pooled; ratio: of the runs' p99s", pooled4(al, p99, runP99), "—", ""},
		{"Allocate min–max (µs)", minmax, "—", ""},
		{"daemon CPU per Allocate (µs), median (min–max) of the runs", cells4(cpuF, rng), "—", ""},
		pinnedRows()[0], pinnedRows()[1],
		{"probe helper alone median / p99 (µs)", []string{"—", "—", f1(probe.med) + " / " + f1(probe.p99), "—", "", ""}, "—", ""},
		{"GetPreferredAllocation median (µs)", pooled4(pr, na(one), prefMed), "—", ""},
		{"GetPreferredAllocation p99 (µs)", pooled4(pr, na(p99), prefP99), "—", ""},
	})

	writePrefer(&d, prefer)

	// Reaction.
	three := []string{"kata dynamic", "hyperlight", "reference", "kata/ref", "hyperlight/ref"}
	// cells3: the daemons' figures over every round, and the per-round ratios of f (nil: none).
	cells3 := func(a, b, c string, f func(reaction) float64) []string {
		if f == nil {
			return []string{a, b, c, "", ""}
		}
		return []string{a, b, c, roundRatio(perRound(kata, f), perRound(ref, f)), roundRatio(perRound(hl, f), perRound(ref, f))}
	}
	d.p("## Reaction times")
	d.p("")
	d.p("Kubelet restart: the mock kubelet stops, closes every plugin connection, deletes every socket in the directory and")
	d.p("serves kubelet.sock again; from the deletion to the next accepted Register (%d restarts per daemon, %d per round).", *restarts, share(*restarts, *runs, 0))
	d.p("CDI repair: the spec file deleted, polled every 50 µs until it is back on disk (%d times per daemon, %d per round,", *runs*cdiPerRound, cdiPerRound)
	d.p("each round a fresh daemon). Device gone: <root>/dev/kvm deleted, to the first ListAndWatch response with every")
	d.p("device Unhealthy arriving at the kubelet (%d times, 2 per round). Each round's slice runs on the node of that", *runs*2)
	d.p("round's start-up run, after its Allocates; the cells are over every round, the ratios within each round (a")
	d.p("round's median or p99 over the reference's in the same round).")
	d.p("")
	rsK, rsH, rsR := summarize(kata.restarts), summarize(hl.restarts), summarize(ref.restarts)
	cdK, cdH := summarize(kata.cdiRepair), summarize(hl.cdiRepair)
	uH, uR := summarize(hl.unhealthy), summarize(ref.unhealthy)
	cdiCell := func(r *results) string {
		if r.cdiNote != "" {
			return r.cdiNote
		}
		return rng(summarize(r.cdiRepair))
	}
	medOf := func(f func(reaction) []float64) func(reaction) float64 {
		return func(rc reaction) float64 {
			if len(f(rc)) == 0 {
				return unmeasured
			}
			return summarize(f(rc)).med
		}
	}
	rsF := func(rc reaction) []float64 { return rc.restarts }
	rsP99 := func(rc reaction) float64 {
		if len(rc.restarts) == 0 {
			return unmeasured
		}
		return summarize(rc.restarts).p99
	}
	cdF := func(rc reaction) []float64 { return rc.cdiRepair }
	uF := func(rc reaction) []float64 { return rc.unhealthy }
	uRow := cells3("n/a¹", rng(uH), rng(uR), medOf(uF))
	uRow[3] = ""
	d.table(three, []row{
		{"restart → re-registered median (ms)", cells3(one(rsK), one(rsH), one(rsR), medOf(rsF)), "—", ""},
		{"restart → re-registered p99 (ms); ratio: of the rounds' p99s", cells3(p99(rsK), p99(rsH), p99(rsR), rsP99), "p99 ≤ 5 ms", mark(rsK.p99 <= 5 && rsH.p99 <= 5)},
		{"restart → re-registered min–max (ms)", cells3(mm(rsK), mm(rsH), mm(rsR), nil), "max ≤ 20 ms", mark(rsK.n > 0 && rsH.n > 0 && rsK.max <= 20 && rsH.max <= 20)},
		{"CDI file deleted → repaired (ms)", cells3(cdiCell(kata), cdiCell(hl), cdiCell(ref), medOf(cdF)),
			"≤ 10 ms", mark(cdK.n > 0 && cdH.n > 0 && kata.cdiNote == "" && hl.cdiNote == "" && cdK.max <= 10 && cdH.max <= 10)},
		{"device node deleted → Unhealthy at the kubelet (ms)", uRow, "≤ 50 ms", mark(uH.n > 0 && uH.max <= 50)},
	})
	d.p("¹ %s.", kata.healthNote)
	d.p("")
	writeKubeletRestarts(&d, kr, "`make bench-kubelet-restarts`")

	writeScale(&d, probe, ceil, scale, enc)
	writeDRA(&d, draf, "`make bench-dra`")
	writeIdle(&d, ks, kata, hl, ref, scan)
	writeLargeScan(&d, large)
	writeSizes(&d, res, staticSize, img, imgNote)
	hp := func(f func(rssParts) int64) int64 {
		return int64(medianOf(hl.runs, func(s startup) float64 { return float64(f(s.smaps)) }))
	}
	writeMissed(&d, missedInput{
		kataAlloc: prS, kataAllocCPU: cS, refAlloc: prR, kataAllocRuns: perRun(ks, runMed), hlRSS: rH, refRSS: st(ref, rssF), hlRSSRatio: rsRatioH,
		hlParts: rssParts{exe: hp(func(p rssParts) int64 { return p.exe }), libs: hp(func(p rssParts) int64 { return p.libs }),
			heap: hp(func(p rssParts) int64 { return p.heap }), stack: hp(func(p rssParts) int64 { return p.stack }),
			anon: hp(func(p rssParts) int64 { return p.anon })},
		kataStaticRSS: rS.med, hlStartReg: regH, hlStartRegRuns: perRun(hl, reg), hlImage: img["hyperlight-device-plugin"], build: *buildDir,
		kataIdle: ks, kataDynIdle: kata, hlIdle: hl, kataRestarts: kata, hlRestarts: hl, refRestarts: ref, host: host,
	})
	if err := os.WriteFile(*outPath, keepPeersSection(*outPath, d.b.Bytes()), 0o644); err != nil {
		fatal("%v", err)
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%v)\n", *outPath, took.Round(time.Second))
}

func writeScale(d *doc, probe stats, ceil int, scale map[string][]scalePoint, enc []encodePoint) {
	d.p("## ListAndWatch at scale (hyperlight)")
	d.p("")
	d.p("DEVICE_COUNT = 100, 2,000, 20,000 and the ceiling %d (the daemon's own error message for an out-of-range", ceil)
	d.p("DEVICE_COUNT names it; the largest list that fits the 4 MiB gRPC message limit). Bytes: the protobuf size of the")
	d.p("full response as the kubelet received it (all Healthy; the encoder's figure is the all-Unhealthy list a flip sends).")
	d.p("Encode: the daemon's own encoder alone, `build/bench/encode/sdp-encode-bench` (bench/encode/encode_bench.c: hyperlight's device")
	d.p("IDs and ceiling, core/src/endpoint/endpoint_encode.c's dp_ep_encode_list timed with CLOCK_MONOTONIC around each call,")
	d.p("buffer malloc and free included), median (min–max) of its repetitions. Flip → received, end to end:")
	d.p("<root>/dev/kvm deleted to the all-Unhealthy response decoded at the kubelet, median (min–max) of %d.", *runs)
	d.p("Go decode: golang/protobuf's Unmarshal of that response in the driver (what grpc-go does before the kubelet")
	d.p("sees it), median of %d. RSS: VmRSS after the first response; per-device memory is the slope of RSS between", *runs)
	d.p("100 devices and the ceiling. At each DEVICE_COUNT hyperlight and the reference run one after the other (which")
	d.p("first alternates), so the ratios of a line met the same neighbours.")
	d.p("")
	d.p("| DEVICE_COUNT | bytes | encode (ms) | hyperlight start → first LAW (ms) | hyperlight flip → received (ms) | Go decode (ms) | hyperlight VmRSS / VmHWM (KiB) | reference flip → received (ms) | reference VmRSS / VmHWM (KiB) | flip ratio | RSS ratio |")
	d.p("|---|---|---|---|---|---|---|---|---|---|---|")
	sh, sr := scale["hyperlight"], scale["reference"]
	for i := range sh {
		a, b := sh[i], sr[i]
		fa, fb := summarize(a.flip), summarize(b.flip)
		e := enc[i]
		d.p("| %d | %d | %s (%s–%s) | %s | %s | %s | %d / %d | %s | %d / %d | %s | %s |", a.count, a.bytes, f1(e.med), f1(e.min), f1(e.max),
			f1(a.firstLAW), rng(fa), f1(a.goDecode), a.rss, a.hwm, rng(fb), b.rss, b.hwm, ratio(fa.med, fb.med), ratio(float64(a.rss), float64(b.rss)))
	}
	d.p("")
	last, first := sh[len(sh)-1], sh[0]
	perDev := float64(last.rss-first.rss) * 1024 / float64(last.count-first.count)
	perDevHWM := float64(last.hwm-first.hwm) * 1024 / float64(last.count-first.count)
	refPer := float64(sr[len(sr)-1].rss-sr[0].rss) * 1024 / float64(last.count-first.count)
	flipCeil := summarize(last.flip).med
	encCeil := enc[len(enc)-1]
	// Linearity: encode time per device at 20,000 vs at the ceiling within a factor of 2.
	perMid := (enc[2].med - enc[0].med) / float64(enc[2].count-enc[0].count)
	perCeil := (encCeil.med - enc[0].med) / float64(encCeil.count-enc[0].count)
	linear := perMid > 0 && perCeil/perMid < 2 && perCeil/perMid > 0.5
	d.p("| Figure | hyperlight | reference | ratio | Target | Met |")
	d.p("|---|---|---|---|---|---|")
	d.p("| encode at the ceiling (ms, sdp-encode-bench) | %s | — | | ≤ 20 ms | %s |", f1(encCeil.med), mark(encCeil.med <= 20))
	d.p("| flip → received at the ceiling (ms, end to end) | %s | %s | %s | — | |", f1(flipCeil), f1(summarize(sr[len(sr)-1].flip).med), ratio(flipCeil, summarize(sr[len(sr)-1].flip).med))
	d.p("| memory per advertised device, VmRSS slope (bytes) | %.1f | %.1f | %s | ≤ 64 | %s |", perDev, refPer, ratio(perDev, refPer), mark(perDev <= 64))
	d.p("| memory per advertised device, VmHWM slope (bytes) | %.1f | — | | — | |", perDevHWM)
	d.p("| encode time per device, 100→20,000 vs 100→ceiling (µs/device) | %.4f vs %.4f | | | linear (within 2×) | %s |", perMid*1000, perCeil*1000, mark(linear))
	d.p("")
	d.p("What the end-to-end flip holds besides the encode (%s ms at the ceiling): the inotify wake-up; the health check,", f1(encCeil.med))
	d.p("whose probe helper is a fork+exec (%s µs alone, above); the copy into the gRPC send queue; the transfer, paced by", f1(probe.med))
	d.p("HTTP/2 flow control: the kubelet's grpc-go client opens with 64 KiB stream and connection windows and grows them")
	d.p("only through its BDP estimator, so a %d-byte message crosses in many windows, each waiting for a WINDOW_UPDATE", last.bytes)
	d.p("round trip through the Go scheduler; and grpc-go's protobuf decode (%s ms at the ceiling, Go decode above), which", f1(last.goDecode))
	d.p("allocates every Device. The reference pays the same transfer and decode.")
	d.p("")
}

func writePrefer(d *doc, prefer []preferPoint) {
	d.p("## GetPreferredAllocation (kata)")
	d.p("")
	d.p("kata's answer alone, without gRPC: `build/bench/prefer/sdp-prefer-bench` (bench/prefer/prefer_bench.c) times kata_prefer()")
	d.p("(kata/prefer.c) with CLOCK_MONOTONIC around each call (%d calls per line), in kubelet's three shapes of call (docs/kata.md,", prefer[0].reps)
	d.p("\"Allocation order\"): nohint, every device available; numa, only NUMA node 0's; must, node 0's free devices as")
	d.p("must-include and every free device available, on an HGX-like node (8 GPUs, 2 NUMA nodes, 4 PCIe switches) and on 4096")
	d.p("devices (8 NUMA nodes of 16 switches of 32).")
	d.p("")
	d.p("| topo | case | size | p50 (µs) | p99 (µs) | max (µs) |")
	d.p("|---|---|---|---|---|---|")
	for _, p := range prefer {
		d.p("| %s | %s | %d | %s | %s | %s |", p.topo, p.kase, p.size, f1(p.p50), f1(p.p99), f1(p.max))
	}
	d.p("")
}

func writeIdle(d *doc, ks, kata, hl, ref *results, scan []scanPoint) {
	d.p("## Idle")
	d.p("")
	d.p("The four daemons registered side by side, then %d s for each to be past its first periodic tick (its one-time", int(idleWarmUp.Seconds()))
	d.p("costs), then %d s idle (`make bench BENCH_IDLE=...` sets it), begun half-way between two instants of the coarse", *idleSec)
	d.p("timers' 5 s grid so that it holds exactly %d of every 30 s tick. CPU: the time on CPU of every thread from", *idleSec/30)
	d.p("/proc/<pid>/task/*/schedstat (nanoseconds, the scheduler's own accounting), scaled to one minute; the daemon's own,")
	d.p("not its probe helper children's (separate processes, whose cost is the helper-alone figure above). Wake-ups: the")
	d.p("sum of voluntary and involuntary context switches of every thread (/proc/<pid>/task/*/status) over the period,")
	d.p("scaled to one minute. `sdp-bench -idle-only kata-static,kata,hyperlight,reference -idle-trace` repeats this part")
	d.p("alone and prints every wake-up's CPU per daemon, with its place on the grid.")
	d.p("")
	cpu := func(r *results) float64 { return float64(r.idleNanos) / 1e6 * 60 / float64(*idleSec) }
	wake := func(r *results) float64 { return float64(r.idleCtx) * 60 / float64(*idleSec) }
	four := []string{"kata static", "kata dynamic", "hyperlight", "reference", "kata static/ref", "hyperlight/ref"}
	d.table(four, []row{
		{"CPU per idle minute (ms)", []string{f1(cpu(ks)), f1(cpu(kata)), f1(cpu(hl)), f1(cpu(ref)), ratio(cpu(ks), cpu(ref)), ratio(cpu(hl), cpu(ref))},
			"≤ 1 ms", markEach(cpu(ks) <= 1, cpu(hl) <= 1)},
		{"context switches per idle minute", []string{f1(wake(ks)), f1(wake(kata)), f1(wake(hl)), f1(wake(ref)), ratio(wake(ks), wake(ref)), ratio(wake(hl), wake(ref))},
			"only the documented timers", "see below"},
		{"threads", []string{fmt.Sprint(ks.idleThreads), fmt.Sprint(kata.idleThreads), fmt.Sprint(hl.idleThreads), fmt.Sprint(ref.idleThreads), "", ""}, "—", ""},
	})
	d.p("Every idle wake-up source (docs/architecture.md, \"Timers\"). The periodic ones are coarse timers on one 5 s grid of")
	d.p("the monotonic clock (core/src/loop/loop_timer.c, dp_timer_set_coarse), so all of them that are due wake the daemon once:")
	d.p("")
	d.p("| source | period | daemons |")
	d.p("|---|---|---|")
	d.p("| kubelet-restart stat backstop (our socket and kubelet.sock against the identities registered) | 30 s while the device-plugins directory has an inotify watch; 5 s without one | both |")
	d.p("| health check (kata: each VFIO cdev and the CDI spec; hyperlight: device node, CDI spec, then the probe helper) | 30 s | both |")
	d.p("| VFIO device-set rescan (sysfs; the backstop for what inotify on /dev/vfio/devices cannot see) | 30 s | kata |")
	d.p("| the kubelet connection's idle check (it holds a ListAndWatch stream, so it is never closed) | 5 min | both |")
	d.p("| hyperlight's probe helper: its exit (pidfd) and its output (pipe), after each check's spawn | with each check | hyperlight |")
	d.p("")
	d.p("So kata wakes 2 times a minute (one 30 s grid tick doing the stat, the check and the rescan), hyperlight about 2")
	d.p("ticks plus the helper's events for each check. A context switch count can exceed the wake-ups by the involuntary")
	d.p("switches of a busy machine.")
	d.p("")
	hot, cold := scan[0], scan[1]
	d.p("kata's tick is mostly its VFIO rescan. The rescan alone, `SDP_TEST_ROOT=<root> build/bench/scan/sdp-scan-bench REPS GAP_MS`")
	d.p("(bench/scan/scan_bench.c: kata/scan.c as the 30 s rescan runs it, with the cache each rescan leaves to the next,")
	d.p("kata/scan_cache.h), on a tree like the kata node's (%d GPUs) made 2.5 s before (past the cache's settle time, as a", hot.devices)
	d.p("node's sysfs files are), median (min–max):")
	d.p("")
	d.p("| rescan of the kata node's tree | µs |")
	d.p("|---|---|")
	d.p("| back to back (%d scans; caches warm) | %s (%s–%s) |", hot.reps, f1(hot.med), f1(hot.min), f1(hot.max))
	d.p("| %d ms apart (%d scans; caches cooled by the pause, as every 30 s) | %s (%s–%s) |", cold.gapMs, cold.reps, f1(cold.med), f1(cold.min), f1(cold.max))
	d.p("")
	d.p("`strace -c -f` of it counts the system calls of a scan: 15 per device (the cdev's stat; the class entry opened")
	d.p("and named by the kernel through /proc/self/fd; the stat of its dev; the device link's stat, open and name; the")
	d.p("stats of vendor and class; numa_node opened, fstat'ed and read; three closes) and 8 per scan (the two directories")
	d.p("opened, listed and closed). sysfs never changes dev, vendor and class, so they are read again only when the file")
	d.p("is not the one the last rescan read (kata/scan_cache.h; 24 system calls per device without it); numa_node is")
	d.p("writable and read every time.")
	d.p("")
}

func writeSizes(d *doc, res map[string]*results, staticSize int64, img map[string]int64, imgNote string) {
	kata, hl, ref := res["kata"], res["hyperlight"], res["reference"]
	d.p("## Sizes")
	d.p("")
	kib := func(v int64) string {
		if v < 0 {
			return "not measured"
		}
		return fmt.Sprintf("%.0f", float64(v)/1024)
	}
	d.p("| Figure | kata | hyperlight | reference | kata/ref | hyperlight/ref | Target | Met |")
	d.p("|---|---|---|---|---|---|---|---|")
	d.p("| binary, build/ (KiB, dynamically linked, not stripped) | %s | %s | %s | %s | %s | — | |", kib(kata.size), kib(hl.size), kib(ref.size), ratio(float64(kata.size), float64(ref.size)), ratio(float64(hl.size), float64(ref.size)))
	d.p("| static kata as the image ships it (KiB; scripts/build-static.sh: musl, -Os, LTO, stripped) | %s | — | — | %s | | ≤ 464 KiB | %s |", kib(staticSize), ratio(float64(staticSize), float64(ref.size)), markIf(staticSize >= 0, staticSize <= 464*1024))
	ik, ih := img["kata-device-plugin"], img["hyperlight-device-plugin"]
	d.p("| image (KiB, `podman image inspect` Size after images/build.sh) | %s | %s | — | | | kata ≤ 2 MiB, hyperlight ≤ 2 MiB (images/build.sh's bounds) | kata %s / hyperlight %s |", kib(ik), kib(ih), markIf(ik >= 0, ik <= 2<<20), markIf(ih >= 0, ih <= 2<<20))
	d.p("")
	if imgNote != "" {
		d.p("Images not measured: %s.", imgNote)
	} else {
		d.p("make bench builds both images with images/build.sh (podman, offline, the vfs store in the build directory).")
	}
	d.p("")
}

// markEach says which daemon meets a target both must meet.
func markEach(kataOK, hlOK bool) string {
	return "kata " + mark(kataOK) + " / hyperlight " + mark(hlOK)
}

func markIf(measured, ok bool) string {
	if !measured {
		return "not measured"
	}
	return mark(ok)
}
