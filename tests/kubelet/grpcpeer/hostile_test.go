// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// Hostile peers against the C server (docs/architecture.md, "gRPC limits"): while each one
// runs, a well-behaved grpc-go client (holding a stream open, as kubelet holds ListAndWatch)
// keeps getting correct Echo answers; each limit is checked at its edge. How fast it is
// answered is a figure, not a test: the slowest answer is logged, never asserted (a loaded
// machine made a 100 ms bound fail once, issue 13).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"sdp/kubelet"
)

// rssKiB is the server's VmRSS.
func (s *cServer) rssKiB(t *testing.T) int {
	t.Helper()
	kib, err := kubelet.ProcStatus(s.Pid(), "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	return kib
}

// prober is the well-behaved client: one connection, a stream held open, Echo after Echo.
type prober struct {
	t      *testing.T
	cc     *grpc.ClientConn
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	n      int
	max    time.Duration
	err    error
}

func startProber(t *testing.T, sock string) *prober {
	t.Helper()
	p := &prober{t: t, cc: dial(t, sock, "localhost"), stop: make(chan struct{}),
		done: make(chan struct{})}
	_, p.cancel = holdStream(t, p.cc)
	waitFor(t, 5*time.Second, "the held stream to reach its handler", func() bool {
		return live(t, p.cc).live == 1
	})
	go p.run()
	t.Cleanup(func() { p.finish() })
	return p
}

func (p *prober) run() {
	defer close(p.done)
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		default:
		}
		req := []byte(fmt.Sprintf("probe %d", i))
		start := time.Now()
		resp, err := call(p.cc, 5*time.Second, "/test.Test/Echo", req)
		d := time.Since(start)
		p.mu.Lock()
		if err == nil && !bytes.Equal(resp, req) {
			err = fmt.Errorf("answer %q to %q", resp, req)
		}
		if err != nil && p.err == nil {
			p.err = err
		}
		p.n++
		if d > p.max {
			p.max = d
		}
		p.mu.Unlock() // the next call goes once this one is answered: no other pacing
	}
}

// check requires that every call so far was answered correctly (each within its 5 s
// deadline), and that at least min calls ran.
func (p *prober) check(min int) {
	p.t.Helper()
	waitFor(p.t, 5*time.Second, "the well-behaved client's calls", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.n >= min || p.err != nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		p.t.Errorf("well-behaved client: %v", p.err)
	}
	if p.n < min {
		p.t.Errorf("well-behaved client: %d calls, want at least %d", p.n, min)
	}
	p.t.Logf("well-behaved client: %d calls, slowest %v", p.n, p.max)
}

func (p *prober) finish() {
	select {
	case <-p.stop:
		return
	default:
	}
	p.check(10)
	close(p.stop)
	<-p.done
	p.cancel()
}

// readUntilClosed reads frames until the server closes c; it returns the frames' types and
// fails when c is still open after bound.
func readUntilClosed(t *testing.T, c net.Conn, bound time.Duration) []http2.FrameType {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(bound))
	fr := http2.NewFramer(io.Discard, c)
	var types []http2.FrameType
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the server did not close the connection within %v (frames %v)", bound, types)
			}
			return types
		}
		types = append(types, f.Header().Type)
	}
}

// stillOpen is true when a PING on r is answered (the server kept the connection).
func (r *rawConn) stillOpen() bool {
	_ = r.c.SetDeadline(time.Now().Add(5 * time.Second))
	data := [8]byte{'a', 'l', 'i', 'v', 'e'}
	if r.fr.WritePing(false, data) != nil {
		return false
	}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			return false
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == data {
			return true
		}
	}
}

// A client that connects and sends nothing is closed at the handshake deadline (SETTINGS,
// GOAWAY, EOF); one that completed its handshake stays past it.
func TestHostileSilent(t *testing.T) {
	s := startServer(t, "--handshake-ms", "300")
	p := startProber(t, s.sock)
	good := rawDial(t, s.sock) // connected before the silent one: its deadline passes first
	// from before the connect: the server's deadline cannot start earlier (measured after Dial
	// returned, a close 20 µs before the 300 ms was seen in a loaded CI run)
	start := time.Now()
	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	types := readUntilClosed(t, c, 5*time.Second)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("closed after %v, before the 300 ms handshake deadline", d)
	}
	if len(types) != 2 || types[0] != http2.FrameSettings || types[1] != http2.FrameGoAway {
		t.Errorf("frames before close: %v, want [SETTINGS GOAWAY]", types)
	}
	if !good.stillOpen() {
		t.Error("a connection that completed its handshake was closed")
	}
	p.check(10)
}

