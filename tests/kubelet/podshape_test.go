package kubelet

// Scenarios in the deployed shape (podshape.go): each daemon as PID 1 of its pod, in the
// chart's memory limit, read-only root, hostPaths where the manifests mount them, restarted on
// exit. Registration, health changes of the host device, kubelet restart, a kill -9 loop and
// hostile clients against the memory limit (podshape_hostile_test.go).

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

const instrumentedLimit = 1 << 30

// podScenario: a simulated node, the mock kubelet on its kubelet directory, one pod.
type podScenario struct {
	t      *testing.T
	node   *Node
	k      *MockKubelet
	pod    *Pod
	m      *Manifest
	target hostileDaemon // the daemon under hostile input (podshape_hostile_test.go)
}

// newPodNode makes the node (with /dev/kvm when kvm) and the mock kubelet.
func newPodNode(t *testing.T, kvm bool) *podScenario {
	t.Helper()
	if err := PrivateMountNamespace(); err != nil {
		t.Fatal(err)
	}
	n := newNode(t, kvm)
	return &podScenario{t: t, node: n, k: newMock(t, Config{Dir: n.KubeletDir})}
}

// start runs spec as the scenario's pod; everything is undone at the test's end.
func (s *podScenario) start(spec PodSpec, m *Manifest, err error) *Pod {
	t := s.t
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if Instrumented(spec.Binary) {
		// ASan's shadow and quarantine are not the daemon's memory: the chart's limit is for
		// the production build (TestPodShapeMemory does not run on an instrumented one).
		t.Logf("%s is instrumented: memory limit %d MiB instead of the chart's %d MiB", spec.Binary,
			instrumentedLimit>>20, spec.MemoryLimit>>20)
		spec.MemoryLimit = instrumentedLimit
	}
	pod, err := StartPod(spec)
	if err != nil {
		t.Fatal(err)
	}
	s.pod, s.m = pod, m
	t.Cleanup(func() {
		if err := pod.Close(); err != nil {
			t.Errorf("pod cleanup: %v", err)
		}
		if r := SanitizerReports(pod.Log()); len(r) > 0 {
			t.Errorf("sanitizer reports in the daemon's log:\n%s", strings.Join(r, "\n"))
		}
		if t.Failed() {
			t.Logf("pod %s (%s, limit %d MiB):\n%s", spec.Name, m.Path, spec.MemoryLimit>>20, pod.Log())
		}
	})
	if err := pod.CheckShape(); err != nil {
		t.Fatalf("the pod's shape: %v", err)
	}
	return pod
}

func (s *podScenario) hyperlight(extraEnv ...string) *Pod {
	spec, m, err := HyperlightPod(s.node, false, extraEnv...)
	return s.start(spec, m, err)
}

// deviceCount is the DEVICE_COUNT the pod runs with.
func (s *podScenario) deviceCount() int {
	n := 2000
	for _, kv := range s.pod.Spec.Env {
		if strings.HasPrefix(kv, "DEVICE_COUNT=") {
			fmt.Sscan(strings.TrimPrefix(kv, "DEVICE_COUNT="), &n)
		}
	}
	return n
}

// fatalf fails the test, saying how the pod's current run is doing.
func (s *podScenario) fatalf(format string, args ...interface{}) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if s.pod != nil {
		c := s.pod.Current()
		msg += fmt.Sprintf(" (pod: %d restart(s), current run %s)", s.pod.Restarts(), c.ExitDescription())
	}
	s.t.Fatal(msg)
}

// registered waits for the count-th registration of resource and returns it.
func (s *podScenario) registered(resource string, count int, bound time.Duration) *Plugin {
	s.t.Helper()
	if !Poll(bound, func() bool { return s.k.Registrations(resource) >= count }) {
		s.fatalf("%s registered %d time(s) within %v, want %d", resource, s.k.Registrations(resource), bound, count)
	}
	p := s.k.Current(resource)
	if p == nil {
		s.fatalf("%s registered but kubelet has no endpoint for it", resource)
	}
	return p
}

// devices waits until the current endpoint of resource shows n devices of health h.
func (s *podScenario) devices(resource string, n int, h string, bound time.Duration) {
	s.t.Helper()
	if devs, err := s.k.WaitDevices(resource, CountHealth(n, h), bound); err != nil {
		s.fatalf("%v (want %d %s; have %d)", err, n, h, len(devs))
	}
}

