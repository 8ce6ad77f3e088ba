// Command sdp-bench is the benchmark driver behind `make bench`: it runs the kata and hyperlight
// daemons and the reference grpc-go plugin (bench/reference-go) on simulated nodes against the
// in-process mock kubelet (package sdp/kubelet) and writes docs/benchmarks.md. The daemons run
// in rounds, each once per round, and every ratio to the reference is taken within a round; the
// host's steal and load are recorded around each (host.go). Timings are reported, never asserted.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	k "sdp/kubelet"
)

var (
	buildDir = flag.String("build", "build", "meson build directory holding the daemons")
	outPath  = flag.String("out", "docs/benchmarks.md", "markdown file to write")
	runs     = flag.Int("runs", 5, "rounds: each runs every daemon once (runs per start-up measurement)")
	allocs   = flag.Int("allocs", 10000, "sequential Allocate calls per daemon and run")
	restarts = flag.Int("restarts", 500, "kubelet restarts per daemon, split over the rounds")
	idleSec  = flag.Int("idle", 60, "idle period in seconds")
	probes   = flag.Int("probes", 200, "runs of the probe helper alone")
	command  = flag.String("command", "make bench", "command line recorded in the document")
	prof     = flag.String("profile", "", "profiling mode: run only this daemon (kata, kata-static, hyperlight, reference) and hold it (profile.go)")
	profWait = flag.Int("profile-wait", 0, "profiling mode: seconds to wait before the Allocates")
	profHold = flag.Int("profile-hold", 0, "profiling mode: seconds to hold the daemon after the Allocates")
	cdiTmpfs = flag.Bool("cdi-tmpfs", true, "mount a tmpfs on each simulated node's /var/run/cdi, as /var/run is on a node (false: the CDI specs go to "+os.TempDir()+")")
)

const refResource = "reference.dev/device"

type daemonKind struct {
	name     string // kata-static, kata, hyperlight, reference
	bin      string
	resource string
	env      []string
}

// isKata: the kata daemon, static (as the image ships it) or dynamic (build/).
func (k daemonKind) isKata() bool { return strings.HasPrefix(k.name, "kata") }

// node is one simulated node with a mock kubelet and a started daemon.
type node struct {
	n      *k.Node
	kt     *k.KataTree
	kub    *k.MockKubelet
	d      *k.Daemon
	kind   daemonKind
	start  time.Time
	mu     sync.Mutex
	events []k.Event
	notify chan struct{}
}

func fatal(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "sdp-bench: "+format+"\n", a...)
	os.Exit(1)
}

func (nd *node) onEvent(e k.Event) {
	nd.mu.Lock()
	nd.events = append(nd.events, e)
	nd.mu.Unlock()
	select {
	case nd.notify <- struct{}{}:
	default:
	}
}

// waitEvent waits for the first event at index >= from matching f; returns it and its index.
func (nd *node) waitEvent(from int, bound time.Duration, f func(k.Event) bool) (k.Event, int) {
	deadline := time.Now().Add(bound)
	for {
		nd.mu.Lock()
		for i := from; i < len(nd.events); i++ {
			if f(nd.events[i]) {
				e := nd.events[i]
				nd.mu.Unlock()
				return e, i
			}
		}
		nd.mu.Unlock()
		left := time.Until(deadline)
		if left <= 0 {
			var log string
			if nd.d != nil {
				log = nd.d.Log()
			}
			fatal("%s: expected event not seen within %v; events:\n%s\ndaemon log:\n%s", nd.kind.name, bound, nd.kub.EventLog(), tail(log, 3000))
		}
		select {
		case <-nd.notify:
		case <-time.After(left):
		}
	}
}

