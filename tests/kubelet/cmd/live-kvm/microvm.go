package main

// The micro-VM pod (tests/cluster/microvm) on what the daemon hands out: a workload with only
// CAP_NET_ADMIN, given the hypervisor, tun and vhost-net by the plugin's allocation, boots the
// tiny bare-metal guest with KVM on a tap it makes itself, virtio-net carried by vhost-net, and
// exchanges packets with it. Here every piece is the real one: the guest kernel's kvm-amd (nested
// SVM on QEMU's emulated EPYC), its tun and vhost_net modules (loaded by the companion steps),
// the daemon's Allocate answers and CDI specs. The real host cannot show this: its kernel has no
// CONFIG_VHOST_NET and its KVM is PVM.
//
// The container is built the way a runtime builds it from the CDI specs the Allocate answers
// name, by the `live-kvm microvm-exec` trampoline, started in a new network and mount namespace
// (clone flags): a tmpfs /dev in the pod's root (/microvm-pod, tests/cluster/microvm/build.sh
// --tiny) with null zero random urandom and exactly the specs' device nodes (type, the node's
// major:minor from the node's own device, fileMode, uid, gid), /proc, /sys, a tmpfs /tmp,
// lo up and net.ipv4.ping_group_range "0 2147483647" in the netns; then chroot, uid 0, gid 0,
// the specs' gid as the supplementary group (the nodes are 0660 65534:65534: the pod reaches them
// through the group, as the cluster's pod does), the capability bounding, permitted and effective
// sets CAP_NET_ADMIN only, no inheritable or ambient capability, no_new_privs, and exec of
// /microvm/run-in-pod.sh (MICROVM_GUEST=tiny MICROVM_ACCEL=kvm) through /bin/sh, which first
// prints what the pod got (its credentials from /proc/self/status and its /dev). Go's SysProcAttr
// alone cannot do it (the mounts must be made inside the new mount namespace, the bounding set
// and capset are per thread): a re-exec of the driver is the smallest runtime that can, with
// no extra program in the initramfs (capsh and its libraries). amd64 only (companion.go).

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sdp/kubelet"
)

const (
	microvmRoot = "/microvm-pod" // the pod's root (build-initramfs.sh)
	microvmKeep = "/keep"        // in the pod's root: run-in-pod.sh's MICROVM_KEEP (qemu.log, console.log)
	// MICROVM_TIMEOUT (run-in-pod.sh's bound for the guest's line) and the whole run's bound:
	// SeaBIOS, pvh.bin and the tiny guest run on nested SVM under TCG.
	microvmTimeout = 240
	microvmBound   = 300 * time.Second
	microvmMem     = "16" // MiB: tiny.elf is 10 KiB at 1 MiB with 68 KiB of .bss
	capNetAdmin    = unix.CAP_NET_ADMIN
)

// podDevNode is one device node of the pod's /dev, as the runtime makes it.
type podDevNode struct {
	path         string
	typ          string // "c" or "b"
	major, minor uint32
	mode         uint32
	uid, gid     uint32
	from         string // the CDI device it comes from
}

func (n podDevNode) arg() string {
	return fmt.Sprintf("%s:%s:%d:%d:%o:%d:%d", n.path, n.typ, n.major, n.minor, n.mode, n.uid, n.gid)
}

func (n podDevNode) String() string {
	return fmt.Sprintf("%s %s %d:%d %04o %d:%d", n.path, n.typ, n.major, n.minor, n.mode, n.uid, n.gid)
}

type microvmRun struct {
	*companionRun
	nodes  []podDevNode // every node of the allocated CDI devices
	env    []string     // their env edits
	groups []uint32     // the nodes' gids: the pod's supplementary groups
	names  []string     // the allocated CDI devices
}

func (c *companionRun) microvmSteps() {
	m := &microvmRun{companionRun: c}
	c.step("microvm-allocate", m.allocate)
	c.step("microvm-vhost-net", m.vhostNet)
	c.step("microvm-no-tun", m.noTun)
	c.step("microvm-no-vhost", m.noVhost)
}

