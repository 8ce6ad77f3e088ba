package main

// The idle measurement on its own (`sdp-bench -idle-only KINDS`), to find what the idle CPU
// figure is made of: the daemons named run side by side as in `make bench` (or one alone), and
// with -idle-trace every daemon's schedstat is sampled every 10 ms, so that each wake-up's CPU
// shows with its time on the 5 s grid of the coarse timers.

import (
	"flag"
	"fmt"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

var (
	idleOnly   = flag.String("idle-only", "", "run only the idle measurement, for these kinds side by side (comma-separated: kata-static, kata, hyperlight, reference), and print it")
	idleRepeat = flag.Int("idle-repeat", 1, "with -idle-only: how many times")
	idleTrace  = flag.Bool("idle-trace", false, "with -idle-only: print each wake-up's CPU per daemon (schedstat sampled every 10 ms)")
)

// wake is the CPU a daemon used within one sampling interval.
type wake struct {
	at   time.Duration // since the period began
	mono float64       // the monotonic clock's second within the 5 s grid
	ns   int64
}

// traceIdle samples every pid's schedstat every 10 ms until stop closes.
func traceIdle(pids []int, stop <-chan struct{}) [][]wake {
	out := make([][]wake, len(pids))
	last := make([]int64, len(pids))
	for i, p := range pids {
		last[i] = cpuNanos(p)
	}
	t0 := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return out
		case <-tick.C:
		}
		for i, p := range pids {
			if v := cpuNanos(p); v != last[i] {
				out[i] = append(out[i], wake{at: time.Since(t0), mono: gridSecond(), ns: v - last[i]})
				last[i] = v
			}
		}
	}
}

// gridSecond is CLOCK_MONOTONIC (the daemons' timers' clock) modulo the 5 s grid of
// dp_timer_set_coarse, in seconds.
func gridSecond() float64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return -1
	}
	return float64(ts.Sec%5) + float64(ts.Nsec)/1e9
}

func idleOnlyMode(all []daemonKind) {
	var kinds []daemonKind
	for _, n := range strings.Split(*idleOnly, ",") {
		found := false
		for _, kd := range all {
			if kd.name == n {
				kinds = append(kinds, kd)
				found = true
			}
		}
		if !found {
			fatal("-idle-only: unknown kind %q", n)
		}
	}
	for rep := 0; rep < *idleRepeat; rep++ {
		res := map[string]*results{}
		for _, kd := range kinds {
			res[kd.name] = &results{}
		}
		traces := measureIdle(kinds, res, *idleSec)
		for i, kd := range kinds {
			r := res[kd.name]
			fmt.Printf("run %d: %-11s CPU %.3f ms per idle minute, %d context switches per minute\n", rep+1, kd.name,
				float64(r.idleNanos)/1e6*60/float64(*idleSec), r.idleCtx*60/int64(*idleSec))
			if traces == nil {
				continue
			}
			for _, w := range traces[i] {
				fmt.Printf("    %-11s t=%6.2fs grid+%.2fs  %4.0f us\n", kd.name, w.at.Seconds(), w.mono, float64(w.ns)/1e3)
			}
		}
	}
}
