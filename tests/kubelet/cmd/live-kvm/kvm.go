package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sdp/kubelet"
)

// The guest is the node: the daemon's real paths.
const (
	daemonPath  = "/usr/local/bin/hyperlight-device-plugin"
	kubeletDir  = "/var/lib/kubelet/device-plugins"
	cdiDir      = "/var/run/cdi"
	cdiPath     = cdiDir + "/" + kubelet.HyperlightCDIFile
	kvmPath     = "/dev/kvm"
	modulesDir  = "/lib/modules"
	scprobeLib  = "/usr/local/lib/libscprobe.so" // tests/fakes/scprobe.c
	scprobeOut  = "/tmp/scprobe.out"
	cdiRWView   = "/tmp/cdi-rw" // a read-write bind mount of the CDI directory
	nobody      = 65534
	deviceCount = 2000 // the daemon's default DEVICE_COUNT
	resource    = kubelet.HyperlightResource
)

// Bounds. Generous where the guest is slow (every check starts a probe helper under
// QEMU's software emulation); the 1 s bound of the kvm_amd unload (arm64: the node's removal)
// is the requirement itself.
const (
	startBound    = 30 * time.Second // daemon start to registered and Healthy
	eventBound    = 5 * time.Second  // an inotify-driven change reaching the stream
	unloadBound   = 1 * time.Second  // rmmod kvm_amd (arm64: rm /dev/kvm) -> Unhealthy
	periodicBound = 40 * time.Second // a change the daemon only sees at its 30 s periodic check
	stopBound     = 10 * time.Second
)

type liveRun struct {
	transcript
	kdir      string      // the kubelet device-plugins directory
	cdi       string      // the daemon's CDI spec file
	cdiName   string      // the CDI device name Allocate must return
	canon     []byte      // the daemon's CDI spec, as first written
	foreign   []fileState // files in the CDI directory the daemon does not own
	allocs    int
	nextReg   int    // the registration count the daemon started last brings
	prevEp    string // the endpoint registered before it
	kvmEv     *uevents
	driverTID int         // the thread of the driver's own KVM_CREATE_VM (kvmSelfTest)
	kvmNode   unix.Stat_t // arm64: the node's /dev/kvm before its removal (arch.go)

	// the pod layout (pod.go)
	podDaemon   string           // the daemon the pod runs (arm64: the image's musl build)
	api         *kubelet.APIStub // the node labels' API server
	podT0       time.Time        // the pod daemon's start
	unloadStart time.Time        // rmmod kvm_amd (arm64: rm /dev/kvm) started (its successful attempt)
	unloaded    time.Time        // and returned
	unloadWhat  string           // what it did
	unloadMark  int              // the pod daemon's log lines before it
}

// probeResult is the probe's own result on success, logged by the daemon at info; on an arm64
// host whose IPA limit is below the default 40 bits it names the size it asked for (issue 30):
// the preflight sets it from the host (probeResultOn).
var probeResult = probeResultOn(0)

func probeResultOn(smallIPA int) string {
	if smallIPA != 0 {
		return fmt.Sprintf(`probe="KVM API version 12, VM created (IPA %d bits, the host's limit)"`, smallIPA)
	}
	return `probe="KVM API version 12, VM created"`
}

func newLiveRun(podDaemon string) *liveRun {
	return &liveRun{kdir: kubeletDir, cdi: cdiPath, cdiName: kubelet.HyperlightCDIName, podDaemon: podDaemon}
}