// probe runs the daemon's --health-check (args) inside the pod, as kubelet's exec probe.
func (s *podScenario) probe(args ...string) Result {
	s.t.Helper()
	r, err := s.pod.Exec(exitBound, args...)
	if err != nil {
		s.fatalf("exec probe %v: %v\nstderr: %s", args, err, r.Stderr)
	}
	return r
}

func (s *podScenario) probeOK(args ...string) {
	s.t.Helper()
	if r := s.probe(args...); r.Code != 0 {
		s.t.Errorf("exec probe %v in the pod: exit %d, want 0; stderr: %s", args, r.Code, r.Stderr)
	}
}

// onlySocket checks that the kubelet directory holds kubelet.sock and endpoint, nothing else.
func (s *podScenario) onlySocket(endpoint string) error {
	socks, err := s.node.PluginSockets()
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(socks, []string{endpoint}) {
		return fmt.Errorf("plugin sockets %v, want only the live %s", socks, endpoint)
	}
	if !IsSocket(s.k.SocketPath()) {
		return fmt.Errorf("kubelet.sock is gone")
	}
	return nil
}

// ---- 1. registration of each daemon

func TestPodShapeRegistration(t *testing.T) {
	t.Run("hyperlight", func(t *testing.T) {
		s := newPodNode(t, true)
		s.hyperlight()
		n := s.deviceCount()
		s.registered(HyperlightResource, 1, startBound)
		s.devices(HyperlightResource, n, Healthy, eventBound)
		a, err := s.k.Allocate(HyperlightResource, []string{fmt.Sprintf("hyperlight-%d", n-1)})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		checkAllocation(t, a.Response)
		b, err := os.ReadFile(s.node.CDIPath())
		if err != nil {
			t.Fatalf("the CDI spec on the host: %v", err)
		}
		if spec, err := ParseCDI(b); err != nil {
			t.Error(err)
		} else if err := CheckHyperlightCDI(spec, 65534, 65534, HyperlightDefaultMode); err != nil {
			t.Errorf("CDI spec: %v\n%s", err, b)
		}
		s.probeOK("--health-check")
		s.probeOK("--health-check=readiness")
	})
	t.Run("device-access", func(t *testing.T) {
		s := newPodNode(t, true)
		spec, m, err := HyperlightPod(s.node, true)
		s.start(spec, m, err)
		s.registered(AccessResource, 1, startBound)
		s.devices(AccessResource, 1, Healthy, eventBound)
		a, err := s.k.Allocate(AccessResource, []string{AccessDeviceID})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		checkAccessGrant(t, a.Full)
		s.probeOK("--device-access", "--health-check")
		s.probeOK("--device-access", "--health-check=readiness")
	})
	t.Run("kata", func(t *testing.T) {
		s := newPodNode(t, false)
		tree, err := NewKataTree(s.node.Root)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []kataEntry{{0, GPU("0000:41:00.0", 0)}, {1, GPU("0000:42:00.0", 0)},
			{2, NVSwitch("0000:05:00.0", -1)}} {
			if err := tree.Add(e.N, e.F); err != nil {
				t.Fatal(err)
			}
		}
		spec, m, err := KataPod(s.node, tree)
		s.start(spec, m, err)
		s.registered(KataGPU, 1, startBound)
		s.registered(KataNVSwitch, 1, startBound)
		s.devices(KataGPU, 2, Healthy, eventBound)
		s.devices(KataNVSwitch, 1, Healthy, eventBound)
		a, err := s.k.Allocate(KataGPU, []string{"1"})
		if err != nil {
			t.Fatalf("Allocate: %v", err)
		}
		checkKataAllocation(t, a.Response, KataGPU, []string{"1"})
		for _, r := range KataResources {
			if _, err := os.Stat(filepath.Join(s.node.CDIDir, KataSpecFile(r))); err != nil {
				t.Errorf("CDI spec of %s: %v", r, err)
			}
		}
		s.probeOK("--health-check")
		s.probeOK("--health-check=readiness")
	})
}

// ---- 2. health of the host's device node, pod layout

