package main

import (
	"bytes"
	"flag"
	"fmt"
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
	began := time.Now()
	bin := func(n string) string {
		p, err := k.Executable(build, n)
		if err != nil {
			fatal("%v", err)
		}
		return p
	}
	kinds := []daemonKind{
		{name: "kata-static", bin: filepath.Join(src, staticKataPath), resource: k.KataGPU},
		{name: "kata", bin: bin(k.KataBinary), resource: k.KataGPU},
		// hyperlight as the image ships it: the musl build, with the shim built for musl
		// (scripts/build-static.sh); the later LD_PRELOAD overrides DaemonEnv's glibc shim.
		{name: "hyperlight", bin: filepath.Join(src, muslHyperlightPath), resource: k.HyperlightResource,
			env: []string{"DEVICE_COUNT=2000", "LD_PRELOAD=" + filepath.Join(src, muslShimPath)}},
		{name: "reference", bin: bin("reference-go-plugin"), resource: refResource, env: []string{"DEVICE_COUNT=2000"}},
	}
	privateMountNS()
	if *asDeployedOnly {
		asDeployedOnlyMode(src, build)
		return
	}
	if *restartsOnly != "" {
		restartsOnlyMode(kinds, build)
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
	res := map[string]*results{}
	for _, kd := range kinds {
		r := &results{size: fileSize(kd.bin)}
		res[kd.name] = r
		for i := 0; i < *runs; i++ {
			// The reaction, idle and scale figures once per daemon (kata: the dynamic build,
			// the same code as the static one).
			s, nd := runStartup(kd, i == 0 && kd.name != "kata-static")
			r.runs = append(r.runs, s)
			if nd == nil {
				continue
			}
			fmt.Fprintf(os.Stderr, "%s: start-up, allocate done; restarts...\n", kd.name)
			r.restarts = measureRestarts(nd, *restarts)
			switch kd.name {
			case "kata":
				r.healthNote = "the kata daemon does not flip health: a removed VFIO device changes the fixed device set and the daemon exits with status 3 (by design, docs/kata.md)"
			default:
				for j := 0; j < *runs*2; j++ {
					r.unhealthy = append(r.unhealthy, ms(flipHealth(nd)))
				}
			}
			cdi := map[string]string{"kata": k.KataSpecFile(k.KataGPU), "hyperlight": k.HyperlightCDIFile, "reference": "reference.json"}[kd.name]
			// Four deletions per daemon: the daemon repairs the first 4 drifts in a row at once
			// (DP_CDI_BACKOFF_FREE); more within 120 s are a fight it backs off from (docs/architecture.md),
			// which is not what this figure measures.
			r.cdiRepair, r.cdiNote = measureCDI(filepath.Join(nd.n.CDIDir, cdi), 4)
			nd.close()
		}
		fmt.Fprintf(os.Stderr, "%s: done (%v)\n", kd.name, time.Since(began).Round(time.Second))
	}
	fmt.Fprintf(os.Stderr, "Allocates pinned to one CPU...\n")
	measurePinned()
	hlKind, refKind := kinds[2], kinds[3]
	probe := summarize(probeAlone(hlKind, *probes))
	ceil := ceiling(hlKind)
	counts := []int{100, 2000, 20000, ceil}
	enc := encodeBench(build, counts)
	scale := map[string][]scalePoint{}
	for _, kd := range []daemonKind{hlKind, refKind} {
		var keep []string // its shim, not its DEVICE_COUNT: measureScale sets that
		for _, e := range kd.env {
			if !strings.HasPrefix(e, "DEVICE_COUNT=") {
				keep = append(keep, e)
			}
		}
		kd.env = keep
		for _, c := range counts {
			scale[kd.name] = append(scale[kd.name], measureScale(kd, c, *runs))
		}
		fmt.Fprintf(os.Stderr, "%s: scale done (%v)\n", kd.name, time.Since(began).Round(time.Second))
	}
	fmt.Fprintf(os.Stderr, "idle %d s...\n", *idleSec)
	measureIdle(kinds, res, *idleSec)
	scan := []scanPoint{scanBench(build, 2001, 0), scanBench(build, 21, 1000)}
	prefer := preferBench(build)
	imgNote := buildImages(src, build)
	img := map[string]int64{}
	for _, n := range []string{"kata-device-plugin", "hyperlight-device-plugin"} {
		img[n] = -1
		if imgNote == "" {
			img[n] = imageSize(src, build, n)
		}
	}
	write(res, probe, ceil, scale, enc, scan, prefer, staticSize, img, imgNote, time.Since(began))
	if *reliabilityPath != "" {
		writeAsDeployed(measureAsDeployed(src, build))
	}
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

func write(res map[string]*results, probe stats, ceil int, scale map[string][]scalePoint, enc []encodePoint, scan []scanPoint, prefer []preferPoint,
	staticSize int64, img map[string]int64, imgNote string, took time.Duration) {
	ks, kata, hl, ref := res["kata-static"], res["kata"], res["hyperlight"], res["reference"]
	var d doc
	d.p("# Benchmarks")
	d.p("")
	d.p("Generated by `%s` (bench/, driver `sdp-bench`); never edited by hand. Figures are \"median (min–max)\"", *command)
	d.p("over the runs named; ratios are ours/reference (bench/reference-go: grpc-go + fsnotify from Debian, the same")
	d.p("job written the way most plugins are). Every daemon runs on a simulated node (temporary root, SDP_TEST_ROOT)")
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
	d.p("Machine: %d CPUs (nproc), %s, Linux %s, %s. Whole run: %v. Runs per start-up figure: %d.", runtime.NumCPU(), cpuModel(), kernel(), runtime.Version(), took.Round(time.Second), *runs)
	d.p("")
	st := func(r *results, f func(startup) float64) stats { return collect(r.runs, f) }
	four := []string{"kata static", "kata dynamic", "hyperlight", "reference", "kata static/ref", "hyperlight/ref"}
	cells4 := func(a, b, c, e stats, show func(stats) string, ratioOf func(stats) float64) []string {
		return []string{show(a), show(b), show(c), show(e), ratio(ratioOf(a), ratioOf(e)), ratio(ratioOf(c), ratioOf(e))}
	}
	med := func(s stats) float64 { return s.med }

	// Start-up and memory.
	d.p("## Start-up and memory")
	d.p("")
	d.p("Start → registered: from the daemon's fork/exec to the mock kubelet accepting Register (after its dial-back and")
	d.p("GetDevicePluginOptions). Start → first ListAndWatch: to the first response arriving at the kubelet. RSS: VmRSS and")
	d.p("VmHWM from /proc/<pid>/status after the first ListAndWatch response, and after %d sequential Allocate calls. %d runs each.", *allocs, *runs)
	d.p("")
	reg := func(s startup) float64 { return s.reg }
	law := func(s startup) float64 { return s.law }
	rssF := func(s startup) float64 { return float64(s.memReg.rss) }
	hwmF := func(s startup) float64 { return float64(s.memReg.hwm) }
	rssA := func(s startup) float64 { return float64(s.memAlloc.rss) }
	grow := func(s startup) float64 { return float64(s.memAlloc.rss - s.memReg.rss) }
	all4 := func(f func(startup) float64) (stats, stats, stats, stats) {
		return st(ks, f), st(kata, f), st(hl, f), st(ref, f)
	}
	regS, regK, regH, regR := all4(reg)
	lawS, lawK, lawH, lawR := all4(law)
	rS, rK, rH, rR := all4(rssF)
	hS, hK, hH, hR := all4(hwmF)
	aS, aK, aH, aR := all4(rssA)
	gS, gK, gH, gR := all4(grow)
	d.table(four, []row{
		{"start → registered (ms)", cells4(regS, regK, regH, regR, rng, med), "≤ 5 ms median", markEach(regS.med <= 5, regH.med <= 5)},
		{"start → first ListAndWatch (ms)", cells4(lawS, lawK, lawH, lawR, rng, med), "—", ""},
		{"VmRSS when registered (KiB)", cells4(rS, rK, rH, rR, rng, med), "kata ≤ 1536, hyperlight ≤ 3072; ratio ≤ 0.15",
			markEach(rS.med <= 1536 && rS.med/rR.med <= 0.15, rH.med <= 3072 && rH.med/rR.med <= 0.15)},
		{"VmHWM when registered (KiB)", cells4(hS, hK, hH, hR, rng, med), "—", ""},
		{fmt.Sprintf("VmRSS after %d Allocates (KiB)", *allocs), cells4(aS, aK, aH, aR, rng, med), "—", ""},
		{"RSS growth over the Allocates (KiB)", cells4(gS, gK, gH, gR, rng, med), "≤ 64 KiB", markEach(gS.max <= 64 && gK.max <= 64, gH.max <= 64)},
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

	// RPCs.
	d.p("## Allocate and GetPreferredAllocation")
	d.p("")
	d.p("Round trips measured at the kubelet side (grpc-go client on kubelet's connection), %d sequential Allocate calls", *allocs)
	d.p("of one device per run. The target figure is the median of the %d per-run medians, with their range: on this", *runs)
	d.p("shared 2-CPU virtual machine the same binary's round trip moves by a factor of 3 or more between minutes (its")
	d.p("neighbours' load), so one slow run must not decide it; the pooled median of all samples follows. %d", *allocs/10)
	d.p("GetPreferredAllocation calls per run (2,000 available, size 1; kata: 4 available).")
	d.p("Daemon CPU: the daemon's time on CPU (/proc/<pid>/task/*/schedstat, ns) over the calls, divided by their number; it")
	d.p("holds its system calls and scheduling, not the client's. hyperlight's Allocate waits for its probe helper (a")
	d.p("fork+exec of the daemon with `--dp-helper probe`, under the shim); the helper alone is")
	d.p("`hyperlight-device-plugin --dp-helper probe kvm <root>/dev/kvm` run %d times from Go's os/exec (fork+exec+wait", *probes)
	d.p("measured from the driver; it includes Go's own spawn cost).")
	d.p("Pinned: the same runs again for kata static and the reference with the driver (the grpc-go client) and the daemon")
	d.p("on one CPU (the driver re-run under `taskset -c 0 sdp-bench -alloc-only KIND`): no round trip then waits for a")
	d.p("wake-up on the other virtual CPU (an inter-processor interrupt, a VM exit on this machine); each side still runs")
	d.p("its own code, and the two alternate on the one CPU.")
	d.p("")
	pooled := func(r *results, f func(startup) []float64) stats { return all(r.runs, f) }
	al := func(s startup) []float64 { return s.allocs }
	pr := func(s startup) []float64 { return s.prefs }
	perRun := func(r *results) stats {
		return st(r, func(s startup) float64 { return summarize(s.allocs).med })
	}
	cpuRun := func(r *results) stats { return st(r, func(s startup) float64 { return s.allocCPU }) }
	apS, apK, apH, apR := pooled(ks, al), pooled(kata, al), pooled(hl, al), pooled(ref, al)
	prS, prK, prH, prR := perRun(ks), perRun(kata), perRun(hl), perRun(ref)
	cS, cK, cH, cR := cpuRun(ks), cpuRun(kata), cpuRun(hl), cpuRun(ref)
	gpS, gpK, gpH, gpR := pooled(ks, pr), pooled(kata, pr), pooled(hl, pr), pooled(ref, pr)
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
	p99v := func(s stats) float64 { return s.p99 }
	// Not offered (no samples): no ratio.
	offered := func(v func(stats) float64) func(stats) float64 {
		return func(s stats) float64 {
			if s.n == 0 {
				return -1
			}
			return v(s)
		}
	}
	d.table(four, []row{
		{"Allocate median (µs): median (min–max) of the per-run medians", cells4(prS, prK, prH, prR, rng, med),
			fmt.Sprintf("kata ≤ 60; hyperlight ≤ 1.3 × helper alone (%s µs)", f1(1.3*probe.med)), markEach(prS.med <= 60, prH.med <= 1.3*probe.med)},
		{fmt.Sprintf("Allocate median (µs), all runs pooled (%d samples)", *runs**allocs), cells4(apS, apK, apH, apR, one, med), "—", ""},
		{"Allocate p99 (µs)", cells4(apS, apK, apH, apR, p99, p99v), "—", ""},
		{"Allocate min–max (µs)", append(cells4(apS, apK, apH, apR, mm, med)[:4], "", ""), "—", ""},
		{"daemon CPU per Allocate (µs), median (min–max) of the runs", cells4(cS, cK, cH, cR, rng, med), "—", ""},
		pinnedRows()[0], pinnedRows()[1],
		{"probe helper alone median / p99 (µs)", []string{"—", "—", f1(probe.med) + " / " + f1(probe.p99), "—", "", ""}, "—", ""},
		{"GetPreferredAllocation median (µs)", cells4(gpS, gpK, gpH, gpR, na(one), offered(med)), "—", ""},
		{"GetPreferredAllocation p99 (µs)", cells4(gpS, gpK, gpH, gpR, na(p99), offered(p99v)), "—", ""},
	})

	writePrefer(&d, prefer)

	// Reaction.
	three := []string{"kata dynamic", "hyperlight", "reference", "kata/ref", "hyperlight/ref"}
	cells3 := func(a, b, c stats, show func(stats) string, ratioOf func(stats) float64) []string {
		return []string{show(a), show(b), show(c), ratio(ratioOf(a), ratioOf(c)), ratio(ratioOf(b), ratioOf(c))}
	}
	d.p("## Reaction times")
	d.p("")
	d.p("Kubelet restart: the mock kubelet stops, closes every plugin connection, deletes every socket in the directory and")
	d.p("serves kubelet.sock again; from the deletion to the next accepted Register (%d restarts). CDI repair: the spec", *restarts)
	d.p("file deleted, polled every 50 µs until it is back on disk (%d times). Device gone: <root>/dev/kvm deleted, to the first", *runs*4)
	d.p("ListAndWatch response with every device Unhealthy arriving at the kubelet (%d times; the node is recreated between).", *runs*2)
	d.p("")
	rsK, rsH, rsR := summarize(kata.restarts), summarize(hl.restarts), summarize(ref.restarts)
	cdK, cdH, cdR := summarize(kata.cdiRepair), summarize(hl.cdiRepair), summarize(ref.cdiRepair)
	uH, uR := summarize(hl.unhealthy), summarize(ref.unhealthy)
	cdiCell := func(s stats, r *results) string {
		if r.cdiNote != "" {
			return r.cdiNote
		}
		return rng(s)
	}
	d.table(three, []row{
		{"restart → re-registered median (ms)", cells3(rsK, rsH, rsR, one, med), "≤ 5 ms", mark(rsK.med <= 5 && rsH.med <= 5)},
		{"restart → re-registered p99 (ms)", cells3(rsK, rsH, rsR, p99, p99v), "≤ 20 ms", mark(rsK.p99 <= 20 && rsH.p99 <= 20)},
		{"restart → re-registered min–max (ms)", []string{mm(rsK), mm(rsH), mm(rsR), "", ""}, "—", ""},
		{"CDI file deleted → repaired (ms)", []string{cdiCell(cdK, kata), cdiCell(cdH, hl), cdiCell(cdR, ref), ratio(cdK.med, cdR.med), ratio(cdH.med, cdR.med)},
			"≤ 10 ms", mark(cdK.n > 0 && cdH.n > 0 && cdK.max <= 10 && cdH.max <= 10)},
		{"device node deleted → Unhealthy at the kubelet (ms)", []string{"n/a¹", rng(uH), rng(uR), "", ratio(uH.med, uR.med)}, "≤ 50 ms", mark(uH.n > 0 && uH.max <= 50)},
	})
	d.p("¹ %s.", kata.healthNote)
	d.p("")

	writeScale(&d, probe, ceil, scale, enc)
	writeIdle(&d, ks, kata, hl, ref, scan)
	writeSizes(&d, res, staticSize, img, imgNote)
	hp := func(f func(rssParts) int64) int64 {
		return int64(medianOf(hl.runs, func(s startup) float64 { return float64(f(s.smaps)) }))
	}
	writeMissed(&d, missedInput{
		kataAlloc: prS, kataAllocCPU: cS, refAlloc: prR, hlRSS: rH, refRSS: rR,
		hlParts: rssParts{exe: hp(func(p rssParts) int64 { return p.exe }), libs: hp(func(p rssParts) int64 { return p.libs }),
			heap: hp(func(p rssParts) int64 { return p.heap }), stack: hp(func(p rssParts) int64 { return p.stack }),
			anon: hp(func(p rssParts) int64 { return p.anon })},
		kataStaticRSS: rS.med, hlStartReg: regH, hlImage: img["hyperlight-device-plugin"], build: *buildDir,
		kataIdle: ks, kataDynIdle: kata, hlIdle: hl,
	})
	if err := os.WriteFile(*outPath, d.b.Bytes(), 0o644); err != nil {
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
	d.p("100 devices and the ceiling.")
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
	d.p("| image (KiB, `podman image inspect` Size after images/build.sh) | %s | %s | — | | | kata ≤ 1 MiB, hyperlight ≤ 8 MiB | kata %s / hyperlight %s |", kib(ik), kib(ih), markIf(ik >= 0, ik <= 1<<20), markIf(ih >= 0, ih <= 8<<20))
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