func (nd *node) eventCount() int {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return len(nd.events)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// newNode prepares the node for kind: /dev/kvm for hyperlight and the reference, a fake VFIO
// host with 4 GPUs for kata.
func newNode(kind daemonKind) *node {
	n, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	nd := &node{n: n, kind: kind, notify: make(chan struct{}, 1)}
	// /var/run is a tmpfs on every node, and the CDI specs live there: an fsync of the spec
	// on this machine's ext4 /tmp costs milliseconds that no node pays.
	if *cdiTmpfs {
		if err := syscall.Mount("tmpfs", n.CDIDir, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
			fatal("mount tmpfs on %s: %v", n.CDIDir, err)
		}
	}
	if kind.isKata() {
		if nd.kt, err = k.NewKataTree(n.Root); err != nil {
			fatal("%v", err)
		}
		addGPUs(nd.kt)
	} else if err := n.MknodKVM(); err != nil {
		fatal("%v", err)
	}
	if nd.kub, err = k.Start(k.Config{Dir: n.KubeletDir, OnEvent: nd.onEvent}); err != nil {
		fatal("%v", err)
	}
	return nd
}

// addGPUs gives a kata tree the bench node's 4 GPUs, two per NUMA node.
func addGPUs(kt *k.KataTree) {
	for i, bdf := range []string{"0000:41:00.0", "0000:42:00.0", "0000:c1:00.0", "0000:c2:00.0"} {
		if err := kt.Add(i, k.GPU(bdf, i/2)); err != nil {
			fatal("%v", err)
		}
	}
}

// launch starts the daemon and returns the start time. kata runs without the hypervisor shim
// (it never touches a hypervisor; the shim's open() wrapper would add to every file it opens).
func (nd *node) launch(extra ...string) {
	env := append(append([]string{"LOG_LEVEL=info"}, nd.kind.env...), extra...)
	if nd.kind.isKata() {
		env = k.PlainDaemonEnv(nd.n.Root, env...)
	} else {
		env = k.DaemonEnv(nd.n.Root, env...)
	}
	nd.start = time.Now()
	d, err := k.StartDaemon(nd.kind.bin, env)
	if err != nil {
		fatal("%v", err)
	}
	nd.d = d
}

func (nd *node) close() {
	if nd.d != nil {
		nd.d.Stop(10 * time.Second)
	}
	nd.kub.Stop()
	if *cdiTmpfs {
		if err := syscall.Unmount(nd.n.CDIDir, syscall.MNT_DETACH); err != nil {
			fatal("unmount %s: %v", nd.n.CDIDir, err)
		}
	}
	nd.n.Remove()
}

// privateMountNS re-executes sdp-bench in a mount namespace of its own (Go remounts / private
// there), so that the tmpfs mounts of newNode never reach the host's; it returns in the child.
func privateMountNS() {
	const marker = "SDP_BENCH_PRIVATE_NS"
	if os.Getenv(marker) == "1" {
		return
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), marker+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fatal("re-executing in a private mount namespace: %v", err)
	}
	os.Exit(0)
}

func isReg(res string) func(k.Event) bool {
	return func(e k.Event) bool { return e.Kind == "register" && e.Resource == res }
}
func isDevices(res string) func(k.Event) bool {
	return func(e k.Event) bool { return e.Kind == "devices" && e.Resource == res }
}

// ---- /proc

type mem struct{ rss, hwm int64 } // KiB

func readMem(pid int) mem {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fatal("%v", err)
	}
	var m mem
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				m.rss = v
			case "VmHWM:":
				m.hwm = v
			}
		}
	}
	return m
}

// rssParts splits a process's resident memory (KiB, /proc/<pid>/smaps) by what backs it.
type rssParts struct {
	exe, libs, heap, stack, anon int64
}

func readSmaps(pid int) rssParts {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		fatal("%v", err)
	}
	defer f.Close()
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	var p rssParts
	name := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) >= 5 && strings.Contains(fl[0], "-") && !strings.HasSuffix(fl[0], ":") {
			name = ""
			if len(fl) >= 6 {
				name = fl[5]
			}
			continue
		}
		if len(fl) < 2 || fl[0] != "Rss:" {
			continue
		}
		v, _ := strconv.ParseInt(fl[1], 10, 64)
		switch {
		case name == exe:
			p.exe += v
		case name == "[heap]":
			p.heap += v
		case name == "[stack]":
			p.stack += v
		case strings.HasPrefix(name, "/"):
			p.libs += v
		default:
			p.anon += v
		}
	}
	return p
}

// cpuTicks is utime+stime of pid (all threads) in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fatal("%v", err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// cpuNanos is the time on CPU of every thread of pid in ns (/proc/<pid>/task/*/schedstat,
// first field: the scheduler's own accounting, not tick-sampled).
func cpuNanos(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			n += v
		}
	}
	return n
}

// ctxSwitches sums voluntary+nonvoluntary context switches of every thread (a wake-up proxy).
func ctxSwitches(pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "voluntary_ctxt_switches:") || strings.HasPrefix(l, "nonvoluntary_ctxt_switches:") {
				v, _ := strconv.ParseInt(strings.TrimSpace(l[strings.IndexByte(l, ':')+1:]), 10, 64)
				n += v
			}
		}
	}
	return n
}

func threads(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	return len(tasks)
}

// ---- statistics

type stats struct {
	med, min, max, p99 float64
	n                  int
}

func summarize(v []float64) stats {
	if len(v) == 0 {
		return stats{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	p := int(float64(len(s))*0.99+0.5) - 1
	if p < 0 {
		p = 0
	}
	if p >= len(s) {
		p = len(s) - 1
	}
	return stats{med: med, min: s[0], max: s[len(s)-1], p99: s[p], n: len(s)}
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
func us(d time.Duration) float64 { return float64(d) / 1e3 }