func runKVM(podDaemon string) int {
	r := newLiveRun(podDaemon)
	n := thisNode
	return r.run(func() {
		r.step("preflight", r.preflight)
		// A workload's guest on this KVM, allowed and denied (workload.go).
		r.step("kvm-run", r.kvmRun)
		r.step("kvm-run-eacces", r.kvmRunEACCES)
		r.step("foreign-files", r.foreignFiles)
		r.step("mock-kubelet", r.startKubelet)
		r.step("daemon-start", func() string { return r.startDaemon(0) })
		r.registeredHealthy()
		r.step("probe-ran", r.probeRan)
		r.step("cdi-spec", r.cdiSpec)
		r.step("allocate", r.allocateOK)
		r.step(n.remove, r.unloadKVM)
		r.step("allocate-"+n.gone, func() string { return r.allocateUnavailable("") })
		r.step(n.restore, r.reloadKVM)
		r.step("allocate", r.allocateOK)
		r.step("cdi-deleted", r.cdiDeleted)
		r.step("allocate", r.allocateOK)
		r.step("cdi-truncated", func() string { return r.cdiDamaged("truncated", r.canon[:len(r.canon)/2]) })
		r.step("allocate", r.allocateOK)
		r.step("cdi-edited", func() string { return r.cdiDamaged("valid JSON, edited", r.edited()) })
		r.step("allocate", r.allocateOK)
		r.step("cdi-dir-readonly", r.cdiReadOnly)
		r.step("allocate-readonly", func() string { return r.allocateUnavailable("") })
		r.step("cdi-dir-writable", r.cdiWritable)
		r.step("allocate", r.allocateOK)
		r.step("daemon-stop", r.stopDaemon)
		r.step("eacces-setup", r.eaccesSetup)
		r.step("daemon-start", func() string { return r.startDaemon(nobody) })
		r.step("registered", r.registered)
		r.unusable("eacces", "EACCES opening "+kvmPath)
		r.step("eacces-fixed", r.eaccesFixed)
		r.step("allocate", r.allocateOK)
		r.step("daemon-stop", r.stopDaemon)
		r.step("eacces-restore", r.eaccesRestore)
		r.step("daemon-start", func() string { return r.startDaemon(0) })
		r.registeredHealthy()
		r.step("allocate", r.allocateOK)
		r.step("kubelet-restart", r.kubeletRestart)
		r.step("allocate", r.allocateOK)
		r.step("cdi-dir-untouched", r.untouched)
		r.step("daemon-stop", r.stopDaemon)
		// The filter enforced by this kernel: refused calls from inside a running daemon.
		r.step("seccomp-start", r.startSeccompDaemon)
		r.registeredHealthy()
		r.step("seccomp-enforced", r.seccompEnforced)
		r.step("allocate", r.allocateOK)
		r.step("daemon-stop", r.stopDaemon)
		// Nothing else refused: each daemon build in log mode (seccomp.go).
		r.seccompLogSteps("seccomp-log", daemonPath, true)
		if r.podDaemon != daemonPath {
			r.seccompLogSteps("seccomp-log-pod-daemon", r.podDaemon, false)
		}
		// The pod layout (pod.go).
		r.step("pod-start", r.podStart)
		r.step("pod-registered", r.registered)
		r.step("pod-layout", r.podLayoutChecked)
		r.step("pod-healthy", func() string { return r.healthy(startBound) })
		r.step("pod-probe-ran", r.podProbeRan)
		r.step("pod-allocate", r.allocateOK)
		r.step("pod-labelled", r.labelled)
		r.step(n.podRemove, r.podUnload)
		r.step("pod-unhealthy", r.podUnhealthy)
		r.step(n.podRestore, r.podReload)
		r.step("pod-allocate", r.allocateOK)
		r.step("pod-log", r.podLogChecked)
		if !n.companions {
			r.step("sigterm", r.sigterm)
		} else {
			r.step("sigterm", r.stopDaemon)
			// The companions on the kernel's own drivers, bare-node layout (companion.go).
			r.companionSteps()
			r.k.Stop()
			if r.api != nil {
				r.api.Close()
			}
		}
		fmt.Printf("%s live-kvm: every step passed\n", r.stamp())
	})
}

func (r *liveRun) daemon() *kubelet.Daemon { return r.daemons[len(r.daemons)-1].d }

// registeredHealthy: the daemon started last registers and every device turns Healthy.
func (r *liveRun) registeredHealthy() {
	r.step("registered", r.registered)
	r.step("healthy", func() string { return r.healthy(startBound) })
}

// unusable: every device turns Unhealthy with reason, and Allocate is refused naming it
// (steps NAME-unhealthy, allocate-NAME).
func (r *liveRun) unusable(name, reason string) {
	r.step(name+"-unhealthy", func() string { return r.unhealthyFor(reason) })
	r.step("allocate-"+name, func() string { return r.allocateUnavailable(reason) })
}

func (r *liveRun) unhealthyFor(reason string) string {
	r.waitHealth(kubelet.Unhealthy, time.Now(), startBound)
	line := r.waitLog(0, "device unusable")
	if !strings.Contains(line, `reason="`+reason+`"`) {
		r.fail("the daemon's reason is not %s: %s", reason, line)
	}
	return "every device Unhealthy; log: " + reasonOf(line)
}

