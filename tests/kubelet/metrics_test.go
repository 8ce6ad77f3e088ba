package kubelet

// Prometheus metrics (docs/operations.md, "Metrics"): each daemon started with
// METRICS_ADDRESS=127.0.0.1:0 logs the bound address; its /metrics is scraped with Go's HTTP
// client and checked by promtool (Debian's prometheus package, unpacked into the build
// directory by scripts/debian-tool.sh, never installed), and the values follow what happens:
// health changes, Allocate, CDI repairs, probe runs. Hostile peers on the metrics port
// (slowloris, an oversized head, garbage, many connections) while kubelet is served; a real
// Prometheus server scrapes a daemon.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const metricsEnv = "METRICS_ADDRESS=127.0.0.1:0"

var addressRe = regexp.MustCompile(`\baddress=(\S+)`)

// metricsAddr waits for the daemon's "metrics listening" line and returns its address.
func metricsAddr(t *testing.T, d *Daemon) string {
	t.Helper()
	line, ok := d.WaitLog(startBound, func(l string) bool { return strings.Contains(l, `msg="metrics listening"`) })
	if !ok {
		t.Fatalf("no \"metrics listening\" line within %v; log:\n%s", startBound, d.Log())
	}
	m := addressRe.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no address= in %q", line)
	}
	return m[1]
}

// scrape GETs /metrics and checks the answer's status line and headers.
func scrape(addr string) (string, error) {
	c := http.Client{Timeout: eventBound}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		return "", fmt.Errorf("Content-Type %q", ct)
	}
	if resp.ContentLength != int64(len(body)) {
		return "", fmt.Errorf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
	}
	return string(body), nil
}

func mustScrape(t *testing.T, addr string) string {
	t.Helper()
	text, err := scrape(addr)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return text
}

var sampleRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metric returns the value of the sample name whose labels include every pair of want
// ("k", "v", ...); ok false when there is none. Several matches: their sum.
func metric(text, name string, want ...string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		m := sampleRe.FindStringSubmatch(line)
		if m == nil || m[1] != name {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRe.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			match = match && labels[want[i]] == want[i+1]
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err == nil {
			sum += v
			found = true
		}
	}
	return sum, found
}

// expectMetric fails unless the sample has the value (0: or no such sample, a counter that
// never counted).
func expectMetric(t *testing.T, text string, value float64, name string, labels ...string) {
	t.Helper()
	v, ok := metric(text, name, labels...)
	if v != value || (!ok && value != 0) {
		t.Errorf("%s%v = %v (present %v), want %v; exposition:\n%s", name, labels, v, ok, value, text)
	}
}

// waitMetric scrapes until cond holds for the sample's value (absent: 0), within bound.
func waitMetric(t *testing.T, addr string, bound time.Duration, cond func(float64) bool, name string,
	labels ...string) float64 {
	t.Helper()
	var v float64
	var text string
	if !Poll(bound, func() bool {
		var err error
		text, err = scrape(addr)
		if err != nil {
			return false
		}
		v, _ = metric(text, name, labels...)
		return cond(v)
	}) {
		t.Fatalf("%s%v = %v after %v; exposition:\n%s", name, labels, v, bound, text)
	}
	return v
}

// debianTool unpacks a Debian package's program into the build directory (once).
func debianTool(t *testing.T, pkg, prog string) string {
	t.Helper()
	src, err := SourceDir()
	if err != nil {
		t.Fatal(err)
	}
	build, err := BuildDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(src, "scripts/debian-tool.sh"), build, pkg, prog).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("scripts/debian-tool.sh %s %s: %v\n%s", pkg, prog, err, msg)
	}
	return strings.TrimSpace(string(out))
}

// promtoolCheck runs `promtool check metrics` on the exposition (lint included).
func promtoolCheck(t *testing.T, text string) {
	t.Helper()
	cmd := exec.Command(debianTool(t, "prometheus", "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s\nexposition:\n%s", err, out, text)
	}
}

