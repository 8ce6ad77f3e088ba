// SPDX-License-Identifier: Apache-2.0

package grpcpeer

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// syncBuffer collects a child's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// waitFor polls cond every 5 ms until it holds or bound passes.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(5 * time.Millisecond)
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

type cServer struct {
	t      *testing.T
	sock   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error // exit status, valid once done is closed
}

// startServer runs the C test server on a fresh socket and waits until it accepts.
func startServer(t *testing.T) *cServer {
	t.Helper()
	s := &cServer{t: t, sock: filepath.Join(t.TempDir(), "dp.sock"), stderr: &syncBuffer{},
		done: make(chan struct{})}
	s.cmd = exec.Command(testBinary(t), s.sock)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start test server: %v", err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop() })
	waitFor(t, 10*time.Second, "the test server socket", func() bool {
		select {
		case <-s.done:
			t.Fatalf("test server exited early: %v\n%s", s.err, s.stderr.String())
		default:
		}
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	return s
}

func (s *cServer) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// terminate sends SIGTERM and requires exit 0 within a bound, with no sanitizer report.
func (s *cServer) terminate() {
	s.t.Helper()
	if !s.exited() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		s.t.Fatalf("test server did not exit after SIGTERM\n%s", s.stderr.String())
	}
	if s.err != nil {
		s.t.Errorf("test server exit: %v\n%s", s.err, s.stderr.String())
	}
	checkSanitizers(s.t, "test server", s.stderr.String())
}

func (s *cServer) stop() {
	if !s.exited() {
		s.terminate()
		return
	}
	checkSanitizers(s.t, "test server", s.stderr.String())
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

// waitLive polls Live until the open calls are back to want (connections are not compared).
func waitLive(t *testing.T, cc *grpc.ClientConn, want liveCounts) {
	t.Helper()
	var got liveCounts
	end := time.Now().Add(5 * time.Second)
	for {
		got = live(t, cc)
		if got.live == want.live && got.calls == want.calls {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("open calls did not return to %+v: still %+v", want, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