// allocate: one device each of the hypervisor, tun and vhost-net from the daemon through the mock
// kubelet; the CDI devices the answers name, resolved in the daemon's spec files as a runtime
// resolves them; the node of each from the guest's real node.
func (m *microvmRun) allocate() string {
	if fi, err := os.Stat(filepath.Join(microvmRoot, "microvm/run-in-pod.sh")); err != nil || !fi.Mode().IsRegular() {
		m.fail("no micro-VM pod root in the initramfs (%s/microvm/run-in-pod.sh): %v", microvmRoot, err)
	}
	var out []string
	for _, res := range []string{resource, "hyperlight.dev/tun", "hyperlight.dev/vhost-net"} {
		p := m.k.Current(res)
		if p == nil {
			m.fail("%s has no current registration", res)
		}
		s, ok := p.Latest()
		if !ok || len(s.Devices) == 0 {
			m.fail("no device list of %s", res)
		}
		id := s.Devices[len(s.Devices)-1].ID
		a, err := m.k.Allocate(res, []string{id})
		if err != nil {
			m.fail("Allocate(%s %s): %v", res, id, err)
		}
		if len(a.Response.CdiDevices) != 1 {
			m.fail("Allocate(%s %s): cdi_devices %v, want one", res, id, a.Response.CdiDevices)
		}
		name := a.Response.CdiDevices[0].Name
		file, nodes, env := m.resolveCDI(name)
		m.names = append(m.names, name)
		m.nodes = append(m.nodes, nodes...)
		m.env = append(m.env, env...)
		var ns []string
		for _, n := range nodes {
			ns = append(ns, n.String())
		}
		out = append(out, fmt.Sprintf("%s %s -> %s (%s: %s)", res, id, name, filepath.Base(file), strings.Join(ns, ", ")))
	}
	seen := map[uint32]bool{}
	for _, n := range m.nodes {
		if n.gid != 0 && !seen[n.gid] {
			seen[n.gid] = true
			m.groups = append(m.groups, n.gid)
		}
	}
	sort.Slice(m.groups, func(i, j int) bool { return m.groups[i] < m.groups[j] })
	return fmt.Sprintf("%s; the pod's supplementary groups %v, env %q", strings.Join(out, "; "), m.groups, m.env)
}

// resolveCDI finds the CDI device name (vendor/class=device) in the spec files of the CDI
// directory, exactly once, and returns its file, its device nodes as the runtime makes them and
// its env. Spec-wide edits apply too. Mounts and hooks this runtime cannot apply fail the step
// (the daemon's specs have none).
func (m *microvmRun) resolveCDI(name string) (string, []podDevNode, []string) {
	kind, dev, ok := strings.Cut(name, "=")
	if !ok {
		m.fail("CDI device %q is not kind=name", name)
	}
	names, err := dirNames(cdiDir)
	m.check(err)
	var file string
	var edits []kubelet.CDIEdits
	for _, n := range names {
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		path := filepath.Join(cdiDir, n)
		b, err := os.ReadFile(path)
		m.check(err)
		spec, err := kubelet.ParseCDI(b)
		if err != nil {
			m.fail("%s: %v", path, err)
		}
		if spec.Kind != kind {
			continue
		}
		for _, d := range spec.Devices {
			if d.Name != dev {
				continue
			}
			if file != "" {
				m.fail("CDI device %s in both %s and %s", name, file, path)
			}
			file = path
			edits = []kubelet.CDIEdits{d.ContainerEdits}
			if spec.ContainerEdits != nil {
				edits = append(edits, *spec.ContainerEdits)
			}
		}
	}
	if file == "" {
		m.fail("CDI device %s in no spec of %s (%v)", name, cdiDir, names)
	}
	var nodes []podDevNode
	var env []string
	for _, e := range edits {
		if e.Mounts != nil || e.Hooks != nil {
			m.fail("%s: %s has mounts or hooks: %+v", file, name, e)
		}
		env = append(env, e.Env...)
		for _, d := range e.DeviceNodes {
			nodes = append(nodes, m.runtimeNode(file, name, d))
		}
	}
	if len(nodes) == 0 {
		m.fail("%s: %s has no device node", file, name)
	}
	return file, nodes, env
}

