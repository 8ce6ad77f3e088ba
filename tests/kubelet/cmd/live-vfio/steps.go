package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sdp/kubelet"
	api "sdp/v1beta1"
)

// The guest is the node: the daemon's real paths. The resource is the extra table row the live
// build adds (tests/live/run-vfio.sh: -Dkata_extra_rows=example.com/testdev:0x1b36:0x00ff).
const (
	daemonPath = "/usr/local/bin/kata-device-plugin"
	kubeletDir = "/var/lib/kubelet/device-plugins"
	cdiDir     = "/var/run/cdi"
	resource   = "example.com/testdev"
	specPath   = cdiDir + "/kata.example.com-testdev.yaml"
	container  = "/dev/vfio/vfio"
)

const (
	startBound  = 60 * time.Second // daemon start to registered (TCG)
	changeBound = 1 * time.Second  // a driver change or removal -> the ID's new health (the uevent path; the rescan would take 30 s)
	healBound   = 5 * time.Second  // back to Healthy (the down ID is rechecked every second)
	stopBound   = 10 * time.Second
)

type vfioRun struct {
	transcript
	iommufd bool // the cdev backend (make test-live-vfio-iommufd), else legacy
	l       *layout
	groups  []int            // expected: ID i is groups[i]
	members map[int][]string // the pci-testdevs of each group
	rebound []string         // unbind-all-unhealthy: the functions it unbound from vfio-pci
	idOf    map[string]string
}

func runVFIO(iommufd bool) int {
	r := &vfioRun{iommufd: iommufd}
	backend, refuses := "backend-legacy", "kernel-refuses-group"
	if iommufd {
		backend, refuses = "backend-iommufd", "kernel-refuses-bind"
	}
	return r.run(func() {
		r.step("layout", r.layout)
		r.step("iommu-groups", r.iommuGroups)
		r.step("bind-vfio-pci", r.bindAll)
		r.step("daemon-start", r.start)
		r.step("registered", r.registered)
		r.step(backend, r.backend)
		r.step("advertised", r.advertised)
		r.step("cdi-spec", r.cdiSpec)
		r.step("companion-unhealthy", r.companionUnhealthy)
		r.step(refuses, r.kernelRefuses)
		r.step("allocate-open", func() string { return r.allocateOpen(r.idOf[r.l.bridged[0]]) })
		r.step("allocate-open", func() string { return r.allocateOpen(r.idOf[r.l.numa0[0]]) })
		r.step("companion-to-vfio", r.companionToVFIO)
		r.step("allocate-open", func() string { return r.allocateOpen(r.idOf[r.l.mf]) })
		r.step("companion-to-host", r.companionToHost)
		r.step("companion-to-vfio", r.companionToVFIO)
		r.step("prefer-2-no-hint", func() string { return r.prefer(2, nil, r.l.switched...) })
		r.step("prefer-4-no-hint", func() string {
			return r.prefer(4, nil, r.l.switched[0], r.l.switched[1], r.l.mf, r.l.bridged[0])
		})
		r.step("prefer-1-numa0", func() string { return r.prefer(1, ptr(0), r.l.numa0[0]) })
		r.step("prefer-2-numa1", func() string { return r.prefer(2, ptr(1), r.l.numa1[0], r.l.switched[0]) })
		r.step("unbind-unhealthy", r.unbindUnhealthy)
		r.step("rebind-healthy", r.rebindHealthy)
		r.step("unbind-all-unhealthy", r.unbindAll)
		r.step("rebind-all-healthy", r.rebindAll)
		r.step("remove-unhealthy", r.removeUnhealthy)
		r.step("sigterm", r.sigterm)
		fmt.Printf("%s live-vfio: every step passed\n", r.stamp())
	})
}

func ptr(n int64) *int64 { return &n }

