package kubelet

// Scenarios for kata-device-plugin on a fake VFIO host (katatree.go: IOMMUFD cdevs made with
// mknod, sysfs identities in the kernel's formats): what is advertised (resources, IDs in PCI
// order, topology), the two CDI specs (parsed as YAML, decoded strictly, checked against the
// CDI rules and the minimum version), Allocate, every hostile-tree case, kubelet restarts, the
// fixed device set (exit status 3), no devices at all, SIGTERM, --version and --health-check.
//
// The CDI check at the end of this file does not trust substrings: the YAML is parsed with
// PyYAML (python3-yaml; no Go YAML library is packaged for Debian 12's gocode) and the result
// decoded strictly into the CDI schema.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

// ---- the node and the daemon

type kataScenario struct {
	*scenario
	tree *KataTree
}

func kataBinary(t *testing.T) string {
	t.Helper()
	build, err := BuildDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Executable(build, KataBinary)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// newKata makes a node with an empty fake VFIO host and a mock kubelet; no daemon yet.
func newKata(t *testing.T) *kataScenario {
	t.Helper()
	return newKataDirLen(t, 0)
}

// newKataDirLen is newKata with a kubelet directory of exactly dirLen bytes (0: the shortest).
func newKataDirLen(t *testing.T, dirLen int) *kataScenario {
	t.Helper()
	bin := kataBinary(t)
	node := newNodeDirLen(t, false, dirLen)
	tree, err := NewKataTree(node.Root)
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, node: node, bin: bin}
	s.k = newMock(t, Config{Dir: node.KubeletDir})
	return &kataScenario{scenario: s, tree: tree}
}

// kataEntry is one VFIO device to create: vfioN for a PCI function.
type kataEntry struct {
	N int
	F PCIFunc
}

func (s *kataScenario) add(entries ...kataEntry) {
	s.t.Helper()
	for _, e := range entries {
		if err := s.tree.Add(e.N, e.F); err != nil {
			s.t.Fatal(err)
		}
	}
}

// must fails the test on a tree-building error.
func (s *kataScenario) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// kataMain is the acceptance node: 4 GPUs on two NUMA nodes (one in PCI domain 1), 2
// NVSwitches (one with no NUMA affinity) and a Mellanox NIC, created out of PCI order and with
// vfio numbers unrelated to it.
var kataMain = []kataEntry{
	{3, GPU("0001:01:00.0", 1)},
	{0, GPU("0000:c1:00.0", 1)},
	{6, NVSwitch("0000:05:00.0", -1)},
	{4, PCIFunc{BDF: "0000:01:00.0", Vendor: 0x15b3, Class: 0x020700, NUMA: 0}},
	{5, GPU("0000:42:00.0", 0)},
	{2, NVSwitch("0000:06:00.0", 0)},
	{1, GPU("0000:41:00.0", 0)},
}

// kataDev is one advertised device as the contract expects it.
type kataDev struct {
	ID   string
	N    int // vfioN
	BDF  string
	NUMA int
}

// kataResourceOf classifies a PCI function by the table; "" when no row matches.
func kataResourceOf(f PCIFunc) string {
	if f.Vendor != NvidiaVendor {
		return ""
	}
	switch f.Class >> 8 {
	case ClassGPU >> 8:
		return KataGPU
	case ClassNVSwitch >> 8:
		return KataNVSwitch
	}
	return ""
}

// kataExpect is the contract's assignment for entries that must be advertised: per resource,
// ordered by PCI address, IDs "0".."n-1".
func kataExpect(entries []kataEntry) map[string][]kataDev {
	out := map[string][]kataDev{}
	for _, e := range entries {
		if r := kataResourceOf(e.F); r != "" {
			out[r] = append(out[r], kataDev{N: e.N, BDF: e.F.BDF, NUMA: e.F.NUMA})
		}
	}
	return kataNumber(out)
}

// kataNumber gives each resource's devices their IDs 0..n-1 in PCI address order.
func kataNumber(out map[string][]kataDev) map[string][]kataDev {
	for r, devs := range out {
		sort.Slice(devs, func(i, j int) bool { return devs[i].BDF < devs[j].BDF })
		for i := range devs {
			devs[i].ID = fmt.Sprint(i)
		}
		out[r] = devs
	}
	return out
}

// checkKataDevices compares a ListAndWatch list with the expectation: same IDs, all Healthy,
// TopologyInfo with exactly the NUMA node when it is known and none otherwise.
func checkKataDevices(got []*api.Device, want []kataDev) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d devices, want %d: %s", len(got), len(want), DescribeDevices(got))
	}
	byID := map[string]*api.Device{}
	for _, d := range got {
		if byID[d.ID] != nil {
			return fmt.Errorf("device ID %q listed twice", d.ID)
		}
		byID[d.ID] = d
	}
	for _, w := range want {
		d := byID[w.ID]
		if d == nil {
			return fmt.Errorf("no device %q (%s, vfio%d) in %s", w.ID, w.BDF, w.N, DescribeDevices(got))
		}
		if d.Health != Healthy {
			return fmt.Errorf("device %q is %s", w.ID, d.Health)
		}
		var nodes []int64
		if d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				nodes = append(nodes, n.ID)
			}
		}
		if w.NUMA >= 0 && (len(nodes) != 1 || nodes[0] != int64(w.NUMA)) {
			return fmt.Errorf("device %q (%s): NUMA nodes %v, want [%d]", w.ID, w.BDF, nodes, w.NUMA)
		}
		if w.NUMA < 0 && len(nodes) != 0 {
			return fmt.Errorf("device %q (%s) has unknown NUMA affinity but TopologyInfo %v", w.ID, w.BDF, nodes)
		}
	}
	return nil
}

// kataRegistered waits for the count-th registration of resource.
func (s *kataScenario) kataRegistered(resource string, count int, bound time.Duration) *Plugin {
	s.t.Helper()
	if !s.wait(bound, func() bool { return s.k.Registrations(resource) >= count && s.k.Current(resource) != nil }) {
		s.fatalf("%s registered %d time(s) within %v, want %d", resource, s.k.Registrations(resource), bound, count)
	}
	return s.k.Current(resource)
}

// kataDevices waits until the newest snapshot on resource's current endpoint passes check.
func (s *kataScenario) kataDevices(resource string, bound time.Duration, check func([]*api.Device) error) []*api.Device {
	s.t.Helper()
	var last []*api.Device
	err := fmt.Errorf("no ListAndWatch snapshot")
	if !s.wait(bound, func() bool {
		p := s.k.Current(resource)
		if p == nil {
			return false
		}
		snap, ok := p.Latest()
		if !ok {
			return false
		}
		last, err = snap.Devices, check(snap.Devices)
		return err == nil
	}) {
		s.fatalf("%s: the device list did not reach the expected state within %v: %v", resource, bound, err)
	}
	return last
}

// kataReady waits until every expected resource is registered and lists exactly its devices;
// it checks the registrations and that no other resource registered.
func (s *kataScenario) kataReady(want map[string][]kataDev) map[string]*Plugin {
	s.t.Helper()
	ps := map[string]*Plugin{}
	for _, r := range KataResources {
		if len(want[r]) == 0 {
			continue
		}
		p := s.kataRegistered(r, 1, startBound)
		s.kataDevices(r, eventBound, func(d []*api.Device) error { return checkKataDevices(d, want[r]) })
		checkKataRegistration(s.t, p)
		ps[r] = p
	}
	for _, r := range s.k.Resources() {
		if ps[r] == nil {
			s.t.Errorf("resource %s registered, want only %v", r, keys(want))
		}
	}
	return ps
}

