package main

// The companions (COMPANIONS=tun,vhost-net,vhost-vsock; hyperlight/companion.h) on the guest
// kernel's own drivers. Debian's 6.1 builds tun, vhost_net and vhost_vsock as modules
// (CONFIG_TUN=m, CONFIG_VHOST_NET=m, CONFIG_VHOST_VSOCK=m): tests/live/build-initramfs.sh puts
// them and their dependencies in /lib/modules and their load order in /lib/modules/companions;
// init does not load them. These steps do, start the daemon with every companion on the
// bare-node layout, and then take each driver away with rmmod and bring it back with insmod:
// the kernel (devtmpfs) removes and makes the node, and the daemon's probes run against the real
// drivers (TUNGETFEATURES, VHOST_GET_FEATURES), whose answers the driver compares with its own.
// amd64 only (the arm64 initramfs has no modules).

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"sdp/kubelet"
)

const (
	companionOrder   = modulesDir + "/companions" // the companions' modules in load order
	companionHVCount = 3                          // DEVICE_COUNT of the companion daemon
	// The ioctls the probes make (<linux/if_tun.h>, <linux/vhost.h>).
	tunGetFeatures   = 0x800454cf // _IOR('T', 207, unsigned int)
	vhostGetFeatures = 0x8008af00 // _IOR(VHOST_VIRTIO, 0x00, __u64)
	iffTAP           = 0x0002
)

// liveCompanion is one companion as these steps serve it.
type liveCompanion struct {
	kubelet.Companion
	module string // the kernel module that makes its node (/proc/modules' name)
	count  int    // <X>_COUNT
	res    string // hyperlight.dev/<name>
	allocs int
	mode   uint32 // the node's permission bits as devtmpfs made it
	uid    uint32
	gid    uint32
	probe  string // the driver's own answer of the probe's ioctl: "features 0x..."
}

func newLiveCompanions() []*liveCompanion {
	modules := map[string]string{"tun": "tun", "vhost-net": "vhost_net", "vhost-vsock": "vhost_vsock"}
	counts := map[string]int{"tun": 2, "vhost-net": 3, "vhost-vsock": 4}
	var cs []*liveCompanion
	for _, c := range kubelet.Companions {
		cs = append(cs, &liveCompanion{Companion: c, module: modules[c.Name], count: counts[c.Name],
			res: "hyperlight.dev/" + c.Name})
	}
	return cs
}

// companionFault: what one step takes away (rmmod, in order) and gives back (insmod, in
// order), and the companions it makes Unhealthy (tun: vhost_net depends on tun and goes first).
type companionFault struct {
	takes, gives []string
	affected     []*liveCompanion
}

type companionRun struct {
	*liveRun
	cs      []*liveCompanion
	modules []string // the files of /lib/modules/companions, in load order
	mark    int      // the daemon's log lines before the step's action
	t0      time.Time
	rmStart time.Time
	rmDone  time.Time
	handDir bool // the step made /dev/net by hand
	times   []string
}

func (r *liveRun) companionSteps() {
	c := &companionRun{liveRun: r, cs: newLiveCompanions()}
	r.step("companion-modules", c.loadAll)
	r.step("companion-start", c.start)
	r.step("registered", r.registered)
	r.step("companions-healthy", c.allHealthy)
	for _, lc := range c.cs {
		lc := lc
		r.step(lc.Name+"-served", func() string { return c.served(lc) })
	}
	byName := map[string]*liveCompanion{}
	for _, lc := range c.cs {
		byName[lc.Name] = lc
	}
	vsock, vnet, tun := byName["vhost-vsock"], byName["vhost-net"], byName["tun"]
	for _, f := range []companionFault{
		{[]string{"vhost_vsock"}, []string{"vhost-vsock"}, []*liveCompanion{vsock}},
		{[]string{"vhost_net"}, []string{"vhost-net"}, []*liveCompanion{vnet}},
		{[]string{"vhost_net", "tun"}, []string{"tun", "vhost-net"}, []*liveCompanion{tun, vnet}},
	} {
		f := f
		lc := f.affected[0]
		r.step("rmmod-"+f.takes[len(f.takes)-1], func() string { return c.unload(f) })
		r.step("allocate-"+lc.Name+"-gone", func() string { return c.allocateUnavailable(lc, lc.Path+" missing") })
		r.step("mknod-"+lc.Name, func() string { return c.handNode(lc) })
		r.step("allocate-"+lc.Name+"-enodev", func() string { return c.allocateUnavailable(lc, noDriver(lc, "ENODEV")) })
		r.step("insmod-"+f.gives[0], func() string { return c.reload(f) })
		r.step("allocate-"+lc.Name, func() string {
			var s []string
			for _, a := range f.affected {
				s = append(s, c.allocateOK(a))
			}
			return strings.Join(s, "; ")
		})
	}
	r.step("companion-log", c.logChecked)
	// A micro-VM pod on the devices the daemon allocates: KVM, tun, vhost-net (microvm.go).
	c.microvmSteps()
	r.step("companion-stop", c.stop)
}

