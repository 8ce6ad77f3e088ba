package kubelet

// The daemon out of file descriptors (issue 21, item 4): a probe that cannot run is not a
// verdict on the device, and clients holding connections cannot take the probe's fds.

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fdLimit is the RLIMIT_NOFILE of the attack.
const fdLimit = "48"

// startDaemonFdLimited is startDaemon, then RLIMIT_NOFILE set to fdLimit (soft and hard) on the
// daemon with prlimit(2) at once (before any client connects). Not prlimit(1) as an exec wrapper:
// the daemon's environment may LD_PRELOAD a shim built for another libc (the musl suite's), which
// a glibc prlimit(1) cannot load.
func (s *scenario) startDaemonFdLimited(extra ...string) {
	s.t.Helper()
	s.startDaemon(extra...)
	n, _ := strconv.ParseUint(fdLimit, 10, 64)
	if err := unix.Prlimit(s.d.Pid(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: n, Max: n}, nil); err != nil {
		s.fatalf("prlimit(%d, RLIMIT_NOFILE, %d): %v", s.d.Pid(), n, err)
	}
}

func openFds(pid int) int {
	ents, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	return len(ents)
}

// holdConns dials addr (network "tcp" or "unix") n times and keeps what connected.
func holdConns(t *testing.T, network, addr string, n int, hello string) []net.Conn {
	var held []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			continue
		}
		if hello != "" {
			_, _ = c.Write([]byte(hello))
		}
		held = append(held, c)
	}
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	return held
}

// With RLIMIT_NOFILE 48 and clients holding every metrics connection and as many gRPC
// connections as they can open, the probe still runs: kubelet's Allocates succeed, the devices
// stay Healthy, nothing is logged as "device unusable"; a metrics scrape is answered meanwhile,
// and the plugin stays registered.
func TestHyperlightFdLimitHeldConnections(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.startDaemonFdLimited("DEVICE_COUNT=3", metricsEnv)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	t.Logf("fds at rest: %d of %s", openFds(s.d.Pid()), fdLimit)

	// The metrics port: 4 held (a request never finished), 8 more closed at accept.
	metrics := holdConns(t, "tcp", addr, 4, "GE")
	holdConns(t, "tcp", addr, 8, "GE")
	// The plugin socket: connections that never send the HTTP/2 preface (held until the 10 s
	// handshake deadline), as many as the daemon accepts.
	sock := filepath.Join(s.node.KubeletDir, p.Endpoint)
	grpcHeld := holdConns(t, "unix", sock, 64, "")
	// the attack holds: the daemon accepted until its fds ran out, and said so once at warn
	// (a connection costs two fds, its socket and its timer, so one may stay free)
	want := []string{"level=warn", `msg="gRPC limit reached"`, "what=fds", "out of file descriptors"}
	if n := waitCount(s.d, 1, want...); n != 1 {
		s.fatalf("%d lines with %q, want 1: the attack did not exhaust the fds (%d open of %s)",
			n, want, openFds(s.d.Pid()), fdLimit)
	}
	fds := openFds(s.d.Pid())
	t.Logf("fds under attack: %d of %s (%d gRPC and %d metrics connections dialled)", fds, fdLimit,
		len(grpcHeld), len(metrics))

	for i := 0; i < 3; i++ {
		a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-" + strconv.Itoa(i)})
		if err != nil {
			s.fatalf("Allocate %d with the fds held: %v", i, err)
		}
		checkAllocation(t, a.Response)
	}
	s.devices(3, Healthy, eventBound)
	for _, l := range s.d.Stderr.Lines() {
		if strings.Contains(l, "device unusable") || strings.Contains(l, "Too many open files") {
			t.Errorf("under the fd attack: %s", l)
		}
	}

	// A scrape is answered at once, the fds held: it takes the slot of a held metrics
	// connection, and the listener's spare fd lets its accept in.
	if body, err := scrape(addr); err != nil {
		t.Errorf("scrape with every fd held: %v", err)
	} else if !strings.Contains(body, "sdp_registered") {
		t.Errorf("scrape without sdp_registered: %.200q", body)
	}
	// The held metrics connections go: scrapes are still answered.
	for _, c := range metrics {
		c.Close()
	}
	if !Poll(eventBound, func() bool { _, err := scrape(addr); return err == nil }) {
		t.Errorf("no scrape answered after the metrics connections went")
	}
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered under the fd attack")
	}
	if s.d.Exited() {
		s.fatalf("the daemon exited")
	}
}

// The probe helper cannot start (clone fails with EAGAIN, as when the daemon is out of
// processes or memory): that is the daemon's failure, not the device's. It is logged at error
// once, as such; the last verdict (Healthy) stands, so Allocates succeed and the devices stay
// Healthy; when the probe starts again the recovery is logged and nothing was "device unusable".
func TestHyperlightProbeCannotStart(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	s.shim("HVSHIM_SPAWN_ERRNO=EAGAIN")
	for i := 0; i < 3; i++ {
		a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-" + strconv.Itoa(i)})
		if err != nil {
			s.fatalf("Allocate %d while the probe cannot start: %v", i, err)
		}
		checkAllocation(t, a.Response)
	}
	want := []string{"level=error", `msg="device check could not run"`, "Resource temporarily unavailable", "verdict=healthy"}
	if n := waitCount(s.d, 1, want...); n != 1 {
		t.Errorf("%d lines with %q, want exactly 1 (once per episode)", n, want)
	}
	s.devices(3, Healthy, eventBound)

	s.clearShim()
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Errorf("Allocate after the probe starts again: %v", err)
	}
	if n := waitCount(s.d, 1, "level=info", `msg="device check runs again"`, "not_run=3"); n != 1 {
		t.Errorf("%d recovery lines, want 1", n)
	}
	for _, l := range s.d.Stderr.Lines() {
		if strings.Contains(l, "device unusable") {
			t.Errorf("a probe that could not start was taken for a verdict: %s", l)
		}
	}
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered")
	}
}