func keys(m map[string][]kataDev) []string {
	var out []string
	for k, v := range m {
		if len(v) > 0 {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// checkKataRegistration: socket "kata-<hash of the resource>-<n>.sock", GetPreferredAllocation
// advertised (topology: kata/prefer.c), no PreStartContainer.
func checkKataRegistration(t *testing.T, p *Plugin) {
	t.Helper()
	prefix := KataSocketPrefix(p.Resource)
	if !IsSocketOf(p.Endpoint, prefix) {
		t.Errorf("%s registered endpoint %q, want %s-<n>.sock", p.Resource, p.Endpoint, prefix)
	}
	if p.Options.PreStartRequired || !p.Options.GetPreferredAllocationAvailable {
		t.Errorf("%s options %+v, want GetPreferredAllocation and no PreStartContainer", p.Resource, p.Options)
	}
}

// ---- specs

// kataSpecPath is <root>/var/run/cdi/kata.<vendor>-<class>.yaml.
func (s *kataScenario) kataSpecPath(resource string) string {
	return filepath.Join(s.node.CDIDir, KataSpecFile(resource))
}

// checkKataSpec reads, parses and checks the spec of resource against the expected devices:
// CDI rules and minimum version, kind = resource, device names = the IDs, each device exactly
// one deviceNode for /dev/vfio/devices/vfioN of the right PCI function, nothing spec-wide.
func (s *kataScenario) checkKataSpec(resource string, want []kataDev) *cdiSpec {
	s.t.Helper()
	path := s.kataSpecPath(resource)
	fi, err := os.Lstat(path)
	if err != nil {
		s.fatalf("CDI spec of %s: %v", resource, err)
	}
	if perm := fi.Mode().Perm(); !fi.Mode().IsRegular() || perm&0o444 != 0o444 || perm&0o022 != 0 {
		s.t.Errorf("%s: mode %v, want a regular file readable by all, writable by the owner only", path, fi.Mode())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		s.fatalf("%v", err)
	}
	spec, err := parseCDIYAML(b)
	if err == nil {
		err = checkCDIRules(spec)
	}
	if err == nil {
		err = checkKataSpecContent(spec, resource, want, s.tree)
	}
	if err != nil {
		s.fatalf("%s: %v\n%s", path, err, b)
	}
	return spec
}

func checkKataSpecContent(spec *cdiSpec, resource string, want []kataDev, tree *KataTree) error {
	if spec.Kind != resource {
		return fmt.Errorf("kind %q, want the resource name %q", spec.Kind, resource)
	}
	if spec.Version != KataCDIVersion {
		return fmt.Errorf("cdiVersion %q, want %q", spec.Version, KataCDIVersion)
	}
	if !spec.ContainerEdits.empty() {
		return fmt.Errorf("spec-wide containerEdits %+v: they would apply to every device", spec.ContainerEdits)
	}
	if len(spec.Devices) != len(want) {
		return fmt.Errorf("%d devices, want %d", len(spec.Devices), len(want))
	}
	byName := map[string]cdiDevice{}
	for _, d := range spec.Devices {
		byName[d.Name] = d
	}
	for _, w := range want {
		d, ok := byName[w.ID]
		if !ok {
			return fmt.Errorf("no device named %q (the advertised ID of %s)", w.ID, w.BDF)
		}
		e := d.ContainerEdits
		if len(e.DeviceNodes) != 1 || len(e.Env) != 0 || len(e.Mounts) != 0 || len(e.Hooks) != 0 {
			return fmt.Errorf("device %q edits %+v, want exactly one deviceNode", w.ID, e)
		}
		n := e.DeviceNodes[0]
		path := tree.ContainerPath(w.N)
		if n.Path != path {
			return fmt.Errorf("device %q (%s) deviceNode path %q, want %q", w.ID, w.BDF, n.Path, path)
		}
		if n.HostPath != "" && n.HostPath != path {
			return fmt.Errorf("device %q hostPath %q, want none or %q", w.ID, n.HostPath, path)
		}
		if n.Type != "c" {
			return fmt.Errorf("device %q deviceNode type %q, want \"c\"", w.ID, n.Type)
		}
		if (n.Major != nil && *n.Major != int64(tree.Major)) || (n.Minor != nil && *n.Minor != int64(w.N)) {
			return fmt.Errorf("device %q deviceNode number %v:%v, want %d:%d", w.ID, n.Major, n.Minor, tree.Major, w.N)
		}
	}
	return nil
}

// cdiFiles lists the CDI directory.
func (s *kataScenario) cdiFiles() []string {
	entries, err := os.ReadDir(s.node.CDIDir)
	if err != nil {
		s.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func (s *kataScenario) readSpec(resource string) []byte {
	s.t.Helper()
	b, err := os.ReadFile(s.kataSpecPath(resource))
	if err != nil {
		s.fatalf("read spec: %v", err)
	}
	return b
}

// ---- logs

var (
	logLevelRe = regexp.MustCompile(`(?:^| )level=(\S+)`)
	logMsgRe   = regexp.MustCompile(`(?:^| )msg=("(?:[^"\\]|\\.)*"|\S+)`)
)

// logField returns level or msg of a logfmt line (unquoted).
func logField(line, key string) string {
	re := logLevelRe
	if key == "msg" {
		re = logMsgRe
	}
	m := re.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	v := m[1]
	if strings.HasPrefix(v, `"`) {
		var u string
		if json.Unmarshal([]byte(v), &u) == nil {
			return u
		}
		return strings.Trim(v, `"`)
	}
	return v
}

// linesNaming returns the daemon's log lines above debug that name word (a whole word: vfio1
// does not match vfio10).
func linesNaming(d *Daemon, word string) []string {
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(word) + `($|[^A-Za-z0-9_])`)
	var out []string
	for _, l := range d.Stderr.Lines() {
		if logField(l, "level") != "debug" && re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// waitLogMsg waits for a line with msg and the given level ("" for any) and returns it.
func (s *kataScenario) waitLogMsg(bound time.Duration, level, msg string, also ...string) string {
	s.t.Helper()
	l, ok := s.d.WaitLog(bound, func(l string) bool {
		if logField(l, "msg") != msg || (level != "" && logField(l, "level") != level) {
			return false
		}
		for _, a := range also {
			if !strings.Contains(l, a) {
				return false
			}
		}
		return true
	})
	if !ok {
		s.fatalf("no log line level=%s msg=%q %v within %v", level, msg, also, bound)
	}
	return l
}

// ---- probes and exit

func (s *kataScenario) probe(args ...string) Result {
	s.t.Helper()
	return s.run(DaemonEnv(s.node.Root), args...)
}

// waitProbe re-runs the probe until it exits with want (each run has its own deadline).
func (s *kataScenario) waitProbe(want int, bound time.Duration, args ...string) {
	s.t.Helper()
	var r Result
	if !Poll(bound, func() bool { r = s.probe(args...); return r.Code == want }) {
		s.fatalf("%s: exit %d within %v, want %d (stderr %q)", strings.Join(args, " "), r.Code, bound, want, r.Stderr)
	}
}

// waitExit waits for the daemon to exit and returns its status.
func (s *kataScenario) waitExit(bound time.Duration) int {
	s.t.Helper()
	code, err := s.d.Wait(bound)
	if err != nil {
		s.fatalf("%v", err)
	}
	return code
}

// KataSetChangedMsg is the error line of a device-set change.
const KataSetChangedMsg = "VFIO device set changed, exiting so the DaemonSet restarts the plugin"

// checkSetChangeExit: the daemon exits with status 3 and exactly one error line naming what
// changed, under one of kinds (removed=, added=, changed=).
func (s *kataScenario) checkSetChangeExit(bound time.Duration, name string, kinds ...string) {
	s.t.Helper()
	start := time.Now()
	if code := s.waitExit(bound); code != KataExitSetChange {
		s.t.Errorf("exit %s after the device set changed, want exit status %d", s.d.ExitDescription(), KataExitSetChange)
	}
	s.t.Logf("exited %v after the change", time.Since(start).Round(time.Millisecond))
	var errs []string
	for _, l := range linesNaming(s.d, name) {
		if logField(l, "level") == "error" {
			errs = append(errs, l)
		}
	}
	if len(errs) != 1 {
		s.t.Errorf("%d error lines naming %s, want exactly one: %q", len(errs), name, errs)
		return
	}
	if msg := logField(errs[0], "msg"); msg != KataSetChangedMsg {
		s.t.Errorf("error line %q, want msg=%q", errs[0], KataSetChangedMsg)
	}
	w := regexp.QuoteMeta(name)
	re := regexp.MustCompile(`(?:^| )(` + strings.Join(kinds, "|") + `)=(?:"(?:[^"]* )?` + w + `(?: [^"]*)?"|` + w + `(?: |$))`)
	if !re.MatchString(errs[0]) {
		s.t.Errorf("error line %q does not list %s under %v", errs[0], name, kinds)
	}
}

// ---- the scenarios

func TestKataAdvertise(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	// The contract spelled out for this node: PCI order, not vfio numbers nor creation order.
	if ids := fmt.Sprint(want[KataGPU]); ids != "[{0 1 0000:41:00.0 0} {1 5 0000:42:00.0 0} {2 0 0000:c1:00.0 1} {3 3 0001:01:00.0 1}]" {
		t.Fatalf("test bug: expected GPUs %s", ids)
	}
	s.startDaemon()
	s.kataReady(want)
	if n := len(want[KataGPU]); n != 4 || len(want[KataNVSwitch]) != 2 {
		t.Fatalf("test bug: want %d GPUs and %d NVSwitches", n, len(want[KataNVSwitch]))
	}
	for _, r := range KataResources {
		s.checkKataSpec(r, want[r])
		var ids []string
		for _, d := range want[r] {
			ids = append(ids, fmt.Sprintf("%s:%s/vfio%d", d.ID, d.BDF, d.N))
		}
		s.waitLogMsg(eventBound, "info", "advertising", "resource="+r+" ", fmt.Sprintf("devices=%d", len(want[r])),
			fmt.Sprintf("ids=%q", strings.Join(ids, " ")))
	}
	files := s.cdiFiles()
	if !reflect.DeepEqual(files, []string{KataSpecFile(KataGPU), KataSpecFile(KataNVSwitch)}) {
		t.Errorf("CDI directory holds %v, want exactly the two specs", files)
	}
	// The NIC is not in the table: one info line names it.
	lines := linesNaming(s.d, "vfio4")
	if len(lines) != 1 || logField(lines[0], "level") != "info" {
		t.Errorf("log lines naming the foreign device vfio4: %q, want exactly one at info", lines)
	}
	// Only the two endpoints' sockets.
	socks, _ := s.node.PluginSockets()
	if len(socks) != 2 {
		t.Errorf("plugin sockets %v, want the two endpoints", socks)
	}
}

// The kernel's own sysfs shape: /sys/class/vfio-dev/vfioN is a symlink into the PCI device's
// directory and its "device" link is relative to that real location.
func TestKataKernelSysfsLayout(t *testing.T) {
	s := newKata(t)
	s.tree.KernelLayout = true
	s.add(kataMain...)
	s.must(s.tree.AddPCI(GPU("0000:43:00.0", 0))) // sysfs without cdev, as a class symlink
	s.must(s.tree.AddClass(9, "0000:43:00.0"))
	want := kataExpect(kataMain)
	s.startDaemon()
	s.kataReady(want)
	for _, r := range KataResources {
		s.checkKataSpec(r, want[r])
	}
	if lines := linesNaming(s.d, "vfio9"); len(lines) != 1 || logField(lines[0], "level") != "warn" {
		t.Errorf("log lines naming vfio9 (sysfs without cdev): %q, want one warning", lines)
	}
}

func TestKataAllocate(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon()
	ps := s.kataReady(want)
	gpuSpec := s.checkKataSpec(KataGPU, want[KataGPU])

	a, err := s.k.Allocate(KataGPU, []string{"1"})
	if err != nil {
		s.fatalf("Allocate [1]: %v", err)
	}
	if strings.Join(a.Calls, ",") != "GetPreferredAllocation,Allocate" || len(a.Full.ContainerResponses) != 1 {
		t.Errorf("calls %v, %d container responses; want GetPreferredAllocation, Allocate and one response", a.Calls, len(a.Full.ContainerResponses))
	}
	checkKataAllocation(t, a.Response, KataGPU, []string{"1"})
	// What the runtime resolves "nvidia.com/gpu=1" to: the second GPU in PCI order.
	var node *CDIDeviceNode
	for _, d := range gpuSpec.Devices {
		if d.Name == "1" {
			node = d.ContainerEdits.DeviceNodes[0]
		}
	}
	if node == nil || node.Path != "/dev/vfio/devices/vfio5" {
		t.Fatalf("spec maps nvidia.com/gpu=1 to %+v, want /dev/vfio/devices/vfio5", node)
	}
	host := filepath.Join(s.node.Root, node.Path)
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
		t.Fatalf("%s is not a character device (%v)", host, err)
	}
	maj, min, _ := s.tree.CdevNumber(5)
	if bdf, err := s.tree.BDFOf(5); err != nil || bdf != "0000:42:00.0" || maj != KataVFIOMajor || min != 5 {
		t.Errorf("vfio5 is %d:%d at %q (%v), want the second GPU 0000:42:00.0", maj, min, bdf, err)
	}

	for r, ids := range map[string][]string{KataGPU: {"3", "0"}, KataNVSwitch: {"0", "1"}} {
		a, err := s.k.Allocate(r, ids)
		if err != nil {
			t.Errorf("Allocate %s %v: %v", r, ids, err)
			continue
		}
		checkKataAllocation(t, a.Response, r, ids)
	}

	// Unknown IDs: INVALID_ARGUMENT naming them; the endpoint keeps serving.
	for r, ids := range map[string][]string{KataGPU: {"0", "4"}, KataNVSwitch: {"2"}} {
		_, err := s.k.Allocate(r, ids)
		st, _ := status.FromError(err)
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), ids[len(ids)-1]) {
			t.Errorf("Allocate %s %v: %v, want InvalidArgument naming %s", r, ids, err, ids[len(ids)-1])
		}
	}
	if _, err := s.k.Allocate(KataGPU, []string{"gpu-0"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate [gpu-0]: %v, want InvalidArgument", err)
	}
	if _, err := s.k.Allocate(KataGPU, []string{"2"}); err != nil {
		t.Errorf("Allocate after the rejected ones: %v", err)
	}
	// Several containers in one call: one answer each, in order.
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	reqs := [][]string{{"2"}, {"0", "1"}}
	resp, err := ps[KataGPU].Client().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: reqs[0]}, {DevicesIds: reqs[1]}}})
	if err != nil || len(resp.ContainerResponses) != len(reqs) {
		t.Errorf("Allocate for two containers: %v, %v", resp, err)
	} else {
		for i, ids := range reqs {
			checkKataAllocation(t, resp.ContainerResponses[i], KataGPU, ids)
		}
	}
	for r, p := range ps {
		if s.k.Current(r) != p {
			t.Errorf("%s re-registered during Allocate", r)
		}
	}
}