// noDriver is the daemon's reason for a node whose driver is absent (hyperlight/probe.c).
func noDriver(lc *liveCompanion, errno string) string {
	return fmt.Sprintf("%s opening %s (no driver: module %s not loaded?)", errno, lc.Path, lc.module)
}

// loadAll: no companion's module is loaded and no node is there (none is built in, nothing
// loaded them), then insmod each in the initramfs's order: the kernel makes each node.
func (c *companionRun) loadAll() string {
	b, err := os.ReadFile(companionOrder)
	c.check(err)
	c.modules = strings.Fields(string(b))
	if len(c.modules) == 0 {
		c.fail("%s lists no module", companionOrder)
	}
	for _, lc := range c.cs {
		if moduleLoaded(lc.module) || exists(lc.Path) {
			c.fail("%s already loaded (or built in) or %s there before any insmod", lc.module, lc.Path)
		}
	}
	start := time.Now()
	for _, m := range c.modules {
		c.check(command("insmod", filepath.Join(modulesDir, m+".ko")))
	}
	took := time.Since(start)
	var nodes []string
	for _, lc := range c.cs {
		if !moduleLoaded(lc.module) {
			c.fail("%s not loaded after insmod", lc.module)
		}
		st := c.nodeBack(lc)
		lc.mode, lc.uid, lc.gid = st.Mode&0o7777, st.Uid, st.Gid
		lc.probe = c.ownProbe(lc)
		nodes = append(nodes, fmt.Sprintf("%s %d:%d %04o %d:%d (%s)", lc.Path, lc.Major, lc.Minor, lc.mode, lc.uid, lc.gid, lc.probe))
	}
	return fmt.Sprintf("insmod %s in %s; the kernel made %s", strings.Join(c.modules, " "), ms(took), strings.Join(nodes, ", "))
}

// nodeBack waits (bounded) for lc's node as the kernel makes it: a character device with the
// kernel's number.
func (c *companionRun) nodeBack(lc *liveCompanion) unix.Stat_t {
	var st unix.Stat_t
	var err error
	if !kubelet.Poll(eventBound, func() bool {
		err = unix.Lstat(lc.Path, &st)
		return err == nil
	}) {
		c.fail("%s not made by the kernel within %v: %v", lc.Path, eventBound, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != lc.Major || unix.Minor(st.Rdev) != lc.Minor {
		c.fail("%s is mode %o %d:%d, want a character device %d:%d", lc.Path, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), lc.Major, lc.Minor)
	}
	return st
}

// ownProbe: the driver's own open and ioctl of the probe, on the kernel's node: the ground
// truth of the daemon's probe line.
func (c *companionRun) ownProbe(lc *liveCompanion) string {
	fd, err := unix.Open(lc.Path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		c.fail("open %s: %v", lc.Path, err)
	}
	defer unix.Close(fd)
	if lc.Name == "tun" {
		var f uint32
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), tunGetFeatures, uintptr(unsafe.Pointer(&f))); e != 0 {
			c.fail("TUNGETFEATURES on %s: %v", lc.Path, e)
		}
		if f&iffTAP == 0 {
			c.fail("the kernel's tun features 0x%x lack IFF_TAP", f)
		}
		return fmt.Sprintf("features 0x%x", f)
	}
	var f uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), vhostGetFeatures, uintptr(unsafe.Pointer(&f))); e != 0 {
		c.fail("VHOST_GET_FEATURES on %s: %v", lc.Path, e)
	}
	return fmt.Sprintf("features 0x%x", f)
}

