package main

// The "As deployed" figures of docs/reliability.md (issue 13): each daemon in the shape its
// manifest runs it (tests/kubelet/podshape.go: PID 1 of a new PID namespace, the chart's memory
// limit, read-only root, hostPaths, restarted on exit), the binaries the images ship (the musl
// builds of scripts/build-static.sh). Every wait has a bound: a missed target becomes a cell
// saying so, never a crash or a hang.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	k "sdp/kubelet"
)

var (
	reliabilityPath = flag.String("reliability", "", "regenerate the \"As deployed\" figures (pod shape) in this file, e.g. docs/reliability.md (make bench); empty: not measured")
	asDeployedOnly  = flag.Bool("asdeployed-only", false, "run only the as-deployed measurements and write them to -reliability (default docs/reliability.md)")
)

// Bounds and counts of the as-deployed measurements.
const (
	adStartBound     = 15 * time.Second // a pod registered and advertising
	adUnhealthyRuns  = 5
	adUnhealthyBound = 3 * time.Second // host node gone -> all Unhealthy at the kubelet
	adRestartRounds  = 20
	adRestartBound   = 6 * time.Second // kill -9 -> registered again (today's first retry: 5 s)
	adHostileBound   = 15 * time.Second
	adSettleBound    = 3 * time.Second
	adStallBound     = 10 * time.Second // the largest legal requests, together
	adFightSettle    = 5 * time.Second
	adFightWindow    = 10 * time.Second
	adLargeCount     = 100000 // hyperlight's DEVICE_COUNT for the answers-never-read input
)

// adDaemon is one daemon as the bench runs it in its pod.
type adDaemon struct {
	name     string // hyperlight, kata
	bin      string // on the host
	shim     string // hyperlight: the hypervisor shim built for the same C library
	resource string
}

func (d adDaemon) isKata() bool { return d.name == "kata" }

// asDeployedDaemons are the musl builds the images ship; when they cannot be built, the build/
// binaries, and a note saying so.
func asDeployedDaemons(src, build string) ([]adDaemon, string) {
	musl := []adDaemon{
		{name: "hyperlight", bin: staticPath(src, muslHyperlightPath), shim: staticPath(src, muslShimPath), resource: k.HyperlightResource},
		{name: "kata", bin: staticPath(src, staticKataPath), resource: k.KataGPU},
	}
	have := func() bool {
		for _, p := range []string{musl[0].bin, musl[0].shim, musl[1].bin} {
			if _, err := os.Stat(p); err != nil {
				return false
			}
		}
		return true
	}
	if !have() {
		if _, note := staticKata(src); note != "" || !have() {
			hl, err1 := k.Executable(build, k.HyperlightBinary)
			kt, err2 := k.Executable(build, k.KataBinary)
			shim, err3 := k.ShimPath(build)
			if err1 != nil || err2 != nil || err3 != nil {
				fatal("as deployed: no musl builds (%s) and no build/ daemons (%v %v %v)", note, err1, err2, err3)
			}
			return []adDaemon{{name: "hyperlight", bin: hl, shim: shim, resource: k.HyperlightResource},
					{name: "kata", bin: kt, resource: k.KataGPU}},
				"the musl builds did not build (" + note + "): the glibc builds of " + build + " ran instead"
		}
	}
	return musl, ""
}

// adPod is one simulated node (mock kubelet, tmpfs CDI directory) with one daemon's pod.
type adPod struct {
	nd  *node
	pod *k.Pod
	d   adDaemon
}

// startADPod starts d's pod (its manifest's env, then env) on a fresh node and waits, bounded,
// until it is registered and advertises only Healthy devices.
func startADPod(d adDaemon, name string, env ...string) (*adPod, error) {
	nd := newNode(daemonKind{name: d.name, resource: d.resource})
	ap := &adPod{nd: nd, d: d}
	pod, err := startPodOn(nd, d, name, env...)
	if err != nil {
		nd.close()
		return nil, err
	}
	ap.pod = pod
	if _, err := nd.kub.WaitRegistered(d.resource, 1, adStartBound); err != nil {
		err = fmt.Errorf("%v; pod log: %s", err, tail(pod.Log(), 600))
		ap.close()
		return nil, err
	}
	if _, err := nd.kub.WaitDevices(d.resource, k.AllHealth(k.Healthy), adStartBound); err != nil {
		ap.close()
		return nil, err
	}
	return ap, nil
}