// metricsPod starts hyperlight in its pod's layout (as podLayout does: the host's /dev at
// HOST_DEVICE_DIR, 3 devices) with metrics on.
func metricsPod(t *testing.T) (s *scenario, node *Node, host string, must func(error)) {
	must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	node = newNode(t, true)
	host = filepath.Join(node.Root, "host-dev", "kvm")
	must(os.Mkdir(filepath.Dir(host), 0o755))
	must(Mknod(host, KVMMajor, KVMMinor))
	s = prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev", metricsEnv)
	return s, node, host, must
}

func TestHyperlightMetrics(t *testing.T) {
	s, node, host, must := metricsPod(t)
	addr := metricsAddr(t, s.d)
	s.ready(3)
	text := mustScrape(t, addr)
	promtoolCheck(t, text)
	expectMetric(t, text, 1, "sdp_build_info", "daemon", HyperlightBinary)
	expectMetric(t, text, 3, "sdp_devices_advertised", "resource", HyperlightResource)
	expectMetric(t, text, 3, "sdp_devices_healthy", "resource", HyperlightResource)
	expectMetric(t, text, 1, "sdp_registered", "resource", HyperlightResource)
	expectMetric(t, text, 1, "sdp_registrations_total", "resource", HyperlightResource, "result", "ok")
	expectMetric(t, text, 1, "sdp_health_transitions_total", "resource", HyperlightResource, "to", "healthy")
	runs, _ := metric(text, "sdp_probe_runs_total")
	if count, _ := metric(text, "sdp_probe_duration_seconds_count"); runs < 1 || count != runs {
		t.Errorf("probe runs %v, duration count %v: want at least 1, equal", runs, count)
	}

	// Allocate: one granted, one refused before the driver.
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
		s.fatalf("Allocate: %v", err)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"nope"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate [nope]: %v, want InvalidArgument", err)
	}
	text = mustScrape(t, addr)
	expectMetric(t, text, 1, "sdp_allocate_total", "resource", HyperlightResource, "result", "OK")
	expectMetric(t, text, 1, "sdp_allocate_total", "resource", HyperlightResource, "result", "INVALID_ARGUMENT")
	runsBefore, _ := metric(text, "sdp_probe_runs_total")
	if runsBefore <= runs {
		t.Errorf("probe runs %v after an Allocate, were %v: each Allocate runs the probe", runsBefore, runs)
	}

	// The host's node goes: every device Unhealthy, one transition with the reason's class,
	// the probe's failure counted; an Allocate meanwhile is refused (UNAVAILABLE).
	must(os.Remove(host))
	s.devices(3, Unhealthy, watchBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 0 }, "sdp_devices_healthy",
		"resource", HyperlightResource)
	text = mustScrape(t, addr)
	expectMetric(t, text, 1, "sdp_health_transitions_total", "resource", HyperlightResource,
		"to", "unhealthy", "reason", "host device")
	if v, _ := metric(text, "sdp_probe_failures_total", "reason", "host device"); v < 1 {
		t.Errorf("sdp_probe_failures_total{reason=\"host device\"} = %v, want >= 1; exposition:\n%s", v, text)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); status.Code(err) != codes.Unavailable {
		t.Errorf("Allocate while unhealthy: %v, want Unavailable", err)
	}
	promtoolCheck(t, mustScrape(t, addr))
	expectMetric(t, mustScrape(t, addr), 1, "sdp_allocate_total", "resource", HyperlightResource,
		"result", "UNAVAILABLE")

	// Back: Healthy again, a second transition to healthy.
	must(Mknod(host, KVMMajor, KVMMinor))
	s.devices(3, Healthy, watchBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 3 }, "sdp_devices_healthy",
		"resource", HyperlightResource)
	expectMetric(t, mustScrape(t, addr), 2, "sdp_health_transitions_total", "resource", HyperlightResource,
		"to", "healthy")

	// The owned CDI spec tampered with: repaired, counted once.
	expectMetric(t, mustScrape(t, addr), 0, "sdp_cdi_spec_repairs_total")
	want := s.readCDI()
	must(os.WriteFile(node.CDIPath(), []byte(`{"tampered":true}`), 0o644))
	s.waitCDI(want, eventBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 1 }, "sdp_cdi_spec_repairs_total",
		"spec", HyperlightCDIFile)
	expectMetric(t, mustScrape(t, addr), 0, "sdp_cdi_spec_write_failures_total")

	// A symlink renamed over the spec: refused (a write failure), repaired once it is gone.
	tmp := node.CDIPath() + ".link"
	must(os.Symlink("/dev/null", tmp))
	must(os.Rename(tmp, node.CDIPath()))
	s.devices(3, Unhealthy, eventBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v >= 1 }, "sdp_cdi_spec_write_failures_total",
		"spec", HyperlightCDIFile)
	must(os.Remove(node.CDIPath()))
	s.waitCDI(want, eventBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 2 }, "sdp_cdi_spec_repairs_total",
		"spec", HyperlightCDIFile)
	s.devices(3, Healthy, backoffBound)

	// kubelet restarts: registered again, counted; registered while it is.
	must(s.k.Restart())
	s.registered(2, startBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 2 }, "sdp_registrations_total",
		"resource", HyperlightResource, "result", "ok")
	expectMetric(t, mustScrape(t, addr), 1, "sdp_registered", "resource", HyperlightResource)
	promtoolCheck(t, mustScrape(t, addr))
}