func (r *liveRun) preflight() string {
	maj, min, err := charDev(kvmPath)
	r.check(err)
	if maj != kubelet.KVMMajor || min != kubelet.KVMMinor {
		r.fail("%s is %d:%d, want %d:%d", kvmPath, maj, min, kubelet.KVMMajor, kubelet.KVMMinor)
	}
	probeResult = probeResultOn(hostSmallIPA(kvmPath))
	ev, err := listenKVMUevents()
	r.check(err)
	r.kvmEv = ev
	since := time.Now()
	msg, tid, err := kvmSelfTest(kvmPath)
	r.check(err)
	r.driverTID = tid
	// The kernel reports the driver's own KVM_CREATE_VM (PID: the calling thread's ID): the
	// uevent proof works in this guest.
	var e kvmEvent
	if !kubelet.Poll(eventBound, func() bool {
		var ok bool
		e, ok = ev.find(since, func(e kvmEvent) bool { return e.event == "create" && e.pid == tid })
		return ok
	}) {
		list, rerr := ev.events()
		r.fail("no KVM uevent EVENT=create PID=%d for the driver's own KVM_CREATE_VM within %v (got %v, reader error %v)", tid, eventBound, list, rerr)
	}
	msg += fmt.Sprintf("; kernel uevent %v (the driver)", e)
	for _, d := range []string{kubeletDir, cdiDir} {
		names, err := dirNames(d)
		r.check(err)
		if len(names) != 0 {
			r.fail("%s is not empty: %v", d, names)
		}
	}
	if _, ok := os.LookupEnv("SDP_TEST_ROOT"); ok {
		r.fail("SDP_TEST_ROOT is set: the guest is the node, the daemon must use the real paths")
	}
	return fmt.Sprintf("%s is a character device %d:%d; %s%s", kvmPath, maj, min, msg, thisNode.preflight(r))
}

// probeRan: the daemon's probe helper really ran the ioctls. Its own result is in the log, and
// the kernel reports a KVM_CREATE_VM by a helper the daemon started (the daemon logs its
// helpers' pids at debug).
func (r *liveRun) probeRan() string {
	line := r.waitLog(0, `msg="device usable"`)
	if !strings.Contains(line, "level=info") || !strings.Contains(line, probeResult) {
		r.fail("the daemon's \"device usable\" line lacks %s at info: %s", probeResult, line)
	}
	var e kvmEvent
	if !kubelet.Poll(eventBound, func() bool {
		helpers := helperPids(r.daemon().Stderr.Lines())
		var ok bool
		e, ok = r.kvmEv.find(r.t0, func(e kvmEvent) bool { return e.event == "create" && helpers[e.pid] })
		return ok
	}) {
		list, err := r.kvmEv.events()
		r.fail("no KVM uevent EVENT=create from a probe helper of the daemon within %v: the probe's KVM_CREATE_VM did not run (KVM events %v, reader error %v, helpers %v)",
			eventBound, list, err, helperPids(r.daemon().Stderr.Lines()))
	}
	return fmt.Sprintf("log: %s; kernel uevent %v, a probe helper of the daemon", probeResult, e)
}

// helperPids: the pids of the daemon's "helper started" debug lines.
func helperPids(lines []string) map[int]bool {
	pids := map[int]bool{}
	for _, l := range lines {
		if !strings.Contains(l, `msg="helper started"`) {
			continue
		}
		var pid int
		if i := strings.Index(l, " pid="); i >= 0 {
			if _, err := fmt.Sscanf(l[i+5:], "%d", &pid); err == nil {
				pids[pid] = true
			}
		}
	}
	return pids
}