// startPodOn starts d's pod on nd (one more pod on the same node for the fighting writers).
func startPodOn(nd *node, d adDaemon, name string, env ...string) (*k.Pod, error) {
	var spec k.PodSpec
	var err error
	if d.isKata() {
		spec, _, err = k.KataPod(nd.n, nd.kt, env...)
	} else {
		spec, _, err = k.HyperlightPod(nd.n, false, env...)
		spec.ShimLib = d.shim
	}
	if err != nil {
		return nil, err
	}
	spec.Binary, spec.Name = d.bin, name
	return k.StartPod(spec)
}

func (ap *adPod) close() {
	if ap.pod != nil {
		if err := closePod(ap.pod); err != nil {
			fmt.Fprintf(os.Stderr, "as deployed: pod %s: %v\n", ap.pod.Spec.Name, err)
		}
	}
	ap.nd.close()
}

// closePod closes p; a daemon whose loop is frozen does not act on SIGTERM while frozen, so
// after 2 s of Close's SIGTERMs every run still alive gets SIGKILL (its figures are taken).
func closePod(p *k.Pod) error {
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Second):
	}
	for _, c := range p.Containers() {
		if !c.Exited() {
			c.Signal(syscall.SIGKILL) //nolint:errcheck // it may have exited meanwhile
		}
	}
	return <-done
}

// ---- host device gone -> Unhealthy, pod layout (hyperlight main plugin)

type unhealthyResult struct {
	ms   []float64
	note string // why the runs stopped early, or why not measured
}

// adUnhealthy removes the node's /dev/kvm (the pod sees it at /host-dev; its own /dev/kvm
// stays) and times the first all-Unhealthy ListAndWatch response received by the kubelet, then
// puts it back and waits for all Healthy; adUnhealthyRuns times, stopping at the first miss.
func adUnhealthy(d adDaemon) unhealthyResult {
	var r unhealthyResult
	ap, err := startADPod(d, "hl-health")
	if err != nil {
		r.note = "not measured: " + err.Error()
		return r
	}
	defer ap.close()
	kub, host := ap.nd.kub, ap.nd.n.KVMPath()
	for i := 1; i <= adUnhealthyRuns; i++ {
		t := time.Now()
		if err := os.Remove(host); err != nil {
			fatal("%v", err)
		}
		var at time.Time
		found := k.Poll(adUnhealthyBound, func() bool {
			p := kub.Current(d.resource)
			if p == nil {
				return false
			}
			for _, s := range p.Snapshots() {
				if !s.Time.Before(t) && k.AllHealth(k.Unhealthy)(s.Devices) {
					at = s.Time
					return true
				}
			}
			return false
		})
		if !found {
			r.note = fmt.Sprintf("run %d: still Healthy at the kubelet %v after the host node was removed", i, adUnhealthyBound)
			return r
		}
		r.ms = append(r.ms, ms(at.Sub(t)))
		if err := ap.nd.n.MknodKVM(); err != nil {
			fatal("%v", err)
		}
		if _, err := kub.WaitDevices(d.resource, k.AllHealth(k.Healthy), adUnhealthyBound); err != nil {
			r.note = fmt.Sprintf("run %d: not Healthy again within %v of the host node's return", i, adUnhealthyBound)
			return r
		}
	}
	return r
}

// ---- kill -9 of PID 1 -> registered again

type restartResult struct {
	ms     []float64 // kill -9 -> registered
	execMs []float64 // the restarted daemon's exec -> registered (the daemon's own part)
	note   string
	stale  int // plugin sockets in the kubelet directory besides the live one, at the end
	missed bool
}

// adRestarts kills the daemon (PID 1 of its pod) with SIGKILL adRestartRounds times in a row;
// the pod restarts it at once; each time from the kill to the kubelet accepting its Register,
// and from the restarted daemon's exec (its comm seen changed, polled every 100 µs) to it.
// Stops at the first round not registered within adRestartBound.
func adRestarts(d adDaemon) restartResult {
	var r restartResult
	ap, err := startADPod(d, d.name+"-crash")
	if err != nil {
		r.note, r.missed = "not measured: "+err.Error(), true
		return r
	}
	defer ap.close()
	kub := ap.nd.kub
	for i := 1; i <= adRestartRounds; i++ {
		regs := kub.Registrations(d.resource)
		killed := time.Now()
		if err := ap.pod.Kill(); err != nil {
			fatal("kill: %v", err)
		}
		c, execAt := execOf(ap.pod, i, d.bin, adRestartBound)
		var cur *k.Plugin
		if c != nil && k.Poll(adRestartBound, func() bool {
			cur = kub.Current(d.resource)
			return kub.Registrations(d.resource) > regs && cur != nil && !c.Exited()
		}) {
			r.ms = append(r.ms, ms(cur.Registered.Sub(killed)))
			r.execMs = append(r.execMs, ms(cur.Registered.Sub(execAt)))
			continue
		}
		r.missed = true
		r.note = fmt.Sprintf("restart %d not registered within %v of kill -9", i, adRestartBound)
		break
	}
	if socks, err := ap.nd.n.PluginSockets(); err == nil {
		live := ""
		if p := kub.Current(d.resource); p != nil {
			live = p.Endpoint
		}
		for _, s := range socks {
			if s != live {
				r.stale++
			}
		}
	}
	return r
}

