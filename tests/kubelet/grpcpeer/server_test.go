// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The C server driven by grpc-go 1.33 clients.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
)

const maxMsg = 4 * 1024 * 1024

func wantCode(t *testing.T, err error, want codes.Code, what string) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestUnaryEcho(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	for _, n := range []int{0, 1, 100, 16384, 65536 + 7, 1 << 20, maxMsg} {
		req := pattern(n, byte(n))
		resp, err := call(cc, 20*time.Second, "/test.Test/Echo", req)
		if err != nil {
			t.Fatalf("Echo %d bytes: %v", n, err)
		}
		if !bytes.Equal(resp, req) {
			t.Fatalf("Echo %d bytes: got %d bytes back, content differs", n, len(resp))
		}
	}
}

// readStream collects a server stream until its status.
func readStream(t *testing.T, ctx context.Context, cc *grpc.ClientConn, req []byte) ([][]byte, error) {
	t.Helper()
	st, err := openStream(ctx, cc, req)
	if err != nil {
		return nil, err
	}
	var msgs [][]byte
	for {
		var m []byte
		err := st.RecvMsg(&m)
		if err == io.EOF {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, m)
	}
}

func checkStream(t *testing.T, msgs [][]byte, n, size int) {
	t.Helper()
	if len(msgs) != n {
		t.Fatalf("got %d messages, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if len(m) != size {
			t.Fatalf("message %d: %d bytes, want %d", i, len(m), size)
		}
		for j := range m {
			if m[j] != streamByte(i, j) {
				t.Fatalf("message %d byte %d: %d, want %d", i, j, m[j], streamByte(i, j))
			}
		}
	}
}

func TestServerStreamFlowControl(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	for _, c := range []struct{ n, size int }{
		{1, 0},          // one empty message
		{1000, 4096},    // ~4 MiB total in many small messages
		{3, maxMsg - 5}, // single messages near 4 MiB: many windows each
		{2, maxMsg},     // exactly the limit
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		msgs, err := readStream(t, ctx, cc, be32s(uint32(c.n), uint32(c.size)))
		cancel()
		if err != nil {
			t.Fatalf("Stream %d x %d: %v", c.n, c.size, err)
		}
		checkStream(t, msgs, c.n, c.size)
	}
}

func TestUnknownMethod(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	_, err := call(cc, 5*time.Second, "/test.Test/Nope", []byte("x"))
	wantCode(t, err, codes.Unimplemented, "unknown method")
	_, err = call(cc, 5*time.Second, "/other.Service/Echo", []byte("x"))
	wantCode(t, err, codes.Unimplemented, "unknown service")
	// the connection keeps serving
	if _, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("y")); err != nil {
		t.Fatalf("Echo after UNIMPLEMENTED: %v", err)
	}
}

func TestOversizeRequest(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	// another stream on the same connection stays open through the refusal
	_, scancel := holdStream(t, cc)
	waitFor(t, 5*time.Second, "the open stream", func() bool { return live(t, cc).live == base.live+1 })
	_, err := call(cc, 20*time.Second, "/test.Test/Echo", make([]byte, 5*1024*1024))
	wantCode(t, err, codes.ResourceExhausted, "5 MiB request")
	if c := live(t, cc); c.live != base.live+1 {
		t.Fatalf("the other stream was affected: %+v", c)
	}
	scancel()
	_, err = call(cc, 20*time.Second, "/test.Test/Echo", make([]byte, maxMsg+1))
	wantCode(t, err, codes.ResourceExhausted, "4 MiB + 1 request")
	// the same connection still works, with a message at the limit
	req := pattern(maxMsg, 3)
	resp, err := call(cc, 20*time.Second, "/test.Test/Echo", req)
	if err != nil || !bytes.Equal(resp, req) {
		t.Fatalf("Echo on the same connection after RESOURCE_EXHAUSTED: %v", err)
	}
	// and so does a new connection
	cc2 := dial(t, s.sock, "localhost")
	if _, err := call(cc2, 5*time.Second, "/test.Test/Echo", []byte("new")); err != nil {
		t.Fatalf("Echo on a new connection: %v", err)
	}
	waitLive(t, cc, base)
}

