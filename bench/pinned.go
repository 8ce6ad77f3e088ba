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
	"math"
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

// pinnedAllocs runs -alloc-only KIND under taskset -c 0 for one run: its median and daemon CPU
// per call, or a note saying why not.
func pinnedAllocs(kind string) (med, cpu float64, note string) {
	if _, err := exec.LookPath("taskset"); err != nil {
		return 0, 0, "taskset (util-linux) is not installed"
	}
	self, err := os.Executable()
	if err != nil {
		return 0, 0, fmt.Sprintf("cannot find sdp-bench itself: %v", err)
	}
	args := []string{"-c", "0", self, "-build", *buildDir, "-alloc-only", kind, "-runs", "1", "-allocs", strconv.Itoa(*allocs)}
	cmd := exec.Command("taskset", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Sprintf("sdp-bench -alloc-only %s under taskset failed: %v", kind, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var m, c float64
		if n, _ := fmt.Sscanf(strings.TrimSpace(sc.Text()), "alloc median_us=%f cpu_us=%f", &m, &c); n == 2 {
			return m, c, ""
		}
	}
	return 0, 0, "no result from sdp-bench -alloc-only " + kind
}

// pinnedFig is one kind's pinned runs, one per round (or why there are none).
type pinnedFig struct {
	med, cpu []float64 // per round; unmeasured: that round's run gave no figure
	note     string
}

// pinned holds the pinned runs of kata static and the reference, filled round by round.
var pinned = map[string]*pinnedFig{"kata-static": {}, "reference": {}}

// measurePinned runs one pinned run of each kind, in that order (a round's).
func measurePinned(kinds ...string) {
	for _, k := range kinds {
		p := pinned[k]
		m, c, note := pinnedAllocs(k)
		if note != "" {
			m, c = unmeasured, unmeasured
			if p.note == "" {
				p.note = note
			}
		}
		p.med, p.cpu = append(p.med, m), append(p.cpu, c)
	}
}

// known is the summary of the figures measured.
func known(v []float64) stats {
	var k []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			k = append(k, x)
		}
	}
	return summarize(k)
}

// pinnedRows are the Allocate table's rows for the pinned runs.
func pinnedRows() []row {
	ks, ref := pinned["kata-static"], pinned["reference"]
	cell := func(p *pinnedFig, v []float64) string {
		s := known(v)
		if s.n == 0 {
			return p.note
		}
		if p.note != "" {
			return rng(s) + "; some runs: " + p.note
		}
		return rng(s)
	}
	return []row{
		{"Allocate median (µs), client and daemon pinned to one CPU (taskset -c 0): median (min–max) of the per-run medians",
			[]string{cell(ks, ks.med), "—", "—", cell(ref, ref.med), roundRatio(ks.med, ref.med), ""}, "—", ""},
		{"daemon CPU per Allocate (µs), pinned to one CPU", []string{cell(ks, ks.cpu), "—", "—", cell(ref, ref.cpu), roundRatio(ks.cpu, ref.cpu), ""}, "—", ""},
	}
}