func companionEnv(cs []*liveCompanion) []string {
	env := append(daemonEnv(), fmt.Sprintf("DEVICE_COUNT=%d", companionHVCount), "COMPANIONS=tun,vhost-net,vhost-vsock")
	for _, lc := range cs {
		env = append(env, fmt.Sprintf("%s_COUNT=%d", strings.ToUpper(strings.ReplaceAll(lc.Name, "-", "_")), lc.count))
	}
	return env
}

func (c *companionRun) start() string {
	env := companionEnv(c.cs)
	c.t0 = time.Now()
	s := c.startDaemonEnv(0, env)
	return s + "; " + strings.Join(env[2:], " ")
}

// waitHealthOf waits until res's newest snapshot has n devices with health h and returns the
// arrival time of the first such snapshot at or after since.
func (c *companionRun) waitHealthOf(res string, n int, h string, since time.Time, bound time.Duration) time.Time {
	pred := kubelet.CountHealth(n, h)
	if _, err := c.k.WaitDevices(res, pred, bound); err != nil {
		c.fail("%v (daemon %s)", err, c.daemon().ExitDescription())
	}
	for _, s := range c.k.Current(res).Snapshots() {
		if !s.Time.Before(since) && pred(s.Devices) {
			return s.Time
		}
	}
	return time.Now()
}

// nowHealth requires res's newest snapshot to have n devices, all with health h.
func (c *companionRun) nowHealth(res string, n int, h string) {
	p := c.k.Current(res)
	if p == nil {
		c.fail("%s has no current registration", res)
	}
	s, ok := p.Latest()
	if !ok || !kubelet.CountHealth(n, h)(s.Devices) {
		c.fail("%s: want %d devices %s, have %s", res, n, h, kubelet.DescribeDevices(s.Devices))
	}
}

// allHealthy: every companion registered on an endpoint of its own, and every resource's
// devices Healthy.
func (c *companionRun) allHealthy() string {
	eps := map[string]string{c.k.Current(resource).Endpoint: resource}
	var out []string
	for _, lc := range c.cs {
		p, err := c.k.WaitRegistered(lc.res, 1, startBound)
		if err != nil {
			c.fail("%v (daemon %s)", err, c.daemon().ExitDescription())
		}
		if other, ok := eps[p.Endpoint]; ok {
			c.fail("%s registered %s's endpoint %s", lc.res, other, p.Endpoint)
		}
		eps[p.Endpoint] = lc.res
		at := c.waitHealthOf(lc.res, lc.count, kubelet.Healthy, c.t0, startBound)
		out = append(out, fmt.Sprintf("%s %d Healthy at %s (%s)", lc.res, lc.count, ms(at.Sub(c.t0)), p.Endpoint))
	}
	at := c.waitHealthOf(resource, companionHVCount, kubelet.Healthy, c.t0, startBound)
	out = append(out, fmt.Sprintf("%s %d Healthy at %s", resource, companionHVCount, ms(at.Sub(c.t0))))
	return strings.Join(out, "; ") + " (since the start)"
}

// logLine waits for the first line after mark of the current daemon's log that holds every
// one of want.
func (c *companionRun) logLine(mark int, bound time.Duration, want ...string) string {
	var found string
	if !kubelet.Poll(bound, func() bool {
		lines := c.daemon().Stderr.Lines()
		for _, l := range lines[min(mark, len(lines)):] {
			all := true
			for _, w := range want {
				if !strings.Contains(l, w) {
					all = false
					break
				}
			}
			if all {
				found = l
				return true
			}
		}
		return false
	}) {
		c.fail("no log line with %q within %v", want, bound)
	}
	return found
}

func resField(res string) string { return "resource=" + res + " " }

var probeRe = regexp.MustCompile(`probe="([^"]*)"`)
var tunProbeRe = regexp.MustCompile(`^tun features (0x[0-9a-f]+) \(([^)]*)\)$`)
var vhostProbeRe = regexp.MustCompile(`^vhost-(net|vsock) (features 0x[0-9a-f]+)$`)

