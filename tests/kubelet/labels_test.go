package kubelet

// Node labels: the real daemon patches its node's labels through a stub HTTPS API server
// (apistub.go). The stub checks what a real API server would (method, path, headers, token,
// the merge patch), fails or withholds the first answer, and the daemon keeps serving kubelet
// meanwhile and retries after its back-off.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	labelNode = "node-a.example.com"
	// the whole-exchange timeout in the label child (15 s) plus the first back-off (1 s),
	// with room for a loaded CI machine and ASan.
	hungBound = 40 * time.Second
)

// labelScenario is a scenario with a stub API server and a mounted service account.
type labelScenario struct {
	*scenario
	stub *APIStub
}

// newLabelScenario starts the stub with answer, mounts a service account holding token and
// ca (the stub's CA when nil), then the mock kubelet and the daemon with NODE_NAME (unless
// nodeName is empty) and the stub as the API server.
func newLabelScenario(t *testing.T, nodeName, token string, ca []byte,
	answer func(node *Node, n int, r *APIRequest) APIAnswer) *labelScenario {
	t.Helper()
	return newLabelScenarioWith(t, StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}}, nodeName, token, ca, answer)
}

// newLabelScenarioWith is newLabelScenario with the stub's certificate (and host) from c.
func newLabelScenarioWith(t *testing.T, c StubCert, nodeName, token string, ca []byte,
	answer func(node *Node, n int, r *APIRequest) APIAnswer) *labelScenario {
	t.Helper()
	return newLabelScenarioBinary(t, "", c, nodeName, token, ca, answer)
}

// newLabelScenarioBinary is newLabelScenarioWith running the daemon binary bin ("": the build's).
func newLabelScenarioBinary(t *testing.T, bin string, c StubCert, nodeName, token string, ca []byte,
	answer func(node *Node, n int, r *APIRequest) APIAnswer) *labelScenario {
	t.Helper()
	return newLabelScenarioNode(t, bin, c, nodeName, token, ca, answer, nil)
}

// newLabelScenarioNode is newLabelScenarioBinary with setup run on the node before the daemon
// starts and the daemon's environment extended by extra.
func newLabelScenarioNode(t *testing.T, bin string, c StubCert, nodeName, token string, ca []byte,
	answer func(node *Node, n int, r *APIRequest) APIAnswer, setup func(*Node), extra ...string) *labelScenario {
	t.Helper()
	node := newNode(t, true)
	if setup != nil {
		setup(node)
	}
	stub, err := StartAPIStubWith(c, func(n int, r *APIRequest) APIAnswer { return answer(node, n, r) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	if ca == nil {
		ca = stub.CAPEM
	}
	if err := WriteServiceAccount(node.Root, token, ca); err != nil {
		t.Fatal(err)
	}
	env := []string{"DEVICE_COUNT=3", "KUBERNETES_SERVICE_HOST=" + stub.Host,
		"KUBERNETES_SERVICE_PORT=" + stub.PortString(), "NO_PROXY=*", "no_proxy=*"}
	if nodeName != "" {
		env = append(env, "NODE_NAME="+nodeName)
	}
	env = append(env, extra...)
	s := prepare(t, node)
	if bin != "" {
		s.bin = bin
	}
	s.startDaemon(env...)
	return &labelScenario{scenario: s, stub: stub}
}

// waitRequests waits until the stub holds at least n requests and cond (if any) holds.
func (s *labelScenario) waitRequests(n int, bound time.Duration, what string, cond func([]APIRequest) bool) []APIRequest {
	s.t.Helper()
	var reqs []APIRequest
	if !s.wait(bound, func() bool {
		reqs = s.stub.Requests()
		return len(reqs) >= n && (cond == nil || cond(reqs))
	}) {
		s.fatalf("%s: the stub API server got %d request(s) within %v: %s", what, len(reqs), bound, describeRequests(reqs))
	}
	return reqs
}

func describeRequests(reqs []APIRequest) string {
	var b strings.Builder
	for i, r := range reqs {
		answer := "nothing (yet)"
		if r.Status != 0 {
			answer = fmt.Sprint(r.Status)
		}
		fmt.Fprintf(&b, "\n  #%d %s %s answered %s", i+1, r.Method, r.Path, answer)
	}
	return b.String()
}

// checkLabelRequest checks one request against what the daemon must send.
func checkLabelRequest(t *testing.T, i int, r APIRequest, token string) {
	t.Helper()
	checkLabelPatch(t, i, r, token, "true")
}

// checkLabelPatch is checkLabelRequest with hyperlight.dev/enabled set to enabled.
func checkLabelPatch(t *testing.T, i int, r APIRequest, token, enabled string) {
	t.Helper()
	checkLabelHeaders(t, i, r, token)
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	var body map[string]interface{}
	if err := dec.Decode(&body); err != nil || dec.More() {
		t.Errorf("request #%d: body %q is not one JSON object (%v)", i+1, r.Body, err)
		return
	}
	wantBody := map[string]interface{}{"metadata": map[string]interface{}{"labels": map[string]interface{}{
		"hyperlight.dev/enabled": enabled, "hyperlight.dev/hypervisor": "kvm"}}}
	if !reflect.DeepEqual(body, wantBody) {
		t.Errorf("request #%d: merge patch %s, want exactly %v", i+1, r.Body, wantBody)
	}
}

// checkLabelHeaders: the request's method, path, headers and token, whatever it patches.
func checkLabelHeaders(t *testing.T, i int, r APIRequest, token string) {
	t.Helper()
	want := map[string]string{
		"method":        "PATCH",
		"path":          "/api/v1/nodes/" + labelNode,
		"Content-Type":  "application/merge-patch+json",
		"Accept":        "application/json",
		"Authorization": "Bearer " + token,
	}
	got := map[string]string{"method": r.Method, "path": r.Path, "Content-Type": r.ContentType,
		"Accept": r.Accept, "Authorization": r.Authorization}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("request #%d: %s %q, want %q", i+1, k, got[k], w)
		}
	}
	if !strings.HasPrefix(r.UserAgent, "hyperlight-device-plugin/") {
		t.Errorf("request #%d: User-Agent %q, want hyperlight-device-plugin/<version>", i+1, r.UserAgent)
	}
}

