package kubelet

// The scenario harness: a simulated node under a temporary root, the mock kubelet serving its
// device-plugins directory, and the real daemon from $SDP_BUILD_DIR. Every wait is bounded.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	api "sdp/v1beta1"
)

// Bounds. Generous: the daemon may run under ASan on a loaded 2-core CI machine.
const (
	startBound   = 15 * time.Second // daemon start to first registration
	eventBound   = 5 * time.Second  // an event-driven reaction (inotify, stream end)
	backoffBound = 20 * time.Second // a recovery through the 1 s..30 s retry backoff
	periodBound  = 40 * time.Second // a recovery that may need the 30 s periodic check
	exitBound    = 10 * time.Second
)

// endpointRe: the hypervisor plugin's socket names, "hl-<hash of the resource>-<n>.sock".
var endpointRe = SocketRe(SocketPrefix(HyperlightSocketTag, HyperlightResource))

type scenario struct {
	t    *testing.T
	node *Node
	k    *MockKubelet
	d    *Daemon
	bin  string
	args []string // the daemon's arguments (after bin)
	env  []string
}

func daemonBinary(t *testing.T) string {
	t.Helper()
	build, err := BuildDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Executable(build, HyperlightBinary)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// newNode makes a simulated node with <root>/dev/kvm (10:232), removed after the test.
func newNode(t *testing.T, kvm bool) *Node {
	t.Helper()
	return newNodeDirLen(t, kvm, 0)
}

// newNodeDirLen is newNode with a kubelet directory of exactly dirLen bytes (0: the shortest).
func newNodeDirLen(t *testing.T, kvm bool, dirLen int) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("scenario tests must run as root (they mknod /dev/kvm under a temporary root and mount)")
	}
	n, err := NewNodeKubeletDirLen(dirLen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Remove(); err != nil {
			t.Errorf("remove %s: %v", n.Root, err)
		}
	})
	if kvm {
		if err := n.MknodKVM(); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// newScenario builds a node with /dev/kvm, starts the mock kubelet and the daemon with env.
func newScenario(t *testing.T, env ...string) *scenario {
	s := prepare(t, newNode(t, true))
	s.startDaemon(env...)
	return s
}

// prepare starts the mock kubelet on node (for tests that set the node up first).
func prepare(t *testing.T, node *Node) *scenario {
	s := &scenario{t: t, node: node, bin: daemonBinary(t)}
	s.k = newMock(t, Config{Dir: node.KubeletDir})
	return s
}

func (s *scenario) startDaemon(extra ...string) {
	t := s.t
	t.Helper()
	s.env = DaemonEnv(s.node.Root, extra...)
	d, err := StartDaemon(s.bin, s.env, s.args...)
	if err != nil {
		t.Fatal(err)
	}
	s.d = d
	t.Cleanup(func() {
		if _, err := d.Stop(exitBound); err != nil {
			t.Errorf("daemon cleanup: %v", err)
		}
		if r := SanitizerReports(d.Log()); len(r) > 0 {
			t.Errorf("sanitizer reports in the daemon's log:\n%s", strings.Join(r, "\n"))
		}
		if t.Failed() {
			t.Logf("daemon (pid %d, %s) log:\n%s", d.Pid(), d.ExitDescription(), d.Log())
		}
	})
}

// fatalf fails the test, saying whether the daemon is still running.
func (s *scenario) fatalf(format string, args ...interface{}) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	if s.d != nil && s.d.Exited() {
		msg += fmt.Sprintf(" (the daemon exited: %s)", s.d.ExitDescription())
	}
	s.t.Fatal(msg)
}

// wait polls cond like Poll but gives up at once when the daemon has exited.
func (s *scenario) wait(bound time.Duration, cond func() bool) bool {
	return Poll(bound, func() bool { return cond() || (s.d != nil && s.d.Exited()) }) && cond()
}

// registered waits for the count-th registration of the hyperlight resource.
func (s *scenario) registered(count int, bound time.Duration) *Plugin {
	s.t.Helper()
	if !s.wait(bound, func() bool { return s.k.Registrations(HyperlightResource) >= count }) {
		s.fatalf("%s registered %d time(s) within %v, want %d", HyperlightResource,
			s.k.Registrations(HyperlightResource), bound, count)
	}
	p := s.k.Current(HyperlightResource)
	if p == nil {
		s.fatalf("%s registered but kubelet has no endpoint for it (disconnected)", HyperlightResource)
	}
	return p
}

// allocateOK requires kubelet's Allocate of hyperlight-0 to be granted with the expected answer
// (checkAllocation); when says at which point of the scenario.
func (s *scenario) allocateOK(when string) {
	s.t.Helper()
	if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		s.t.Errorf("Allocate %s: %v", when, err)
	} else {
		checkAllocation(s.t, a.Response)
	}
}

// devices waits until the current endpoint's newest snapshot has n devices of health h.
func (s *scenario) devices(n int, h string, bound time.Duration) []*api.Device {
	s.t.Helper()
	pred := CountHealth(n, h)
	var last []*api.Device
	var have bool
	if !s.wait(bound, func() bool {
		p := s.k.Current(HyperlightResource)
		if p == nil {
			return false
		}
		snap, ok := p.Latest()
		last, have = snap.Devices, ok
		return ok && pred(snap.Devices)
	}) {
		if !have {
			s.fatalf("no ListAndWatch snapshot on the current endpoint within %v (want %d %s)", bound, n, h)
		}
		s.fatalf("no snapshot of %d %s devices within %v; last: %s", n, h, bound, DescribeDevices(last))
	}
	return last
}