func (r *vfioRun) layout() string {
	l, err := findLayout()
	r.check(err)
	r.l = l
	for bdf, n := range l.numa {
		want := -1
		if contains(l.numa0, bdf) {
			want = 0
		} else if contains(l.numa1, bdf) {
			want = 1
		}
		if n != want {
			r.fail("%s numa_node %d, want %d (expander bridges give their node, the main root bus -1)", bdf, n, want)
		}
	}
	if d := driverOf(l.hda); d != "snd_hda_intel" {
		r.fail("%s (intel-hda) is bound to %q, want snd_hda_intel", l.hda, d)
	}
	for _, bdf := range l.all {
		if d := driverOf(bdf); d != "" {
			r.fail("%s is bound to %s before the test binds it", bdf, d)
		}
	}
	return fmt.Sprintf("switch %v, multi-function %s+%s (snd_hda_intel), behind pcie-pci-bridge %v, NUMA 0 %v, NUMA 1 %v, the rest numa_node -1",
		l.switched, l.mf, l.hda, l.bridged, l.numa0, l.numa1)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// iommuGroups: the kernel's groups for this layout, from /sys/kernel/iommu_groups.
func (r *vfioRun) iommuGroups() string {
	l := r.l
	var out []string
	expect := func(what string, bdf string, want []string) {
		got := groupMembers(l.group[bdf])
		if !sameSet(got, want) {
			r.fail("%s: group %d of %s holds %v, want %v", what, l.group[bdf], bdf, got, want)
		}
		out = append(out, fmt.Sprintf("%s %d=%v", what, l.group[bdf], got))
	}
	for _, bdf := range l.switched {
		port := parentBDF(bdf)
		acs, err := hasACS(port)
		r.check(err)
		if acs {
			r.fail("downstream port %s has ACS: the layout expects none", port)
		}
		expect("switch", bdf, []string{port, bdf}) // no ACS: the device shares its port's group
	}
	if l.group[l.switched[0]] == l.group[l.switched[1]] {
		r.fail("the two switched devices share group %d", l.group[l.switched[0]])
	}
	expect("multi-function", l.mf, []string{l.mf, l.hda})
	expect("bridged", l.bridged[0], []string{parentBDF(l.bridged[0]), l.bridged[0], l.bridged[1]})
	for _, bdf := range append(append([]string{}, l.numa0...), l.numa1...) {
		rp := parentBDF(bdf)
		acs, err := hasACS(rp)
		r.check(err)
		if !acs {
			r.fail("root port %s has no ACS", rp)
		}
		expect(fmt.Sprintf("numa%d", l.numa[bdf]), bdf, []string{bdf})
	}
	r.groups, r.members = l.expectedIDs()
	r.idOf = map[string]string{}
	for i, g := range r.groups {
		for _, bdf := range r.members[g] {
			r.idOf[bdf] = strconv.Itoa(i)
		}
	}
	return strings.Join(out, ", ") + " (xio3130 downstream ports: no ACS; root ports: ACS)"
}

func (r *vfioRun) bindAll() string {
	for _, bdf := range r.l.all {
		r.check(bind(bdf, "vfio-pci"))
	}
	for _, g := range r.groups {
		if _, err := os.Stat(fmt.Sprintf("/dev/vfio/%d", g)); err != nil {
			r.fail("group node of group %d: %v", g, err)
		}
	}
	names, _ := os.ReadDir("/dev/vfio")
	var list []string
	for _, n := range names {
		list = append(list, n.Name())
	}
	msg := fmt.Sprintf("%d pci-testdevs on vfio-pci (driver_override + drivers_probe); /dev/vfio: %s", len(r.l.all), strings.Join(list, " "))
	if !r.iommufd {
		return msg
	}
	// The cdev backend: each vfio-pci device has its cdev, and the node's sysfs names it back.
	var cdevs []string
	for _, bdf := range r.l.all {
		name, err := cdevOf(bdf)
		r.check(err)
		back, err := cdevPCI(filepath.Join(cdevDir, name))
		r.check(err)
		if back != bdf {
			r.fail("%s/%s names %s, want %s", cdevDir, name, back, bdf)
		}
		cdevs = append(cdevs, bdf[5:]+"="+name)
	}
	return msg + fmt.Sprintf("; %s: %s", cdevDir, strings.Join(cdevs, " "))
}

func (r *vfioRun) start() string {
	k, err := kubelet.Start(kubelet.Config{Dir: kubeletDir})
	r.check(err)
	r.k = k
	d, err := kubelet.StartDaemon(daemonPath, []string{"PATH=/bin:/usr/bin:/usr/local/bin", "LOG_LEVEL=debug"})
	r.check(err)
	r.daemon = d
	return fmt.Sprintf("mock kubelet on %s; daemon pid %d, VFIO_BACKEND unset (auto)", k.SocketPath(), d.Pid())
}

func (r *vfioRun) registered() string {
	start := time.Now()
	p, err := r.k.WaitRegistered(resource, 1, startBound)
	if err != nil {
		r.fail("%v (daemon %s)", err, r.daemon.ExitDescription())
	}
	if !p.Options.GetGetPreferredAllocationAvailable() {
		r.fail("get_preferred_allocation_available is false")
	}
	return fmt.Sprintf("%s, endpoint %s, after %s; resources: %v", resource, p.Endpoint, ms(time.Since(start)), r.k.Resources())
}

func (r *vfioRun) waitLog(bound time.Duration, parts ...string) string {
	return r.waitLogAfter(0, bound, parts...)
}

// logMark is the number of daemon log lines so far.
func (r *vfioRun) logMark() int { return len(r.daemon.Stderr.Lines()) }

// waitLogAfter waits for a daemon log line after the first mark lines that holds every part.
func (r *vfioRun) waitLogAfter(mark int, bound time.Duration, parts ...string) string {
	var found string
	ok := kubelet.Poll(bound, func() bool {
		lines := r.daemon.Stderr.Lines()
	next:
		for i := mark; i < len(lines); i++ {
			for _, p := range parts {
				if !strings.Contains(lines[i], p) {
					continue next
				}
			}
			found = lines[i]
			return true
		}
		return false
	})
	if !ok {
		r.fail("no new daemon log line with %q within %v", parts, bound)
	}
	return found
}

func (r *vfioRun) backend() string {
	line := r.waitLog(time.Second, `msg="VFIO backend"`)
	want := "backend=legacy"
	if r.iommufd {
		want = `backend=iommufd reason="auto: /dev/vfio/devices has IOMMUFD cdevs"`
	}
	if !strings.Contains(line, want) {
		r.fail("backend line: %s", line)
	}
	return strings.TrimSpace(line[strings.Index(line, "msg="):])
}

// health is the health of id in the newest snapshot ("" if absent).
func (r *vfioRun) snapshot() []*api.Device {
	p := r.k.Current(resource)
	if p == nil {
		return nil
	}
	s, _ := p.Latest()
	return s.Devices
}

// waitID waits until id has health h and returns the arrival time of the first snapshot at or
// after since that shows it.
func (r *vfioRun) waitID(id, h string, since time.Time, bound time.Duration) time.Time {
	has := func(devs []*api.Device) bool {
		for _, d := range devs {
			if d.ID == id {
				return d.Health == h
			}
		}
		return false
	}
	if _, err := r.k.WaitDevices(resource, has, bound); err != nil {
		r.fail("ID %s not %s: %v (daemon %s)", id, h, err, r.daemon.ExitDescription())
	}
	for _, s := range r.k.Current(resource).Snapshots() {
		if !s.Time.Before(since) && has(s.Devices) {
			return s.Time
		}
	}
	r.fail("ID %s was already %s before the change", id, h)
	return time.Time{}
}

func (r *vfioRun) advertised() string {
	want := len(r.groups)
	devs, err := r.k.WaitDevices(resource, func(d []*api.Device) bool { return len(d) == want }, startBound)
	if err != nil {
		r.fail("%v", err)
	}
	var out []string
	for i, g := range r.groups {
		id := strconv.Itoa(i)
		var d *api.Device
		for _, x := range devs {
			if x.ID == id {
				d = x
			}
		}
		if d == nil {
			r.fail("no ID %s (group %d) in %s", id, g, kubelet.DescribeDevices(devs))
		}
		low := r.members[g][0]
		var nodes []int64
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				nodes = append(nodes, n.ID)
			}
		}
		wantNUMA := r.l.numa[low]
		if (wantNUMA < 0 && len(nodes) != 0) || (wantNUMA >= 0 && (len(nodes) != 1 || nodes[0] != int64(wantNUMA))) {
			r.fail("ID %s (group %d, %s): TopologyInfo %v, want NUMA node %d", id, g, low, nodes, wantNUMA)
		}
		wantHealth := kubelet.Healthy
		if g == r.l.group[r.l.mf] {
			wantHealth = kubelet.Unhealthy // the companion is on snd_hda_intel
		}
		if d.Health != wantHealth {
			r.fail("ID %s (group %d) %s, want %s", id, g, d.Health, wantHealth)
		}
		out = append(out, fmt.Sprintf("%s=g%d%v numa%d %s", id, g, r.members[g], wantNUMA, d.Health))
	}
	return strings.Join(out, "; ")
}