// runtimeNode: the node a runtime makes for a spec's deviceNode: the host node (hostPath, else
// path) gives the type and number the spec leaves out, the spec's fileMode, uid and gid (else
// the host node's mode, root).
func (m *microvmRun) runtimeNode(file, name string, d kubelet.CDIDeviceNode) podDevNode {
	host := d.HostPath
	if host == "" {
		host = d.Path
	}
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		m.fail("%s: %s's node %s: %v", file, name, host, err)
	}
	n := podDevNode{path: d.Path, major: unix.Major(st.Rdev), minor: unix.Minor(st.Rdev), mode: st.Mode & 0o777, from: name}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		n.typ = "c"
	case unix.S_IFBLK:
		n.typ = "b"
	default:
		m.fail("%s: %s's node %s is not a device (mode %o)", file, name, host, st.Mode)
	}
	if d.Type != "" && d.Type != n.typ {
		m.fail("%s: %s's node %s is type %s, the node's is %s", file, name, d.Path, d.Type, n.typ)
	}
	if d.Major != nil {
		n.major = uint32(*d.Major)
	}
	if d.Minor != nil {
		n.minor = uint32(*d.Minor)
	}
	if d.FileMode != nil {
		n.mode = *d.FileMode & 0o777
	}
	if d.UID != nil {
		n.uid = *d.UID
	}
	if d.GID != nil {
		n.gid = *d.GID
	}
	return n
}

// vhostNet: the pod with every node of the three devices boots the tiny guest on KVM, vhost=on.
// The kernel says the rest: a KVM_CREATE_VM by the pod's QEMU (its uevent) and vhost_net's worker
// thread for that QEMU (vhost-<pid>), which ran while the packets went through.
func (m *microvmRun) vhostNet() string {
	res := m.runPod(m.nodes)
	ok := res.requireOK(m, "on", "/dev/vhost-net: opens")
	kvm := m.qemuVM(res)
	if res.vhostPid == 0 {
		m.fail("no vhost-%d worker thread of vhost_net seen while QEMU ran (vhost=on)", res.qemuPid)
	}
	if res.vhostSwitches == 0 {
		m.fail("vhost_net's worker vhost-%d never ran (0 context switches)", res.qemuPid)
	}
	// QEMU says when it cannot start vhost ("falling back on userspace virtio"): its log, kept
	// by run-in-pod.sh (MICROVM_KEEP), has no word of it.
	b, err := os.ReadFile(filepath.Join(microvmRoot, microvmKeep, "qemu.log"))
	m.check(err)
	if bytes.Contains(b, []byte("vhost")) {
		m.fail("QEMU's log names vhost: %s", bytes.TrimSpace(b))
	}
	return fmt.Sprintf("%q; %s; %s; vhost_net's worker vhost-%d (pid %d) ran: %d context switches, %d ms of CPU; %s; %s; %s",
		ok, res.tiny, kvm, res.qemuPid, res.vhostPid, res.vhostSwitches, res.vhostCPU, res.creds(), res.summary(), m.stillHealthy())
}