// podProbeRan: the pod daemon (at info, as deployed) logs the probe's result, and the kernel
// reports a VM created since it started by a process other than the driver: the bare daemon
// has exited, so only the pod daemon's probe helper remains.
func (r *liveRun) podProbeRan() string {
	line := r.waitLog(0, `msg="device usable"`)
	if !strings.Contains(line, "level=info") || !strings.Contains(line, probeResult) {
		r.fail("the pod daemon's \"device usable\" line lacks %s at info: %s", probeResult, line)
	}
	self := os.Getpid()
	var e kvmEvent
	if !kubelet.Poll(eventBound, func() bool {
		var ok bool
		e, ok = r.kvmEv.find(r.podT0, func(e kvmEvent) bool {
			return e.event == "create" && e.pid != self && e.pid != r.driverTID
		})
		return ok
	}) {
		list, err := r.kvmEv.events()
		r.fail("no KVM uevent EVENT=create since the pod daemon started within %v: the probe's KVM_CREATE_VM did not run (KVM events %v, reader error %v)",
			eventBound, list, err)
	}
	return fmt.Sprintf("log: %s; kernel uevent %v (not the driver, pid %d)", probeResult, e, self)
}

// foreignFiles puts files the daemon does not own into the CDI directory.
func (r *liveRun) foreignFiles() string {
	files := []struct {
		name, data string
		mode       os.FileMode
	}{
		{"vendor.example.json", `{"cdiVersion":"0.3.0","kind":"vendor.example/dev","devices":[]}` + "\n", 0o640},
		{"other.yaml", "cdiVersion: 0.5.0\nkind: other.example/x\ndevices: []\n", 0o600},
	}
	var names []string
	for _, f := range files {
		p := filepath.Join(cdiDir, f.name)
		r.check(os.WriteFile(p, []byte(f.data), f.mode))
		r.check(os.Chmod(p, f.mode))
		st, err := statFile(p)
		r.check(err)
		r.foreign = append(r.foreign, st)
		names = append(names, fmt.Sprintf("%s (%v)", f.name, f.mode))
	}
	return "in " + cdiDir + ": " + strings.Join(names, ", ")
}

func (r *liveRun) startKubelet() string {
	k, err := kubelet.Start(kubelet.Config{Dir: kubeletDir})
	r.check(err)
	r.k = k
	return "serving " + k.SocketPath()
}

func daemonEnv() []string {
	return []string{"PATH=/bin:/usr/bin:/usr/local/bin", "LOG_LEVEL=debug"}
}

// startDaemon starts the daemon as root, or through the exec-as trampoline as uid.
func (r *liveRun) startDaemon(uid int) string {
	return r.startDaemonEnv(uid, daemonEnv())
}

func (r *liveRun) startDaemonEnv(uid int, env []string) string {
	return r.startDaemonAt(daemonPath, uid, env)
}

func (r *liveRun) startDaemonAt(path string, uid int, env []string) string {
	var d *kubelet.Daemon
	var err error
	r.nextReg = r.k.Registrations(resource) + 1
	r.prevEp = ""
	if p := r.k.Current(resource); p != nil {
		r.prevEp = p.Endpoint
	}
	if uid == 0 {
		d, err = kubelet.StartDaemon(path, env)
	} else {
		self, e := os.Executable()
		r.check(e)
		d, err = kubelet.StartDaemon(self, env, "exec-as", fmt.Sprint(uid), fmt.Sprint(uid), path)
	}
	r.check(err)
	r.daemons = append(r.daemons, &started{d: d, uid: uid})
	return fmt.Sprintf("pid %d as uid %d, no SDP_TEST_ROOT", d.Pid(), uid)
}

// registered waits for the registration of the daemon started last.
func (r *liveRun) registered() string {
	count := r.nextReg
	start := time.Now()
	p, err := r.k.WaitRegistered(resource, count, startBound)
	if err != nil {
		r.fail("%v (daemon %s)", err, r.daemon().ExitDescription())
	}
	if p.Endpoint == r.prevEp {
		r.fail("the new daemon registered the previous daemon's endpoint %s", p.Endpoint)
	}
	return fmt.Sprintf("registration %d, endpoint %s, after %s", count, p.Endpoint, ms(time.Since(start)))
}

// waitHealth waits until the newest snapshot has every device with health h and returns the
// arrival time of the first such snapshot received at or after since.
func (r *liveRun) waitHealth(h string, since time.Time, bound time.Duration) time.Time {
	pred := kubelet.CountHealth(deviceCount, h)
	if _, err := r.k.WaitDevices(resource, pred, bound); err != nil {
		r.fail("%v (daemon %s)", err, r.daemon().ExitDescription())
	}
	for _, s := range r.k.Current(resource).Snapshots() {
		if !s.Time.Before(since) && pred(s.Devices) {
			return s.Time
		}
	}
	return time.Now() // the state held already before since
}

