package main

// The last section of docs/benchmarks.md: every target this run missed, with what limits it,
// from this run's own figures (issue: "where one is missed, profile, fix, and say what
// limits it").

import (
	"fmt"
	"sort"
	"strings"
)

// missedInput holds the figures the explanations quote.
type missedInput struct {
	kataAlloc, kataAllocCPU, refAlloc     stats
	kataAllocRuns                         []float64 // kata static's run medians, per round
	hlRSS, refRSS                         stats
	hlRSSRatio                            float64  // median of the per-round ratios
	hlParts                               rssParts // medians
	kataStaticRSS                         float64
	hlStartReg                            stats
	hlStartRegRuns                        []float64 // per round
	hlImage                               int64
	kataIdle, kataDynIdle, hlIdle         *results
	kataRestarts, hlRestarts, refRestarts *results // kata: the dynamic build
	host                                  *hostLog
	build                                 string
}

// roundsOver are the rounds (0-based) whose figure is over limit.
func roundsOver(v []float64, limit float64) []int {
	var out []int
	for i, x := range v {
		if x > limit {
			out = append(out, i)
		}
	}
	return out
}

// noiseNote says whether the rounds (0-based) a missed figure came from were noisy.
func noiseNote(h *hostLog, rounds []int) string {
	if h == nil || len(rounds) == 0 {
		return ""
	}
	var names, noisy []string
	for _, i := range rounds {
		if i >= len(h.rounds) {
			continue
		}
		r := h.rounds[i]
		names = append(names, r.name)
		if r.noisy() {
			noisy = append(noisy, fmt.Sprintf("%s (%s)", r.name, r.why()))
		}
	}
	if len(names) == 0 {
		return ""
	}
	if len(noisy) == 0 {
		return fmt.Sprintf(" Missed in round(s) %s, none of them marked noisy (Host during the run).", strings.Join(names, ", "))
	}
	return fmt.Sprintf(" Missed in round(s) %s, marked noisy among them: %s (Host during the run); the reference ran in the "+
		"same rounds, so the per-round ratios above hold what the neighbours did to both.", strings.Join(names, ", "), strings.Join(noisy, "; "))
}

// partNote says whether the part measured once was noisy.
func partNote(h *hostLog, name string) string {
	if h == nil {
		return ""
	}
	for _, p := range h.parts {
		if p.name == name {
			if p.noisy() {
				return fmt.Sprintf(" The %s part was noisy: %s (Host during the run).", name, p.why())
			}
			return fmt.Sprintf(" The %s part was not marked noisy (Host during the run).", name)
		}
	}
	return ""
}

// restartRounds are the rounds (0-based) holding a restart of r over limit ms.
func restartRounds(r *results, limit float64) []int {
	var out []int
	for i, rc := range r.rounds {
		if summarize(rc.restarts).max > limit {
			out = append(out, i)
		}
	}
	return out
}