// Started before kubelet: the failed attempts counted by kind, not registered; then registered.
func TestHyperlightMetricsRegistrationFailure(t *testing.T) {
	node := newNode(t, true)
	s := &scenario{t: t, node: node, bin: daemonBinary(t)}
	s.startDaemon("DEVICE_COUNT=3", metricsEnv)
	addr := metricsAddr(t, s.d)
	waitMetric(t, addr, startBound, func(v float64) bool { return v >= 1 }, "sdp_registrations_total",
		"resource", HyperlightResource, "result", "kubelet_missing")
	text := mustScrape(t, addr)
	expectMetric(t, text, 0, "sdp_registered", "resource", HyperlightResource)
	expectMetric(t, text, 0, "sdp_registrations_total", "resource", HyperlightResource, "result", "ok")
	if _, ok := metric(text, "sdp_registered", "resource", HyperlightResource); !ok {
		t.Errorf("sdp_registered is not exposed before the first registration")
	}
	s.k = newMock(t, Config{Dir: node.KubeletDir})
	s.registered(1, startBound)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 1 }, "sdp_registered",
		"resource", HyperlightResource)
	text = mustScrape(t, addr)
	expectMetric(t, text, 1, "sdp_registrations_total", "resource", HyperlightResource, "result", "ok")
	promtoolCheck(t, text)
}

func TestKataMetrics(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon(metricsEnv)
	addr := metricsAddr(t, s.d)
	s.kataReady(want)
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == float64(len(want[KataNVSwitch])) },
		"sdp_devices_healthy", "resource", KataNVSwitch)
	text := mustScrape(t, addr)
	promtoolCheck(t, text)
	expectMetric(t, text, 1, "sdp_build_info", "daemon", KataBinary)
	for r, devs := range want {
		expectMetric(t, text, float64(len(devs)), "sdp_devices_advertised", "resource", r)
		expectMetric(t, text, float64(len(devs)), "sdp_devices_healthy", "resource", r)
		expectMetric(t, text, 1, "sdp_registered", "resource", r)
		expectMetric(t, text, 1, "sdp_registrations_total", "resource", r, "result", "ok")
	}
	if _, ok := metric(text, "sdp_probe_runs_total"); ok {
		t.Errorf("kata has no probe, yet sdp_probe_runs_total is exposed")
	}

	if _, err := s.k.Allocate(KataGPU, []string{"1"}); err != nil {
		s.fatalf("Allocate: %v", err)
	}
	if _, err := s.k.Allocate(KataGPU, []string{"0", "4"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate [0 4]: %v, want InvalidArgument", err)
	}
	text = mustScrape(t, addr)
	expectMetric(t, text, 1, "sdp_allocate_total", "resource", KataGPU, "result", "OK")
	expectMetric(t, text, 1, "sdp_allocate_total", "resource", KataGPU, "result", "INVALID_ARGUMENT")
	expectMetric(t, text, 0, "sdp_allocate_total", "resource", KataNVSwitch)

	// The GPU spec tampered with: repaired, counted for that spec only.
	spec := s.readSpec(KataGPU)
	s.must(os.WriteFile(s.kataSpecPath(KataGPU), []byte("cdiVersion: 0.3.0\n"), 0o644))
	if !Poll(eventBound, func() bool { b, _ := os.ReadFile(s.kataSpecPath(KataGPU)); return string(b) == string(spec) }) {
		s.fatalf("the GPU spec was not repaired within %v", eventBound)
	}
	waitMetric(t, addr, eventBound, func(v float64) bool { return v == 1 }, "sdp_cdi_spec_repairs_total",
		"spec", KataSpecFile(KataGPU))
	text = mustScrape(t, addr)
	expectMetric(t, text, 0, "sdp_cdi_spec_repairs_total", "spec", KataSpecFile(KataNVSwitch))
	promtoolCheck(t, text)
}