// checkKataAllocation: cdi_devices "<resource>=<id>" per ID, one cdi.k8s.io annotation with
// the same names, nothing else (no device specs, mounts or envs: the runtime gets it from CDI).
func checkKataAllocation(t *testing.T, c *api.ContainerAllocateResponse, resource string, ids []string) {
	t.Helper()
	checkKataAllocationKey(t, c, resource, KataAnnotationKey(resource, ids[0]), ids)
}

// checkKataAllocationKey is checkKataAllocation with the annotation key given (the plugin
// name of RESOURCE_NAMING=sku is not derived from the resource name).
func checkKataAllocationKey(t *testing.T, c *api.ContainerAllocateResponse, resource, key string, ids []string) {
	t.Helper()
	var names, got []string
	for _, id := range ids {
		names = append(names, resource+"="+id)
	}
	for _, d := range c.CdiDevices {
		got = append(got, d.Name)
	}
	if !reflect.DeepEqual(got, names) {
		t.Errorf("cdi_devices %q, want %q", got, names)
	}
	wantAnn := map[string]string{key: strings.Join(names, ",")}
	if !reflect.DeepEqual(c.Annotations, wantAnn) {
		t.Errorf("annotations %q, want %q", c.Annotations, wantAnn)
	}
	// The CDI library's annotation key rule: the name part at most 63 characters,
	// alphanumeric at both ends, [-_.] inside.
	if name := strings.TrimPrefix(key, "cdi.k8s.io/"); len(name) > 63 ||
		!regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`).MatchString(name) {
		t.Errorf("annotation key %q is not a valid CDI annotation key", key)
	}
	if len(c.Devices) != 0 || len(c.Mounts) != 0 || len(c.Envs) != 0 {
		t.Errorf("Allocate returned devices %v, mounts %v, envs %v; want CDI names only", c.Devices, c.Mounts, c.Envs)
	}
}

// kataHostile is one broken entry next to good ones: setup breaks it; the entry must be
// skipped with exactly one log line naming it at level.
type kataHostile struct {
	name  string // the name the log line must carry
	what  string
	level string
	setup func(s *kataScenario)
}

func TestKataHostileTree(t *testing.T) {
	s := newKata(t)
	good := []kataEntry{
		{1, GPU("0000:05:00.0", 0)},
		{2, GPU("0000:20:00.1", 1)}, // numa_node removed below: advertised without topology
		{3, GPU("0000:40:00.0", 1)}, // numa_node garbage below: advertised without topology
		{4, NVSwitch("0000:21:00.1", 1)},
	}
	s.add(good...)
	s.must(s.tree.RemovePCIAttr("0000:20:00.1", "numa_node"))
	s.must(s.tree.WritePCIAttr("0000:40:00.0", "numa_node", "node1\n"))
	good[1].F.NUMA, good[2].F.NUMA = -1, -1

	// Every hostile entry looks like a GPU at 0000:1a:00.0..0000:2d:00.0, between the good
	// ones, so advertising any of them would shift the IDs.
	gpu := func(n int) PCIFunc { return GPU(fmt.Sprintf("0000:%02x:00.0", 0x10+n), 0) }
	// outside is a valid GPU directory outside the node root.
	outside := t.TempDir()
	outsideBDF := filepath.Join(outside, "0000:2a:00.0")
	s.must(os.Mkdir(outsideBDF, 0o755))
	for f, v := range map[string]string{"vendor": "0x10de\n", "class": "0x030200\n", "numa_node": "0\n"} {
		s.must(os.WriteFile(filepath.Join(outsideBDF, f), []byte(v), 0o444))
	}
	cases := []kataHostile{
		{"vfio10", "vendor missing", "warn", func(s *kataScenario) {
			s.add(kataEntry{10, gpu(10)})
			s.must(s.tree.RemovePCIAttr(gpu(10).BDF, "vendor"))
		}},
		{"vfio11", "class missing", "warn", func(s *kataScenario) {
			s.add(kataEntry{11, gpu(11)})
			s.must(s.tree.RemovePCIAttr(gpu(11).BDF, "class"))
		}},
		{"vfio12", "garbage in class", "warn", func(s *kataScenario) {
			s.add(kataEntry{12, gpu(12)})
			s.must(s.tree.WritePCIAttr(gpu(12).BDF, "class", "3D controller\n"))
		}},
		{"vfio13", "empty class", "warn", func(s *kataScenario) {
			s.add(kataEntry{13, gpu(13)})
			s.must(s.tree.WritePCIAttr(gpu(13).BDF, "class", ""))
		}},
		{"vfio14", "class longer than a bounded read", "warn", func(s *kataScenario) {
			s.add(kataEntry{14, gpu(14)})
			s.must(s.tree.WritePCIAttr(gpu(14).BDF, "class", "0x030200\n"+strings.Repeat("0", 200)))
		}},
		{"vfio15", "class out of range", "warn", func(s *kataScenario) {
			s.add(kataEntry{15, gpu(15)})
			s.must(s.tree.WritePCIAttr(gpu(15).BDF, "class", "0x1000302000\n"))
		}},
		{"vfio16", "garbage in vendor", "warn", func(s *kataScenario) {
			s.add(kataEntry{16, gpu(16)})
			s.must(s.tree.WritePCIAttr(gpu(16).BDF, "vendor", "nvidia\n"))
		}},
		{"vfio17", "symlink loop", "warn", func(s *kataScenario) {
			s.add(kataEntry{17, gpu(17)})
			s.must(s.tree.LoopLink(17))
		}},
		{"vfio18", "cdev without sysfs", "warn", func(s *kataScenario) {
			s.must(s.tree.AddCdev(18))
		}},
		{"vfio19", "sysfs without cdev", "warn", func(s *kataScenario) {
			s.must(s.tree.AddPCI(gpu(19)))
			s.must(s.tree.AddClass(19, gpu(19).BDF))
		}},
		{"vfio20", "another vendor", "info", func(s *kataScenario) {
			s.add(kataEntry{20, PCIFunc{BDF: gpu(20).BDF, Vendor: 0x1002, Class: ClassGPU, NUMA: 0}})
		}},
		{"vfio21", "NVIDIA function of a class not in the table", "info", func(s *kataScenario) {
			s.add(kataEntry{21, PCIFunc{BDF: gpu(21).BDF, Vendor: NvidiaVendor, Class: 0x040300, NUMA: 0}})
		}},
		{"vfio22", "dev number mismatch", "warn", func(s *kataScenario) {
			s.add(kataEntry{22, gpu(22)})
			s.must(s.tree.WriteDev(22, fmt.Sprintf("%d:%d\n", KataVFIOMajor, 99)))
		}},
		{"vfio23", "dev missing", "warn", func(s *kataScenario) {
			s.add(kataEntry{23, gpu(23)})
			s.must(s.tree.RemoveClassFile(23, "dev"))
		}},
		{"vfio24", "garbage in dev", "warn", func(s *kataScenario) {
			s.add(kataEntry{24, gpu(24)})
			s.must(s.tree.WriteDev(24, "two-three-seven\n"))
		}},
		{"vfio25", "device link missing", "warn", func(s *kataScenario) {
			s.add(kataEntry{25, gpu(25)})
			s.must(s.tree.RemoveClassFile(25, "device"))
		}},
		{"vfio26", "device link leaving the root", "warn", func(s *kataScenario) {
			s.must(s.tree.AddClass(26, "unused"))
			s.must(s.tree.Relink(26, outsideBDF))
			s.must(s.tree.AddCdev(26))
		}},
		{"vfio27", "device link to a non-PCI device", "warn", func(s *kataScenario) {
			platform := filepath.Join(s.tree.Root, "sys/devices/platform/vfio-platform.0")
			s.must(os.MkdirAll(platform, 0o755))
			for f, v := range map[string]string{"vendor": "0x10de\n", "class": "0x030200\n", "numa_node": "0\n"} {
				s.must(os.WriteFile(filepath.Join(platform, f), []byte(v), 0o444))
			}
			s.must(s.tree.AddClass(27, "unused"))
			s.must(s.tree.Relink(27, "../../../devices/platform/vfio-platform.0"))
			s.must(s.tree.AddCdev(27))
		}},
		{"vfio28", "a regular file, not a character device", "warn", func(s *kataScenario) {
			s.must(os.WriteFile(s.tree.CdevPath(28), nil, 0o644))
		}},
		// Two cdevs claiming one PCI device: neither can be trusted. Each skip line names
		// the other entry too.
		{"vfio30", "a PCI device claimed twice", "warn", func(s *kataScenario) {
			s.add(kataEntry{30, gpu(30)})
			s.must(s.tree.AddClass(31, gpu(30).BDF))
			s.must(s.tree.AddCdev(31))
		}},
		{"vfio31", "a PCI device claimed twice", "warn", func(s *kataScenario) {}},
		{"vfio29", "a block device", "warn", func(s *kataScenario) {
			s.must(syscall.Mknod(s.tree.CdevPath(29), syscall.S_IFBLK|0o600, int(unix.Mkdev(KataVFIOMajor, 29))))
		}},
	}
	for _, c := range cases {
		c.setup(s)
	}
	want := kataExpect(good)
	s.startDaemon()
	s.kataReady(want)
	for _, r := range KataResources {
		s.checkKataSpec(r, want[r])
	}
	for _, c := range cases {
		lines, n := linesNaming(s.d, c.name), 1
		if c.what == "a PCI device claimed twice" {
			n = 2 // its own line and the other claimant's
		}
		if len(lines) != n {
			t.Errorf("%s (%s): %d log lines name it, want %d: %q", c.name, c.what, len(lines), n, lines)
			continue
		}
		for _, l := range lines {
			t.Logf("%s (%s): %s", c.name, c.what, l)
			if lvl := logField(l, "level"); lvl != c.level {
				t.Errorf("%s (%s): logged at %s, want %s: %s", c.name, c.what, lvl, c.level, l)
			}
		}
	}
	// The good devices with unknown NUMA affinity are advertised (checked above) and logged.
	for _, name := range []string{"vfio2", "vfio3"} {
		n := 0
		for _, l := range linesNaming(s.d, name) {
			if logField(l, "level") == "warn" && logField(l, "msg") == "NUMA node unknown, advertising without topology" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d warnings about its unknown NUMA node, want one", name, n)
		}
	}
	if s.d.Exited() {
		t.Errorf("the daemon exited: %s", s.d.ExitDescription())
	}
}

func TestKataKubeletRestart(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon()
	old := s.kataReady(want)
	for round := 0; round < 2; round++ {
		if err := s.k.Restart(); err != nil {
			t.Fatal(err)
		}
		cur := s.kataSettled(old, want, eventBound)
		for r := range cur {
			t.Logf("%s re-registered as %s (registration #%d)", r, cur[r].Endpoint, cur[r].Seq)
		}
		old = cur
	}
	for r, ids := range map[string][]string{KataGPU: {"2"}, KataNVSwitch: {"1"}} {
		if a, err := s.k.Allocate(r, ids); err != nil {
			t.Errorf("Allocate %s after the restarts: %v", r, err)
		} else {
			checkKataAllocation(t, a.Response, r, ids)
		}
	}
}

// kataSettled waits until every resource of old registered again under a new socket name,
// those sockets are the only ones in the directory, and each lists its devices.
func (s *kataScenario) kataSettled(old map[string]*Plugin, want map[string][]kataDev, bound time.Duration) map[string]*Plugin {
	s.t.Helper()
	cur := map[string]*Plugin{}
	var why string
	ok := s.wait(bound, func() bool {
		var socks []string
		for r, p := range old {
			c := s.k.Current(r)
			if c == nil || c.Seq <= p.Seq || c.Endpoint == p.Endpoint {
				why = fmt.Sprintf("%s: no registration under a new socket after #%d", r, p.Seq)
				return false
			}
			snap, ok := c.Latest()
			if !ok {
				why = r + ": no snapshot yet"
				return false
			}
			if err := checkKataDevices(snap.Devices, want[r]); err != nil {
				why = r + ": " + err.Error()
				return false
			}
			cur[r] = c
			socks = append(socks, c.Endpoint)
		}
		sort.Strings(socks)
		got, err := s.node.PluginSockets()
		if err != nil || !reflect.DeepEqual(got, socks) {
			why = fmt.Sprintf("plugin sockets %v (%v), want %v", got, err, socks)
			return false
		}
		return true
	})
	if !ok {
		s.fatalf("not settled within %v: %s", bound, why)
	}
	return cur
}

func TestKataDeviceSetChanged(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vfio   string
		kinds  []string
		change func(s *kataScenario)
	}{
		{"gpu-added", "vfio9", []string{"added"}, func(s *kataScenario) { s.add(kataEntry{9, GPU("0000:43:00.0", 0)}) }},
		// Removed and re-created at once: seen as removed, or as changed if both land together.
		{"gpu-renumbered", "vfio1", []string{"removed", "changed"}, func(s *kataScenario) {
			s.must(s.tree.RemoveCdev(1))
			s.must(s.tree.WriteDev(1, fmt.Sprintf("%d:%d\n", KataVFIOMajor, 41)))
			s.must(s.tree.AddCdevNumber(1, KataVFIOMajor, 41))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKata(t)
			s.add(kataMain...)
			want := kataExpect(kataMain)
			s.startDaemon()
			ps := s.kataReady(want)
			specs := map[string][]byte{}
			for _, r := range KataResources {
				specs[r] = s.readSpec(r)
			}
			tc.change(s)
			s.checkSetChangeExit(eventBound, tc.vfio, tc.kinds...)
			for r, b := range specs {
				if got, err := os.ReadFile(s.kataSpecPath(r)); err != nil || !bytes.Equal(got, b) {
					t.Errorf("spec of %s not kept as it was (%v)", r, err)
				}
			}
			for r, p := range ps {
				if _, ok := p.WaitEnded(eventBound); !ok {
					t.Errorf("kubelet's %s stream did not end when the daemon exited", r)
				}
			}
		})
	}
}

// A removed device (its cdev gone: unbound from vfio-pci, hot-unplugged) is no longer a reason
// to restart: its ID turns Unhealthy at once, the others stay Healthy and allocatable, and it
// is Healthy again when it comes back as it was. (It ended the daemon with status 3 before.)
func TestKataDeviceRemovedUnhealthy(t *testing.T) {
	for _, tc := range []struct {
		name, resource, id string
		n                  int
	}{{"gpu", KataGPU, "1", 5}, {"nvswitch", KataNVSwitch, "0", 6}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKata(t)
			s.add(kataMain...)
			want := kataExpect(kataMain)
			s.startDaemon()
			s.kataReady(want)
			spec := s.readSpec(tc.resource)
			major, minor, err := s.tree.CdevNumber(tc.n)
			s.must(err)
			s.must(s.tree.RemoveCdev(tc.n))
			s.kataDevices(tc.resource, eventBound, onlyDown(tc.id))
			l := s.waitLogMsg(eventBound, "warn", "device unusable, advertising it Unhealthy", "id="+tc.id+" ")
			if !strings.Contains(l, "resource="+tc.resource) || !strings.Contains(l, VFIOName(tc.n)) {
				t.Errorf("line %q: want resource=%s and the missing %s", l, tc.resource, VFIOName(tc.n))
			}
			a, err := s.k.Allocate(tc.resource, []string{tc.id})
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "ID "+tc.id+":") {
				t.Errorf("Allocate of the removed device: %v %v, want UNAVAILABLE naming ID %s", a, err, tc.id)
			}
			other := "0"
			if tc.id == "0" {
				other = "1"
			}
			if _, err := s.k.Allocate(tc.resource, []string{other}); err != nil {
				t.Errorf("Allocate of another device: %v", err)
			}
			s.must(s.tree.AddCdevNumber(tc.n, major, minor))
			s.kataDevices(tc.resource, eventBound, onlyDown())
			s.waitLogMsg(eventBound, "info", "device usable again", "id="+tc.id+" ")
			if n := len(logLines(s.d, "warn", "device unusable, advertising it Unhealthy")); n != 1 {
				t.Errorf("%d warn lines for one removal, want 1", n)
			}
			if got := s.readSpec(tc.resource); !bytes.Equal(got, spec) {
				t.Errorf("spec of %s changed", tc.resource)
			}
			if s.d.Exited() {
				t.Errorf("the daemon exited")
			}
		})
	}
}

// onlyDown: exactly the IDs down are Unhealthy, every other one Healthy.
func onlyDown(down ...string) func([]*api.Device) error {
	return func(devs []*api.Device) error {
		set := map[string]bool{}
		for _, id := range down {
			set[id] = true
		}
		for _, d := range devs {
			if want := map[bool]string{true: Unhealthy, false: Healthy}[set[d.ID]]; d.Health != want {
				return fmt.Errorf("device %s is %s, want %s: %s", d.ID, d.Health, want, DescribeDevices(devs))
			}
		}
		return nil
	}
}

// A changed sysfs identity under an unchanged cdev is found by the periodic rescan (30 s).
func TestKataIdentityChanged(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon()
	s.kataReady(kataExpect(kataMain))
	// The GPU behind vfio5 now reports the NVSwitch class: the resource it belongs to changed.
	s.must(s.tree.WritePCIAttr("0000:42:00.0", "class", fmt.Sprintf("0x%06x\n", ClassNVSwitch)))
	s.checkSetChangeExit(periodBound, "vfio5", "changed")
}

func TestKataNoDevices(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(s *kataScenario)
		grow  bool // a GPU appearing afterwards makes the daemon exit 3
	}{
		{"empty", func(s *kataScenario) {}, true},
		{"only-unmatched", func(s *kataScenario) {
			s.add(kataEntry{0, PCIFunc{BDF: "0000:01:00.0", Vendor: 0x15b3, Class: 0x020700, NUMA: 0}})
			s.must(s.tree.AddCdev(1)) // a cdev without sysfs
		}, true},
		{"no-vfio-at-all", func(s *kataScenario) {
			s.must(os.RemoveAll(filepath.Join(s.node.Root, "dev/vfio")))
			s.must(os.RemoveAll(filepath.Join(s.node.Root, "sys")))
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newKata(t)
			tc.setup(s)
			s.startDaemon()
			s.waitLogMsg(startBound, "warn", "no VFIO device matches the table; nothing to advertise")
			s.waitProbe(0, startBound, "--health-check")
			if r := s.probe("--health-check=readiness"); r.Code != 1 {
				t.Errorf("readiness with nothing to advertise: exit %d, want 1", r.Code)
			}
			socks, _ := s.node.PluginSockets()
			if len(socks) != 1 || !IsSocketOf(socks[0], KataIdlePrefix) {
				s.fatalf("plugin sockets %v, want one %s-*.sock", socks, KataIdlePrefix)
			}
			if rs := s.k.Resources(); len(rs) != 0 {
				t.Errorf("registered %v with nothing to advertise", rs)
			}
			for _, e := range s.k.Events() {
				if e.Kind == "register-rejected" {
					t.Errorf("the idle daemon tried to register: %s", e)
				}
			}
			if files := s.cdiFiles(); len(files) != 0 {
				t.Errorf("CDI directory holds %v with nothing to advertise", files)
			}
			if s.d.Exited() {
				s.fatalf("the daemon did not stay up")
			}
			// A kubelet restart deletes every socket: the idle one comes back (else liveness
			// would fail on every node without devices), still never registered.
			if err := s.k.Restart(); err != nil {
				t.Fatal(err)
			}
			if !s.wait(eventBound, func() bool {
				now, _ := s.node.PluginSockets()
				return len(now) == 1 && IsSocketOf(now[0], KataIdlePrefix) && now[0] != socks[0]
			}) {
				now, _ := s.node.PluginSockets()
				s.fatalf("plugin sockets %v after a kubelet restart, want a new %s-*.sock", now, KataIdlePrefix)
			}
			s.waitProbe(0, eventBound, "--health-check")
			if rs := s.k.Resources(); len(rs) != 0 {
				t.Errorf("registered %v after a kubelet restart with nothing to advertise", rs)
			}
			if !tc.grow {
				return
			}
			// The vfio module loaded later creates the directories, then the cdev.
			s.must(os.MkdirAll(s.tree.DevicesDir, 0o755))
			s.add(kataEntry{7, GPU("0000:41:00.0", 0)})
			s.checkSetChangeExit(eventBound, "vfio7", "added")
		})
	}
}

// A resource without devices gets no spec; an old spec of ours for it is left alone.
func TestKataAbsentResourceSpecKept(t *testing.T) {
	s := newKata(t)
	gpus := []kataEntry{{0, GPU("0000:41:00.0", 0)}, {1, GPU("0000:42:00.0", 0)}}
	s.add(gpus...)
	stale := []byte("cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/nvswitch\"\ndevices:\n  - name: \"0\"\n" +
		"    containerEdits:\n      deviceNodes:\n        - path: \"/dev/vfio/devices/vfio9\"\n")
	old := s.kataSpecPath(KataNVSwitch)
	s.must(os.WriteFile(old, stale, 0o644))
	s.startDaemon()
	want := kataExpect(gpus)
	s.kataReady(want)
	s.checkKataSpec(KataGPU, want[KataGPU])
	if b, err := os.ReadFile(old); err != nil || !bytes.Equal(b, stale) {
		t.Errorf("the old %s was changed or removed (%v)", KataSpecFile(KataNVSwitch), err)
	}
	if n := s.k.Registrations(KataNVSwitch); n != 0 {
		t.Errorf("%s registered %d times without devices", KataNVSwitch, n)
	}
}

func TestKataSIGTERM(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon()
	ps := s.kataReady(kataExpect(kataMain))
	specs := map[string][]byte{}
	for _, r := range KataResources {
		specs[r] = s.readSpec(r)
	}
	s.must(s.d.Signal(syscall.SIGTERM))
	if code := s.waitExit(exitBound); code != 0 {
		t.Errorf("exit %s after SIGTERM, want 0", s.d.ExitDescription())
	}
	if socks, _ := s.node.PluginSockets(); len(socks) != 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
	for r, b := range specs {
		if got, err := os.ReadFile(s.kataSpecPath(r)); err != nil || !bytes.Equal(got, b) {
			t.Errorf("spec of %s not kept on shutdown (%v)", r, err)
		}
	}
	for r, p := range ps {
		if _, ok := p.WaitEnded(eventBound); !ok {
			t.Errorf("kubelet's %s stream did not end when the daemon exited", r)
		}
	}
}

var kataVersionRe = regexp.MustCompile(`^kata-device-plugin (\S+) \(commit (\S+)\)$`)

func TestKataVersionAndUsage(t *testing.T) {
	s := newKata(t)
	r := s.probe("--version")
	m := kataVersionRe.FindStringSubmatch(strings.TrimRight(r.Stdout, "\n"))
	if r.Code != 0 || m == nil {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q; want exit 0 and \"kata-device-plugin <version> (commit <hash>)\"",
			r.Code, r.Stdout, r.Stderr)
	}
	if r := s.probe("--help"); r.Code != 0 || !strings.Contains(r.Stdout, "--health-check") {
		t.Errorf("--help: exit %d, stdout %q; want exit 0 and the usage", r.Code, r.Stdout)
	}
	for _, args := range [][]string{{"--bogus"}, {"--device-access"}, {"--health-check=liveness"}, {"extra"}} {
		if r := s.probe(args...); r.Code != 2 || !strings.Contains(r.Stderr, "Usage") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and the usage", args, r.Code, r.Stderr)
		}
	}
	if socks, _ := s.node.PluginSockets(); len(socks) != 0 || len(s.k.Resources()) != 0 {
		t.Errorf("a one-shot command served or registered")
	}
	// The first line of a running daemon carries the same version and commit.
	s.add(kataMain...)
	s.startDaemon()
	s.kataRegistered(KataGPU, 1, startBound)
	lines := s.d.Stderr.Lines()
	if len(lines) == 0 || logField(lines[0], "msg") != "starting" || !strings.Contains(lines[0], "program=kata-device-plugin") ||
		!strings.Contains(lines[0], "version="+m[1]) || !strings.Contains(lines[0], "commit="+m[2]) {
		t.Errorf("first log line %q, want msg=starting program=kata-device-plugin version=%s commit=%s", first(lines), m[1], m[2])
	}
}

func TestKataLogLevel(t *testing.T) {
	for _, tc := range []struct {
		level   string
		info    bool // info lines expected
		warning bool // a warning about LOG_LEVEL expected
	}{{"warn", false, false}, {"loud", true, true}} {
		t.Run(tc.level, func(t *testing.T) {
			s := newKata(t)
			s.add(kataMain...)
			s.startDaemon("LOG_LEVEL=" + tc.level)
			s.kataReady(kataExpect(kataMain))
			var info, debug, warned int
			for _, l := range s.d.Stderr.Lines() {
				switch logField(l, "level") {
				case "info":
					info++
				case "debug":
					debug++
				case "warn":
					if strings.Contains(l, "LOG_LEVEL") {
						warned++
					}
				}
			}
			if debug != 0 || (info > 0) != tc.info || (warned == 1) != tc.warning {
				t.Errorf("LOG_LEVEL=%s: %d debug, %d info lines, %d warnings about LOG_LEVEL; want no debug, info %v, warning %v",
					tc.level, debug, info, warned, tc.info, tc.warning)
			}
		})
	}
}

func TestKataHealthCheck(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	if r := s.probe("--health-check"); r.Code != 1 {
		t.Errorf("liveness with no daemon running: exit %d, want 1", r.Code)
	}
	s.startDaemon()
	s.kataReady(kataExpect(kataMain))
	s.waitProbe(0, eventBound, "--health-check")
	s.waitProbe(0, eventBound, "--health-check=readiness")
	// No kubelet: not ready, still live. Live within the bound, not at once: the stream's end
	// makes the daemon re-register, and between the old server's socket going and the fresh
	// one serving a single probe finds no socket (as in TestHyperlightHealthCheck).
	s.k.Stop()
	s.waitProbe(1, eventBound, "--health-check=readiness")
	s.waitProbe(0, eventBound, "--health-check")
	if _, err := s.d.Stop(exitBound); err != nil {
		t.Error(err)
	}
	if r := s.probe("--health-check"); r.Code != 1 {
		t.Errorf("liveness after the daemon stopped: exit %d, want 1", r.Code)
	}
}

func TestKataCDIRepaired(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon()
	ps := s.kataReady(kataExpect(kataMain))
	other := filepath.Join(s.node.CDIDir, "other-vendor.yaml")
	otherContent := []byte("cdiVersion: \"0.3.0\"\nkind: \"example.com/other\"\ndevices: []\n")
	s.must(os.WriteFile(other, otherContent, 0o600))
	orig := s.readSpec(KataGPU)
	s.must(os.Remove(s.kataSpecPath(KataGPU)))
	s.waitFile(s.kataSpecPath(KataGPU), orig, eventBound)
	s.must(os.WriteFile(s.kataSpecPath(KataGPU), []byte("kind: nvidia.com/gpu\n"), 0o644))
	s.waitFile(s.kataSpecPath(KataGPU), orig, eventBound)
	if b, _ := os.ReadFile(other); !bytes.Equal(b, otherContent) {
		t.Errorf("the daemon touched %s", other)
	}
	for r, p := range ps {
		if s.k.Current(r) != p {
			t.Errorf("%s re-registered after a CDI repair", r)
		}
	}
}

// waitFile waits until path is a regular file holding exactly want.
func (s *kataScenario) waitFile(path string, want []byte, bound time.Duration) {
	s.t.Helper()
	if !s.wait(bound, func() bool {
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			return false
		}
		b, err := os.ReadFile(path)
		return err == nil && bytes.Equal(b, want)
	}) {
		s.fatalf("%s not repaired within %v", path, bound)
	}
}

// One resource's spec cannot be repaired: only that resource turns Unhealthy; readiness
// fails, liveness holds; both recover when the directory is writable again.
func TestKataCDIReadOnlyPerResource(t *testing.T) {
	kataBinary(t)
	privateMountNamespace(t)
	s := newKata(t)
	s.add(kataMain...)
	node := s.node
	rw := filepath.Join(node.Root, "cdi-rw")
	s.must(os.Mkdir(rw, 0o755))
	mount(t, node.CDIDir, "--bind", node.CDIDir, node.CDIDir)
	mount(t, rw, "--bind", node.CDIDir, rw)
	want := kataExpect(kataMain)
	s.startDaemon()
	ps := s.kataReady(want)
	orig := s.readSpec(KataGPU)
	s.waitProbe(0, eventBound, "--health-check=readiness")

	mount(t, "", "-o", "remount,bind,ro", node.CDIDir)
	s.must(os.Remove(filepath.Join(rw, KataSpecFile(KataGPU))))
	s.kataDevices(KataGPU, eventBound, func(d []*api.Device) error {
		if !CountHealth(len(want[KataGPU]), Unhealthy)(d) {
			return fmt.Errorf("want every GPU Unhealthy: %s", DescribeDevices(d))
		}
		return nil
	})
	s.waitProbe(1, eventBound, "--health-check=readiness")
	if r := s.probe("--health-check"); r.Code != 0 {
		t.Errorf("liveness while a resource is unhealthy: exit %d, want 0 (%s)", r.Code, r.Stderr)
	}
	for _, snap := range ps[KataNVSwitch].Snapshots() {
		if err := checkKataDevices(snap.Devices, want[KataNVSwitch]); err != nil {
			t.Errorf("the NVSwitches changed with the GPU spec: %v", err)
		}
	}

	mount(t, "", "-o", "remount,bind,rw", node.CDIDir)
	s.waitFile(s.kataSpecPath(KataGPU), orig, backoffBound)
	s.kataDevices(KataGPU, backoffBound, func(d []*api.Device) error { return checkKataDevices(d, want[KataGPU]) })
	s.waitProbe(0, eventBound, "--health-check=readiness")
	for r, p := range ps {
		if s.k.Current(r) != p {
			t.Errorf("%s re-registered instead of reporting health on the open stream", r)
		}
	}
}

// The CDI checker itself must reject what a runtime would reject.
func TestKataCDIChecker(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("python3 (with python3-yaml) is needed to parse the YAML specs: %v", err)
	}
	tree := &KataTree{Major: KataVFIOMajor}
	want := []kataDev{{ID: "0", N: 3}, {ID: "1", N: 5}}
	good := "cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n" +
		"  - name: \"0\"\n    containerEdits:\n      deviceNodes:\n        - path: \"/dev/vfio/devices/vfio3\"\n          type: \"c\"\n" +
		"  - name: \"1\"\n    containerEdits:\n      deviceNodes:\n        - path: \"/dev/vfio/devices/vfio5\"\n          type: \"c\"\n"
	check := func(doc string) error {
		spec, err := parseCDIYAML([]byte(doc))
		if err == nil {
			err = checkCDIRules(spec)
		}
		if err == nil {
			err = checkKataSpecContent(spec, KataGPU, want, tree)
		}
		return err
	}
	if err := check(good); err != nil {
		t.Fatalf("a good spec was rejected: %v\n%s", err, good)
	}
	// The same spec as JSON (a YAML subset) passes too.
	if err := check(`{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[` +
		`{"name":"0","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/devices/vfio3","type":"c"}]}},` +
		`{"name":"1","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/devices/vfio5","type":"c"}]}}]}`); err != nil {
		t.Errorf("the JSON form was rejected: %v", err)
	}
	for name, bad := range map[string]string{
		"unquoted numeric name":     strings.Replace(good, `name: "0"`, `name: 0`, 1),
		"version too old":           strings.Replace(good, `"0.5.0"`, `"0.3.0"`, 1),
		"version above the minimum": strings.Replace(good, `"0.5.0"`, `"0.6.0"`, 1),
		"unknown version":           strings.Replace(good, `"0.5.0"`, `"0.5.9"`, 1),
		"wrong kind":                strings.Replace(good, `nvidia.com/gpu`, `nvidia.com/pgpu`, 1),
		"invalid kind":              strings.Replace(good, `nvidia.com/gpu`, `nvidia.com/gpu/x`, 1),
		"swapped devices":           strings.Replace(strings.Replace(good, "vfio3", "vfioX", 1), "vfio5", "vfio3", 1),
		"unknown field":             strings.Replace(good, `type: "c"`, `typ: "c"`, 1),
		"duplicate key":             strings.Replace(good, `kind: "nvidia.com/gpu"`, "kind: \"nvidia.com/gpu\"\nkind: \"nvidia.com/gpu\"", 1),
		"duplicate device":          strings.Replace(good, `name: "1"`, `name: "0"`, 1),
		"type not c":                strings.Replace(good, `type: "c"`, `type: "char"`, 1),
		"not YAML":                  good + "devices: [\n",
		"two documents":             good + "---\n" + good,
		"spec-wide edits":           good + "containerEdits:\n  env: [\"A=1\"]\n",
		"hostPath elsewhere":        strings.Replace(good, `type: "c"`+"\n", "type: \"c\"\n          hostPath: \"/dev/vfio/devices/vfio9\"\n", 1),
	} {
		if err := check(bad); err == nil {
			t.Errorf("%s: accepted:\n%s", name, bad)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// ---- the CDI checker: YAML parsed by PyYAML, decoded strictly into the CDI schema, validated
// with the CDI library's rules; cdiVersion must be exactly the minimum the content requires.

// yamlToJSONScript converts one YAML document on stdin to JSON on stdout, refusing duplicate
// keys, several documents and anything JSON cannot express (dates, NaN, non-string keys).
const yamlToJSONScript = `
import json, sys, yaml
class Strict(yaml.SafeLoader):
    pass
