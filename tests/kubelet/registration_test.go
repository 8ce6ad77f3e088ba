package kubelet

// The registration path as an operator sees it: a restart over its predecessor's stale socket,
// every failure said once at warn and its recovery at info, two plugins registering one
// resource, stray signals.

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	regFailedMsg   = "registration failed, retrying"
	registeredMsg  = "registered with kubelet"
	staleRemoved   = "removed stale socket"
	contendedMsg   = "another plugin is registering this resource; backing off"
	ignoringSignal = "ignoring signal"
)

// logLines returns the daemon's log lines with msg (and level, unless ""), each containing
// every string of also.
func logLines(d *Daemon, level, msg string, also ...string) []string {
	var out []string
	for _, l := range d.Stderr.Lines() {
		if logField(l, "msg") != msg || (level != "" && logField(l, "level") != level) {
			continue
		}
		ok := true
		for _, a := range also {
			ok = ok && strings.Contains(l, a)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// waitLine waits for a line as logLines selects it.
func waitLine(t *testing.T, d *Daemon, bound time.Duration, level, msg string, also ...string) string {
	t.Helper()
	var l []string
	if !Poll(bound, func() bool { l = logLines(d, level, msg, also...); return len(l) > 0 }) {
		t.Fatalf("no log line level=%s msg=%q %q within %v; log:\n%s", level, msg, also, bound, d.Log())
	}
	return l[0]
}

// staleSocket leaves a socket file at path that nobody listens on (what kill -9 leaves).
func staleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// liveSocket listens on path until the test ends.
func liveSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// startAsPID1 runs the hyperlight daemon as PID 1 of a new PID namespace, as its image runs in
// a container; SIGKILL to the returned process kills the daemon too (--kill-child).
func startAsPID1(t *testing.T, s *scenario) *Daemon {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare not found")
	}
	d, err := StartDaemon(unshare, s.env, "--pid", "--fork", "--kill-child", s.bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// unshare does not forward SIGTERM; --kill-child ends the daemon with it.
		d.Signal(syscall.SIGKILL)
		d.Wait(exitBound) //nolint:errcheck // the log below says what happened
		if t.Failed() {
			t.Logf("daemon (PID 1 under unshare %d) log:\n%s", d.Pid(), d.Log())
		}
	})
	return d
}

// A daemon killed with -9 as PID 1 and restarted as PID 1 again: the restart removes the
// stale socket its predecessor left (said once at info) and registers without a single failed
// attempt; sockets of other plugins (another prefix, stale or live) and a live socket of the
// same prefix are left alone.
func TestRegistrationRestartOverStaleSocket(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.env = DaemonEnv(s.node.Root, "DEVICE_COUNT=3")
	first := startAsPID1(t, s)
	p1 := s.registered(1, startBound)
	if !endpointRe.MatchString(p1.Endpoint) {
		t.Fatalf("endpoint %q, want %s", p1.Endpoint, endpointRe)
	}
	first.Signal(syscall.SIGKILL)
	if _, err := first.Wait(exitBound); err != nil {
		t.Fatal(err)
	}
	if !IsSocket(p1.Socket) {
		t.Fatalf("test bug: kill -9 left no socket %s", p1.Socket)
	}
	// The killed daemon's listener is gone once a connect is refused.
	if !Poll(eventBound, func() bool {
		c, err := net.Dial("unix", p1.Socket)
		if err == nil {
			c.Close()
		}
		return err != nil && strings.Contains(err.Error(), "connection refused")
	}) {
		t.Fatalf("%s still accepts connections after kill -9", p1.Socket)
	}
	prefix := SocketPrefix(HyperlightSocketTag, HyperlightResource)
	others := []string{"other-000001.sock", SocketPrefix(HyperlightSocketTag, AccessResource) + "-000001.sock",
		prefix + "x-000001.sock", prefix + "-1-1.sock", prefix + "-0000001.sock"}
	for _, n := range others {
		staleSocket(t, s.node.SocketPath(n))
	}
	live := prefix + "-0004v2.sock"
	liveSocket(t, s.node.SocketPath(live))

	second := startAsPID1(t, s)
	p2 := s.registered(2, startBound)
	if p2.Endpoint == p1.Endpoint {
		t.Errorf("the restart registered its predecessor's name %s", p2.Endpoint)
	}
	if !endpointRe.MatchString(p2.Endpoint) {
		t.Errorf("endpoint %q, want %s", p2.Endpoint, endpointRe)
	}
	waitLine(t, second, eventBound, "info", staleRemoved, "socket="+p1.Endpoint)
	if IsSocket(p1.Socket) {
		t.Errorf("the stale socket %s is still there", p1.Socket)
	}
	if l := logLines(second, "info", staleRemoved); len(l) != 1 {
		t.Errorf("%d %q lines, want 1 (only %s): %q", len(l), staleRemoved, p1.Endpoint, l)
	}
	for _, n := range append(others, live) {
		if !IsSocket(s.node.SocketPath(n)) {
			t.Errorf("%s (not ours, or live) was removed", n)
		}
	}
	if l := logLines(second, "", regFailedMsg); len(l) != 0 {
		t.Errorf("the restart had failed attempts: %q", l)
	}
	// The mock kubelet records the Register before the daemon reads the answer and logs it.
	waitLine(t, second, eventBound, "info", registeredMsg)
	if l := logLines(second, "info", registeredMsg); len(l) != 1 || strings.Contains(l[0], "recovered_after") {
		t.Errorf("registration lines %q, want one first-attempt %q", l, registeredMsg)
	}
}

// refusingKubelet answers every Register with an error, like a kubelet that rejects us.
type refusingKubelet struct {
	api.UnimplementedRegistrationServer
}

func (refusingKubelet) Register(context.Context, *api.RegisterRequest) (*api.Empty, error) {
	return nil, status.Error(codes.InvalidArgument, "test kubelet refuses this plugin")
}

// Each reason on the registration path is said once at warn when it first occurs (kubelet.sock
// missing, kubelet.sock refusing connections, Register refused with kubelet's message), not on
// every retry, and the recovery once at info.
func TestRegistrationFailuresSaidOnce(t *testing.T) {
	node := newNode(t, true)
	s := &scenario{t: t, node: node, bin: daemonBinary(t)}
	if err := os.MkdirAll(node.KubeletDir, 0o750); err != nil {
		t.Fatal(err)
	}
	kubeletSock := filepath.Join(node.KubeletDir, KubeletSocket)
	s.startDaemon("DEVICE_COUNT=3")
	d := s.d

	// 1. No kubelet.sock: waiting, said once.
	waitLine(t, d, startBound, "warn", regFailedMsg, "waiting for", KubeletSocket)

	// 2. kubelet.sock nobody listens on: connection refused, said once over several attempts.
	staleSocket(t, kubeletSock)
	waitLine(t, d, eventBound, "warn", regFailedMsg, "Connection refused")
	waitLine(t, d, backoffBound, "debug", "registration attempt failed", "attempts=5")
	if l := logLines(d, "warn", regFailedMsg, "Connection refused"); len(l) != 1 {
		t.Errorf("connection refused said %d times over 4 attempts, want once: %q", len(l), l)
	}

	// 3. A kubelet that refuses Register: its message, said once.
	os.Remove(kubeletSock)
	lis, err := net.Listen("unix", kubeletSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterRegistrationServer(srv, refusingKubelet{})
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	waitLine(t, d, eventBound, "warn", regFailedMsg, "test kubelet refuses this plugin")
	before := len(logLines(d, "debug", "registration attempt failed"))
	if !Poll(backoffBound, func() bool { return len(logLines(d, "debug", "registration attempt failed")) >= before+3 }) {
		t.Fatalf("no further attempts against the refusing kubelet")
	}
	if l := logLines(d, "warn", regFailedMsg, "test kubelet refuses this plugin"); len(l) != 1 {
		t.Errorf("the refusal said %d times, want once: %q", len(l), l)
	}
	srv.Stop()

	// 4. The real (mock) kubelet: registered, and the line says it recovered.
	s.k = newMock(t, Config{Dir: node.KubeletDir})
	s.registered(1, backoffBound)
	l := waitLine(t, d, eventBound, "info", registeredMsg)
	if !strings.Contains(l, "recovered_after_failures=") {
		t.Errorf("the registration after failures does not say it recovered: %q", l)
	}
}

// Two daemons registering the same resource (two releases on one node): each Register ends the
// other's ListAndWatch stream. They back off instead of swapping the registration forever.
func TestRegistrationTwoPluginsOneResource(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	s.registered(1, startBound)
	other, err := StartDaemon(s.bin, s.env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		other.Stop(exitBound) //nolint:errcheck
		if t.Failed() {
			t.Logf("second daemon log:\n%s", other.Log())
		}
	})
	// The fight is noticed and said (once per daemon that backs off).
	if !Poll(backoffBound, func() bool {
		return len(logLines(s.d, "warn", contendedMsg)) > 0 || len(logLines(other, "warn", contendedMsg)) > 0
	}) {
		t.Fatalf("no %q line within %v; %d registrations", contendedMsg, backoffBound, s.k.Registrations(HyperlightResource))
	}
	// Then a bounded number of registrations in a 3 s window (without the back-off: hundreds).
	start := s.k.Registrations(HyperlightResource)
	Poll(3*time.Second, func() bool { return s.d.Exited() || other.Exited() })
	t.Logf("%d registrations before the window, %d in it", start, s.k.Registrations(HyperlightResource)-start)
	if n := s.k.Registrations(HyperlightResource) - start; n > 20 {
		t.Errorf("%d registrations in 3 s after the back-off started, want at most 20", n)
	}
	for _, d := range []*Daemon{s.d, other} {
		if n := len(logLines(d, "warn", contendedMsg)); n > 1 {
			t.Errorf("pid %d said %q %d times, want once per episode", d.Pid(), contendedMsg, n)
		}
		if d.Exited() {
			t.Errorf("pid %d exited: %s", d.Pid(), d.ExitDescription())
		}
	}
}

// Signals with no meaning to the daemon are ignored, said once at info; the daemon keeps its
// registration and socket, and SIGTERM still ends it cleanly with no socket of ours left.
func TestRegistrationStraySignalsIgnored(t *testing.T) {
	for _, kata := range []bool{false, true} {
		name := "hyperlight"
		if kata {
			name = "kata"
		}
		t.Run(name, func(t *testing.T) {
			var s *scenario
			resource := HyperlightResource
			if kata {
				ks := newKata(t)
				ks.add(kataEntry{0, GPU("0000:41:00.0", 0)})
				ks.startDaemon()
				s, resource = ks.scenario, KataGPU
			} else {
				s = newScenario(t, "DEVICE_COUNT=3")
			}
			if _, err := s.k.WaitRegistered(resource, 1, startBound); err != nil {
				t.Fatal(err)
			}
			sigs := []syscall.Signal{syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM}
			names := []string{"HUP", "USR1", "USR2", "ALRM"}
			for i, sig := range sigs {
				if err := s.d.Signal(sig); err != nil {
					t.Fatal(err)
				}
				waitLine(t, s.d, eventBound, "info", ignoringSignal, "signal="+names[i])
			}
			s.d.Signal(syscall.SIGHUP) // again: not said again
			if s.d.Exited() || s.k.Registrations(resource) != 1 {
				t.Fatalf("after the signals: exited %v (%s), %d registrations", s.d.Exited(), s.d.ExitDescription(), s.k.Registrations(resource))
			}
			if socks, _ := s.node.PluginSockets(); len(socks) != 1 {
				t.Errorf("plugin sockets %v, want ours", socks)
			}
			if code, err := s.d.Stop(exitBound); err != nil || code != 0 {
				t.Errorf("SIGTERM: exit %d, %v", code, err)
			}
			if l := logLines(s.d, "info", ignoringSignal, "signal=HUP"); len(l) != 1 {
				t.Errorf("SIGHUP said %d times, want once: %q", len(l), l)
			}
			if socks, _ := s.node.PluginSockets(); len(socks) != 0 {
				t.Errorf("plugin sockets left after SIGTERM: %v", socks)
			}
		})
	}
}

// kubelet cannot dial the plugin back: kubelet's own message, said once; the next kubelet
// registers it, and the line says it recovered.
func TestRegistrationDialBackFailureSaid(t *testing.T) {
	node := newNode(t, true)
	s := &scenario{t: t, node: node, bin: daemonBinary(t)}
	s.k = newMock(t, Config{Dir: node.KubeletDir, DialTimeout: time.Nanosecond})
	s.startDaemon("DEVICE_COUNT=3")
	waitLine(t, s.d, startBound, "warn", regFailedMsg, "failed to dial device plugin")
	before := len(logLines(s.d, "debug", "registration attempt failed"))
	if !Poll(backoffBound, func() bool { return len(logLines(s.d, "debug", "registration attempt failed")) >= before+2 }) {
		t.Fatalf("no further attempts after the dial-back failure")
	}
	if l := logLines(s.d, "warn", regFailedMsg, "failed to dial device plugin"); len(l) != 1 {
		t.Errorf("the dial-back failure said %d times, want once: %q", len(l), l)
	}
	s.k.Stop()
	s.k = newMock(t, Config{Dir: node.KubeletDir})
	s.registered(1, backoffBound)
	if l := waitLine(t, s.d, eventBound, "info", registeredMsg); !strings.Contains(l, "recovered_after_failures=") {
		t.Errorf("the registration after failures does not say it recovered: %q", l)
	}
}

// The plugin cannot create its socket (the device-plugins directory is read-only): said once
// with the reason while retried; registered once the directory is writable again.
func TestRegistrationSocketFailureSaid(t *testing.T) {
	privateMountNamespace(t)
	s := prepare(t, newNode(t, true))
	dir := s.node.KubeletDir
	mount(t, dir, "--bind", dir, dir)
	mount(t, "", "-o", "remount,bind,ro", dir)
	s.startDaemon("DEVICE_COUNT=3")
	waitLine(t, s.d, startBound, "warn", regFailedMsg, "cannot serve", "Read-only file system")
	waitLine(t, s.d, backoffBound, "debug", "registration attempt failed", "attempts=3")
	if l := logLines(s.d, "warn", regFailedMsg); len(l) != 1 {
		t.Errorf("%d %q lines over 3 attempts, want 1: %q", len(l), regFailedMsg, l)
	}
	if n := s.k.Registrations(HyperlightResource); n != 0 {
		t.Fatalf("%d registrations without a socket", n)
	}
	mount(t, "", "-o", "remount,bind,rw", dir)
	s.registered(1, backoffBound)
	if l := waitLine(t, s.d, eventBound, "info", registeredMsg); !strings.Contains(l, "recovered_after_failures=") {
		t.Errorf("the registration after failures does not say it recovered: %q", l)
	}
}

// kata with nothing to advertise serves only its idle health socket: killed with -9 as PID 1
// and restarted as PID 1, it removes the idle socket its predecessor left (said once at info)
// instead of leaving one more idle socket behind on every crash.
func TestRegistrationKataIdleRestartOverStaleSocket(t *testing.T) {
	ks := newKata(t)
	s := ks.scenario
	s.env = DaemonEnv(s.node.Root)
	idleSockets := func() []string {
		socks, _ := s.node.PluginSockets()
		var out []string
		for _, n := range socks {
			if IsSocketOf(n, KataIdlePrefix) {
				out = append(out, n)
			}
		}
		return out
	}
	first := startAsPID1(t, s)
	waitLine(t, first, startBound, "info", "serving health only, not registered with kubelet")
	old := idleSockets()
	if len(old) != 1 {
		t.Fatalf("idle sockets %v, want one %s-<n>.sock", old, KataIdlePrefix)
	}
	first.Signal(syscall.SIGKILL)
	if _, err := first.Wait(exitBound); err != nil {
		t.Fatal(err)
	}
	second := startAsPID1(t, s)
	waitLine(t, second, startBound, "info", staleRemoved, "socket="+old[0])
	waitLine(t, second, startBound, "info", "serving health only, not registered with kubelet")
	if now := idleSockets(); len(now) != 1 || now[0] == old[0] {
		t.Errorf("idle sockets after the restart %v, want one that is not %s", now, old[0])
	}
}

// A kubelet restart whose new kubelet.sock is created (bound) before kubelet listens on it, after
// the ListAndWatch stream ended and the sockets were deleted: the endpoint waits for it to accept
// and registers on the first Register attempt after its creation, with no failed attempt and no
// back-off (issue 21, item 6: a refused connect there ran the 100 ms back-off, which no later
// directory event shortened). The hold is far longer than the endpoint takes to notice the
// creation, so the order is the same on every run.
func TestRegistrationKubeletRestartListenLater(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=debug")
	p := s.ready(3)
	before := len(s.d.Stderr.Lines())
	start := time.Now()
	if err := s.k.RestartListenLater(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cur := s.settled(p.Seq, p.Endpoint, 3, eventBound)
	t.Logf("re-registered as %s %v after the restart (kubelet listened 300 ms after the bind)",
		cur.Endpoint, time.Since(start).Round(time.Millisecond))
	waitLine(t, s.d, eventBound, "info", registeredMsg, "socket="+cur.Endpoint)
	lines := s.d.Stderr.Lines()[before:]
	created := -1
	for i, l := range lines {
		// told at info, or at debug when it joined the restart the stream's end scheduled
		if m := logField(l, "msg"); (m == "re-registering" || m == "re-registering already scheduled") &&
			strings.Contains(l, "kubelet.sock created") {
			created = i
		}
	}
	if created < 0 {
		t.Fatalf("no re-registering line for kubelet.sock created; log:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines[created:] {
		if m := logField(l, "msg"); m == "registration attempt failed" || m == regFailedMsg {
			t.Errorf("a failed attempt after kubelet.sock was created: %s", l)
		}
		if logField(l, "msg") == "re-registering" && !strings.Contains(l, "delay_us=0") &&
			logField(l, "level") == "debug" {
			t.Errorf("a delayed re-registration after kubelet.sock was created: %s", l)
		}
	}
	if t.Failed() {
		t.Logf("log since the restart:\n%s", strings.Join(lines, "\n"))
	}
}