// Invalid METRICS_ADDRESS: a clear error naming what is wrong and exit status 2, as other
// invalid settings.
func checkInvalidMetricsAddress(t *testing.T, bin string, env func(root string, extra ...string) []string) {
	for v, want := range map[string]string{
		"9400":             "missing port",
		"example.com:9400": "not a numeric IPv4 address",
		"127.0.0.1:70000":  "out of range",
		"[::1:9400":        "missing ']'",
		"[::1]":            "missing port after ']'",
		"[]:9100":          "empty IPv6 address",
		"::1:9400":         "needs brackets",
	} {
		node := newNode(t, true)
		r, err := RunCommand(exitBound, bin, env(node.Root, "METRICS_ADDRESS="+v))
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 2 || !strings.Contains(r.Stderr, `msg="invalid METRICS_ADDRESS"`) ||
			!strings.Contains(r.Stderr, want) {
			t.Errorf("%s with METRICS_ADDRESS=%s: exit %d, want 2 and \"invalid METRICS_ADDRESS\" saying %q; log:\n%s",
				filepath.Base(bin), v, r.Code, want, r.Stderr)
		}
	}
}

func TestHyperlightMetricsInvalidAddress(t *testing.T) {
	checkInvalidMetricsAddress(t, daemonBinary(t), DaemonEnv)
}

func TestKataMetricsInvalidAddress(t *testing.T) {
	checkInvalidMetricsAddress(t, kataBinary(t), PlainDaemonEnv)
}

// readAll reads what the server sends until it closes, within bound; closed says it did (an
// end of file, or a reset: a server closing with our request unread resets the connection).
func readAll(c net.Conn, bound time.Duration) (data string, closed bool) {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	b, err := io.ReadAll(c)
	return string(b), err == nil || errors.Is(err, syscall.ECONNRESET)
}