func (r *liveRun) healthy(bound time.Duration) string {
	start := time.Now()
	at := r.waitHealth(kubelet.Healthy, start, bound)
	return fmt.Sprintf("%d devices Healthy, after %s", deviceCount, ms(at.Sub(start)))
}

// allocateOK allocates one device (a different one each time) and checks the CDI answer.
func (r *liveRun) allocateOK() string {
	id := r.deviceID()
	start := time.Now()
	a, err := r.k.Allocate(resource, []string{id})
	if err != nil {
		r.fail("Allocate(%s): %v", id, err)
	}
	took := time.Since(start)
	var names []string
	for _, c := range a.Response.CdiDevices {
		names = append(names, c.Name)
	}
	if len(names) != 1 || names[0] != r.cdiName {
		r.fail("Allocate(%s) cdi_devices %q, want [%s]", id, names, r.cdiName)
	}
	var ann []string
	for k, v := range a.Response.Annotations {
		if strings.HasPrefix(k, "cdi.k8s.io/") && v == r.cdiName {
			ann = append(ann, k)
		}
	}
	if len(ann) != 1 {
		r.fail("Allocate(%s) annotations %v, want one cdi.k8s.io/ key = %s", id, a.Response.Annotations, r.cdiName)
	}
	return fmt.Sprintf("Allocate(%s) -> %s (cdi_devices and %s), in %s", id, names[0], ann[0], ms(took))
}

// deviceID picks the next advertised device ID from the newest snapshot.
func (r *liveRun) deviceID() string {
	p := r.k.Current(resource)
	if p == nil {
		r.fail("no current registration")
	}
	s, ok := p.Latest()
	if !ok || len(s.Devices) == 0 {
		r.fail("no device list from the daemon")
	}
	r.allocs++
	return s.Devices[(r.allocs*397)%len(s.Devices)].ID
}

// allocateUnavailable expects Allocate to fail with UNAVAILABLE whose message contains want.
func (r *liveRun) allocateUnavailable(want string) string {
	id := r.deviceID()
	_, err := r.k.Allocate(resource, []string{id})
	if err == nil {
		r.fail("Allocate(%s) succeeded on an unusable device", id)
	}
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), want) {
		r.fail("Allocate(%s): %v, want UNAVAILABLE containing %q", id, err, want)
	}
	return fmt.Sprintf("Allocate(%s) -> %s %q", id, st.Code(), st.Message())
}

func (r *liveRun) cdiSpec() string {
	b, err := os.ReadFile(cdiPath)
	r.check(err)
	spec, err := kubelet.ParseCDI(b)
	r.check(err)
	r.check(kubelet.CheckHyperlightCDI(spec, nobody, nobody, kubelet.HyperlightDefaultMode))
	fi, err := os.Lstat(cdiPath)
	r.check(err)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		r.fail("%s mode %v, want a regular file 0644", cdiPath, fi.Mode())
	}
	r.canon = b
	return fmt.Sprintf("%s: %d bytes, cdiVersion %s, kind %s, device %s", cdiPath, len(b), spec.CDIVersion, spec.Kind, spec.Devices[0].Name)
}

// unloadKVM takes the node's KVM away (arch.go: rmmod kvm_amd; arm64 rm /dev/kvm) and requires
// every device Unhealthy within 1 s of the action's return.
func (r *liveRun) unloadKVM() string {
	start, returned, what := thisNode.take(r, false)
	node := "/dev/kvm still present"
	if !exists(kvmPath) {
		node = "/dev/kvm removed"
	}
	at := r.waitHealth(kubelet.Unhealthy, start, unloadBound)
	lat := at.Sub(returned)
	if lat > unloadBound {
		r.fail("Unhealthy %s after %s returned, bound %v", ms(lat), what, unloadBound)
	}
	when := fmt.Sprintf("%s after it returned", ms(lat))
	if lat < 0 {
		when = fmt.Sprintf("%s before it returned", ms(-lat))
	}
	return fmt.Sprintf("%s took %s, %s%s; every device Unhealthy %s (bound %v)",
		what, ms(returned.Sub(start)), node, thisNode.stays, when, unloadBound)
}

