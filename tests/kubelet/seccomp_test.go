package kubelet

// Self-confinement (docs/security.md): each daemon loads its seccomp allow-list after start-up
// and the probe helper a narrower one. tests/fakes/libscprobe.so, preloaded, tries refused
// calls from inside the daemon once its loop runs; the hypervisor shim's HVSHIM_TRY_SOCKET
// does the same inside the probe helper. SDP_SECCOMP=off shows the checks are not vacuous.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scprobeEnv preloads the seccomp check next to the hypervisor shim; its result goes to
// <root>/scprobe.out.
func scprobeEnv(t *testing.T, root string) (string, []string) {
	t.Helper()
	build := os.Getenv("SDP_BUILD_DIR")
	lib := filepath.Join(build, "tests/fakes/libscprobe.so")
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("%v (build it first)", err)
	}
	shim, err := ShimPath(build)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "scprobe.out")
	return out, []string{"LD_PRELOAD=" + shim + " " + lib, "SCPROBE_OUT=" + out}
}

// scprobeResult waits for the check's line and returns its key=value fields.
func scprobeResult(s *scenario, out string) map[string]string {
	s.t.Helper()
	var line []byte
	if !s.wait(eventBound, func() bool {
		b, err := os.ReadFile(out)
		line = b
		return err == nil && strings.HasSuffix(string(b), "\n")
	}) {
		s.fatalf("no seccomp check result in %s within %v", out, eventBound)
	}
	fields := map[string]string{}
	for _, kv := range strings.Fields(string(line)) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			fields[k] = v
		}
	}
	return fields
}

func expectFields(t *testing.T, who string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s=%q, want %q (all: %v)", who, k, got[k], v, got)
		}
	}
}

// procStatus returns a field of /proc/<pid>/status as the operator would read it.
// wantSeccompStatus is the Seccomp: field of /proc/<pid>/status a daemon started with the
// test's inherited environment must show: 2 (a filter), or 0 when that environment sets
// SDP_SECCOMP=off (make test-arm64 does: qemu-user refuses a guest's seccomp filter, see
// tests/arm64/run.sh).
func wantSeccompStatus() string {
	if os.Getenv("SDP_SECCOMP") == "off" {
		return "0"
	}
	return "2"
}

func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// confinedWant is what a confined daemon's own calls give.
var confinedWant = map[string]string{
	"seccomp": "2", "nnp": "1", "execve": "EPERM", "execveat": "EPERM", "socket_unix": "ok",
	"clone3": "ENOSYS",
}

func TestSeccompHyperlight(t *testing.T) {
	s := prepare(t, newNode(t, true))
	out, env := scprobeEnv(t, s.node.Root)
	// Healthy devices below prove the probe helper ran under its own filter: with
	// HVSHIM_TRY_SOCKET its ioctls fail unless socket() is refused there.
	// Metrics on: the listener is made before the filter; serving it needs no more calls.
	s.startDaemon(append(env, "DEVICE_COUNT=3", "HVSHIM_TRY_SOCKET=1", metricsEnv)...)
	s.ready(3)
	got := scprobeResult(s, out)
	// Labelling is off (no NODE_NAME): no inet socket either; only the node-label child
	// needs one, and the daemon's list carries it only for that child (hyperlight/confine.c).
	want := map[string]string{"socket_inet": "EPERM"}
	for k, v := range confinedWant {
		want[k] = v
	}
	expectFields(t, "hyperlight daemon", got, want)
	if v := procStatus(t, s.d.Pid(), "Seccomp"); v != "2" {
		t.Errorf("/proc/%d/status Seccomp: %q, want 2 (filter mode)", s.d.Pid(), v)
	}
	if !strings.Contains(s.d.Log(), "seccomp=enforce") {
		t.Errorf("the log does not say the daemon is confined (seccomp=enforce)")
	}
	// Still serving after the refused calls: Allocate runs a fresh probe helper.
	a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"})
	if err != nil {
		s.fatalf("Allocate after the refused calls: %v", err)
	}
	checkAllocation(t, a.Response)
	expectMetric(t, mustScrape(t, metricsAddr(t, s.d)), 1, "sdp_allocate_total", "result", "OK")
}

func TestSeccompHyperlightOff(t *testing.T) {
	s := prepare(t, newNode(t, true))
	out, env := scprobeEnv(t, s.node.Root)
	s.startDaemon(append(env, "DEVICE_COUNT=3", "HVSHIM_TRY_SOCKET=1", "SDP_SECCOMP=off")...)
	s.registered(1, eventBound)
	got := scprobeResult(s, out)
	expectFields(t, "unconfined hyperlight daemon", got, map[string]string{
		"seccomp": "0", "execve": "ENOENT", "execveat": "ENOENT", "socket_inet": "ok",
	})
	// The unconfined helper gets its socket, so the shim fails the probe: the check bites.
	s.devices(3, Unhealthy, eventBound)
	if !s.wait(eventBound, func() bool { return strings.Contains(s.d.Log(), "EXDEV") }) {
		t.Errorf("the probe failure (KVM_GET_API_VERSION: EXDEV) is not in the log")
	}
}

func TestSeccompInvalidModeStaysEnforced(t *testing.T) {
	s := prepare(t, newNode(t, true))
	out, env := scprobeEnv(t, s.node.Root)
	s.startDaemon(append(env, "DEVICE_COUNT=3", "SDP_SECCOMP=of")...)
	s.ready(3)
	expectFields(t, "hyperlight daemon with SDP_SECCOMP=of", scprobeResult(s, out), confinedWant)
	if !s.wait(time.Second, func() bool {
		return strings.Contains(s.d.Log(), `SDP_SECCOMP=\"of\" is not one of enforce, log, off`)
	}) {
		t.Errorf("no warning naming the invalid SDP_SECCOMP value in the log")
	}
}

func TestSeccompHyperlightDeviceAccess(t *testing.T) {
	s := prepare(t, newNode(t, true))
	out, env := scprobeEnv(t, s.node.Root)
	s.startWith([]string{"--device-access"}, env...)
	expectFields(t, "device-access daemon", scprobeResult(s, out), confinedWant)
}

func TestSeccompKata(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	out, env := scprobeEnv(t, s.node.Root)
	s.startDaemon(append(env, metricsEnv)...)
	s.kataReady(kataExpect(kataMain))
	want := map[string]string{"socket_inet": "EPERM"}
	for k, v := range confinedWant {
		want[k] = v
	}
	expectFields(t, "kata daemon", scprobeResult(s.scenario, out), want)
	a, err := s.k.Allocate(KataGPU, []string{"1"})
	if err != nil {
		s.fatalf("Allocate after the refused calls: %v", err)
	}
	checkKataAllocation(t, a.Response, KataGPU, []string{"1"})
	expectMetric(t, mustScrape(t, metricsAddr(t, s.d)), 1, "sdp_allocate_total", "result", "OK")
}