// Hostile peers on the metrics port: each is answered or closed by its limit, logged once per
// kind, counted, while kubelet's Allocate and a normal scrape keep working.
func TestHyperlightMetricsHostilePeers(t *testing.T) {
	s, _, _, _ := metricsPod(t)
	addr := metricsAddr(t, s.d)
	s.ready(3)
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, eventBound)
		if err != nil {
			s.fatalf("dial %s: %v", addr, err)
		}
		return c
	}

	// Slowloris: a request line, then nothing: closed at the head deadline without an answer.
	slow := dial()
	defer slow.Close()
	_, _ = slow.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n"))
	if got, ok := readAll(slow, eventBound); !ok || got != "" {
		t.Errorf("slowloris: closed %v, got %q; want closed at the head deadline, no answer", ok, got)
	}

	// Every slot held by a connection without a request: each scrape takes the slot of the
	// one held longest, which is closed without an answer; kubelet is served meanwhile.
	var held []net.Conn
	for i := 0; i < 4; i++ {
		c := dial()
		defer c.Close()
		_, _ = c.Write([]byte("GE"))
		held = append(held, c)
	}
	for i := 0; i < 4; i++ {
		mustScrape(t, addr)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		s.fatalf("Allocate while the metrics port is held: %v", err)
	}
	for i, c := range held {
		if got, ok := readAll(c, eventBound); !ok || got != "" {
			t.Errorf("held connection %d: closed %v, got %q; want closed without an answer", i, ok, got)
		}
	}

	// An oversized head: 431, closed.
	big := dial()
	defer big.Close()
	go func() {
		_, _ = big.Write([]byte("GET /metrics HTTP/1.1\r\nX: " + strings.Repeat("a", 16<<10) + "\r\n\r\n"))
	}()
	if got, ok := readAll(big, eventBound); !ok || !strings.HasPrefix(got, "HTTP/1.1 431 ") {
		t.Errorf("oversized head: closed %v, got %q; want 431", ok, got)
	}
	// Garbage: 400; a TLS hello: 400; another path: 404; another method: 405; HTTP/1.1
	// without Host or with two: 400 (RFC 9112 section 3.2); an empty line before the request
	// line is ignored (section 2.2).
	for req, want := range map[string]string{
		"\x00\x01garbage\r\n\r\n":                             "HTTP/1.1 400 ",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\n\n":                "HTTP/1.1 400 ",
		"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n":              "HTTP/1.1 404 ",
		"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n":         "HTTP/1.1 405 ",
		"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\ntrailing":    "HTTP/1.1 200 ",
		"GET /metrics HTTP/1.1\r\n\r\n":                       "HTTP/1.1 400 ",
		"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n": "HTTP/1.1 400 ",
		"\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n":        "HTTP/1.1 200 ",
	} {
		c := dial()
		_, _ = c.Write([]byte(req))
		if got, ok := readAll(c, eventBound); !ok || !strings.HasPrefix(got, want) {
			t.Errorf("request %q: closed %v, got %.60q; want %q", req, ok, got, want)
		}
		c.Close()
	}

	// Still serving: kubelet and a scrape; every refusal counted; each limit logged once.
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"}); err != nil {
		s.fatalf("Allocate after the hostile peers: %v", err)
	}
	text := mustScrape(t, addr)
	promtoolCheck(t, text)
	for reason, min := range map[string]float64{"evicted": 1, "head_timeout": 1, "head_too_large": 1,
		"bad_request": 4, "not_found": 1, "method_not_allowed": 1} {
		if v, _ := metric(text, "sdp_metrics_http_refused_total", "reason", reason); v < min {
			t.Errorf("sdp_metrics_http_refused_total{reason=%q} = %v, want >= %v", reason, v, min)
		}
	}
	for _, what := range []string{"evicted", "head_timeout", "head", "request"} {
		if n := countLines(s.d, `msg="metrics limit reached"`, "what="+what+" "); n != 1 {
			t.Errorf("%d \"metrics limit reached\" lines for what=%s, want 1 (once per episode)", n, what)
		}
	}
	if ended, _ := s.k.Current(HyperlightResource).Ended(); ended || s.d.Exited() {
		t.Errorf("the daemon's ListAndWatch stream ended or the daemon exited")
	}
}

// stillServing checks what the metrics attacks must leave alone: the plugin registered once
// (p), its devices Healthy, an Allocate answered, the daemon running.
func stillServing(s *scenario, p *Plugin, when string) {
	s.t.Helper()
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
		s.fatalf("Allocate %s: %v", when, err)
	}
	s.devices(3, Healthy, eventBound)
	if s.k.Current(HyperlightResource) != p || s.d.Exited() {
		s.fatalf("%s: the daemon re-registered or exited", when)
	}
}