def mapping(loader, node):
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(None, None, "non-string key %r" % (key,), key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, "duplicate key %r" % (key,), key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=True)
Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
try:
    docs = list(yaml.load_all(sys.stdin.buffer.read(), Loader=Strict))
    if len(docs) != 1:
        raise ValueError("want exactly one YAML document, got %d" % len(docs))
    out = json.dumps(docs[0], allow_nan=False)
except Exception as e:
    sys.exit("%s: %s" % (type(e).__name__, " ".join(str(e).split())))
sys.stdout.write(out)
`

// YAMLToJSON parses one YAML document with PyYAML (python3-yaml) and returns it as JSON.
func YAMLToJSON(data []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "python3", "-c", yamlToJSONScript)
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("not valid YAML (python3 yaml, %v: %s)", err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// The CDI schema (specs-go/config.go, v1.1.0): every field a spec may carry, nothing else.
type cdiSpec struct {
	Version        string            `json:"cdiVersion"`
	Kind           string            `json:"kind"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	Devices        []cdiDevice       `json:"devices"`
	ContainerEdits *cdiEdits         `json:"containerEdits,omitempty"`
}

type cdiDevice struct {
	Name           string            `json:"name"`
	Annotations    map[string]string `json:"annotations,omitempty"`
	ContainerEdits *cdiEdits         `json:"containerEdits"`
}