// served: lc's "device usable" line at info carries the probe's result, which is what the
// kernel answers the driver; its device IDs; its CDI spec; Allocate.
func (c *companionRun) served(lc *liveCompanion) string {
	line := c.logLine(0, eventBound, `msg="device usable"`, resField(lc.res))
	m := probeRe.FindStringSubmatch(line)
	if !strings.Contains(line, "level=info") || !strings.Contains(line, "device="+lc.Path) || m == nil {
		c.fail("the \"device usable\" line of %s lacks level=info, device=%s or probe=: %s", lc.res, lc.Path, line)
	}
	probe := m[1]
	c.checkProbe(lc, probe)
	p := c.k.Current(lc.res)
	s, _ := p.Latest()
	var ids []string
	for i, d := range s.Devices {
		if want := fmt.Sprintf("%s-%d", lc.Name, i); d.ID != want {
			c.fail("%s: device %d is %s, want %s", lc.res, i, d.ID, want)
		}
		ids = append(ids, d.ID)
	}
	spec := c.companionSpec(lc)
	return fmt.Sprintf("probe=%q (the kernel's: %s); IDs %s; %s; %s", probe, lc.probe, strings.Join(ids, " "), spec, c.allocateOK(lc))
}

// checkProbe: the daemon's probe text is the kernel's answer to the driver's own ioctl.
func (c *companionRun) checkProbe(lc *liveCompanion, probe string) {
	if lc.Name == "tun" {
		m := tunProbeRe.FindStringSubmatch(probe)
		if m == nil || "features "+m[1] != lc.probe {
			c.fail("tun's probe %q is not the kernel's %s", probe, lc.probe)
		}
		tap := false
		for _, f := range strings.Split(m[2], ", ") {
			tap = tap || f == "tap"
		}
		if !tap {
			c.fail("tun's probe %q does not name tap", probe)
		}
		return
	}
	m := vhostProbeRe.FindStringSubmatch(probe)
	if m == nil || "vhost-"+m[1] != lc.Name || m[2] != lc.probe {
		c.fail("%s's probe %q is not the kernel's %s", lc.Name, probe, lc.probe)
	}
}

// companionSpec checks /var/run/cdi/hyperlight-<name>.json: kind hyperlight.dev/<name>, one
// device <name>, its node with the workload's owner and mode, and nothing else.
func (c *companionRun) companionSpec(lc *liveCompanion) string {
	path := filepath.Join(cdiDir, "hyperlight-"+lc.Name+".json")
	fi, err := os.Lstat(path)
	c.check(err)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		c.fail("%s mode %v, want a regular file 0644", path, fi.Mode())
	}
	b, err := os.ReadFile(path)
	c.check(err)
	spec, err := kubelet.ParseCDI(b)
	c.check(err)
	if spec.Kind != lc.res || len(spec.Devices) != 1 || spec.Devices[0].Name != lc.Name || spec.ContainerEdits != nil {
		c.fail("%s: kind %q devices %+v, want kind %s and one device %s", path, spec.Kind, spec.Devices, lc.res, lc.Name)
	}
	e := spec.Devices[0].ContainerEdits
	if len(e.DeviceNodes) != 1 || len(e.Env) != 0 || e.Mounts != nil || e.Hooks != nil {
		c.fail("%s: edits %+v, want exactly one device node", path, e)
	}
	d := e.DeviceNodes[0]
	if d.Path != lc.Path || d.Type != "c" || d.Permissions != "rw" || d.FileMode == nil || *d.FileMode != kubelet.HyperlightDefaultMode ||
		d.UID == nil || *d.UID != nobody || d.GID == nil || *d.GID != nobody || d.HostPath != "" || d.Major != nil {
		c.fail("%s: node %+v, want %s c rw mode %o owner %d:%d", path, d, lc.Path, kubelet.HyperlightDefaultMode, nobody, nobody)
	}
	return fmt.Sprintf("%s (%d bytes, cdiVersion %s, %s %s %04o %d:%d)", path, len(b), spec.CDIVersion, spec.Kind, d.Path, *d.FileMode, *d.UID, *d.GID)
}

func (c *companionRun) nextID(lc *liveCompanion) string {
	p := c.k.Current(lc.res)
	if p == nil {
		c.fail("%s has no current registration", lc.res)
	}
	s, ok := p.Latest()
	if !ok || len(s.Devices) == 0 {
		c.fail("no device list of %s", lc.res)
	}
	lc.allocs++
	return s.Devices[lc.allocs%len(s.Devices)].ID
}