func (r *liveRun) reloadKVM() string {
	start := time.Now()
	what := thisNode.give(r, false)
	returned := time.Now()
	if _, _, err := charDev(kvmPath); err != nil {
		r.fail("after %s: %v", what, err)
	}
	at := r.waitHealth(kubelet.Healthy, start, eventBound)
	return fmt.Sprintf("%s took %s, /dev/kvm back; every device Healthy %s after it returned",
		what, ms(returned.Sub(start)), ms(at.Sub(returned)))
}

// waitCanon waits until the CDI file holds the canonical bytes again.
func (r *liveRun) waitCanon(bound time.Duration) time.Duration {
	start := time.Now()
	var got []byte
	if !kubelet.Poll(bound, func() bool {
		got, _ = os.ReadFile(cdiPath)
		return bytes.Equal(got, r.canon)
	}) {
		r.fail("%s not repaired within %v; it holds %q", cdiPath, bound, got)
	}
	return time.Since(start)
}

func (r *liveRun) cdiDeleted() string {
	r.check(os.Remove(cdiPath))
	d := r.waitCanon(eventBound)
	r.waitHealth(kubelet.Healthy, time.Now(), eventBound)
	return fmt.Sprintf("deleted; rewritten in %s, devices Healthy", ms(d))
}

func (r *liveRun) edited() []byte {
	e := bytes.Replace(r.canon, []byte(`"rw"`), []byte(`"rwm"`), 1)
	if bytes.Equal(e, r.canon) {
		r.fail("the spec has no \"rw\" to edit:\n%s", r.canon)
	}
	return e
}

// cdiDamaged overwrites the file in place with bad and waits for the repair.
func (r *liveRun) cdiDamaged(what string, bad []byte) string {
	r.check(os.WriteFile(cdiPath, bad, 0o644))
	d := r.waitCanon(eventBound)
	r.waitHealth(kubelet.Healthy, time.Now(), eventBound)
	return fmt.Sprintf("overwritten in place (%s, %d bytes); repaired in %s, devices Healthy", what, len(bad), ms(d))
}

// cdiReadOnly makes the CDI directory read-only for the daemon, then damages the file through
// a read-write bind mount of the same file system: the daemon cannot repair it.
func (r *liveRun) cdiReadOnly() string {
	r.check(bindMount(cdiDir, cdiRWView))
	r.check(remount(cdiDir, true))
	if err := writable(cdiDir); err != syscall.EROFS {
		r.fail("%s after the read-only remount: access(W_OK) = %v, want EROFS", cdiDir, err)
	}
	damaged := []byte("damaged while read-only\n")
	mark := len(r.daemon().Stderr.Lines())
	start := time.Now()
	r.check(os.WriteFile(filepath.Join(cdiRWView, kubelet.HyperlightCDIFile), damaged, 0o644))
	at := r.waitHealth(kubelet.Unhealthy, start, eventBound)
	line := r.waitLog(mark, "device unusable")
	if !strings.Contains(line, "Read-only file system") {
		r.fail("the daemon's reason does not name the read-only file system: %s", line)
	}
	if got, _ := os.ReadFile(cdiPath); !bytes.Equal(got, damaged) {
		r.fail("%s changed although its directory is read-only: %q", cdiPath, got)
	}
	return fmt.Sprintf("%s remounted read-only, file damaged through %s; every device Unhealthy after %s; log: %s",
		cdiDir, cdiRWView, ms(at.Sub(start)), reasonOf(line))
}