type cdiEdits struct {
	Env            []string         `json:"env,omitempty"`
	DeviceNodes    []*CDIDeviceNode `json:"deviceNodes,omitempty"`
	NetDevices     []cdiNetDevice   `json:"netDevices,omitempty"`
	Hooks          []cdiHook        `json:"hooks,omitempty"`
	Mounts         []cdiMount       `json:"mounts,omitempty"`
	IntelRdt       json.RawMessage  `json:"intelRdt,omitempty"`
	AdditionalGIDs []uint32         `json:"additionalGids,omitempty"`
}

type cdiMount struct {
	HostPath      string   `json:"hostPath"`
	ContainerPath string   `json:"containerPath"`
	Options       []string `json:"options,omitempty"`
	Type          string   `json:"type,omitempty"`
}

type cdiHook struct {
	HookName string   `json:"hookName"`
	Path     string   `json:"path"`
	Args     []string `json:"args,omitempty"`
	Env      []string `json:"env,omitempty"`
	Timeout  *int     `json:"timeout,omitempty"`
}

type cdiNetDevice struct {
	HostInterfaceName string `json:"hostInterfaceName"`
	Name              string `json:"name"`
}

func (e *cdiEdits) empty() bool {
	return e == nil || (len(e.Env) == 0 && len(e.DeviceNodes) == 0 && len(e.NetDevices) == 0 &&
		len(e.Hooks) == 0 && len(e.Mounts) == 0 && len(e.IntelRdt) == 0 && len(e.AdditionalGIDs) == 0)
}