// allocateOK: Allocate of one of lc's devices answers exactly its CDI device and annotation.
func (c *companionRun) allocateOK(lc *liveCompanion) string {
	id := c.nextID(lc)
	start := time.Now()
	a, err := c.k.Allocate(lc.res, []string{id})
	if err != nil {
		c.fail("Allocate(%s %s): %v", lc.res, id, err)
	}
	took := time.Since(start)
	want := lc.res + "=" + lc.Name
	r := a.Response
	if len(r.CdiDevices) != 1 || r.CdiDevices[0].Name != want {
		c.fail("Allocate(%s): cdi_devices %v, want [%s]", id, r.CdiDevices, want)
	}
	key := "cdi.k8s.io/hyperlight.dev-" + lc.Name + "_"
	var ann string
	for k, v := range r.Annotations {
		if strings.HasPrefix(k, key) && v == want {
			ann = k
		}
	}
	if ann == "" || len(r.Annotations) != 1 || len(r.Devices) != 0 || len(r.Mounts) != 0 || len(r.Envs) != 0 {
		c.fail("Allocate(%s): annotations %v devices %v mounts %v envs %v, want one %s...=%s and nothing else",
			id, r.Annotations, r.Devices, r.Mounts, r.Envs, key, want)
	}
	return fmt.Sprintf("Allocate(%s) -> %s (and %s), in %s", id, want, ann, ms(took))
}

// allocateUnavailable: Allocate of one of lc's devices is refused with UNAVAILABLE naming want.
func (c *companionRun) allocateUnavailable(lc *liveCompanion, want string) string {
	id := c.nextID(lc)
	_, err := c.k.Allocate(lc.res, []string{id})
	if err == nil {
		c.fail("Allocate(%s) succeeded on an unusable device", id)
	}
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), want) {
		c.fail("Allocate(%s): %v, want UNAVAILABLE containing %q", id, err, want)
	}
	return fmt.Sprintf("Allocate(%s) -> %s %q", id, st.Code(), st.Message())
}

// others: the resources f leaves alone must stay Healthy, the hypervisor's too.
func (c *companionRun) othersHealthy(f companionFault) string {
	var names []string
	c.nowHealth(resource, companionHVCount, kubelet.Healthy)
	names = append(names, resource)
	for _, lc := range c.cs {
		hit := false
		for _, a := range f.affected {
			hit = hit || a == lc
		}
		if !hit {
			c.nowHealth(lc.res, lc.count, kubelet.Healthy)
			names = append(names, lc.res)
		}
	}
	for _, l := range c.daemon().Stderr.Lines()[c.mark:] {
		for _, n := range names {
			if strings.Contains(l, `msg="device unusable`) && strings.Contains(l, resField(n)) {
				c.fail("%s turned unusable: %s", n, l)
			}
		}
	}
	return strings.Join(names, ", ") + " still Healthy"
}

// unload: rmmod each of f.takes (retried while a probe in flight holds the module), the kernel
// removes the nodes, each affected companion Unhealthy within 1 s of the last rmmod's return
// with the reason naming its missing node.
func (c *companionRun) unload(f companionFault) string {
	c.mark = len(c.daemon().Stderr.Lines())
	var first time.Time
	var tries []string
	for _, m := range f.takes {
		var err error
		n := 0
		if !kubelet.Poll(eventBound, func() bool {
			n++
			c.rmStart = time.Now()
			err = command("rmmod", m)
			c.rmDone = time.Now()
			return err == nil
		}) {
			c.fail("%v", err)
		}
		if first.IsZero() {
			first = c.rmStart
		}
		if moduleLoaded(m) {
			c.fail("%s still loaded after rmmod", m)
		}
		tries = append(tries, fmt.Sprintf("%s (%d attempt(s), the last %s)", m, n, ms(c.rmDone.Sub(c.rmStart))))
	}
	var out []string
	for _, lc := range f.affected {
		if exists(lc.Path) {
			c.fail("%s still there after rmmod %s", lc.Path, strings.Join(f.takes, " "))
		}
	}
	dir := ""
	if lc := f.affected[0]; filepath.Dir(lc.Path) != "/dev" {
		d := filepath.Dir(lc.Path)
		dir = fmt.Sprintf(" (%s kept)", d)
		if !exists(d) {
			dir = fmt.Sprintf(" (and %s: devtmpfs removes the directory it made)", d)
		}
	}
	for _, lc := range f.affected {
		at := c.waitHealthOf(lc.res, lc.count, kubelet.Unhealthy, first, unloadBound)
		lat := at.Sub(c.rmDone)
		if lat > unloadBound {
			c.fail("%s Unhealthy %s after rmmod returned, bound %v", lc.res, ms(lat), unloadBound)
		}
		line := c.logLine(c.mark, eventBound, `msg="device unusable`, resField(lc.res))
		if !strings.Contains(line, `reason="`+lc.Path+` missing"`) {
			c.fail("%s's reason does not name the missing node %s: %s", lc.res, lc.Path, line)
		}
		// The kernel removes the node inside rmmod (misc_deregister): the daemon may see it
		// before rmmod returns.
		when := ms(lat) + " after it returned"
		if lat < 0 {
			when = ms(-lat) + " before it returned"
		}
		began := ms(at.Sub(first)) + " after the rmmod began"
		out = append(out, fmt.Sprintf("%s Unhealthy %s (%s), %s", lc.Name, began, when, reasonOf(line)))
		c.times = append(c.times, fmt.Sprintf("rmmod %s -> %s Unhealthy %s (%s)", strings.Join(f.takes, " "), lc.Name, began, when))
	}
	var gone []string
	for _, lc := range f.affected {
		gone = append(gone, lc.Path)
	}
	return fmt.Sprintf("rmmod %s; the kernel removed %s%s; %s (bound %v); %s", strings.Join(tries, ", "),
		strings.Join(gone, " "), dir, strings.Join(out, "; "), unloadBound, c.othersHealthy(f))
}