// Half a frame, then nothing: before the handshake ends (half the SETTINGS frame) the
// connection goes at the handshake deadline; after it (half a HEADERS frame, which already
// opened a stream) at the idle deadline.
func TestHostileHalfFrame(t *testing.T) {
	s := startServer(t, "--handshake-ms", "300", "--idle-ms", "500")
	p := startProber(t, s.sock)

	c, err := net.Dial("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	half := append([]byte(http2.ClientPreface), 0, 0, 6, byte(http2.FrameSettings), 0, 0, 0, 0, 0, 0, 3)
	if _, err := c.Write(half); err != nil {
		t.Fatal(err)
	}
	readUntilClosed(t, c, 5*time.Second)

	base := live(t, p.cc).calls // the held stream and the Live call itself
	r := rawDial(t, s.sock)
	block := r.block(grpcRequest("/test.Test/Echo"))
	var hdr bytes.Buffer
	fr := http2.NewFramer(&hdr, nil)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.c.Write(hdr.Bytes()[:9+len(block)/2]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the stalled stream to be open", func() bool {
		return live(t, p.cc).calls == base+1
	})
	readUntilClosed(t, r.c, 5*time.Second)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("closed after %v, before the 500 ms idle deadline", d)
	}
	waitFor(t, 5*time.Second, "the stalled stream to be freed", func() bool {
		return live(t, p.cc).calls == base
	})
	p.check(10)
}

// headersSplit sends a header block as HEADERS + CONTINUATIONs of at most 16 KiB.
func (r *rawConn) headersSplit(id uint32, end bool, block []byte) error {
	const max = 16384
	first := block
	if len(first) > max {
		first = block[:max]
	}
	rest := block[len(first):]
	err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first,
		EndStream: end, EndHeaders: len(rest) == 0})
	for err == nil && len(rest) > 0 {
		n := len(rest)
		if n > max {
			n = max
		}
		err = r.fr.WriteContinuation(id, n == len(rest), rest[:n])
		rest = rest[n:]
	}
	return err
}

// 1,000 streams on one connection: exactly SETTINGS_MAX_CONCURRENT_STREAMS (128) open at once
// are served; the 129th is a connection error in nghttp2 (GOAWAY PROTOCOL_ERROR naming the
// last accepted stream, RFC 9113 5.1.2); the server and its other clients are unaffected.
func TestHostileThousandStreams(t *testing.T) {
	s := startServer(t)
	p := startProber(t, s.sock)
	base := live(t, p.cc).calls
	r := rawDial(t, s.sock)
	if v := r.settings[http2.SettingMaxConcurrentStreams]; v != 128 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 128", v)
	}
	block := r.block(grpcRequest("/test.Test/Echo"))
	for i := 0; i < 128; i++ { // at the limit: all open, none refused
		if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1),
			BlockFragment: block, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "128 open streams", func() bool { return live(t, p.cc).calls == base+128 })
	r.data(255, true, framed(0, []byte("edge"))) // the 128th is served (read fails on a GOAWAY)
	rep := r.read(255, false)
	if st, msg := rep.grpcStatus(t); st != 0 || !bytes.Equal(rep.data, framed(0, []byte("edge"))) {
		t.Errorf("stream 255: status %d %q, data %q", st, msg, rep.data)
	}
	// 127 open: the next one fits, the one after is one too many
	go func() { // writes only
		for id := uint32(257); id < 2*1000; id += 2 {
			hp := http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}
			if r.fr.WriteHeaders(hp) != nil {
				return
			}
		}
	}()
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		if rst, ok := f.(*http2.RSTStreamFrame); ok {
			t.Errorf("stream %d reset (%v)", rst.StreamID, rst.ErrCode)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeProtocol || g.LastStreamID != 257 {
				t.Errorf("GOAWAY %v after stream %d, want PROTOCOL_ERROR after 257", g.ErrCode,
					g.LastStreamID)
			}
			break
		}
	}
	readUntilClosed(t, r.c, 5*time.Second)
	waitFor(t, 5*time.Second, "the streams to be freed", func() bool { return live(t, p.cc).calls == base })
	p.check(10)
}