// ParseCDIYAML parses a YAML CDI spec and decodes it strictly.
func parseCDIYAML(data []byte) (*cdiSpec, error) {
	js, err := YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var s cdiSpec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("not a CDI spec (strict decode): %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a CDI spec: trailing data")
	}
	return &s, nil
}

// cdiVersions in order (specs-go/version.go); 0.1.0 and 0.2.0 are known but never required.
var cdiVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"}

func cdiVersionIndex(v string) int {
	for i, k := range cdiVersions {
		if k == strings.TrimPrefix(v, "v") {
			return i
		}
	}
	return -1
}

// cdiRequiredVersion is the newest version whose feature the spec uses (version.go), 0.3.0 at least.
func cdiRequiredVersion(s *cdiSpec) string {
	req := cdiVersionIndex("0.3.0")
	need := func(v string) {
		if i := cdiVersionIndex(v); i > req {
			req = i
		}
	}
	edits := []*cdiEdits{s.ContainerEdits}
	if len(s.Annotations) > 0 {
		need("0.6.0")
	}
	if _, class, ok := strings.Cut(s.Kind, "/"); ok && strings.Contains(class, ".") {
		need("0.6.0")
	}
	for _, d := range s.Devices {
		edits = append(edits, d.ContainerEdits)
		if len(d.Annotations) > 0 {
			need("0.6.0")
		}
		if d.Name != "" && d.Name[0] >= '0' && d.Name[0] <= '9' {
			need("0.5.0")
		}
	}
	for _, e := range edits {
		if e == nil {
			continue
		}
		for _, n := range e.DeviceNodes {
			if n.HostPath != "" {
				need("0.5.0")
			}
		}
		for _, m := range e.Mounts {
			if m.Type != "" {
				need("0.4.0")
			}
		}
		if len(e.IntelRdt) > 0 || len(e.AdditionalGIDs) > 0 {
			need("0.7.0")
		}
		if len(e.NetDevices) > 0 {
			need("1.1.0")
		}
	}
	return cdiVersions[req]
}