// servingMeanwhile proves the daemon serves kubelet: registered, a ListAndWatch snapshot, and
// an Allocate answered by the daemon within the bound (OK, or UNAVAILABLE naming why the device
// is not usable when the test environment cannot run the usability probe).
func (s *labelScenario) servingMeanwhile() *Plugin {
	s.t.Helper()
	p := s.registered(1, startBound)
	if _, err := p.WaitSnapshots(1, eventBound); err != nil {
		s.fatalf("ListAndWatch: %v", err)
	}
	conn := s.dial(p)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	resp, err := api.NewDevicePluginClient(conn).Allocate(ctx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"hyperlight-0"}}}})
	switch {
	case err == nil:
		if len(resp.ContainerResponses) != 1 {
			s.fatalf("Allocate answered %d container responses, want 1", len(resp.ContainerResponses))
		}
	case status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "is not usable"):
		s.t.Logf("Allocate answered UNAVAILABLE (no hypervisor probe in this environment): %v", err)
	default:
		s.fatalf("Allocate not answered by the daemon within %v: %v", eventBound, err)
	}
	return p
}

// logLine waits for a daemon log line containing every part.
func (s *labelScenario) logLine(bound time.Duration, parts ...string) string {
	s.t.Helper()
	line, ok := s.d.WaitLog(bound, func(l string) bool {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				return false
			}
		}
		return true
	})
	if !ok {
		s.fatalf("no daemon log line with %q within %v", parts, bound)
	}
	return line
}