// handNode: the node made by hand while its driver is unloaded (a container runtime's copy of
// it, or a stale /dev): the kernel answers its open with ENODEV, and the daemon names the module.
func (c *companionRun) handNode(lc *liveCompanion) string {
	mark := len(c.daemon().Stderr.Lines())
	start := time.Now()
	c.handDir = false
	if d := filepath.Dir(lc.Path); !exists(d) {
		c.check(os.Mkdir(d, 0o755))
		c.handDir = true
	}
	if err := unix.Mknod(lc.Path, unix.S_IFCHR|lc.mode, int(unix.Mkdev(lc.Major, lc.Minor))); err != nil {
		c.fail("mknod %s: %v", lc.Path, err)
	}
	c.check(os.Chmod(lc.Path, os.FileMode(lc.mode)))
	made := time.Now()
	// The daemon's reaction first (its watch sees the node made, its probe opens it), then the
	// kernel's own answer to an open() of the node, which the reason must name exactly.
	line := c.logLine(mark, eventBound, `msg="device unusable`, resField(lc.res), "opening "+lc.Path)
	at := "logged " + ms(time.Since(made)) + " after mknod returned"
	opened := time.Now()
	f, err := os.OpenFile(lc.Path, os.O_RDWR, 0)
	took := time.Since(opened)
	own := "ok"
	if err == nil {
		f.Close()
	} else {
		own = errnoName(err)
	}
	want := noDriver(lc, own)
	if !strings.Contains(line, `reason="`+want+`"`) {
		c.fail("the kernel's open() of the hand-made %s: %s; the daemon's line is not reason=%q: %s", lc.Path, own, want, line)
	}
	if own != "ENODEV" {
		c.fail("the kernel's open() of the hand-made %s: %s, want ENODEV (the daemon says %s)", lc.Path, own, reasonOf(line))
	}
	c.nowHealth(lc.res, lc.count, kubelet.Unhealthy)
	dir := ""
	if c.handDir {
		dir = fmt.Sprintf("mkdir %s, ", filepath.Dir(lc.Path))
	}
	c.times = append(c.times, fmt.Sprintf("mknod %s -> reason %s", lc.Path, at))
	return fmt.Sprintf("%smknod %s c %d %d (%04o) in %s; daemon: %s (%s); the kernel's open() of it: %s (in %s); still Unhealthy",
		dir, lc.Path, lc.Major, lc.Minor, lc.mode, ms(made.Sub(start)), reasonOf(line), at, own, ms(took))
}