func (r *vfioRun) cdiSpec() string {
	b, err := os.ReadFile(specPath)
	r.check(err)
	kind, nodes, order := parseSpec(b)
	if kind != resource {
		r.fail("%s: kind %q", specPath, kind)
	}
	if len(order) != len(r.groups) {
		r.fail("%s: devices %v, want %d", specPath, order, len(r.groups))
	}
	var per []string
	for i, g := range r.groups {
		id := strconv.Itoa(i)
		want := []string{fmt.Sprintf("/dev/vfio/%d", g), container}
		if r.iommufd {
			want = r.groupCdevs(g)
		}
		if strings.Join(nodes[id], " ") != strings.Join(want, " ") {
			r.fail("%s: device %q nodes %v, want %v", specPath, id, nodes[id], want)
		}
		per = append(per, fmt.Sprintf("%s=%v", id, nodes[id]))
	}
	if !r.iommufd {
		return fmt.Sprintf("%s: kind %s, %d devices, each its group node and %s", specPath, kind, len(order), container)
	}
	if strings.Contains(string(b), iommuNode) || strings.Contains(string(b), container) {
		r.fail("%s names %s or %s in iommufd mode", specPath, iommuNode, container)
	}
	return fmt.Sprintf("%s: kind %s, %d devices, each the cdevs of its group's vfio-pci testdevs, no group node, no %s: %s",
		specPath, kind, len(order), iommuNode, strings.Join(per, " "))
}