// execOf waits (bounded, polling every 100 µs) until run n of p has exec'ed bin (its comm is
// bin's name, no longer the harness's init hook's); returns the run and when it was seen.
func execOf(p *k.Pod, n int, bin string, bound time.Duration) (*k.PodContainer, time.Time) {
	want := filepath.Base(bin)
	if len(want) > 15 {
		want = want[:15]
	}
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if runs := p.Containers(); len(runs) > n {
			c := runs[n]
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.Pid()))
			if strings.TrimSpace(string(b)) == want {
				return c, time.Now()
			}
			if c.Exited() {
				return nil, time.Time{}
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil, time.Time{}
}

// ---- the whole part

// asDeployed is every as-deployed figure.
type asDeployed struct {
	daemons   []adDaemon
	buildNote string
	ceiling   int
	unhealthy unhealthyResult
	restarts  map[string]restartResult
	hostile   map[string][]hostileResult // per daemon, in hostileInputs order
	stall     map[string]stallResult
	fight     fightResult
	took      time.Duration
	host      *hostLog // what else used the machine, step by step
}

func measureAsDeployed(src, build string) *asDeployed {
	began := time.Now()
	a := &asDeployed{restarts: map[string]restartResult{}, hostile: map[string][]hostileResult{}, stall: map[string]stallResult{},
		host: newHostLog()}
	a.daemons, a.buildNote = asDeployedDaemons(src, build)
	hl := a.daemons[0]
	a.ceiling = adCeiling(hl)
	a.host.skip() // the static build, if any, is the bench's own work
	step := func(what string) {
		fmt.Fprintf(os.Stderr, "as deployed: %s (%v)\n", what, time.Since(began).Round(time.Second))
	}
	step("host device gone -> Unhealthy")
	a.unhealthy = adUnhealthy(hl)
	a.host.part("device gone", "host device gone → Unhealthy")
	for _, d := range a.daemons {
		step(d.name + ": kill -9 -> registered")
		a.restarts[d.name] = adRestarts(d)
		a.host.part("kill -9 ("+d.name+")", "kill -9 → registered again, "+d.name)
	}
	for _, d := range a.daemons {
		for _, in := range hostileInputs {
			step(fmt.Sprintf("%s: %s, %d client(s)", d.name, in.name, in.clients))
			a.hostile[d.name] = append(a.hostile[d.name], runHostile(d, in))
		}
		a.host.part("hostile inputs ("+d.name+")", "the hostile-input figures of "+d.name+" (the liveness checks' times; the memory peaks hardly)")
	}
	for _, d := range a.daemons {
		step(d.name + ": the largest legal requests")
		a.stall[d.name] = adStall(d, a.ceiling)
	}
	a.host.part("largest requests", "the loop's longest stall, both daemons")
	step("two fighting writers")
	a.fight = adFight(hl)
	a.host.part("fighting writers", "the spec writes per second of the two fighting writers")
	a.took = time.Since(began)
	step("done")
	return a
}

// asDeployedOnlyMode runs this part alone (-asdeployed-only).
func asDeployedOnlyMode(src, build string) {
	if *reliabilityPath == "" {
		*reliabilityPath = "docs/reliability.md"
	}
	writeAsDeployed(measureAsDeployed(src, build))
}

// adCeiling is hyperlight's DEVICE_COUNT ceiling (its error message names it), or
// adLargeCount when it cannot be read.
func adCeiling(d adDaemon) int {
	n, err := k.NewNode()
	if err != nil {
		fatal("%v", err)
	}
	defer n.Remove()
	env := k.DaemonEnv(n.Root, "DEVICE_COUNT=4294967295", "LD_PRELOAD="+d.shim)
	r, err := k.RunCommand(10*time.Second, d.bin, env)
	if err != nil {
		return adLargeCount
	}
	m := ceilingRe.FindStringSubmatch(r.Stderr)
	if m == nil {
		return adLargeCount
	}
	var c int
	fmt.Sscan(m[1], &c)
	if c <= 0 {
		return adLargeCount
	}
	return c
}

// commandLine is how this run was started, for the generated section.
func commandLine() string {
	if *command != "make bench" || !*asDeployedOnly {
		return *command
	}
	args := []string{filepath.Join(*buildDir, "sdp-bench")}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t") {
			a = "'" + a + "'"
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}