func TestOversizeResponse(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	_, err := call(cc, 20*time.Second, "/test.Test/Big", be32s(maxMsg+1))
	wantCode(t, err, codes.ResourceExhausted, "response of 4 MiB + 1")
	resp, err := call(cc, 20*time.Second, "/test.Test/Big", be32s(maxMsg))
	if err != nil || len(resp) != maxMsg {
		t.Fatalf("response of exactly 4 MiB: %v (%d bytes)", err, len(resp))
	}
}

func TestDeadline(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	_, err := call(cc, 300*time.Millisecond, "/test.Test/Slow", be32s(60000))
	wantCode(t, err, codes.DeadlineExceeded, "Slow past its deadline")
	waitLive(t, cc, base)
	// an answer within the deadline still works
	resp, err := call(cc, 5*time.Second, "/test.Test/Slow", append(be32s(10), "late"...))
	if err != nil || string(resp) != "late" {
		t.Fatalf("Slow within its deadline: %v %q", err, resp)
	}
}

func TestClientCancelMidStream(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	st, cancel := holdStream(t, cc)
	waitFor(t, 5*time.Second, "the open stream to count", func() bool {
		return live(t, cc).live == base.live+1
	})
	cancel()
	var m []byte
	wantCode(t, st.RecvMsg(&m), codes.Canceled, "cancelled stream")
	waitLive(t, cc, base)

	// cancel while a large response is in flight (queued data must be freed)
	ctx2, cancel2 := context.WithCancel(context.Background())
	if _, err := openStream(ctx2, cc, be32s(3, maxMsg-5)); err != nil {
		t.Fatal(err)
	}
	cancel2()
	waitLive(t, cc, base)
}

func TestRawSocketPathAuthority(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, s.sock) // what kubelets before the localhost fix sent
	resp, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("old kubelet"))
	if err != nil || string(resp) != "old kubelet" {
		t.Fatalf("Echo with :authority %q: %v", s.sock, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := readStream(t, ctx, cc, be32s(5, 100))
	if err != nil {
		t.Fatal(err)
	}
	checkStream(t, msgs, 5, 100)
}

func TestGzipUnimplemented(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	_, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("compress me"), grpc.UseCompressor("gzip"))
	wantCode(t, err, codes.Unimplemented, "gzip-compressed request")
	if _, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("plain")); err != nil {
		t.Fatalf("Echo after the compressed request: %v", err)
	}
}

func TestStatusMessagePercentEncoding(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	msg := "100% sure: caf\u00e9 \u20ac, tab\there"
	_, err := call(cc, 5*time.Second, "/test.Test/Fail", append(be32s(9), msg...))
	wantCode(t, err, codes.FailedPrecondition, "Fail")
	if got := status.Convert(err).Message(); got != msg {
		t.Fatalf("grpc-message: got %q, want %q", got, msg)
	}
}

func TestConcurrentClients(t *testing.T) {
	s := startServer(t)
	const n = 50
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		conns[i] = dial(t, s.sock, "localhost")
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, cc := range conns {
		wg.Add(1)
		go func(i int, cc *grpc.ClientConn) {
			defer wg.Done()
			req := pattern(1000+i, byte(i))
			for k := 0; k < 5; k++ {
				resp, err := call(cc, 20*time.Second, "/test.Test/Echo", req)
				if err != nil || !bytes.Equal(resp, req) {
					errs <- errors.New("echo failed: " + status.Convert(err).Message())
					return
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			msgs, err := readStream(t, ctx, cc, be32s(20, uint32(2000+i)))
			if err != nil || len(msgs) != 20 {
				errs <- errors.New("stream failed")
			}
		}(i, cc)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if c := live(t, conns[0]); c.conns != n {
		t.Errorf("server counts %d connections, want %d", c.conns, n)
	}
}

func TestShutdownGoaway(t *testing.T) {
	s := startServer(t)
	var streams []grpc.ClientStream
	for i := 0; i < 3; i++ {
		st, _ := holdStream(t, dial(t, s.sock, "localhost"))
		streams = append(streams, st)
	}
	cc := dial(t, s.sock, "localhost")
	waitFor(t, 5*time.Second, "3 open streams", func() bool { return live(t, cc).live == 3 })
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		var m []byte
		err := st.RecvMsg(&m)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("stream %d after SIGTERM: %v, want Unavailable", i, err)
		}
	}
	s.terminate() // exit 0, no sanitizer report
	if _, err := call(cc, 2*time.Second, "/test.Test/Echo", []byte("x")); status.Code(err) != codes.Unavailable &&
		status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("call after shutdown: %v", err)
	}
}