// Issue 21: one peer reopening 4 connections as soon as they close held every slot, and 19
// of 20 scrapes failed. An attacker goroutine per connection reopens it at once (sending "GE",
// never a whole request) while 20 scrapes run one after another: every scrape is answered
// (each takes the slot of the attacker's connection held longest).
func TestHyperlightMetricsReopenAttack(t *testing.T) {
	s, _, _, _ := metricsPod(t)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	var dialled, reopened int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, eventBound)
				if err != nil {
					continue
				}
				atomic.AddInt64(&dialled, 1)
				_, _ = c.Write([]byte("GE"))
				readAll(c, 2*eventBound) // until the daemon closes it
				c.Close()
				atomic.AddInt64(&reopened, 1)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	if !Poll(eventBound, func() bool { return atomic.LoadInt64(&dialled) >= 4 }) {
		s.fatalf("the attacker could not connect")
	}
	answered := 0
	for i := 0; i < 20; i++ {
		if _, err := scrape(addr); err != nil {
			t.Logf("scrape %d under the reopen attack: %v", i, err)
		} else {
			answered++
		}
	}
	t.Logf("%d of 20 scrapes answered under the reopen attack; the attacker's connections were closed %d times",
		answered, atomic.LoadInt64(&reopened))
	if answered != 20 {
		t.Errorf("%d of 20 scrapes answered under the reopen attack, want 20", answered)
	}
	stillServing(s, p, "under the reopen attack")
	// every attacker connection the daemon closed was closed to make room, and counted (how
	// many depends on how fast the attacker reopened between the scrapes: not a fixed number)
	closed := atomic.LoadInt64(&reopened)
	text := mustScrape(t, addr)
	if v, _ := metric(text, "sdp_metrics_http_refused_total", "reason", "evicted"); v < 1 || v < float64(closed) {
		t.Errorf("sdp_metrics_http_refused_total{reason=\"evicted\"} = %v, want >= 1 and >= %d (the attacker's connections closed)", v, closed)
	}
}

// junkPeer sends req, then junk as fast as the daemon takes it until a write fails (the daemon
// closed the connection) or bound; it returns the answer read and the bytes of junk sent.
func junkPeer(addr, req string, bound time.Duration) (answer string, sent int64, closed bool) {
	c, err := net.DialTimeout("tcp", addr, eventBound)
	if err != nil {
		return "", 0, false
	}
	defer c.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := readAll(c, bound)
		got <- b
	}()
	_ = c.SetWriteDeadline(time.Now().Add(bound))
	if _, err := c.Write([]byte(req)); err != nil {
		return <-got, 0, true
	}
	junk := []byte(strings.Repeat("j", 64<<10))
	for {
		n, err := c.Write(junk)
		sent += int64(n)
		if err != nil {
			var ne net.Error
			closed = !(errors.As(err, &ne) && ne.Timeout())
			break
		}
	}
	return <-got, sent, closed
}

// Issue 21: a peer that kept sending after a 400 or 431 was read 512 bytes at a time until the
// 5 s deadline (11.6 s of CPU for 4 such peers). It is closed once its answer is sent now: 4
// such peers cost the daemon next to no CPU, scrapes are answered, the plugin stays registered.
func TestHyperlightMetricsJunkAfterError(t *testing.T) {
	s, _, _, _ := metricsPod(t)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	pid := s.d.Pid()
	before := cpuTicks(pid)
	reqs := []string{"garbage\r\n\r\n", "\x16\x03\x01\x00\xa5\x01\x00\x00\n\n",
		"GET /metrics HTTP/1.1\r\nX: " + strings.Repeat("a", 9000), "GET /metrics HTTP/1.1\r\n\r\n"}
	wants := []string{"HTTP/1.1 400 ", "HTTP/1.1 400 ", "HTTP/1.1 431 ", "HTTP/1.1 400 "}
	type result struct {
		answer string
		sent   int64
		closed bool
	}
	results := make([]result, len(reqs))
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			a, n, c := junkPeer(addr, reqs[i], 2*eventBound)
			results[i] = result{a, n, c}
		}(i)
	}
	wg.Wait()
	used := cpuTicks(pid) - before
	for i, r := range results {
		t.Logf("junk peer %d: %d bytes of junk sent before the daemon closed (%v), answer %.20q", i, r.sent,
			r.closed, r.answer)
		if !r.closed || !strings.HasPrefix(r.answer, wants[i]) {
			t.Errorf("junk peer %d: closed %v, answer %.40q; want %q, then closed", i, r.closed, r.answer, wants[i])
		}
	}
	// 100 ticks a second: a daemon reading the junk until the deadline spends seconds
	t.Logf("daemon CPU for 4 junk peers: %d ms", used*10)
	if used >= 100 {
		t.Errorf("the daemon spent %d ms of CPU on 4 peers sending junk after an error answer, want < 1 s", used*10)
	}
	mustScrape(t, addr)
	stillServing(s, p, "after the junk peers")
}