// noTun: the same pod without the tun device's node: run-in-pod.sh refuses before QEMU starts.
func (m *microvmRun) noTun() string {
	var nodes []podDevNode
	for _, n := range m.nodes {
		if n.path != "/dev/net/tun" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == len(m.nodes) {
		m.fail("no /dev/net/tun among the allocated nodes")
	}
	res := m.runPod(nodes)
	const want = "microvm: FAIL /dev/net/tun: no such character device ("
	last := res.last()
	if res.code != 1 || !strings.HasPrefix(last, want) || res.qemuPid != 0 {
		m.fail("without /dev/net/tun: exit %d, last line %q, QEMU pid %d; want exit 1, %q..., no QEMU:\n%s", res.code, last, res.qemuPid, want, res.out)
	}
	return fmt.Sprintf("exit 1, %q; the pod's /dev: %s; %s", last, devPaths(res.dev), res.took())
}

// noVhost: without vhost-net's node: the guest still runs and exchanges packets, virtio-net in
// QEMU's own userspace (vhost=off), and vhost_net has no worker for it.
func (m *microvmRun) noVhost() string {
	var nodes []podDevNode
	for _, n := range m.nodes {
		if n.path != "/dev/vhost-net" {
			nodes = append(nodes, n)
		}
	}
	res := m.runPod(nodes)
	ok := res.requireOK(m, "off", "/dev/vhost-net: absent")
	kvm := m.qemuVM(res)
	if res.vhostPid != 0 {
		m.fail("a vhost-%d worker (pid %d) without /dev/vhost-net", res.qemuPid, res.vhostPid)
	}
	return fmt.Sprintf("%q; %s; no vhost worker for it; %s", ok, kvm, res.summary())
}

// qemuVM: the kernel's KVM uevent for the pod's QEMU.
func (m *microvmRun) qemuVM(res *podResult) string {
	if res.qemuPid == 0 {
		m.fail("QEMU's process was not seen while the pod ran")
	}
	var e kvmEvent
	if !kubelet.Poll(eventBound, func() bool {
		var ok bool
		e, ok = m.kvmEv.find(res.start, func(e kvmEvent) bool { return e.event == "create" && e.pid == res.qemuPid })
		return ok
	}) {
		list, err := m.kvmEv.events()
		m.fail("no KVM uevent EVENT=create PID=%d (the pod's QEMU) (KVM events %v, reader error %v)", res.qemuPid, list, err)
	}
	return fmt.Sprintf("kernel uevent %v (the pod's QEMU)", e)
}

// stillHealthy: the daemon's resources stay Healthy while a workload uses the devices.
func (m *microvmRun) stillHealthy() string {
	m.nowHealth(resource, companionHVCount, kubelet.Healthy)
	var names []string
	for _, lc := range m.cs {
		m.nowHealth(lc.res, lc.count, kubelet.Healthy)
		names = append(names, lc.Name)
	}
	return "the hypervisor and " + strings.Join(names, ", ") + " still Healthy"
}

// podResult is one run of the pod.
type podResult struct {
	start, end    time.Time
	code          int
	out           string // stdout and stderr, in order
	status        string // the pod's "pod: uid=..." line
	dev           string // the pod's "pod: /dev: ..." line, after the prefix
	tiny          string // the tiny guest's CPUID line
	qemuPid       int    // QEMU as the driver saw it in /proc
	qemuHWM       int    // its VmHWM, KiB (the last sample)
	vhostPid      int    // the vhost-<qemuPid> kernel thread
	vhostSwitches int    // its context switches (the last sample)
	vhostCPU      int    // its utime+stime, ms (the last sample)
}

func (p *podResult) lines() []string { return strings.Split(strings.TrimSpace(p.out), "\n") }

func (p *podResult) last() string {
	l := p.lines()
	return l[len(l)-1]
}

func (p *podResult) took() string { return "the pod ran " + ms(p.end.Sub(p.start)) }

// creds: what checkPod found.
func (p *podResult) creds() string {
	return "the pod: uid 0, gid 0, groups " + strings.Fields(strings.TrimPrefix(p.status, "pod: uid=0 gid=0 groups="))[0] +
		", CapBnd = CapPrm = CapEff = CAP_NET_ADMIN, CapInh = CapAmb = 0, NoNewPrivs 1, own netns"
}

// devPaths: the paths of the pod's "/dev: PATH TYPE ...;" line.
func devPaths(dev string) string {
	var ps []string
	for _, e := range strings.Split(dev, ";") {
		if f := strings.Fields(e); len(f) > 0 {
			ps = append(ps, f[0])
		}
	}
	return strings.Join(ps, " ")
}

func (p *podResult) summary() string {
	return fmt.Sprintf("QEMU pid %d, VmHWM %d MiB; %s", p.qemuPid, (p.qemuHWM+512)/1024, p.took())
}

var microvmOKRe = regexp.MustCompile(`^microvm: ok accel=kvm vhost=(on|off) guest-ping=ok pod-ping=ok boot=[0-9]+s total=[0-9]+s guest=tiny$`)

// requireOK: exit 0 and the ok line with vhost, the guest's KVM CPUID line, QEMU's vhost choice
// and why.
func (p *podResult) requireOK(m *microvmRun, vhost, why string) string {
	last := p.last()
	mm := microvmOKRe.FindStringSubmatch(last)
	if p.code != 0 || mm == nil || mm[1] != vhost {
		m.fail("exit %d, last line %q; want exit 0 and microvm: ok accel=kvm vhost=%s ... guest=tiny:\n%s", p.code, last, vhost, p.out)
	}
	head := fmt.Sprintf("microvm: guest=tiny accel=kvm cpu=host vhost=%s (%s) mem=%sM", vhost, why, microvmMem)
	if !strings.Contains(p.out, head+"\n") {
		m.fail("no line %q:\n%s", head, p.out)
	}
	if !strings.HasSuffix(p.tiny, "cpuid hypervisor KVMKVMKVM") {
		m.fail("the tiny guest's line %q does not say cpuid hypervisor KVMKVMKVM:\n%s", p.tiny, p.out)
	}
	return last
}

// runPod runs the pod with nodes in its /dev and checks what it says it got: uid 0, gid 0, the
// groups, CAP_NET_ADMIN only, no_new_privs, ping_group_range, and exactly the nodes in /dev.
func (m *microvmRun) runPod(nodes []podDevNode) *podResult {
	keep := filepath.Join(microvmRoot, microvmKeep)
	m.check(os.RemoveAll(keep))
	m.check(os.Mkdir(keep, 0o755))
	self, err := os.Executable()
	m.check(err)
	var gs []string
	for _, g := range m.groups {
		gs = append(gs, fmt.Sprint(g))
	}
	args := []string{"microvm-exec", microvmRoot, strings.Join(gs, ",")}
	for _, n := range nodes {
		args = append(args, n.arg())
	}
	args = append(args, "--", "/bin/sh", "-c", podScript)
	cmd := exec.Command(self, args...)
	cmd.Env = append([]string{"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/", "MICROVM_GUEST=tiny", "MICROVM_ACCEL=kvm",
		"MICROVM_MEM=" + microvmMem, fmt.Sprintf("MICROVM_TIMEOUT=%d", microvmTimeout), "MICROVM_KEEP=" + microvmKeep}, m.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS | unix.CLONE_NEWNET, Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	res := &podResult{start: time.Now()}
	m.check(cmd.Start())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		watchQEMU(res, stop)
	}()
	timer := time.AfterFunc(microvmBound, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	res.end = time.Now()
	timedOut := !timer.Stop()
	close(stop)
	wg.Wait()
	res.out = out.String()
	if timedOut {
		m.fail("the pod did not end within %v:\n%s", microvmBound, res.out)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		m.fail("the pod: %v:\n%s", err, res.out)
	}
	for _, l := range res.lines() {
		switch {
		case strings.HasPrefix(l, "pod: uid="):
			res.status = l
		case strings.HasPrefix(l, "pod: /dev: "):
			res.dev = strings.TrimPrefix(l, "pod: /dev: ")
		case strings.HasPrefix(l, "microvm: guest: tiny: "):
			res.tiny = strings.TrimPrefix(l, "microvm: guest: ")
		}
	}
	m.checkPod(res, nodes)
	return res
}

// podScript: what the pod's shell prints about itself before run-in-pod.sh.
const podScript = `echo "pod: uid=$(id -u) gid=$(id -g) groups=$(id -G | tr ' ' ,) $(grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status | tr -d '\t' | tr '\n' ' ')ping_group_range=$(tr '\t' ' ' </proc/sys/net/ipv4/ping_group_range) lo=$(cat /sys/class/net/lo/operstate) links=$(ls /sys/class/net | tr '\n' ' ')"
echo "pod: /dev: $(stat -c '%n %F %t:%T %a %u:%g' $(find /dev -type c | sort) | tr '\n' ';')"
exec /bin/sh /microvm/run-in-pod.sh`

// checkPod: the pod's own account of its credentials and /dev.
func (m *microvmRun) checkPod(res *podResult, nodes []podDevNode) {
	groups := "0"
	for _, g := range m.groups {
		groups += fmt.Sprintf(",%d", g)
	}
	netAdmin := fmt.Sprintf("%016x", uint64(1)<<capNetAdmin)
	want := fmt.Sprintf("pod: uid=0 gid=0 groups=%s CapInh:%016x CapPrm:%s CapEff:%s CapBnd:%s CapAmb:%016x NoNewPrivs:1 ping_group_range=0 2147483647 lo=unknown links=lo ",
		groups, 0, netAdmin, netAdmin, netAdmin, 0)
	if res.status != want {
		m.fail("the pod says %q, want %q:\n%s", res.status, want, res.out)
	}
	all := append([]podDevNode{
		{path: "/dev/null", typ: "c", major: 1, minor: 3, mode: 0o666}, {path: "/dev/random", typ: "c", major: 1, minor: 8, mode: 0o666},
		{path: "/dev/urandom", typ: "c", major: 1, minor: 9, mode: 0o666}, {path: "/dev/zero", typ: "c", major: 1, minor: 5, mode: 0o666},
	}, nodes...)
	sort.Slice(all, func(i, j int) bool { return all[i].path < all[j].path })
	var dev []string
	for _, n := range all {
		dev = append(dev, fmt.Sprintf("%s character special file %x:%x %o %d:%d", n.path, n.major, n.minor, n.mode, n.uid, n.gid))
	}
	if w := strings.Join(dev, ";") + ";"; res.dev != w {
		m.fail("the pod's /dev is %q, want %q:\n%s", res.dev, w, res.out)
	}
}

// watchQEMU samples /proc until stop: the pod's QEMU (comm qemu-system-x86), its VmHWM, and
// vhost_net's worker thread for it (comm vhost-<QEMU's pid>: the kernel's thread, made at
// VHOST_SET_OWNER, which moves the packets between the tap and the guest's rings).
func watchQEMU(res *podResult, stop <-chan struct{}) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		sampleQEMU(res)
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

func sampleQEMU(res *podResult) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			continue
		}
		comm := strings.TrimSpace(string(b))
		switch {
		case comm == "qemu-system-x86" && (res.qemuPid == 0 || res.qemuPid == pid):
			res.qemuPid = pid
			if kb := statusField(pid, "VmHWM:"); kb > 0 {
				res.qemuHWM = kb
			}
		case res.qemuPid != 0 && comm == fmt.Sprintf("vhost-%d", res.qemuPid):
			res.vhostPid = pid
			res.vhostSwitches = statusField(pid, "voluntary_ctxt_switches:") + statusField(pid, "nonvoluntary_ctxt_switches:")
			if cpu := taskCPU(pid); cpu > 0 {
				res.vhostCPU = cpu
			}
		}
	}
}