func (r *vfioRun) companionUnhealthy() string {
	line := r.waitLog(time.Second, `msg="IOMMU group not viable, advertising the device Unhealthy"`,
		"member="+r.l.hda, "driver=snd_hda_intel", "id="+r.idOf[r.l.mf])
	return strings.TrimSpace(line[strings.Index(line, "msg="):])
}

// kernelRefuses: the kernel agrees with the daemon: the group is not viable.
func (r *vfioRun) kernelRefuses() string {
	if r.iommufd {
		return r.kernelRefusesBind()
	}
	node := fmt.Sprintf("/dev/vfio/%d", r.l.group[r.l.mf])
	flags, setErr, err := groupRefused(container, node)
	r.check(err)
	if flags&vfioGroupFlagsViable != 0 {
		r.fail("%s: VFIO_GROUP_GET_STATUS flags %#x: viable while %s is on snd_hda_intel", node, flags, r.l.hda)
	}
	if setErr != syscall.EPERM {
		r.fail("%s: VFIO_GROUP_SET_CONTAINER on a group that is not viable: %v, want EPERM", node, setErr)
	}
	return fmt.Sprintf("%s: GET_STATUS flags %#x (not viable), SET_CONTAINER: %v", node, flags, setErr)
}

// allocateOpen allocates id and opens exactly the nodes the spec names for it, as a container
// would, getting a device fd for every pci-testdev of its group.
func (r *vfioRun) allocateOpen(id string) string {
	a, err := r.k.Allocate(resource, []string{id})
	if err != nil {
		r.fail("Allocate(%s): %v", id, err)
	}
	var names []string
	for _, c := range a.Response.CdiDevices {
		names = append(names, c.Name)
	}
	if len(names) != 1 || names[0] != resource+"="+id {
		r.fail("Allocate(%s): cdi_devices %v", id, names)
	}
	b, err := os.ReadFile(specPath)
	r.check(err)
	_, nodes, _ := parseSpec(b)
	n := nodes[id]
	if r.iommufd {
		return fmt.Sprintf("ID %s -> %v; %s", id, n, r.openCdevs(id, n))
	}
	if len(n) != 2 || n[1] != container {
		r.fail("spec nodes of %s: %v", id, n)
	}
	i, _ := strconv.Atoi(id)
	g := r.groups[i]
	var bdfs []string
	for _, m := range groupMembers(g) {
		if driverOf(m) == "vfio-pci" {
			bdfs = append(bdfs, m)
		}
	}
	msg, err := vfioOpen(n[1], n[0], bdfs)
	r.check(err)
	return fmt.Sprintf("ID %s -> %v; %s", id, n, msg)
}

// companionToVFIO binds the intel-hda function to vfio-pci: the GPU's ID turns Healthy.
func (r *vfioRun) companionToVFIO() string {
	id := r.idOf[r.l.mf]
	mark := r.logMark()
	t0 := time.Now()
	r.check(bind(r.l.hda, "vfio-pci"))
	done := time.Now()
	at := r.waitID(id, kubelet.Healthy, t0, healBound)
	r.waitLogAfter(mark, healBound, `msg="device usable again"`, "id="+id)
	return fmt.Sprintf("%s unbound from snd_hda_intel and bound to vfio-pci in %s; ID %s Healthy %s after the writes began",
		r.l.hda, ms(done.Sub(t0)), id, ms(at.Sub(t0)))
}