// union of round lists, sorted.
func union(a, b []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range append(append([]int(nil), a...), b...) {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

func writeMissed(d *doc, in missedInput) {
	var m []string
	if in.kataAlloc.med > 60 {
		pin := ""
		if ks, ref := pinned["kata-static"], pinned["reference"]; ks.note == "" && ref.note == "" {
			pin = fmt.Sprintf(" With the client and the daemon pinned to one CPU (table above) the same round trip is %s µs "+
				"(daemon CPU %s µs per call), the reference's %s µs: the difference from the unpinned figure is the cross-CPU "+
				"wake-up, paid twice per call.", f1(known(ks.med).med), f1(known(ks.cpu).med), f1(known(ref.med).med))
		}
		m = append(m, fmt.Sprintf("**kata Allocate ≤ 60 µs** (%s µs, per-run medians %s–%s; the reference %s µs): the "+
			"daemon's CPU per call is %s µs for five system calls (epoll_wait; the request peeked; one gathered send of "+
			"the answer; the request consumed; the stat of the requested node); the rest of the round trip is the "+
			"grpc-go client's own work and two wake-ups across this virtual machine's 2 vCPUs (the daemon's answer "+
			"wakes the client; the client's next request wakes the daemon), each an inter-processor interrupt and a "+
			"VM exit.%s A third wake-up is gone: consuming a request frees the client socket's buffer space, which "+
			"wakes Go's netpoller (it registers every socket for EPOLLOUT), so the daemon now consumes the request "+
			"only after it has answered (core/src/grpc/h2.c, h2_read), when the answer has already woken the client "+
			"(A/B on this machine, the two builds alternating: 71–72 → 64–68 µs). Where the daemon's CPU goes "+
			"(`perf record -g -p <pid>` on `build/sdp-bench -build build -profile kata-static -profile-wait 2 "+
			"-allocs 30000`): 63%% kernel, 36%% user space spread over nghttp2 (HPACK, frames), malloc and protobuf-c "+
			"with no single hot spot; 8.5%% is the answer's wake-up of the client on the other CPU (sock_def_readable, "+
			"interrupts off) and 1.6%% the write-space wake-up after it (16%% together before the reorder). What is "+
			"left is not ours to remove without changing the client or busy-polling.",
			f1(in.kataAlloc.med), f1(in.kataAlloc.min), f1(in.kataAlloc.max), f1(in.refAlloc.med),
			f1(in.kataAllocCPU.med), pin)+noiseNote(in.host, roundsOver(in.kataAllocRuns, 60)))
	}
	if r := in.hlRSSRatio; r > 0.15 || in.hlRSS.med > 3072 {
		m = append(m, fmt.Sprintf("**hyperlight RSS ≤ 3 MiB and ratio ≤ 0.15** (%s KiB, ratio %.2f): %d KiB of it are the "+
			"file pages of musl's libc.so; its own memory (executable %d, heap %d, stack %d, other anonymous %d KiB) "+
			"is %.2f of the reference's RSS (the table \"Where the resident memory is\" above; the static kata: %s KiB).",
			f1(in.hlRSS.med), r, in.hlParts.libs, in.hlParts.exe, in.hlParts.heap, in.hlParts.stack, in.hlParts.anon,
			float64(in.hlParts.exe+in.hlParts.heap+in.hlParts.stack+in.hlParts.anon)/in.refRSS.med, f1(in.kataStaticRSS)))
	}
	if in.hlStartReg.med > 5 {
		m = append(m, fmt.Sprintf("**hyperlight start → registered ≤ 5 ms** (%s ms): run `build/sdp-startup` "+
			"(tests/kubelet/cmd/startup) for the phase-by-phase split.", f1(in.hlStartReg.med))+
			noiseNote(in.host, roundsOver(in.hlStartRegRuns, 5)))
	}
	if k, h := summarize(in.kataRestarts.restarts), summarize(in.hlRestarts.restarts); k.p99 > 5 || h.p99 > 5 || k.max > 20 || h.max > 20 {
		over := func(r *results) int {
			n := 0
			for _, x := range r.restarts {
				if x > 5 {
					n++
				}
			}
			return n
		}
		rf := summarize(in.refRestarts.restarts)
		m = append(m, fmt.Sprintf("**restart → re-registered p99 ≤ 5 ms, max ≤ 20 ms** (kata dynamic p99 %s, max %s ms; hyperlight "+
			"p99 %s, max %s ms; the reference p99 %s, max %s ms): %d of kata's %d restarts and %d of hyperlight's %d took over 5 ms. "+
			"`build/sdp-bench -build build -restarts-only KIND -restarts %d -restarts-log FILE` prints every restart over 5 ms "+
			"with its index and keeps the daemon's debug log, to see what it waited for.",
			f1(k.p99), f1(k.max), f1(h.p99), f1(h.max), f1(rf.p99), f1(rf.max), over(in.kataRestarts), k.n, over(in.hlRestarts), h.n, *restarts)+
			noiseNote(in.host, union(restartRounds(in.kataRestarts, 5), restartRounds(in.hlRestarts, 5))))
	}
	perMin := func(r *results) (ms, wakes float64) {
		return float64(r.idleNanos) / 1e6 * 60 / float64(*idleSec), float64(r.idleCtx) * 60 / float64(*idleSec)
	}
	{
		km, kw := perMin(in.kataIdle)
		dm, _ := perMin(in.kataDynIdle)
		if hm, hw := perMin(in.hlIdle); km > 1 || hm > 1 {
			m = append(m, fmt.Sprintf("**idle CPU ≤ 1 ms per minute** (kata static %.2f ms over %.0f context switches, "+
				"kata dynamic %.2f, hyperlight %.2f ms over %.0f): the wake-ups are only the documented timers, two 30 s "+
				"ticks a minute (table above); the CPU is what a tick does. kata: mostly the VFIO rescan (its cost alone "+
				"and its system calls are in the Idle section: each attribute sysfs never changes is stat'ed, not read, "+
				"when it is the file the last rescan read), plus the health check (a stat per cdev, the CDI spec read "+
				"and compared) and the kubelet-restart stat backstop. hyperlight: its check spawns the probe helper "+
				"(clone with CLONE_VM|CLONE_VFORK, no page-table copy), then wakes for its exit and output. What is left "+
				"moves with the neighbours on this shared machine: `sdp-bench -idle-only kata-static -idle-trace -idle 300` "+
				"prints the cost of every tick, which differs between runs minutes apart for the same binary.",
				km, kw, dm, hm, hw)+partNote(in.host, "idle"))
		}
	}
	if in.hlImage > 8<<20 {
		m = append(m, fmt.Sprintf("**hyperlight image ≤ 8 MiB** (%.0f KiB): see build-static/image-context-hyperlight "+
			"(scripts/build-static.sh) for what it holds.", float64(in.hlImage)/1024))
	}
	d.p("## Targets missed in this run, and what limits them")
	d.p("")
	if len(m) == 0 {
		d.p("None: every target above is met in this run.")
	}
	for _, s := range m {
		d.p("- %s", s)
	}
	d.p("")
}