var (
	cdiVendorClassRe = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)
	cdiDeviceNameRe  = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$`)
	cdiPermissionsRe = regexp.MustCompile(`^[rwm]*$`)
)

// checkCDIRules applies the CDI library's validation (parser.go, spec.go, device.go,
// container-edits.go) and the minimum-version rule.
func checkCDIRules(s *cdiSpec) error {
	if cdiVersionIndex(s.Version) < 0 {
		return fmt.Errorf("invalid cdiVersion %q", s.Version)
	}
	if want := cdiRequiredVersion(s); s.Version != want {
		return fmt.Errorf("cdiVersion %q, want the minimum the content requires, %q", s.Version, want)
	}
	vendor, class, ok := strings.Cut(s.Kind, "/")
	if !ok || !cdiVendorClassRe.MatchString(vendor) || !cdiVendorClassRe.MatchString(class) {
		return fmt.Errorf("invalid kind %q", s.Kind)
	}
	if len(s.Devices) == 0 {
		return fmt.Errorf("invalid spec, no devices")
	}
	if err := checkCDIEdits(s.ContainerEdits); err != nil {
		return fmt.Errorf("spec containerEdits: %v", err)
	}
	seen := map[string]bool{}
	for _, d := range s.Devices {
		if !cdiDeviceNameRe.MatchString(d.Name) {
			return fmt.Errorf("invalid device name %q", d.Name)
		}
		if seen[d.Name] {
			return fmt.Errorf("duplicate device name %q", d.Name)
		}
		seen[d.Name] = true
		if d.ContainerEdits.empty() {
			return fmt.Errorf("device %q: invalid device, empty device edits", d.Name)
		}
		if err := checkCDIEdits(d.ContainerEdits); err != nil {
			return fmt.Errorf("device %q: %v", d.Name, err)
		}
	}
	return nil
}

func checkCDIEdits(e *cdiEdits) error {
	if e == nil {
		return nil
	}
	for _, v := range e.Env {
		if strings.IndexByte(v, '=') <= 0 {
			return fmt.Errorf("invalid env %q", v)
		}
	}
	for _, n := range e.DeviceNodes {
		if n == nil || n.Path == "" {
			return fmt.Errorf("deviceNode without path")
		}
		switch n.Type {
		case "", "b", "c", "u", "p":
		default:
			return fmt.Errorf("deviceNode %s: invalid type %q", n.Path, n.Type)
		}
		if n.Permissions != "none" && !cdiPermissionsRe.MatchString(n.Permissions) {
			return fmt.Errorf("deviceNode %s: invalid permissions %q", n.Path, n.Permissions)
		}
	}
	for _, m := range e.Mounts {
		if m.HostPath == "" || m.ContainerPath == "" {
			return fmt.Errorf("invalid mount %+v", m)
		}
	}
	for _, h := range e.Hooks {
		if h.HookName == "" || !strings.HasPrefix(h.Path, "/") {
			return fmt.Errorf("invalid hook %+v", h)
		}
	}
	return nil
}