// companionToHost gives the intel-hda function back to snd_hda_intel: Unhealthy again.
func (r *vfioRun) companionToHost() string {
	id := r.idOf[r.l.mf]
	mark := r.logMark()
	r.check(unbind(r.l.hda))
	r.check(writeSys(filepath.Join(sysPCI, "devices", r.l.hda, "driver_override"), "\n"))
	t0 := time.Now()
	r.check(writeSys(filepath.Join(sysPCI, "drivers", "snd_hda_intel", "bind"), r.l.hda))
	done := time.Now()
	if d := driverOf(r.l.hda); d != "snd_hda_intel" {
		r.fail("%s bound to %q", r.l.hda, d)
	}
	at := r.waitID(id, kubelet.Unhealthy, t0, changeBound)
	r.waitLogAfter(mark, changeBound, `msg="IOMMU group not viable, advertising the device Unhealthy"`,
		"member="+r.l.hda, "driver=snd_hda_intel", "id="+id)
	return fmt.Sprintf("bind to snd_hda_intel took %s; ID %s Unhealthy %s after the bind began", ms(done.Sub(t0)), id, ms(at.Sub(t0)))
}

// prefer asks kubelet's GetPreferredAllocation for size IDs (hint: a NUMA node or nil) in
// kubelet's call shape and compares the answer with the IDs of want.
func (r *vfioRun) prefer(size int, hint *int64, want ...string) string {
	var wantIDs []string
	for _, bdf := range want {
		wantIDs = append(wantIDs, r.idOf[bdf])
	}
	p, err := r.k.Prefer(resource, size, nil, hint)
	if err != nil {
		r.fail("Prefer(%d, hint %v): %v", size, hint, err)
	}
	if !p.Called {
		r.fail("kubelet would not call GetPreferredAllocation for this shape (aligned %v)", p.Answer)
	}
	got := append([]string(nil), p.Answer...)
	sort.Strings(got)
	sort.Strings(wantIDs)
	if strings.Join(got, ",") != strings.Join(wantIDs, ",") {
		r.fail("answer %v, want %v (%v); available %v must %v", p.Answer, wantIDs, want, p.Available, p.Must)
	}
	h := "none"
	if hint != nil {
		h = fmt.Sprintf("NUMA %d", *hint)
	}
	return fmt.Sprintf("hint %s: available %v must %v -> %v = %v", h, p.Available, p.Must, p.Answer, want)
}

func (r *vfioRun) unbindUnhealthy() string {
	bdf := r.l.numa1[0]
	id := r.idOf[bdf]
	mark := r.logMark()
	t0 := time.Now()
	r.check(writeSys(filepath.Join(sysPCI, "drivers", "vfio-pci", "unbind"), bdf))
	done := time.Now()
	at := r.waitID(id, kubelet.Unhealthy, t0, changeBound)
	line := r.waitLogAfter(mark, changeBound, `msg="device unusable, advertising it Unhealthy"`, "id="+id)
	return fmt.Sprintf("%s unbound from vfio-pci (%s); ID %s Unhealthy %s after the unbind began (%s after it returned); %s",
		bdf, ms(done.Sub(t0)), id, ms(at.Sub(t0)), ms(at.Sub(done)), strings.TrimSpace(line[strings.Index(line, "reason="):]))
}

func (r *vfioRun) rebindHealthy() string {
	bdf := r.l.numa1[0]
	id := r.idOf[bdf]
	t0 := time.Now()
	r.check(writeSys(filepath.Join(sysPCI, "drivers_probe"), bdf)) // driver_override still says vfio-pci
	if d := driverOf(bdf); d != "vfio-pci" {
		r.fail("%s bound to %q", bdf, d)
	}
	at := r.waitID(id, kubelet.Healthy, t0, healBound)
	msg := r.allocateOpen(id)
	return fmt.Sprintf("%s bound to vfio-pci again; ID %s Healthy %s after; %s", bdf, id, ms(at.Sub(t0)), msg)
}

// waitAll waits until every advertised ID has health h; the arrival time of that snapshot.
func (r *vfioRun) waitAll(h string, bound time.Duration) time.Time {
	all := func(devs []*api.Device) bool {
		for _, d := range devs {
			if d.Health != h {
				return false
			}
		}
		return len(devs) == len(r.groups)
	}
	if _, err := r.k.WaitDevices(resource, all, bound); err != nil {
		r.fail("not every ID %s: %v (daemon %s)", h, err, r.daemon.ExitDescription())
	}
	snaps := r.k.Current(resource).Snapshots()
	for i := len(snaps) - 1; i > 0; i-- {
		if !all(snaps[i-1].Devices) {
			return snaps[i].Time
		}
	}
	return snaps[0].Time
}