// A peer that sends a whole request and never reads nor closes keeps its slot at most until a
// newcomer needs it or the 5 s deadline; those closed at the deadline are counted and logged
// (once) as slow readers. 4 of them: a scrape is answered meanwhile.
func TestHyperlightMetricsNeverReadingPeer(t *testing.T) {
	s, _, _, _ := metricsPod(t)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	peers := holdConns(t, "tcp", addr, 4, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	if len(peers) != 4 {
		s.fatalf("%d peers connected, want 4", len(peers))
	}
	mustScrape(t, addr)
	stillServing(s, p, "with peers never reading")
	const deadlineBound = 5*time.Second + eventBound // the 5 s deadline, generous for ASan
	want := []string{"level=warn", `msg="metrics limit reached"`, "what=slow_reader "}
	if !Poll(deadlineBound, func() bool { return countLines(s.d, want...) >= 1 }) {
		t.Errorf("no line with %q within %v", want, deadlineBound)
	}
	for i, c := range peers {
		if got, ok := readAll(c, eventBound); !ok || !strings.HasPrefix(got, "HTTP/1.1 200 ") {
			t.Errorf("peer %d: closed %v, got %.40q; want its answer, then closed", i, ok, got)
		}
	}
	if n := countLines(s.d, want...); n != 1 {
		t.Errorf("%d lines with %q, want 1 (once per episode)", n, want)
	}
	text := mustScrape(t, addr)
	if v, _ := metric(text, "sdp_metrics_http_refused_total", "reason", "slow_reader"); v < 1 {
		t.Errorf("sdp_metrics_http_refused_total{reason=\"slow_reader\"} = %v, want >= 1", v)
	}
}

// Issue 21: the metrics port in use at start ended the daemon (exit 1). Now the plugin
// registers and advertises its devices Healthy, one error line says why there are no metrics
// (the bind is retried with back-off meanwhile, once a second at first: the debug lines count
// the attempts), and once the port is free the listener comes up and scrapes are answered.
func TestHyperlightMetricsPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	s := prepare(t, newNode(t, true))
	s.startDaemon("DEVICE_COUNT=3", "LOG_LEVEL=debug", "METRICS_ADDRESS="+addr)
	p := s.ready(3)
	if n := waitCount(s.d, 2, `msg="metrics: cannot listen"`, "error=EADDRINUSE"); n < 2 {
		s.fatalf("%d bind attempts logged at debug, want 2 or more", n)
	}
	want := []string{"level=error", `msg="cannot listen for metrics"`, "address=" + addr,
		"errno=EADDRINUSE"} // error= is the C library's text (musl: "Address in use")
	if n := countLines(s.d, want...); n != 1 {
		t.Errorf("%d lines with %q, want 1 (once for every attempt)", n, want)
	}
	stillServing(s, p, "with the metrics port in use")
	l.Close()
	if got := metricsAddr(t, s.d); got != addr {
		t.Errorf("metrics listening on %s, want %s", got, addr)
	}
	text := mustScrape(t, addr)
	expectMetric(t, text, 3, "sdp_devices_healthy", "resource", HyperlightResource)
	stillServing(s, p, "after the metrics port came free")
}

// An address that is not on this host (bind: EADDRNOTAVAIL) also ended the daemon; now it is
// logged once and the devices are served, by both daemons.
func TestHyperlightMetricsAddressNotLocal(t *testing.T) {
	s := prepare(t, newNode(t, true))
	s.startDaemon("DEVICE_COUNT=3", "METRICS_ADDRESS=192.0.2.1:9400") // TEST-NET-1
	p := s.ready(3)
	want := []string{"level=error", `msg="cannot listen for metrics"`, "address=192.0.2.1:9400",
		"errno=EADDRNOTAVAIL"}
	if n := waitCount(s.d, 1, want...); n != 1 {
		t.Errorf("%d lines with %q, want 1", n, want)
	}
	stillServing(s, p, "with an address not on this host")
}

