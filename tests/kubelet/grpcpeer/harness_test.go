// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The fixtures every conformance test starts from: the C test server (startServer), a grpc-go
// connection to it (dial), a held server stream (holdStream), a raw HTTP/2 connection
// (rawDial, raw_test.go), and the condition waits (waitFor, waitLive).

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"sdp/kubelet"
)

func testBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SDP_BUILD_DIR")
	if dir == "" {
		t.Fatal("SDP_BUILD_DIR is not set (the meson build directory)")
	}
	bin := filepath.Join(dir, "tests", "grpc", "grpc_test_server")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("test server binary: %v", err)
	}
	return bin
}

// waitFor waits (kubelet.Poll) until cond holds, failing the test after bound.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	if !kubelet.Poll(bound, cond) {
		t.Fatalf("timed out after %v waiting for %s", bound, what)
	}
}

// checkSanitizers fails on any ASan/UBSan/LSan report in a child's stderr.
func checkSanitizers(t *testing.T, who, stderr string) {
	t.Helper()
	for _, bad := range []string{"Sanitizer", "runtime error:"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("%s: sanitizer report:\n%s", who, stderr)
			return
		}
	}
}

// cServer is the C test server, a kubelet.Daemon serving sock.
type cServer struct {
	*kubelet.Daemon
	t    *testing.T
	sock string
}

// startServer runs the C test server on a fresh socket, with limit flags if any
// (grpc_test_server --handshake-ms N ...), and waits until its socket listens.
func startServer(t *testing.T, args ...string) *cServer {
	t.Helper()
	s := &cServer{t: t, sock: filepath.Join(t.TempDir(), "dp.sock")}
	d, err := kubelet.StartDaemon(testBinary(t), nil, append(args, s.sock)...)
	if err != nil {
		t.Fatalf("start test server: %v", err)
	}
	s.Daemon = d
	t.Cleanup(func() { s.stop() })
	waitFor(t, 10*time.Second, "the test server socket", func() bool {
		if s.Exited() {
			t.Fatalf("test server exited early: %s\n%s", s.ExitDescription(), s.Log())
		}
		return listening(t, s.sock)
	})
	return s
}

// listening reports whether a unix socket listens on path (/proc/net/unix, flag __SO_ACCEPTCON):
// a condition seen without connecting, so that no test's connection count includes the wait's.
func listening(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() { // Num RefCount Protocol Flags Type St Inode Path
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 || fields[7] != path {
			continue
		}
		if flags, err := strconv.ParseUint(fields[3], 16, 32); err == nil && flags&0x10000 != 0 {
			return true
		}
	}
	return false
}

// terminate sends SIGTERM and requires exit 0 within a bound, with no sanitizer report.
func (s *cServer) terminate() {
	s.t.Helper()
	code, err := s.Stop(20 * time.Second)
	if err != nil {
		s.t.Fatalf("test server: %v\n%s", err, s.Log())
	}
	if code != 0 {
		s.t.Errorf("test server exit: %s\n%s", s.ExitDescription(), s.Log())
	}
	checkSanitizers(s.t, "test server", s.Log())
}

func (s *cServer) stop() {
	if !s.Exited() {
		s.terminate()
		return
	}
	checkSanitizers(s.t, "test server", s.Log())
}

// dial connects grpc-go to sock with the given :authority and the raw codec.
func dial(t *testing.T, sock, authority string, extra ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []grpc.DialOption{
		grpc.WithInsecure(),
		grpc.WithBlock(),
		grpc.WithAuthority(authority),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	}
	cc, err := grpc.DialContext(ctx, "passthrough:///grpcpeer", append(opts, extra...)...)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func call(cc *grpc.ClientConn, timeout time.Duration, method string, req []byte,
	opts ...grpc.CallOption) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var resp []byte
	err := cc.Invoke(ctx, method, req, &resp, opts...)
	return resp, err
}

type liveCounts struct{ live, calls, conns uint32 }

// live asks the server how many calls are open (the Live call itself counts in calls).
func live(t *testing.T, cc *grpc.ClientConn) liveCounts {
	t.Helper()
	resp, err := call(cc, 5*time.Second, "/test.Test/Live", nil)
	if err != nil || len(resp) != 12 {
		t.Fatalf("Live: %v (%d bytes)", err, len(resp))
	}
	return liveCounts{binary.BigEndian.Uint32(resp), binary.BigEndian.Uint32(resp[4:]),
		binary.BigEndian.Uint32(resp[8:])}
}

// waitLive waits until the open calls are back to want (connections are not compared).
func waitLive(t *testing.T, cc *grpc.ClientConn, want liveCounts) {
	t.Helper()
	var got liveCounts
	if !kubelet.Poll(5*time.Second, func() bool {
		got = live(t, cc)
		return got.live == want.live && got.calls == want.calls
	}) {
		t.Fatalf("open calls did not return to %+v: still %+v", want, got)
	}
}

// openStream starts /test.Test/Stream with req (be32s(n, size): n messages of size bytes; n = 0
// holds the stream open until the client ends it) and closes the sending side.
func openStream(ctx context.Context, cc *grpc.ClientConn, req []byte) (grpc.ClientStream, error) {
	st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Test/Stream")
	if err != nil {
		return nil, err
	}
	if err := st.SendMsg(req); err != nil {
		return nil, err
	}
	return st, st.CloseSend()
}

// holdStream opens a stream the server holds open (as kubelet holds ListAndWatch) until cancel
// is called or the test ends.
func holdStream(t *testing.T, cc *grpc.ClientConn) (grpc.ClientStream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := openStream(ctx, cc, be32s(0, 0))
	if err != nil {
		t.Fatalf("holding a stream: %v", err)
	}
	return st, cancel
}