// nodeDir is the directory the kernel makes for the backend's nodes, and what it holds.
func (r *vfioRun) nodeDir() (string, []string) {
	dir := "/dev/vfio"
	if r.iommufd {
		dir = cdevDir
	}
	names, _ := os.ReadDir(dir)
	var list []string
	for _, n := range names {
		list = append(list, n.Name())
	}
	return dir, list
}

// vfioBound: every function of the layout on vfio-pci (the devices and the companion bound to
// it by companion-to-vfio).
func (r *vfioRun) vfioBound() []string {
	var out []string
	for _, bdf := range append(append([]string{}, r.l.all...), r.l.hda) {
		if driverOf(bdf) == "vfio-pci" {
			out = append(out, bdf)
		}
	}
	return out
}

// Every device unbound from vfio-pci, as a drain does: the kernel removes every node (with the
// cdev backend the last cdev takes /dev/vfio/devices with it); every ID Unhealthy.
func (r *vfioRun) unbindAll() string {
	r.rebound = r.vfioBound()
	t0 := time.Now()
	for _, bdf := range r.rebound {
		r.check(writeSys(filepath.Join(sysPCI, "drivers", "vfio-pci", "unbind"), bdf))
	}
	at := r.waitAll(kubelet.Unhealthy, changeBound)
	dir, left := r.nodeDir()
	gone := "removed by the kernel"
	if _, err := os.Stat(dir); err == nil {
		gone = fmt.Sprintf("still there, holding %q", left)
		if r.iommufd {
			r.fail("%s %s after every cdev was unbound: the kernel removes it with its last cdev", dir, gone)
		}
		for _, n := range left {
			if n != "vfio" {
				r.fail("%s still holds %s after every device was unbound", dir, n)
			}
		}
	}
	if r.daemon.Exited() {
		r.fail("daemon exited: %s", r.daemon.ExitDescription())
	}
	return fmt.Sprintf("%d functions unbound; every ID Unhealthy %s after the first unbind; %s %s",
		len(r.rebound), ms(at.Sub(t0)), dir, gone)
}

// Every device bound to vfio-pci again: the kernel makes the nodes (and the directory) again;
// every ID Healthy, and one opens through VFIO as a container would.
func (r *vfioRun) rebindAll() string {
	t0 := time.Now()
	for _, bdf := range r.rebound {
		r.check(writeSys(filepath.Join(sysPCI, "drivers_probe"), bdf)) // driver_override says vfio-pci
	}
	at := r.waitAll(kubelet.Healthy, healBound)
	dir, list := r.nodeDir()
	msg := r.allocateOpen(r.idOf[r.l.bridged[0]])
	return fmt.Sprintf("%d functions bound to vfio-pci again; every ID Healthy %s after the first bind; %s: %s; %s",
		len(r.rebound), ms(at.Sub(t0)), dir, strings.Join(list, " "), msg)
}

func (r *vfioRun) removeUnhealthy() string {
	bdf := r.l.switched[1]
	id := r.idOf[bdf]
	t0 := time.Now()
	r.check(writeSys(filepath.Join(sysPCI, "devices", bdf, "remove"), "1"))
	done := time.Now()
	at := r.waitID(id, kubelet.Unhealthy, t0, changeBound)
	if _, err := os.Stat(filepath.Join(sysPCI, "devices", bdf)); err == nil {
		r.fail("%s still in sysfs after remove", bdf)
	}
	if r.daemon.Exited() {
		r.fail("daemon exited: %s", r.daemon.ExitDescription())
	}
	healthy := 0
	for _, d := range r.snapshot() {
		if d.Health == kubelet.Healthy {
			healthy++
		}
	}
	return fmt.Sprintf("%s removed (%s); ID %s Unhealthy %s after the remove began (%s after it returned); %d IDs still Healthy",
		bdf, ms(done.Sub(t0)), id, ms(at.Sub(t0)), ms(at.Sub(done)), healthy)
}

func (r *vfioRun) sigterm() string {
	r.check(r.daemon.Signal(syscall.SIGTERM))
	code, err := r.daemon.Wait(stopBound)
	r.check(err)
	if code != 0 {
		r.fail("exit status %d after SIGTERM", code)
	}
	return "exit 0"
}