// A 16 MiB header block (HEADERS + CONTINUATIONs) is refused without buffering it: the
// connection is closed, the server's RSS does not grow by 8 MiB. A header list of exactly
// SETTINGS_MAX_HEADER_LIST_SIZE is served, one byte more is RESOURCE_EXHAUSTED.
func TestHostileHugeHeaders(t *testing.T) {
	s := startServer(t)
	p := startProber(t, s.sock)
	before := s.rssKiB(t)
	r := rawDial(t, s.sock)
	r.hb.Reset()
	_ = r.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
	pad := hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("p", 4000), Sensitive: true}
	for r.hb.Len() < 16<<20 {
		_ = r.enc.WriteField(pad) // never indexed: each one is 4 KB on the wire
	}
	block := append([]byte(nil), r.hb.Bytes()...)
	werr := make(chan error, 1)
	go func() { werr <- r.headersSplit(1, true, block) }()
	readUntilClosed(t, r.c, 10*time.Second) // nghttp2: too many CONTINUATIONs
	r.c.Close()
	if err := <-werr; err == nil {
		t.Error("the server read the whole 16 MiB header block")
	}
	if after := s.rssKiB(t); after-before > 8<<10 {
		t.Errorf("server RSS grew from %d to %d KiB", before, after)
	}

	// the edge: the header list size counts name + value + 32 per field
	base := 0
	for _, h := range grpcRequest("/test.Test/Echo") {
		base += len(h[0]) + len(h[1]) + 32
	}
	for _, over := range []int{0, 1} {
		r := rawDial(t, s.sock)
		value := strings.Repeat("v", 16384-base-len("x-pad")-32+over)
		hdrs := append(grpcRequest("/test.Test/Echo"), [2]string{"x-pad", value})
		if err := r.headersSplit(1, false, r.block(hdrs)); err != nil {
			t.Fatal(err)
		}
		r.data(1, true, framed(0, []byte("edge")))
		st, msg := r.read(1, false).grpcStatus(t)
		want := codes.OK
		if over > 0 {
			want = codes.ResourceExhausted
		}
		if codes.Code(st) != want {
			t.Errorf("header list %d bytes over the limit: status %d %q, want %v", over, st, msg, want)
		}
	}
	p.check(10)
}

// PINGs and SETTINGS without reading the ACKs: nghttp2's outbound ACK limit (1000) closes
// the connection.
func TestHostilePingSettingsFlood(t *testing.T) {
	s := startServer(t)
	p := startProber(t, s.sock)
	r := rawDial(t, s.sock)
	werr := make(chan error, 1)
	go func() {
		_ = r.c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		for i := 0; ; i++ {
			var err error
			if i%2 == 0 {
				err = r.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)})
			} else {
				err = r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 65535})
			}
			if err != nil {
				werr <- err
				return
			}
			if i > 1000000 {
				werr <- nil
				return
			}
		}
	}()
	// the writer must fail: the server closed the connection (it never reads an ACK from us)
	if err := <-werr; err == nil {
		t.Fatal("a million PINGs and SETTINGS were taken without closing the connection")
	}
	readUntilClosed(t, r.c, 5*time.Second)
	p.check(10)
}

// Random frames after a valid start, from several connections at once: each connection
// ends or is answered, the server keeps serving, connections and calls return to the baseline.
func TestHostileRandomFrames(t *testing.T) {
	s := startServer(t)
	p := startProber(t, s.sock)
	base := live(t, p.cc)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 50; i++ {
				c, fr, _ := rawStart(s.sock, 5*time.Second)
				if c == nil {
					return
				}
				sprayFrames(fr, rng, 200, 100, 12, 10)
				c.Close()
			}
		}(int64(w + 1))
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "connections and calls back to the baseline", func() bool {
		c := live(t, p.cc)
		return c.conns == base.conns && c.calls == base.calls && c.live == base.live
	})
	p.check(10)
}

// rawSquat opens a connection that completes its handshake and then sits idle.
func rawSquat(t *testing.T, sock string) net.Conn {
	t.Helper()
	r := rawDial(t, sock)
	_ = r.c.SetDeadline(time.Time{})
	return r.c
}

