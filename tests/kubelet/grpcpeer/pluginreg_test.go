// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The core's plugin registration socket (dp/pluginreg.h, through tests/grpc/pluginreg_server)
// asked by grpc-go as the kubelet's plugin watcher asks a DRA driver: GetInfo, then
// NotifyRegistrationStatus; with bad requests, a stale socket and a live one in the way.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"sdp/kubelet"
	reg "sdp/pluginregistration"
)

const (
	regDriver   = "kata.nvidia.com"
	regEndpoint = "/var/lib/kubelet/plugins/kata.nvidia.com/dra.sock"
)

type regServer struct {
	*kubelet.Daemon
	t    *testing.T
	sock string
}

// startReg runs pluginreg_server in dir (a fresh one when empty) for regDriver with versions,
// and waits until its socket listens.
func startReg(t *testing.T, dir string, versions ...string) *regServer {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	bin := filepath.Join(filepath.Dir(testBinary(t)), "pluginreg_server")
	args := append([]string{dir, "DRAPlugin", regDriver, regEndpoint}, versions...)
	d, err := kubelet.StartDaemon(bin, nil, args...)
	if err != nil {
		t.Fatalf("start pluginreg_server: %v", err)
	}
	s := &regServer{Daemon: d, t: t, sock: filepath.Join(dir, regDriver+"-reg.sock")}
	t.Cleanup(func() {
		if !s.Exited() {
			if code, err := s.Stop(20 * time.Second); err != nil || code != 0 {
				t.Errorf("pluginreg_server at SIGTERM: exit %d, %v\n%s", code, err, s.Log())
			}
		}
		checkSanitizers(t, "pluginreg_server", s.Log())
	})
	waitFor(t, 10*time.Second, "the registration socket", func() bool {
		if s.Exited() {
			t.Fatalf("pluginreg_server exited early: %s\n%s", s.ExitDescription(), s.Log())
		}
		return listening(t, s.sock)
	})
	return s
}

// regClient dials the registration socket as the kubelet's plugin watcher does (a unix
// socket, insecure, the protobuf codec).
func regClient(t *testing.T, sock string) (reg.RegistrationClient, *grpc.ClientConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := grpc.DialContext(ctx, "passthrough:///pluginreg", grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { cc.Close() })
	return reg.NewRegistrationClient(cc), cc
}

func regCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// The kubelet's sequence: GetInfo gives the type, the driver's name, its service endpoint and
// versions; NotifyRegistrationStatus (registered, then refused with the kubelet's message)
// reaches the plugin each time, in order, and is answered.
func TestPluginRegGetInfoAndStatus(t *testing.T) {
	s := startReg(t, "", "v1.DRAPlugin", "v1beta1.DRAPlugin")
	fi, err := os.Stat(s.sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v; want 0600", s.sock, err, fi.Mode())
	}
	c, _ := regClient(t, s.sock)
	ctx, cancel := regCtx()
	defer cancel()
	info, err := c.GetInfo(ctx, &reg.InfoRequest{})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != "DRAPlugin" || info.Name != regDriver || info.Endpoint != regEndpoint ||
		strings.Join(info.SupportedVersions, ",") != "v1.DRAPlugin,v1beta1.DRAPlugin" {
		t.Fatalf("GetInfo: %+v", info)
	}
	if _, err := c.NotifyRegistrationStatus(ctx, &reg.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(true): %v", err)
	}
	msg := `plugin "kata.nvidia.com" is already registered` + "\n\x01"
	if _, err := c.NotifyRegistrationStatus(ctx, &reg.RegistrationStatus{Error: msg}); err != nil {
		t.Fatalf("NotifyRegistrationStatus(false): %v", err)
	}
	want := []string{
		"serving " + s.sock,
		`status registered=1 error=""`,
		`status registered=0 error="plugin \"kata.nvidia.com\" is already registered\x0a\x01"`,
	}
	waitFor(t, 5*time.Second, "both statuses told", func() bool { return len(s.Stdout.Lines()) >= len(want) })
	if got := s.Stdout.Lines(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("told:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Malformed requests are refused with INVALID_ARGUMENT and tell nothing; the socket serves on.
func TestPluginRegBadRequests(t *testing.T) {
	s := startReg(t, "", "v1.DRAPlugin")
	_, cc := regClient(t, s.sock)
	raw := dial(t, s.sock, "localhost")
	cases := []struct {
		method string
		req    []byte
	}{
		{"/pluginregistration.Registration/GetInfo", []byte{0x0a, 0x05, 'a'}},                     // truncated
		{"/pluginregistration.Registration/NotifyRegistrationStatus", []byte{0x0a, 0x01, 0x00}},   // field 1 as bytes
		{"/pluginregistration.Registration/NotifyRegistrationStatus", []byte{0x12, 0x02, 'a', 0}}, // NUL in error
		{"/pluginregistration.Registration/NotifyRegistrationStatus", []byte{0x08}},               // varint cut
	}
	for _, tc := range cases {
		_, err := call(raw, 5*time.Second, tc.method, tc.req)
		wantCode(t, err, codes.InvalidArgument, tc.method)
	}
	_, err := call(raw, 5*time.Second, "/pluginregistration.Registration/Register", nil)
	wantCode(t, err, codes.Unimplemented, "an unknown method")
	c := reg.NewRegistrationClient(cc)
	ctx, cancel := regCtx()
	defer cancel()
	// unknown fields are skipped, as protobuf does
	if _, err := call(raw, 5*time.Second, "/pluginregistration.Registration/GetInfo", []byte{0x08, 0x01, 0x12, 0x01, 'x'}); err != nil {
		t.Fatalf("GetInfo with unknown fields: %v", err)
	}
	if info, err := c.GetInfo(ctx, &reg.InfoRequest{}); err != nil || info.Name != regDriver {
		t.Fatalf("GetInfo after the bad requests: %v %+v", err, info)
	}
	if n := len(s.Stdout.Lines()); n != 1 {
		t.Fatalf("a refused request was told: %q", s.Stdout.Lines())
	}
}

// A stale socket of the name (a plugin killed with -9) is replaced; a live one (another
// instance) is refused, and left alone.
func TestPluginRegStaleAndLiveSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, regDriver+"-reg.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd) // bound, never listened: stale
	s := startReg(t, dir, "v1.DRAPlugin")
	c, _ := regClient(t, s.sock)
	ctx, cancel := regCtx()
	defer cancel()
	if _, err := c.GetInfo(ctx, &reg.InfoRequest{}); err != nil {
		t.Fatalf("GetInfo on the replaced socket: %v", err)
	}
	bin := filepath.Join(filepath.Dir(testBinary(t)), "pluginreg_server")
	d, err := kubelet.StartDaemon(bin, nil, dir, "DRAPlugin", regDriver, regEndpoint, "v1.DRAPlugin")
	if err != nil {
		t.Fatal(err)
	}
	code, err := d.Wait(10 * time.Second)
	if err != nil || code != 1 || !strings.Contains(d.Log(), "error EADDRINUSE") {
		t.Fatalf("a second instance: exit %d (%v), log %q; want 1 and EADDRINUSE", code, err, d.Log())
	}
	if _, err := c.GetInfo(ctx, &reg.InfoRequest{}); err != nil {
		t.Fatalf("the first instance after the second was refused: %v", err)
	}
	// SIGTERM: the socket goes, so the kubelet deregisters the plugin
	if code, err := s.Stop(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v\n%s", code, err, s.Log())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after SIGTERM: %v", err)
	}
}

// Configurations the kubelet would refuse, or that cannot be served, are refused at start.
func TestPluginRegBadConfig(t *testing.T) {
	bin := filepath.Join(filepath.Dir(testBinary(t)), "pluginreg_server")
	dir := t.TempDir()
	long := strings.Repeat("a", 63)
	for _, args := range [][]string{
		{dir, "DRAPlugin", "Kata.nvidia.com", regEndpoint, "v1.DRAPlugin"}, // upper case
		{dir, "DRAPlugin", "-kata", regEndpoint, "v1.DRAPlugin"},           // leading '-'
		{dir, "DRAPlugin", long + "a", regEndpoint, "v1.DRAPlugin"},        // 64 bytes
		{dir, "DRAPlugin", regDriver, "relative/dra.sock", "v1.DRAPlugin"},
		{dir, "DRAPlugin", regDriver, regEndpoint, ""},
		{dir, "", regDriver, regEndpoint, "v1.DRAPlugin"},
		{filepath.Join(dir, strings.Repeat("d", 60)), "DRAPlugin", long, regEndpoint, "v1.DRAPlugin"}, // path too long
	} {
		d, err := kubelet.StartDaemon(bin, nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		code, err := d.Wait(10 * time.Second)
		if err != nil || code != 1 || !strings.HasPrefix(d.Log(), "error E") {
			t.Errorf("%q: exit %d (%v), log %q; want 1 and an error", args, code, err, d.Log())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused configurations left files: %v", entries)
	}
}
