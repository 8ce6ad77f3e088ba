package main

// The large-tree figures (issue 27): kata on a legacy node with 10,000 IOMMU groups, 8 of them
// GPUs and the rest NIC VFs bound to vfio-pci (a host with thousands of VFs): the scan alone
// (sdp-scan-bench: time and memory) and the daemon's start on that tree (start to registered
// with every GPU, and its peak resident set). `sdp-bench -large-scan-only` prints the section.

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	k "sdp/kubelet"
	api "sdp/v1beta1"
)

var largeScanOnly = flag.Bool("large-scan-only", false, "run only the 10,000-group scan figures, print their section and rewrite it in -out")

// largeScanHeading is the section's heading in docs/benchmarks.md; it goes before largeScanNext.
const (
	largeScanHeading = "## Kata on a legacy node with 10,000 IOMMU groups"
	largeScanNext    = "## Sizes"
)

const (
	largeGroups = 10000
	largeGPUs   = 8
)

// largeScan: the figures of one run.
type largeScan struct {
	groups, gpus         int
	build                time.Duration // making the fake tree (not the daemon's)
	scan                 scanPoint
	rssBefore, rssPeak   int // sdp-scan-bench, KiB
	start                time.Duration
	daemonHWM, daemonRSS int // KiB
	reps                 int
	before               hostSample // the host when this part began
}

var rssRe = regexp.MustCompile(`rss_before_kib=(-?\d+) maxrss_kib=(-?\d+)`)

// largeTree makes the legacy tree: GPUs in groups 0..7 (two NUMA nodes), NIC VFs in the rest.
func largeTree(kt *k.KataTree) {
	for g := 0; g < largeGroups; g++ {
		var f k.PCIFunc
		if g < largeGPUs {
			f = k.GPU(fmt.Sprintf("0000:%02x:00.0", 0x41+g), g*2/largeGPUs)
		} else {
			f = k.PCIFunc{BDF: fmt.Sprintf("0001:%02x:%02x.%d", g/256, (g/8)%32, g%8), Vendor: 0x15b3,
				Class: 0x020000, NUMA: g % 2, Device: 0x101e}
		}
		if err := kt.AddLegacy(f.InGroup(1000 + g)); err != nil {
			fatal("large tree: %v", err)
		}
	}
}

func measureLargeScan(build string) largeScan {
	n, kt := benchTree()
	defer n.Remove()
	if err := os.Remove(kt.DevicesDir); err != nil {
		fatal("%v", err)
	}
	ls := largeScan{groups: largeGroups, gpus: largeGPUs, reps: 11, before: readHost()}
	t0 := time.Now()
	largeTree(kt)
	ls.build = time.Since(t0)
	p, out := runScanBench(build, n.Root, ls.reps, 0, "VFIO_BACKEND=legacy")
	r := rssRe.FindStringSubmatch(out)
	if r == nil {
		fatal("sdp-scan-bench on the large tree: no resident set figures: %s", out)
	}
	ls.scan = p
	ls.rssBefore, _ = strconv.Atoi(r[1])
	ls.rssPeak, _ = strconv.Atoi(r[2])
	if ls.scan.devices != largeGPUs {
		fatal("large tree: the scan found %d devices, want the %d GPUs", ls.scan.devices, largeGPUs)
	}
	largeDaemon(build, n, &ls)
	return ls
}

// largeDaemon: the kata daemon (dynamic build) started on the tree, to registered with every GPU
// Healthy; its VmHWM and VmRSS then.
func largeDaemon(build string, n *k.Node, ls *largeScan) {
	kub, err := k.Start(k.Config{Dir: n.KubeletDir})
	if err != nil {
		fatal("%v", err)
	}
	defer kub.Stop()
	bin, err := k.Executable(build, k.KataBinary)
	if err != nil {
		fatal("%v", err)
	}
	t0 := time.Now()
	d, err := k.StartDaemon(bin, k.PlainDaemonEnv(n.Root, "LOG_LEVEL=info", "VFIO_BACKEND=legacy"))
	if err != nil {
		fatal("%v", err)
	}
	defer d.Stop(10 * time.Second)
	healthy := func(devs []*api.Device) bool {
		for _, dv := range devs {
			if dv.Health != k.Healthy {
				return false
			}
		}
		return len(devs) == largeGPUs
	}
	if _, err := kub.WaitDevices(k.KataGPU, healthy, 60*time.Second); err != nil {
		fatal("kata on the large tree: %v\n%s", err, tail(d.Log(), 3000))
	}
	ls.start = time.Since(t0)
	ls.daemonHWM, _ = k.ProcStatus(d.Pid(), "VmHWM")
	ls.daemonRSS, _ = k.ProcStatus(d.Pid(), "VmRSS")
}

func writeLargeScan(d *doc, ls largeScan) {
	d.p("%s", largeScanHeading)
	d.p("")
	d.p("A fake legacy tree (tests/kubelet KataTree, made in %v): %d groups, %d GPUs and %d NIC VFs bound to vfio-pci",
		ls.build.Round(100*time.Millisecond), ls.groups, ls.gpus, ls.groups-ls.gpus)
	d.p("(a host with thousands of VFs). Every entry of /dev/vfio and every group's member directory is read, whatever")
	d.p("their number (until issue 27 the walks stopped after 4096 entries in directory order). The scan alone,")
	d.p("`SDP_TEST_ROOT=<root> VFIO_BACKEND=legacy build/bench/scan/sdp-scan-bench %d 0` back to back, and the kata", ls.reps)
	d.p("daemon (dynamic build) started on it; `build/sdp-bench -build build -large-scan-only` re-runs this section alone")
	d.p("and rewrites it here. Load average when this part began: %s.", loadLine(ls.before))
	d.p("")
	d.p("| %d groups, %d GPUs | figure |", ls.groups, ls.gpus)
	d.p("|---|---|")
	d.p("| one scan, median (min–max) of %d | %s ms (%s–%s) |", ls.scan.reps, f1(ls.scan.med/1000), f1(ls.scan.min/1000), f1(ls.scan.max/1000))
	d.p("| the scanning process's resident set: before the first scan, peak after %d | %d KiB, %d KiB (+%d KiB) |", ls.scan.reps,
		ls.rssBefore, ls.rssPeak, ls.rssPeak-ls.rssBefore)
	d.p("| kata start to registered with every GPU Healthy | %v |", ls.start.Round(time.Millisecond))
	d.p("| kata's peak resident set (VmHWM), then VmRSS | %d KiB, %d KiB |", ls.daemonHWM, ls.daemonRSS)
	d.p("")
	d.p("The scanning process's growth is mostly the cache each rescan leaves to the next (kata/scan_cache.h: the")
	d.p("vendor and class of every function, the dev of every node, twice while a scan replaces them); the daemon's")
	d.p("start-up scan runs without it, its 30 s rescans with it, so a node of this size adds about that to kata's")
	d.p("resident set after the first rescan (the chart's limit is 64 MiB).")
	d.p("")
}

// largeScanOnlyMode prints the section alone and rewrites it in -out.
func largeScanOnlyMode(build string) {
	var d doc
	writeLargeScan(&d, measureLargeScan(build))
	fmt.Print(d.b.String())
	rewriteSection(*outPath, largeScanHeading, largeScanNext, d.b.Bytes())
}