// waitLog waits for the first line after the first mark lines of the current daemon's log
// that contains what.
func (r *liveRun) waitLog(mark int, what string) string {
	var found string
	if !kubelet.Poll(eventBound, func() bool {
		lines := r.daemon().Stderr.Lines()
		for _, l := range lines[min(mark, len(lines)):] {
			if strings.Contains(l, what) {
				found = l
				return true
			}
		}
		return false
	}) {
		r.fail("no %q in the daemon log within %v", what, eventBound)
	}
	return found
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// reasonOf extracts reason=... from a logfmt line.
func reasonOf(line string) string {
	if i := strings.Index(line, "reason="); i >= 0 {
		return line[i:]
	}
	return line
}

// cdiWritable restores the directory: the daemon repairs the file and recovers.
func (r *liveRun) cdiWritable() string {
	start := time.Now()
	r.check(remount(cdiDir, false))
	r.check(syscall.Unmount(cdiRWView, 0))
	r.check(os.Remove(cdiRWView))
	d := r.waitCanon(periodicBound)
	at := r.waitHealth(kubelet.Healthy, start, periodicBound)
	return fmt.Sprintf("%s read-write again; file repaired after %s, every device Healthy after %s",
		cdiDir, ms(d), ms(at.Sub(start)))
}

func (r *liveRun) stopDaemon() string {
	d := r.daemon()
	socket := filepath.Join(r.kdir, r.k.Current(resource).Endpoint)
	code, err := d.Stop(stopBound)
	r.check(err)
	if code != 0 {
		r.fail("daemon exited %d after SIGTERM", code)
	}
	if exists(socket) {
		r.fail("the daemon left its socket %s", socket)
	}
	if _, err := os.Lstat(r.cdi); err != nil {
		r.fail("the CDI spec was removed at shutdown: %v", err)
	}
	return "SIGTERM: exit 0, socket removed, CDI spec kept"
}

// eaccesSetup: /dev/kvm 0600 root (devtmpfs's mode for it); the directories the daemon writes
// are given to uid 65534, so only the device denies it.
func (r *liveRun) eaccesSetup() string {
	r.check(os.Chown(kvmPath, 0, 0))
	r.check(os.Chmod(kvmPath, 0o600))
	r.check(chownAll(nobody, nobody, kubeletDir, r.k.SocketPath(), cdiDir))
	return fmt.Sprintf("%s 0600 root:root; %s, kubelet.sock and %s owned by %d", kvmPath, kubeletDir, cdiDir, nobody)
}

// eaccesFixed removes the fault while the daemon runs: the node's mode change is an inotify
// event on /dev.
func (r *liveRun) eaccesFixed() string {
	start := time.Now()
	r.check(os.Chmod(kvmPath, 0o666))
	at := r.waitHealth(kubelet.Healthy, start, eventBound)
	return fmt.Sprintf("chmod 0666 %s; every device Healthy after %s", kvmPath, ms(at.Sub(start)))
}

func (r *liveRun) eaccesRestore() string {
	r.check(os.Chmod(kvmPath, 0o600))
	r.check(chownAll(0, 0, kubeletDir, r.k.SocketPath(), cdiDir))
	if b, err := os.ReadFile(cdiPath); err != nil || !bytes.Equal(b, r.canon) {
		r.fail("%s after the unprivileged daemon: %v %q", cdiPath, err, b)
	}
	return fmt.Sprintf("%s 0600 again, directories owned by root again", kvmPath)
}

func (r *liveRun) kubeletRestart() string {
	before := r.k.Registrations(resource)
	old := r.k.Current(resource).Endpoint
	start := time.Now()
	r.check(r.k.Restart())
	p, err := r.k.WaitRegistered(resource, before+1, startBound)
	r.check(err)
	took := time.Since(start)
	if p.Endpoint == old {
		r.fail("re-registered with the old endpoint %s", old)
	}
	at := r.waitHealth(kubelet.Healthy, start, eventBound)
	return fmt.Sprintf("sockets deleted; re-registered as %s after %s, Healthy after %s",
		p.Endpoint, ms(took), ms(at.Sub(start)))
}

// untouched: the foreign files are exactly as written, nothing else appeared.
func (r *liveRun) untouched() string {
	want := []string{kubelet.HyperlightCDIFile}
	for _, f := range r.foreign {
		now, err := statFile(f.path)
		r.check(err)
		if d := f.diff(now); d != "" {
			r.fail("%s changed: %s", f.path, d)
		}
		want = append(want, filepath.Base(f.path))
	}
	names, err := dirNames(cdiDir)
	r.check(err)
	if strings.Join(names, " ") != strings.Join(sorted(want), " ") {
		r.fail("%s holds %v, want %v", cdiDir, names, sorted(want))
	}
	if b, err := os.ReadFile(cdiPath); err != nil || !bytes.Equal(b, r.canon) {
		r.fail("%s: %v %q", cdiPath, err, b)
	}
	return fmt.Sprintf("%s holds %v; foreign files identical (bytes, mode, owner, inode, mtime)", cdiDir, names)
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func (r *liveRun) sigterm() string {
	s := r.stopDaemon()
	r.k.Stop()
	if r.api != nil {
		r.api.Close()
	}
	return s
}