// reload: the hand-made node (and directory) removed, insmod each of f.gives: the kernel makes
// the nodes again, each affected companion Healthy, its probe logged again.
func (c *companionRun) reload(f companionFault) string {
	lc0 := f.affected[0]
	c.check(os.Remove(lc0.Path))
	if c.handDir {
		c.check(syscall.Rmdir(filepath.Dir(lc0.Path)))
	}
	mark := len(c.daemon().Stderr.Lines())
	start := time.Now()
	for _, m := range f.gives {
		c.check(command("insmod", filepath.Join(modulesDir, m+".ko")))
	}
	returned := time.Now()
	var out []string
	for _, lc := range f.affected {
		st := c.nodeBack(lc)
		if st.Mode&0o7777 != lc.mode || st.Uid != lc.uid || st.Gid != lc.gid {
			c.fail("%s came back %04o %d:%d, was %04o %d:%d", lc.Path, st.Mode&0o7777, st.Uid, st.Gid, lc.mode, lc.uid, lc.gid)
		}
		at := c.waitHealthOf(lc.res, lc.count, kubelet.Healthy, start, eventBound)
		line := c.logLine(mark, eventBound, `msg="device usable"`, resField(lc.res))
		m := probeRe.FindStringSubmatch(line)
		if m == nil {
			c.fail("%s's \"device usable\" line has no probe: %s", lc.res, line)
		}
		c.checkProbe(lc, m[1])
		out = append(out, fmt.Sprintf("%s back, %s Healthy %s after insmod returned (probe=%q)", lc.Path, lc.Name, ms(at.Sub(returned)), m[1]))
		c.times = append(c.times, fmt.Sprintf("insmod %s -> %s Healthy %s", strings.Join(f.gives, " "), lc.Name, ms(at.Sub(returned))))
	}
	c.nowHealth(resource, companionHVCount, kubelet.Healthy)
	return fmt.Sprintf("insmod %s in %s; %s", strings.Join(f.gives, " "), ms(returned.Sub(start)), strings.Join(out, "; "))
}

// logChecked: over the whole run the hypervisor stayed usable (one "device usable" line, no
// "device unusable"), and each companion's probe result was logged at its start and at each
// return of its driver.
func (c *companionRun) logChecked() string {
	usable := map[string]int{}
	unusable := map[string]int{}
	lines := c.daemon().Stderr.Lines()
	for _, l := range lines {
		for _, res := range append([]string{resource}, c.resources()...) {
			if !strings.Contains(l, resField(res)) {
				continue
			}
			switch {
			case strings.Contains(l, `msg="device usable"`):
				usable[res]++
			case strings.Contains(l, `msg="device unusable`):
				unusable[res]++
			}
		}
	}
	want := map[string]int{resource: 1, "hyperlight.dev/tun": 2, "hyperlight.dev/vhost-net": 3, "hyperlight.dev/vhost-vsock": 2}
	var out []string
	for _, res := range append([]string{resource}, c.resources()...) {
		if usable[res] != want[res] || (res == resource) != (unusable[res] == 0) {
			c.fail("%s: \"device usable\" %d time(s), \"device unusable\" %d, want %d and %s", res, usable[res], unusable[res], want[res],
				map[bool]string{true: "none", false: "some"}[res == resource])
		}
		out = append(out, fmt.Sprintf("%s usable %d, unusable %d", res, usable[res], unusable[res]))
	}
	return strings.Join(out, "; ") + "; reaction times: " + strings.Join(c.times, ", ")
}

func (c *companionRun) resources() []string {
	var rs []string
	for _, lc := range c.cs {
		rs = append(rs, lc.res)
	}
	return rs
}

// stop: SIGTERM, exit 0, every socket removed, every CDI spec kept.
func (c *companionRun) stop() string {
	var socks []string
	for _, res := range append([]string{resource}, c.resources()...) {
		socks = append(socks, filepath.Join(c.kdir, c.k.Current(res).Endpoint))
	}
	code, err := c.daemon().Stop(stopBound)
	c.check(err)
	if code != 0 {
		c.fail("daemon exited %d after SIGTERM", code)
	}
	for _, s := range socks {
		if exists(s) {
			c.fail("the daemon left its socket %s", s)
		}
	}
	names, err := dirNames(cdiDir)
	c.check(err)
	var specs []string
	for _, n := range names {
		if strings.HasPrefix(n, "hyperlight") {
			specs = append(specs, n)
		}
	}
	want := "hyperlight-tun.json hyperlight-vhost-net.json hyperlight-vhost-vsock.json hyperlight.json"
	if strings.Join(specs, " ") != want {
		c.fail("%s holds %v, want %s", cdiDir, specs, want)
	}
	for _, lc := range c.cs {
		b, err := os.ReadFile(filepath.Join(cdiDir, "hyperlight-"+lc.Name+".json"))
		if err != nil || !bytes.Contains(b, []byte(lc.Path)) {
			c.fail("the spec of %s after SIGTERM: %v", lc.Name, err)
		}
	}
	return fmt.Sprintf("SIGTERM: exit 0, %d sockets removed, CDI specs kept: %s", len(socks), strings.Join(specs, " "))
}