// ready waits for the first registration and n Healthy devices.
func (s *scenario) ready(n int) *Plugin {
	s.t.Helper()
	p := s.registered(1, startBound)
	s.devices(n, Healthy, eventBound)
	return p
}

// settled waits until the daemon registered again after registration seq: the current
// endpoint is newer than seq (and differs from notEndpoint when that is set), its socket is
// the only plugin socket in the directory, and its newest snapshot shows n Healthy devices.
func (s *scenario) settled(seq int, notEndpoint string, n int, bound time.Duration) *Plugin {
	s.t.Helper()
	var cur *Plugin
	var why string
	ok := s.wait(bound, func() bool {
		cur = s.k.Current(HyperlightResource)
		switch {
		case cur == nil || cur.Seq <= seq:
			why = fmt.Sprintf("no registration after #%d", seq)
			return false
		case notEndpoint != "" && cur.Endpoint == notEndpoint:
			why = "re-registered with the old socket name " + notEndpoint
			return false
		}
		socks, err := s.node.PluginSockets()
		if err != nil || !reflect.DeepEqual(socks, []string{cur.Endpoint}) {
			why = fmt.Sprintf("plugin sockets %v (%v), want only %s", socks, err, cur.Endpoint)
			return false
		}
		snap, ok := cur.Latest()
		if !ok || !CountHealth(n, Healthy)(snap.Devices) {
			why = fmt.Sprintf("registration #%d: no snapshot of %d Healthy devices yet", cur.Seq, n)
			if ok {
				why += "; last " + DescribeDevices(snap.Devices)
			}
			return false
		}
		return true
	})
	if !ok {
		s.fatalf("not settled within %v: %s", bound, why)
	}
	return cur
}

// dial opens the test's own client connection to the daemon's current socket.
func (s *scenario) dial(p *Plugin) *grpc.ClientConn {
	s.t.Helper()
	conn, err := DialPlugin(context.Background(), p.Socket, eventBound)
	if err != nil {
		s.fatalf("dial %s: %v", p.Socket, err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// run runs the daemon binary once (--version, --health-check...) with the scenario's env.
func (s *scenario) run(env []string, args ...string) Result {
	s.t.Helper()
	r, err := RunCommand(exitBound, s.bin, env, args...)
	if err != nil {
		s.t.Fatalf("%v\nstderr: %s", err, r.Stderr)
	}
	return r
}

func (s *scenario) readCDI() []byte {
	s.t.Helper()
	b, err := os.ReadFile(s.node.CDIPath())
	if err != nil {
		s.fatalf("read CDI spec: %v", err)
	}
	return b
}

// checkCDI requires the CDI spec on disk to parse and meet the contract (CheckHyperlightCDI)
// with the owner uid:gid and the permission bits mode.
func (s *scenario) checkCDI(uid, gid, mode uint32) {
	s.t.Helper()
	b := s.readCDI()
	spec, err := ParseCDI(b)
	if err != nil {
		s.t.Fatalf("%v:\n%s", err, b)
	}
	if err := CheckHyperlightCDI(spec, uid, gid, mode); err != nil {
		s.t.Errorf("CDI spec: %v\n%s", err, b)
	}
}

// waitCDI waits until the CDI path is a regular file holding exactly want.
func (s *scenario) waitCDI(want []byte, bound time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	var last string
	ok := Poll(bound, func() bool {
		fi, err := os.Lstat(s.node.CDIPath())
		if err != nil {
			last = err.Error()
			return false
		}
		if !fi.Mode().IsRegular() {
			last = "not a regular file: " + fi.Mode().String()
			return false
		}
		got, err := os.ReadFile(s.node.CDIPath())
		if err != nil || !bytes.Equal(got, want) {
			last = fmt.Sprintf("%d bytes, differs from the %d rendered bytes (%v)", len(got), len(want), err)
			return false
		}
		return true
	})
	if !ok {
		s.fatalf("CDI spec not repaired within %v: %s", bound, last)
	}
	return time.Since(start)
}

// privateMountNamespace fails the test unless it runs in a mount namespace of its own, so no
// test ever changes the host's mounts: some ancestor process (init, or the shell that ran
// `unshare -m`) must be in a different mount namespace than this process.
func privateMountNamespace(t *testing.T) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatalf("cannot read the mount namespace: %v", err)
	}
	for pid := os.Getppid(); pid > 0; {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err == nil && ns != self {
			return
		}
		if pid == 1 {
			break
		}
		pid = parentPid(pid)
	}
	if ns, err := os.Readlink("/proc/1/ns/mnt"); err == nil && ns != self {
		return
	}
	t.Fatal("this test mounts and must run in a private mount namespace: " +
		"run the scenario binary under `unshare -m --propagation private` (tests/run.sh does)")
}

// parentPid reads PPid from /proc/<pid>/status; 0 when unknown.
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "PPid:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(l, "PPid:")))
			return n
		}
	}
	return 0
}

// mount runs mount(8) and registers the matching umount for cleanup when umountAt is set.
func mount(t *testing.T, umountAt string, args ...string) {
	t.Helper()
	out, err := exec.Command("mount", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("mount %s: %v: %s", strings.Join(args, " "), err, out)
	}
	if umountAt != "" {
		t.Cleanup(func() {
			if out, err := exec.Command("umount", umountAt).CombinedOutput(); err != nil {
				t.Errorf("umount %s: %v: %s", umountAt, err, out)
			}
		})
	}
}