// The main plugin sees the host's /dev only at /host-dev; the pod's own /dev/kvm stays. The
// host node gone, back, or another device in its place must reach kubelet as an event, well
// before the 30 s periodic check (the daemon has no knob for it: eventBound is far below it).
func TestPodShapeHostDeviceHealth(t *testing.T) {
	s := newPodNode(t, true)
	s.hyperlight()
	n := s.deviceCount()
	p := s.registered(HyperlightResource, 1, startBound)
	s.devices(HyperlightResource, n, Healthy, eventBound)
	host := s.node.KVMPath()
	step := func(what string, change func() error, health string) {
		t.Helper()
		start := time.Now()
		if err := change(); err != nil {
			t.Fatal(err)
		}
		s.devices(HyperlightResource, n, health, eventBound)
		t.Logf("%s: all %d devices %s at kubelet after %v", what, n, health, time.Since(start).Round(time.Millisecond))
	}
	step("host node removed", func() error { return os.Remove(host) }, Unhealthy)
	step("host node back", func() error { return Mknod(host, KVMMajor, KVMMinor) }, Healthy)
	step("host node replaced by another device number", func() error {
		tmp := host + ".new"
		if err := Mknod(tmp, KVMMajor, KVMMinor+1); err != nil {
			return err
		}
		return os.Rename(tmp, host)
	}, Unhealthy)
	if s.k.Current(HyperlightResource) != p || s.pod.Restarts() != 0 {
		t.Errorf("the daemon re-registered or restarted (restarts %d)", s.pod.Restarts())
	}
}

// ---- 3. kubelet restart

func TestPodShapeKubeletRestart(t *testing.T) {
	t.Run("hyperlight", func(t *testing.T) {
		s := newPodNode(t, true)
		s.hyperlight()
		n := s.deviceCount()
		p := s.registered(HyperlightResource, 1, startBound)
		s.devices(HyperlightResource, n, Healthy, eventBound)
		s.kubeletRestart(HyperlightResource, p, n)
	})
	t.Run("kata", func(t *testing.T) {
		s := newPodNode(t, false)
		tree, err := NewKataTree(s.node.Root)
		if err != nil {
			t.Fatal(err)
		}
		if err := tree.Add(0, GPU("0000:41:00.0", 0)); err != nil {
			t.Fatal(err)
		}
		spec, m, err := KataPod(s.node, tree)
		s.start(spec, m, err)
		p := s.registered(KataGPU, 1, startBound)
		s.devices(KataGPU, 1, Healthy, eventBound)
		s.kubeletRestart(KataGPU, p, 1)
	})
}

func (s *podScenario) kubeletRestart(resource string, p *Plugin, n int) {
	t := s.t
	t.Helper()
	pid := s.pod.Current().Pid()
	if err := s.k.Restart(); err != nil {
		t.Fatal(err)
	}
	cur := s.registered(resource, p.Seq+1, eventBound)
	s.devices(resource, n, Healthy, eventBound)
	if s.pod.Restarts() != 0 || s.pod.Current().Pid() != pid {
		t.Errorf("the container restarted (%d restart(s)); kubelet's restart must not end the daemon", s.pod.Restarts())
	}
	if resource == HyperlightResource {
		if err := s.onlySocket(cur.Endpoint); err != nil {
			t.Error(err)
		}
	}
	s.probeOK("--health-check=readiness")
}

// ---- 4. crash-restart loop

const crashRounds = 20

// failedAttempt matches the log lines of a failed or retried registration (docs/operations.md:
// "registration failed, retrying", "cannot start") and of any back-off.
var failedAttempt = regexp.MustCompile(`(?i)registration failed|retrying|back-?off|cannot serve|cannot start`)