// noTLSInDaemon checks that the daemon process itself never mapped a TLS library and holds no
// TCP connection (the PATCH ran in the hyperlight-label-node helper child) and that the daemon
// is confined (the child ran under the daemon's seccomp filter).
func (s *labelScenario) noTLSInDaemon() {
	s.t.Helper()
	if want := wantSeccompStatus(); procStatus(s.t, s.d.Pid(), "Seccomp") != want {
		s.t.Errorf("/proc/%d/status Seccomp: %q, want %s", s.d.Pid(), procStatus(s.t, s.d.Pid(), "Seccomp"),
			map[string]string{"2": "2 (confined)", "0": "0 (SDP_SECCOMP=off in the test's environment)"}[want])
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", s.d.Pid()))
	if err != nil {
		s.fatalf("read the daemon's maps: %v", err)
	}
	for _, lib := range []string{"libmbed", "libssl", "libcrypto", "libcurl", "hyperlight-label-node"} {
		if strings.Contains(string(maps), lib) {
			s.t.Errorf("the daemon process maps %s; it belongs in the label helper child only", lib)
		}
	}
	tcp := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", s.d.Pid(), f))
		if err != nil {
			s.fatalf("read the daemon's TCP sockets: %v", err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			if fields := strings.Fields(line); len(fields) > 9 {
				tcp["socket:["+fields[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.d.Pid()))
	if err != nil {
		s.fatalf("read the daemon's fds: %v", err)
	}
	for _, fd := range fds {
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", s.d.Pid(), fd.Name())); tcp[link] {
			s.t.Errorf("the daemon process holds a TCP socket (fd %s); HTTPS belongs in the label helper child", fd.Name())
		}
	}
}

// stop stops the daemon and checks it exited cleanly (labels freed at exit).
func (s *labelScenario) stop() {
	s.t.Helper()
	code, err := s.d.Stop(exitBound)
	if err != nil || code != 0 {
		s.fatalf("daemon stop: exit %d, %v", code, err)
	}
}

// The first PATCH fails with HTTP 500 and is held until kubelet has seen the daemon register,
// stream and answer Allocate; the token rotates meanwhile; the retry, 1 s later, carries the new
// token and is accepted; then the daemon stops sending.
func TestLabelsRetryAfterServerError(t *testing.T) {
	release := make(chan struct{})
	var rotateErr error
	var once sync.Once
	// Invalid UTF-8, control characters and more than 200 bytes: the log shows a short, clean excerpt.
	errBody := "etcd unavailable\n\tretry later\x01\xff " + strings.Repeat("x", 200) + " PAST-THE-EXCERPT"
	s := newLabelScenario(t, labelNode, "token-1\n", nil, func(node *Node, n int, r *APIRequest) APIAnswer {
		if n == 1 {
			once.Do(func() { rotateErr = WriteToken(node.Root, "token-2\n") })
			return APIAnswer{Status: 500, Body: errBody, Hold: release}
		}
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	})
	s.waitRequests(1, startBound, "first attempt", nil)
	p := s.servingMeanwhile()
	if r := s.stub.Requests(); r[0].Status != 0 {
		s.fatalf("the first PATCH was answered (%d) before the test released it", r[0].Status)
	}
	released := time.Now()
	close(release)

	reqs := s.waitRequests(2, backoffBound, "retry", func(r []APIRequest) bool { return len(r) >= 2 && r[1].Status != 0 })
	if rotateErr != nil {
		t.Fatalf("rotate the token: %v", rotateErr)
	}
	checkLabelRequest(t, 0, reqs[0], "token-1")
	checkLabelRequest(t, 1, reqs[1], "token-2")
	if reqs[0].Status != 500 || reqs[1].Status != 200 {
		t.Errorf("answers %d, %d; want 500, 200", reqs[0].Status, reqs[1].Status)
	}
	if gap := reqs[1].Time.Sub(released); gap < 950*time.Millisecond {
		t.Errorf("retry %v after the failure, want the 1 s back-off", gap)
	}
	warn := s.logLine(eventBound, "level=warn", `msg="node labelling failed"`, "status=500")
	for _, w := range []string{"node=" + labelNode, "attempt=1", "retry_in=1s", "etcd unavailable..retry later.. xxx"} {
		if !strings.Contains(warn, w) {
			t.Errorf("failure log line lacks %q: %s", w, warn)
		}
	}
	if strings.Contains(warn, "PAST-THE-EXCERPT") || strings.Contains(warn, "\t") {
		t.Errorf("failure log line has more than a 200-byte clean excerpt: %s", warn)
	}
	done := s.logLine(eventBound, "level=info", `msg="node labelled"`)
	if !strings.Contains(done, "node="+labelNode) || !strings.Contains(done, "attempts=2") {
		t.Errorf("success log line: %s", done)
	}
	if ended, err := p.Ended(); ended {
		t.Errorf("kubelet's ListAndWatch stream ended: %v", err)
	}
	s.noTLSInDaemon()
	s.stop()
	if n := len(s.stub.Requests()); n != 2 {
		t.Errorf("%d PATCH requests in total, want 2 (none after success)", n)
	}
}

// The API server accepts the connection and never answers: the daemon registers and answers
// Allocate regardless; the label helper child gives up after its 15 s exchange
// timeout (before the child's 20 s deadline) and the retry succeeds.
func TestLabelsHungAPIServer(t *testing.T) {
	s := newLabelScenario(t, labelNode, "token-1", nil, func(_ *Node, n int, r *APIRequest) APIAnswer {
		if n == 1 {
			return APIAnswer{Hang: true}
		}
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`}
	})
	s.waitRequests(1, startBound, "first attempt", nil)
	s.servingMeanwhile()
	if r := s.stub.Requests(); len(r) != 1 || r[0].Status != 0 {
		s.fatalf("want exactly one unanswered request while the server hangs: %s", describeRequests(r))
	}
	reqs := s.waitRequests(2, hungBound, "retry after the transfer timeout",
		func(r []APIRequest) bool { return len(r) >= 2 && r[1].Status != 0 })
	checkLabelRequest(t, 0, reqs[0], "token-1")
	checkLabelRequest(t, 1, reqs[1], "token-1")
	if reqs[1].Status != 200 {
		t.Errorf("second answer %d, want 200", reqs[1].Status)
	}
	warn := s.logLine(eventBound, "level=warn", `msg="node labelling failed"`, "attempt=1")
	if !strings.Contains(strings.ToLower(warn), "timed out") {
		t.Errorf("failure log line does not say the transfer timed out: %s", warn)
	}
	s.logLine(eventBound, "level=info", `msg="node labelled"`, "attempts=2")
	s.stop()
}

// A CA that did not sign the server certificate: TLS verification fails, no request reaches
// the server, the failure is logged, the daemon serves.
func TestLabelsUntrustedServer(t *testing.T) {
	otherCA, err := NewTestCA()
	if err != nil {
		t.Fatal(err)
	}
	s := newLabelScenario(t, labelNode, "token-1", otherCA, func(_ *Node, n int, r *APIRequest) APIAnswer {
		return APIAnswer{Status: 200}
	})
	warn := s.logLine(startBound, "level=warn", `msg="node labelling failed"`, "attempt=1")
	if !strings.Contains(strings.ToLower(warn), "certificate") {
		t.Errorf("failure log line does not name the certificate problem: %s", warn)
	}
	s.servingMeanwhile()
	if r := s.stub.Requests(); len(r) != 0 {
		t.Errorf("requests reached a server the CA does not vouch for: %s", describeRequests(r))
	}
	s.stop()
}

// Without NODE_NAME the daemon says why labelling is off, sends nothing and serves.
func TestLabelsDisabledWithoutNodeName(t *testing.T) {
	s := newLabelScenario(t, "", "token-1", nil, func(_ *Node, n int, r *APIRequest) APIAnswer {
		return APIAnswer{Status: 200}
	})
	s.logLine(startBound, "level=info", `msg="node labelling disabled"`, "NODE_NAME is not set")
	s.servingMeanwhile()
	s.stop()
	if r := s.stub.Requests(); len(r) != 0 {
		t.Errorf("requests without NODE_NAME: %s", describeRequests(r))
	}
	if strings.Contains(s.d.Log(), "node labelling enabled") {
		t.Errorf("labelling enabled without NODE_NAME")
	}
}

// The server's certificate is signed by the right CA but names another address: the child
// refuses it (Mbed TLS 2.28 does not check iPAddress entries; https.c does), says which address
// it wanted, and no request reaches the server.
func TestLabelsCertificateForAnotherAddress(t *testing.T) {
	c := StubCert{IPs: []net.IP{net.ParseIP("127.0.0.2")}, DNS: []string{"localhost"}}
	s := newLabelScenarioWith(t, c, labelNode, "token-1", nil, func(_ *Node, n int, r *APIRequest) APIAnswer {
		return APIAnswer{Status: 200}
	})
	s.logLine(startBound, "level=warn", `msg="node labelling failed"`, "attempt=1", "certificate rejected",
		"no subjectAltName IP address 127.0.0.1")
	s.servingMeanwhile()
	if r := s.stub.Requests(); len(r) != 0 {
		t.Errorf("requests reached a server whose certificate is for another address: %s", describeRequests(r))
	}
	s.stop()
}

// KUBERNETES_SERVICE_HOST a host name (localhost: ::1 first on most hosts, where nothing
// listens, then 127.0.0.1), the certificate an RSA one for that name (kubeadm's key type); the
// first answer a 500 with a chunked body (its excerpt decoded in the log), the retry a chunked 200.
func TestLabelsHostNameRSAChunked(t *testing.T) {
	c := StubCert{DNS: []string{"localhost"}, RSA: true, Host: "localhost"}
	s := newLabelScenarioWith(t, c, labelNode, "token-1", nil, func(_ *Node, n int, r *APIRequest) APIAnswer {
		if n == 1 {
			return APIAnswer{Status: 500, Body: `{"kind":"Status","message":"etcdserver: request timed out"}`, Chunked: true}
		}
		return APIAnswer{Status: 200, Body: `{"kind":"Node","apiVersion":"v1"}`, Chunked: true}
	})
	warn := s.logLine(startBound, "level=warn", `msg="node labelling failed"`, "attempt=1", "status=500")
	if !strings.Contains(warn, `etcdserver: request timed out`) {
		t.Errorf("the failure's excerpt is not the decoded chunked body: %s", warn)
	}
	s.logLine(hungBound, "level=info", `msg="node labelled"`, "attempts=2")
	reqs := s.stub.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2: %s", len(reqs), describeRequests(reqs))
	}
	checkLabelRequest(t, 1, reqs[1], "token-1")
	s.noTLSInDaemon()
	s.stop()
}

// The certificate names another host name: Mbed TLS's own name check refuses it.
func TestLabelsCertificateForAnotherName(t *testing.T) {
	c := StubCert{DNS: []string{"kubernetes.default.svc"}, Host: "localhost"}
	s := newLabelScenarioWith(t, c, labelNode, "token-1", nil, func(_ *Node, n int, r *APIRequest) APIAnswer {
		return APIAnswer{Status: 200}
	})
	s.logLine(startBound, "level=warn", `msg="node labelling failed"`, "attempt=1", "certificate rejected",
		"Common Name (CN) does not match")
	if r := s.stub.Requests(); len(r) != 0 {
		t.Errorf("requests reached a server whose certificate is for another name: %s", describeRequests(r))
	}
	s.stop()
}

// The daemon's directory lacks hyperlight-label-node (an image built without it): each attempt
// fails with the program's path and the reason, is retried with the back-off, and the daemon
// serves meanwhile.
func TestLabelsHelperProgramMissing(t *testing.T) {
	dir := t.TempDir()
	build, err := BuildDir()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(build, HyperlightBinary))
	if err != nil {
		t.Fatal(err)
	}
	lone := filepath.Join(dir, HyperlightBinary)
	if err := os.WriteFile(lone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newLabelScenarioBinary(t, lone, StubCert{IPs: []net.IP{net.ParseIP("127.0.0.1")}}, labelNode, "token-1", nil,
		func(_ *Node, n int, r *APIRequest) APIAnswer { return APIAnswer{Status: 200} })
	want := "cannot start helper " + filepath.Join(dir, "hyperlight-label-node") + ": No such file or directory"
	s.logLine(startBound, "level=warn", `msg="node labelling failed"`, "attempt=1", want, "retry_in=1s")
	s.logLine(hungBound, "level=warn", `msg="node labelling failed"`, "attempt=2", want)
	s.servingMeanwhile()
	if r := s.stub.Requests(); len(r) != 0 {
		t.Errorf("requests without the label helper: %s", describeRequests(r))
	}
	s.stop()
}
