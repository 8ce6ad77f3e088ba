// Command startup measures one daemon's start-up the way sdp-bench (bench/) does, without the
// rest of the benchmark: for each run a fresh simulated node (<root>/dev/kvm, the hypervisor
// shim preloaded), the in-process mock kubelet, the daemon started with DEVICE_COUNT=2000
// (plus the extra KEY=value arguments); it prints start -> registered (Register accepted after
// the dial-back and GetDevicePluginOptions), start -> first ListAndWatch response, and VmRSS /
// VmHWM at that moment, then the medians. For profiling between `make bench` runs; it asserts
// nothing and writes no document.
//
//	SDP_BUILD_DIR=build build/sdp-startup [-runs 21] [-bin hyperlight-device-plugin] [-hold 10s] [KEY=value...]
//
// -hold keeps the last run's daemon alive that long (its pid is printed) for /proc/PID/smaps.
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	k "sdp/kubelet"
)

func status(pid int) (rss, hwm string) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "VmRSS:" {
			rss = f[1]
		} else if len(f) >= 2 && f[0] == "VmHWM:" {
			hwm = f[1]
		}
	}
	return rss, hwm
}

func fatal(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "startup: "+format+"\n", a...)
	os.Exit(1)
}

func median(v []float64) (med, min, max float64) {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[0], s[len(s)-1]
}

// once runs the daemon on a fresh node; returns the two intervals (ms).
func once(bin string, extra []string, hold time.Duration) (reg, law float64) {
	n, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	defer n.Remove()
	if err := n.MknodKVM(); err != nil {
		fatal("%v", err)
	}
	events := make(chan k.Event, 64)
	kub, err := k.Start(k.Config{Dir: n.KubeletDir, OnEvent: func(e k.Event) { events <- e }})
	if err != nil {
		fatal("%v", err)
	}
	defer kub.Stop()
	env := k.DaemonEnv(n.Root, append([]string{"LOG_LEVEL=info", "DEVICE_COUNT=2000"}, extra...)...)
	start := time.Now()
	d, err := k.StartDaemon(bin, env)
	if err != nil {
		fatal("%v", err)
	}
	defer d.Stop(10 * time.Second)
	var tReg, tLaw time.Time
	for tLaw.IsZero() {
		select {
		case e := <-events:
			if e.Kind == "register" && tReg.IsZero() {
				tReg = e.Time
			} else if e.Kind == "devices" && !tReg.IsZero() {
				tLaw = e.Time
			}
		case <-time.After(20 * time.Second):
			fatal("no registration and first ListAndWatch within 20 s; daemon log:\n%s", d.Log())
		}
	}
	rss, hwm := status(d.Pid())
	reg, law = float64(tReg.Sub(start))/1e6, float64(tLaw.Sub(start))/1e6
	fmt.Printf("registered %6.2f ms  first ListAndWatch %6.2f ms  VmRSS %s KiB  VmHWM %s KiB\n", reg, law, rss, hwm)
	if hold > 0 {
		fmt.Printf("holding pid %d for %v\n", d.Pid(), hold)
		time.Sleep(hold)
	}
	return reg, law
}

func main() {
	runs := flag.Int("runs", 21, "runs, each on a fresh node")
	name := flag.String("bin", k.HyperlightBinary, "daemon in $SDP_BUILD_DIR")
	hold := flag.Duration("hold", 0, "keep the last run's daemon alive this long")
	flag.Parse()
	build, err := k.BuildDir()
	if err != nil {
		fatal("%v", err)
	}
	bin, err := k.Executable(build, *name)
	if err != nil {
		fatal("%v", err)
	}
	var regs, laws []float64
	for i := 0; i < *runs; i++ {
		h := time.Duration(0)
		if i == *runs-1 {
			h = *hold
		}
		r, l := once(bin, flag.Args(), h)
		regs, laws = append(regs, r), append(laws, l)
	}
	m, lo, hi := median(regs)
	fmt.Printf("start -> registered: median %.2f ms (%.2f-%.2f) over %d runs\n", m, lo, hi, *runs)
	m, lo, hi = median(laws)
	fmt.Printf("start -> first ListAndWatch: median %.2f ms (%.2f-%.2f)\n", m, lo, hi)
}
