package main

// The Allocate round trip with the grpc-go client and the daemon on one CPU: the bench runs
// itself again under `taskset -c 0` with -alloc-only (every thread of the driver and the daemon
// it starts inherit the affinity), for our kata and for the reference alike. Beside the
// unpinned figure it shows how much of a round trip is the cross-CPU wake-up of this virtual
// machine (an IPI, a VM exit) rather than either side's work.

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

var allocOnly = flag.String("alloc-only", "", "run only -runs start-ups of this kind with their Allocates and print each run's median and daemon CPU (used under taskset by the pinned row)")

// allocOnlyMode prints one line per run: "alloc median_us=M cpu_us=C".
func allocOnlyMode(all []daemonKind) {
	for _, kd := range all {
		if kd.name != *allocOnly {
			continue
		}
		for i := 0; i < *runs; i++ {
			s, _ := runStartup(kd, false)
			fmt.Printf("alloc median_us=%.3f cpu_us=%.3f\n", summarize(s.allocs).med, s.allocCPU)
		}
		return
	}
	fatal("-alloc-only: unknown kind %q", *allocOnly)
}

// pinnedAllocs runs -alloc-only KIND under taskset -c 0: the per-run medians and daemon CPU
// per call, or a note saying why not.
func pinnedAllocs(kind string) (med, cpu stats, note string) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return stats{}, stats{}, "taskset (util-linux) is not installed"
	}
	self, err := os.Executable()
	if err != nil {
		return stats{}, stats{}, fmt.Sprintf("cannot find sdp-bench itself: %v", err)
	}
	args := []string{"-c", "0", self, "-build", *buildDir, "-alloc-only", kind,
		"-runs", strconv.Itoa(*runs), "-allocs", strconv.Itoa(*allocs)}
	cmd := exec.Command("taskset", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return stats{}, stats{}, fmt.Sprintf("sdp-bench -alloc-only %s under taskset failed: %v", kind, err)
	}
	var ms, cs []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m, c float64
		if n, _ := fmt.Sscanf(strings.TrimSpace(sc.Text()), "alloc median_us=%f cpu_us=%f", &m, &c); n == 2 {
			ms, cs = append(ms, m), append(cs, c)
		}
	}
	if len(ms) == 0 {
		return stats{}, stats{}, "no result from sdp-bench -alloc-only " + kind
	}
	return summarize(ms), summarize(cs), ""
}

// pinnedFig is one kind's pinned figures (or why there are none).
type pinnedFig struct {
	med, cpu stats
	note     string
}

// pinned holds the pinned runs of kata static and the reference, filled by main.
var pinned = map[string]pinnedFig{}

func measurePinned() {
	for _, k := range []string{"kata-static", "reference"} {
		m, c, note := pinnedAllocs(k)
		pinned[k] = pinnedFig{med: m, cpu: c, note: note}
	}
}

// pinnedRows are the Allocate table's rows for the pinned runs.
func pinnedRows() []row {
	ks, ref := pinned["kata-static"], pinned["reference"]
	cell := func(p pinnedFig, show func(stats) string) string {
		if p.note != "" {
			return p.note
		}
		return show(p.med)
	}
	cpuCell := func(p pinnedFig) string {
		if p.note != "" {
			return "—"
		}
		return rng(p.cpu)
	}
	return []row{
		{"Allocate median (µs), client and daemon pinned to one CPU (taskset -c 0): median (min–max) of the per-run medians",
			[]string{cell(ks, rng), "—", "—", cell(ref, rng), ratio(ks.med.med, ref.med.med), ""}, "—", ""},
		{"daemon CPU per Allocate (µs), pinned to one CPU", []string{cpuCell(ks), "—", "—", cpuCell(ref), ratio(ks.cpu.med, ref.cpu.med), ""}, "—", ""},
	}
}