// statusField: the number after name in /proc/PID/status (0 if absent).
func statusField(pid int, name string) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name); ok && len(strings.Fields(v)) > 0 {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return 0
}

// taskCPU: utime+stime of /proc/PID/stat in ms (USER_HZ 100).
func taskCPU(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return (u + k) * 10
}

// ---------------------------------------------------------------- the trampoline

// microvmExec is `live-kvm microvm-exec ROOT GIDS NODE... -- PROGRAM [ARG...]`, started by
// runPod in a new network and mount namespace: it builds the pod in ROOT (nodes
// PATH:TYPE:MAJOR:MINOR:MODE(octal):UID:GID), enters it with GIDS (comma-separated) as the
// supplementary groups and CAP_NET_ADMIN only, and executes PROGRAM.
func microvmExec(args []string) int {
	sep := -1
	for i, a := range args {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 2 || sep == len(args)-1 {
		fmt.Fprintln(os.Stderr, "usage: live-kvm microvm-exec ROOT GIDS NODE... -- PROGRAM [ARG...]")
		return 2
	}
	// The bounding set, capset and no_new_privs are per thread: this thread execs.
	runtime.LockOSThread()
	root, prog := args[0], args[sep+1:]
	var groups []int
	for _, g := range strings.Split(args[1], ",") {
		if g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil {
			fmt.Fprintln(os.Stderr, "live-kvm microvm-exec: GIDS:", err)
			return 2
		}
		groups = append(groups, n)
	}
	for _, f := range []func() error{
		func() error { return podRootfs(root, args[2:sep]) },
		func() error { return podNetwork(root) },
		func() error { return enterPod(root, groups) },
	} {
		if err := f(); err != nil {
			fmt.Fprintln(os.Stderr, "live-kvm microvm-exec:", err)
			return 1
		}
	}
	err := syscall.Exec(prog[0], prog, os.Environ())
	fmt.Fprintf(os.Stderr, "live-kvm microvm-exec: exec %s: %v\n", prog[0], err)
	return 1
}

// podRootfs: in the new mount namespace (propagation private), a tmpfs /dev in root with the
// runtime's default nodes and the given ones, /proc, /sys (read-only), a tmpfs /tmp.
func podRootfs(root string, nodes []string) error {
	if err := mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return err
	}
	if err := mount("tmpfs", root+"/dev", "tmpfs", unix.MS_NOSUID, "mode=0755,size=64k"); err != nil {
		return err
	}
	unix.Umask(0)
	all := []string{"/dev/null:c:1:3:666:0:0", "/dev/zero:c:1:5:666:0:0", "/dev/random:c:1:8:666:0:0", "/dev/urandom:c:1:9:666:0:0"}
	for _, spec := range append(all, nodes...) {
		f := strings.Split(spec, ":")
		if len(f) != 7 {
			return fmt.Errorf("node %q is not PATH:TYPE:MAJOR:MINOR:MODE:UID:GID", spec)
		}
		var v [5]uint64
		for i := range v {
			base := 10
			if i == 2 {
				base = 8
			}
			n, err := strconv.ParseUint(f[i+2], base, 32)
			if err != nil {
				return fmt.Errorf("node %q: %v", spec, err)
			}
			v[i] = n
		}
		typ := uint32(unix.S_IFCHR)
		if f[1] == "b" {
			typ = unix.S_IFBLK
		} else if f[1] != "c" {
			return fmt.Errorf("node %q: type %q", spec, f[1])
		}
		p := filepath.Join(root, f[0])
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := unix.Mknod(p, typ|uint32(v[2]), int(unix.Mkdev(uint32(v[0]), uint32(v[1])))); err != nil {
			return fmt.Errorf("mknod %s: %v", p, err)
		}
		if err := os.Lchown(p, int(v[3]), int(v[4])); err != nil {
			return err
		}
	}
	for _, mt := range []struct {
		src, dst, fstype string
		flags            uintptr
		data             string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY, ""},
		{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777"},
	} {
		if err := mount(mt.src, root+mt.dst, mt.fstype, mt.flags, mt.data); err != nil {
			return err
		}
	}
	return nil
}

// podNetwork: in the new network namespace, lo up and ping_group_range covering every group
// (containerd's enable_unprivileged_icmp), written through the pod's /proc.
func podNetwork(root string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %v", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %v", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo up: %v", err)
	}
	return os.WriteFile(root+"/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647\n"), 0)
}

// enterPod: chroot, uid 0 and gid 0 with groups as the supplementary groups, the bounding set
// CAP_NET_ADMIN only, permitted and effective CAP_NET_ADMIN only, no inheritable or ambient
// capability, no_new_privs. After the exec (uid 0, no file capabilities) the kernel gives the
// program the bounding set: CAP_NET_ADMIN.
func enterPod(root string, groups []int) error {
	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %v", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups %v: %v", groups, err)
	}
	if err := syscall.Setgid(0); err != nil {
		return fmt.Errorf("setgid: %v", err)
	}
	if err := syscall.Setuid(0); err != nil {
		return fmt.Errorf("setuid: %v", err)
	}
	return limitCaps(1 << capNetAdmin)
}
