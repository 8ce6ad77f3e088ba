package main

import (
	"context"
	"fmt"
	"os"
	"time"

	api "sdp/v1beta1"
)

// profile is `sdp-bench -profile NAME`: one daemon on a simulated node, for a profiler to
// attach to (the numbers in docs/benchmarks.md's notes come from these runs). It prints the
// daemon's pid and its start-up figures, waits -profile-wait seconds (attach perf or strace
// now), runs -allocs sequential Allocates and prints their median, then holds the daemon for
// -profile-hold seconds (idle wake-ups) before stopping it. SDP_DAEMON_WRAPPER (e.g.
// "strace -f -tt -o /tmp/kata.strace") wraps the daemon as in the tests.
func profile(kind daemonKind, wait, hold time.Duration) {
	nd := newNode(kind)
	defer nd.close()
	nd.launch()
	reg, law, p := nd.waitStarted()
	pid := nd.d.Pid()
	m := readMem(pid)
	fmt.Printf("%s: pid %d; start → registered %.3f ms, → first ListAndWatch %.3f ms; VmRSS %d KiB, VmHWM %d KiB\n",
		kind.name, pid, ms(reg.Sub(nd.start)), ms(law.Sub(nd.start)), m.rss, m.hwm)
	fmt.Printf("%s: pid %d; waiting %v before the Allocates\n", kind.name, pid, wait)
	time.Sleep(wait)
	snap, _ := p.Latest()
	areq := &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{snap.Devices[0].ID}}}}
	var v []float64
	c := p.Client()
	t0 := cpuNanos(pid)
	for i := 0; i < *allocs; i++ {
		t := time.Now()
		if _, err := c.Allocate(context.Background(), areq); err != nil {
			fatal("%s: Allocate %d: %v", kind.name, i, err)
		}
		v = append(v, us(time.Since(t)))
	}
	s := summarize(v)
	m = readMem(pid)
	cpu := float64(cpuNanos(pid)-t0) / 1e3 / float64(len(v))
	fmt.Printf("%s: %d Allocates: median %.1f µs, p99 %.1f µs, daemon CPU %.1f µs per call; VmRSS %d KiB\n", kind.name, s.n, s.med, s.p99, cpu, m.rss)
	c0 := ctxSwitches(pid)
	fmt.Printf("%s: pid %d; holding %v\n", kind.name, pid, hold)
	time.Sleep(hold)
	fmt.Printf("%s: %d context switches while held\n", kind.name, ctxSwitches(pid)-c0)
	os.Stdout.Sync()
}