// kill -9 of PID 1, 20 times in a row; the pod restarts it at once each time. Every restarted
// daemon must register on its first attempt: the registration count goes up by exactly one per
// restart, its log has no warning or error (no failed attempt, no back-off), and the socket
// directory holds only kubelet.sock and the live daemon's socket (no pile-up of the dead
// predecessors' hyperlight-1-N.sock, all PID 1).
func TestPodShapeCrashLoop(t *testing.T) {
	s := newPodNode(t, true)
	s.hyperlight()
	n := s.deviceCount()
	s.registered(HyperlightResource, 1, startBound)
	s.devices(HyperlightResource, n, Healthy, eventBound)
	var times []time.Duration
	failedRounds := 0
	defer func() {
		if len(times) > 0 {
			sorted := append([]time.Duration(nil), times...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			t.Logf("kill -9 -> registered, %d restart(s): %v (median %v, max %v)", len(times), times,
				sorted[len(sorted)/2], sorted[len(sorted)-1])
		}
	}()
	for i := 1; i <= crashRounds; i++ {
		regs := s.k.Registrations(HyperlightResource)
		if regs != i {
			t.Errorf("before kill %d: %d registrations, want %d (one per run so far)", i, regs, i)
		}
		killed := time.Now()
		if err := s.pod.Kill(); err != nil {
			t.Fatal(err)
		}
		c, err := s.pod.WaitRun(i, exitBound)
		if err != nil {
			t.Fatal(err)
		}
		// Waits up to backoffBound so a slow restart is measured for the report, but a
		// registration later than eventBound (an event's bound) fails.
		var cur *Plugin
		ok := Poll(backoffBound, func() bool {
			cur = s.k.Current(HyperlightResource)
			return s.k.Registrations(HyperlightResource) > regs && cur != nil && !c.Exited()
		})
		if !ok {
			s.fatalf("restart %d: not registered again within %v of kill -9 (registrations %d -> %d)",
				i, backoffBound, regs, s.k.Registrations(HyperlightResource))
		}
		took := cur.Registered.Sub(killed)
		times = append(times, took.Round(100*time.Microsecond))
		if took > eventBound {
			t.Errorf("restart %d: registered %v after kill -9, more than %v: not on its first attempt", i,
				took.Round(time.Millisecond), eventBound)
			failedRounds++
		}
		if _, err := cur.WaitSnapshots(1, eventBound); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		if got := s.k.Registrations(HyperlightResource); got != regs+1 {
			t.Errorf("restart %d: %d registrations, want exactly one more than %d", i, got, regs)
		}
		if err := s.onlySocket(cur.Endpoint); err != nil {
			t.Errorf("restart %d: %v", i, err)
		}
		for _, l := range c.Stderr.Lines() {
			if failedAttempt.MatchString(l) {
				t.Errorf("restart %d: a failed registration attempt in the restarted daemon's log: %s", i, l)
			}
		}
		// Today's failures cost seconds each (growing back-off): three show the trend.
		if t.Failed() && i >= 3 || failedRounds >= 2 {
			return
		}
	}
	s.probeOK("--health-check=readiness")
}

// ---- the manifests the pods are read from

// The reader takes from each manifest what the pods use: the chart's memory limits (64 Mi for
// hyperlight's main plugin and kata, 48 Mi for device-access), the args and the literal env.
func TestPodShapeManifests(t *testing.T) {
	src, err := SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file  string
		limit int64
		args  []string
		env   []string
	}{
		{HyperlightManifest, 64 << 20, nil, []string{"NODE_LABELS_HOLD=10", "HOST_DEVICE_DIR=/host-dev", "DEVICE_COUNT=2000",
			"DEVICE_UID=65534", "DEVICE_GID=65534", "DEVICE_MODE=0660", "LOG_LEVEL=info"}},
		{DeviceAccessManifest, 48 << 20, []string{"--device-access"}, []string{"HOST_DEVICE_DIR=/host-dev", "LOG_LEVEL=info"}},
		{KataValues, 64 << 20, nil, []string{"LOG_LEVEL=info"}},
	} {
		m, err := ReadManifest(filepath.Join(src, tc.file))
		if err != nil {
			t.Error(err)
			continue
		}
		if m.MemoryLimit != tc.limit || !reflect.DeepEqual(m.Args, tc.args) || !reflect.DeepEqual(m.Env, tc.env) {
			t.Errorf("%s: limit %d args %q env %q; want %d %q %q", tc.file, m.MemoryLimit, m.Args, m.Env,
				tc.limit, tc.args, tc.env)
		}
	}
	for _, q := range []string{"64", "1Ki", "0Mi", "-1Mi", "64M", "Mi"} {
		n, err := ParseQuantity(q)
		if ok := q == "64" || q == "1Ki"; ok != (err == nil) || (q == "1Ki" && n != 1024) {
			t.Errorf("ParseQuantity(%q) = %d, %v", q, n, err)
		}
	}
}