func TestKataMetricsAddressNotLocal(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon("METRICS_ADDRESS=192.0.2.1:9400")
	s.kataReady(want)
	line := []string{"level=error", `msg="cannot listen for metrics"`, "errno=EADDRNOTAVAIL"}
	if n := waitCount(s.d, 1, line...); n != 1 {
		t.Errorf("%d lines with %q, want 1", n, line)
	}
	if s.d.Exited() {
		s.fatalf("kata exited")
	}
}

// A real Prometheus server (Debian's, unpacked, never installed) scrapes the daemon: up == 1
// and the daemon's gauge is queried through its HTTP API.
func TestHyperlightMetricsPrometheus(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", metricsEnv)
	addr := metricsAddr(t, s.d)
	s.ready(3)
	prom := debianTool(t, "prometheus", "prometheus")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"+
		"  - job_name: sdp\n    static_configs:\n      - targets: ['%s']\n", addr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := l.Addr().String()
	l.Close()
	cmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	var log LogBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	}()
	query := func(q string) (string, error) {
		c := http.Client{Timeout: eventBound}
		resp, err := c.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []struct {
					Value []interface{} `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&r); err != nil {
			return "", err
		}
		if len(r.Data.Result) != 1 || len(r.Data.Result[0].Value) != 2 {
			return "", fmt.Errorf("%d results", len(r.Data.Result))
		}
		v, _ := r.Data.Result[0].Value[1].(string)
		return v, nil
	}
	const promBound = 60 * time.Second // its start (TSDB, web) and a few 1 s scrapes
	var up, healthy string
	if !Poll(promBound, func() bool {
		up, _ = query(`up{job="sdp"}`)
		healthy, _ = query(`sdp_devices_healthy{job="sdp",resource="hyperlight.dev/hypervisor"}`)
		return up == "1" && healthy == "3"
	}) {
		t.Fatalf("Prometheus: up %q, sdp_devices_healthy %q within %v, want 1 and 3", up, healthy, promBound)
	}
}

// waitPodMetricsAddr waits for the "metrics listening" line of a pod's daemon.
func waitPodMetricsAddr(t *testing.T, p *Pod) string {
	t.Helper()
	var m []string
	if !Poll(startBound, func() bool {
		for _, l := range strings.Split(p.Log(), "\n") {
			if strings.Contains(l, `msg="metrics listening"`) {
				m = addressRe.FindStringSubmatch(l)
				return m != nil
			}
		}
		return false
	}) {
		t.Fatalf("no \"metrics listening\" line within %v; log:\n%s", startBound, p.Log())
	}
	return m[1]
}

// floodMetrics is a hostile client of the metrics port: connections holding almost a whole
// head (8 KiB less a byte) without ending it, 64 more connections at once, and oversized heads
// sent as fast as the daemon takes them; it returns when every connection ended (each is closed
// within the 5 s deadline).
func floodMetrics(t *testing.T, addr string) {
	var wg sync.WaitGroup
	almost := "GET /metrics HTTP/1.1\r\nX: " + strings.Repeat("a", 8192-28)
	huge := "GET /metrics HTTP/1.1\r\nX: " + strings.Repeat("a", 1<<20) + "\r\n\r\n"
	var mu sync.Mutex
	outcome := map[string]int{}
	for i := 0; i < 96; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addr, eventBound)
			if err != nil {
				mu.Lock()
				outcome["dial failed"]++
				mu.Unlock()
				return
			}
			defer c.Close()
			_ = c.SetWriteDeadline(time.Now().Add(2 * eventBound))
			if i%3 == 0 {
				_, _ = c.Write([]byte(almost))
			} else {
				_, _ = c.Write([]byte(huge))
			}
			got, closed := readAll(c, 2*eventBound)
			kind := "closed without an answer"
			if len(got) >= 12 {
				kind = got[:12]
			}
			if !closed {
				kind = "not closed in time"
			}
			mu.Lock()
			outcome[kind]++
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	t.Logf("metrics port flood: %v", outcome)
	if outcome["not closed in time"] > 0 {
		t.Errorf("%d connections to the metrics port were not closed within %v", outcome["not closed in time"],
			2*eventBound)
	}
}