// closedNow reports whether the server closed c (its pending frames are skipped).
func closedNow(c net.Conn) bool {
	buf := make([]byte, 4096)
	for {
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// At max_connections a new connection evicts the least recently active one where no handler
// holds a call; when a handler holds a call on every connection, the new one is refused.
func TestHostileConnectionLimitEdge(t *testing.T) {
	s := startServer(t, "--max-conns", "4")
	p := startProber(t, s.sock)
	squat := []net.Conn{rawSquat(t, s.sock), rawSquat(t, s.sock), rawSquat(t, s.sock)}
	waitFor(t, 5*time.Second, "4 connections", func() bool { return live(t, p.cc).conns == 4 })
	for i, c := range squat { // exactly at the limit: nobody evicted
		if closedNow(c) {
			t.Fatalf("squatter %d closed at the limit", i)
		}
	}
	// one over: a new client is answered, the oldest squatter made room
	cc := dial(t, s.sock, "localhost")
	if resp, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("new")); err != nil || string(resp) != "new" {
		t.Fatalf("a new client at the limit: %v", err)
	}
	if !closedNow(squat[0]) || closedNow(squat[1]) || closedNow(squat[2]) {
		t.Error("want the oldest squatter evicted, the others kept")
	}
	p.check(10)

	// streams may hold 3 of 4 slots: a fourth stream is served and the newest other holder
	// makes room (UNAVAILABLE), the prober's older stream is kept, a short call still gets in
	s2 := startServer(t, "--max-conns", "4")
	p2 := startProber(t, s2.sock)
	ended := make([]chan error, 3)
	holders := make([]*grpc.ClientConn, 3)
	for i := range ended {
		holders[i] = dial(t, s2.sock, "localhost")
		st, _ := holdStream(t, holders[i])
		ended[i] = make(chan error, 1)
		go func(st grpc.ClientStream, ch chan error) {
			var m []byte
			ch <- st.RecvMsg(&m)
		}(st, ended[i])
		if i < 2 {
			want := uint32(i + 2)
			waitFor(t, 5*time.Second, fmt.Sprintf("%d held streams", want), func() bool {
				return live(t, p2.cc).live == want
			})
		}
	}
	select {
	case err := <-ended[1]:
		wantCode(t, err, codes.Unavailable, "the newest other stream over the limit")
	case <-time.After(5 * time.Second):
		t.Fatal("no stream was closed when a fourth connection held one")
	}
	holders[1].Close() // no reconnecting (a client that reconnects at once competes for the free slot)
	waitFor(t, 5*time.Second, "3 held streams", func() bool { return live(t, p2.cc).live == 3 })
	for _, i := range []int{0, 2} {
		select {
		case err := <-ended[i]:
			t.Errorf("stream %d ended: %v", i, err)
		default:
		}
	}
	cc2 := dial(t, s2.sock, "localhost")
	if resp, err := call(cc2, 5*time.Second, "/test.Test/Echo", []byte("short")); err != nil || string(resp) != "short" {
		t.Errorf("a short call while streams hold the slots: %q, %v", resp, err)
	}
	p2.check(10)
}

// 70 idle connections (more than the 64 allowed) while the well-behaved client keeps being
// answered, and a new client still gets in: squatters cannot lock kubelet out.
func TestHostileSeventyIdle(t *testing.T) {
	s := startServer(t)
	p := startProber(t, s.sock)
	var squat []net.Conn
	for i := 0; i < 70; i++ {
		squat = append(squat, rawSquat(t, s.sock))
	}
	cc := dial(t, s.sock, "localhost")
	if resp, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("kubelet")); err != nil || string(resp) != "kubelet" {
		t.Fatalf("a new client with 70 squatters: %v", err)
	}
	if n := live(t, p.cc).conns; n != 64 {
		t.Errorf("%d connections, want 64 (the limit)", n)
	}
	open := 0
	for _, c := range squat {
		if !closedNow(c) {
			open++
		}
	}
	if open != 62 { // 64 - the prober - the new client
		t.Errorf("%d squatters still open, want 62", open)
	}
	if !closedNow(squat[0]) || closedNow(squat[69]) {
		t.Error("want the oldest squatters evicted, the newest kept")
	}
	p.check(10)
}
