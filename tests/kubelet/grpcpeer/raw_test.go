// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The C server driven by hand-written HTTP/2 frames: what grpc-go clients never send.

import (
	"bytes"
	"encoding/binary"
	"math/rand"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

type rawConn struct {
	t   *testing.T
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
	// the server's first SETTINGS frame
	settings map[http2.SettingID]uint32
}

// rawStart dials sock, bounds the connection by a deadline and sends the client preface and an
// empty SETTINGS frame. c is nil only when the dial failed.
func rawStart(sock string, bound time.Duration) (c net.Conn, fr *http2.Framer, err error) {
	if c, err = net.Dial("unix", sock); err != nil {
		return nil, nil, err
	}
	_ = c.SetDeadline(time.Now().Add(bound))
	fr = http2.NewFramer(c, c)
	if _, err = c.Write([]byte(http2.ClientPreface)); err == nil {
		err = fr.WriteSettings()
	}
	return c, fr, err
}

// sprayFrames writes n frames of random type (below types), flags, stream (below ids) and
// payload (below maxLen bytes), up to the first failed write.
func sprayFrames(fr *http2.Framer, rng *rand.Rand, n, maxLen, types, ids int) {
	for k := 0; k < n; k++ {
		payload := make([]byte, rng.Intn(maxLen))
		rng.Read(payload)
		if fr.WriteRawFrame(http2.FrameType(rng.Intn(types)), http2.Flags(rng.Intn(256)),
			uint32(rng.Intn(ids)), payload) != nil {
			return
		}
	}
}

// rawDial connects, sends the preface and SETTINGS, and requires SETTINGS as the server's
// first frame.
func rawDial(t *testing.T, sock string) *rawConn {
	t.Helper()
	c, fr, err := rawStart(sock, 10*time.Second)
	if c != nil {
		t.Cleanup(func() { c.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &rawConn{t: t, c: c, fr: fr, settings: map[http2.SettingID]uint32{}}
	r.enc = hpack.NewEncoder(&r.hb)
	r.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	r.fr.MaxHeaderListSize = 1 << 20
	f, err := r.fr.ReadFrame()
	if err != nil {
		t.Fatalf("reading the server's first frame: %v", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		t.Fatalf("server's first frame is %v, want SETTINGS", f)
	}
	_ = sf.ForeachSetting(func(s http2.Setting) error { r.settings[s.ID] = s.Val; return nil })
	if err := r.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rawConn) block(hdrs [][2]string) []byte {
	r.hb.Reset()
	for _, h := range hdrs {
		_ = r.enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	return append([]byte(nil), r.hb.Bytes()...)
}

func (r *rawConn) headers(id uint32, end bool, hdrs ...[2]string) {
	r.t.Helper()
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.block(hdrs),
		EndStream: end, EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) data(id uint32, end bool, p []byte) {
	r.t.Helper()
	if err := r.fr.WriteData(id, end, p); err != nil {
		r.t.Fatal(err)
	}
}

func grpcRequest(path string, extra ...[2]string) [][2]string {
	h := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	return append(h, extra...)
}

func framed(flag byte, msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// reply is what the server sent on one stream.
type reply struct {
	headers  []map[string]string // each HEADERS block
	data     []byte
	rst      bool
	rstCode  http2.ErrCode
	ended    bool // END_STREAM seen
	lastRead time.Time
}

// read collects frames of stream id until END_STREAM and, when wantRst, a RST_STREAM;
// connection frames are answered (SETTINGS ack, PING ack) or ignored.
func (r *rawConn) read(id uint32, wantRst bool) *reply {
	r.t.Helper()
	rep := &reply{}
	for !(rep.rst || (rep.ended && !wantRst)) {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.t.Fatalf("stream %d: reading: %v (so far %+v)", id, err, rep)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = r.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = r.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			r.t.Fatalf("stream %d: GOAWAY %v", id, f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			m := map[string]string{}
			for _, hf := range f.Fields {
				m[hf.Name] = hf.Value
			}
			rep.headers = append(rep.headers, m)
			rep.ended = rep.ended || f.StreamEnded()
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			rep.data = append(rep.data, f.Data()...)
			if len(f.Data()) > 0 {
				_ = r.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				_ = r.fr.WriteWindowUpdate(id, uint32(len(f.Data())))
			}
			rep.ended = rep.ended || f.StreamEnded()
		case *http2.RSTStreamFrame:
			if f.StreamID != id {
				continue
			}
			rep.rst = true
			rep.rstCode = f.ErrCode
		}
	}
	rep.lastRead = time.Now()
	return rep
}

// grpcStatus is grpc-status of the last HEADERS block (trailers or Trailers-Only).
func (rep *reply) grpcStatus(t *testing.T) (int, string) {
	t.Helper()
	if len(rep.headers) == 0 {
		t.Fatalf("no HEADERS on the stream: %+v", rep)
	}
	last := rep.headers[len(rep.headers)-1]
	st, err := strconv.Atoi(last["grpc-status"])
	if err != nil {
		t.Fatalf("no grpc-status in %v", last)
	}
	return st, last["grpc-message"]
}

func TestRawSettingsAndPing(t *testing.T) {
	s := startServer(t)
	r := rawDial(t, s.sock)
	if v := r.settings[http2.SettingMaxConcurrentStreams]; v != 128 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want 128", v)
	}
	if v := r.settings[http2.SettingMaxHeaderListSize]; v != 16384 {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d, want 16384", v)
	}
	payload := [8]byte{2, 4, 16, 16, 9, 14, 7, 7} // grpc-go's BDP ping
	if err := r.fr.WritePing(false, payload); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatalf("waiting for PING ack: %v", err)
		}
		if p, ok := f.(*http2.PingFrame); ok {
			if !p.IsAck() || p.Data != payload {
				t.Fatalf("PING reply %v", p)
			}
			break
		}
	}
}

func TestRawRequestValidation(t *testing.T) {
	s := startServer(t)
	r := rawDial(t, s.sock)
	echo := framed(0, []byte("hi"))

	// wrong content-type: HTTP 415 with grpc-status INVALID_ARGUMENT, as grpc-go does
	r.headers(1, false, [][2]string{{":method", "POST"}, {":scheme", "http"},
		{":path", "/test.Test/Echo"}, {":authority", "localhost"}, {"content-type", "application/json"}}...)
	r.data(1, true, echo)
	rep := r.read(1, false)
	if rep.headers[0][":status"] != "415" || len(rep.headers) != 1 {
		t.Errorf("wrong content-type: headers %v, want one block with :status 415", rep.headers)
	}
	if st, _ := rep.grpcStatus(t); st != 3 {
		t.Errorf("wrong content-type: grpc-status %d, want 3", st)
	}

	// not POST: the stream is reset (PROTOCOL_ERROR)
	h := grpcRequest("/test.Test/Echo")
	h[0][1] = "GET"
	r.headers(3, true, h...)
	if rep = r.read(3, true); rep.rstCode != http2.ErrCodeProtocol {
		t.Errorf("GET: %+v, want RST_STREAM PROTOCOL_ERROR", rep)
	}

	// duplicate :path
	r.headers(5, true, append(grpcRequest("/test.Test/Echo")[:3], [][2]string{{":path", "/x"},
		{"content-type", "application/grpc"}}...)...)
	if rep = r.read(5, true); rep.rstCode != http2.ErrCodeProtocol {
		t.Errorf("duplicate :path: %+v, want RST_STREAM PROTOCOL_ERROR", rep)
	}

	// pseudo-header after a regular header
	r.headers(7, true, [][2]string{{":method", "POST"}, {"content-type", "application/grpc"},
		{":path", "/test.Test/Echo"}}...)
	if rep = r.read(7, true); rep.rstCode != http2.ErrCodeProtocol {
		t.Errorf("late pseudo-header: %+v, want RST_STREAM PROTOCOL_ERROR", rep)
	}

	// malformed grpc-timeout values: INTERNAL
	id := uint32(9)
	for _, v := range []string{"1x", "123456789m", "", "-1S", "1.5S"} {
		r.headers(id, false, grpcRequest("/test.Test/Echo", [2]string{"grpc-timeout", v})...)
		r.data(id, true, echo)
		if st, _ := r.read(id, false).grpcStatus(t); st != 13 {
			t.Errorf("grpc-timeout %q: grpc-status %d, want 13", v, st)
		}
		id += 2
	}

	// compressed flag set: UNIMPLEMENTED; invalid flag: INTERNAL
	r.headers(id, false, grpcRequest("/test.Test/Echo")...)
	r.data(id, true, framed(1, []byte("zz")))
	if st, _ := r.read(id, false).grpcStatus(t); st != 12 {
		t.Errorf("compressed flag: grpc-status %d, want 12", st)
	}
	id += 2
	r.headers(id, false, grpcRequest("/test.Test/Echo")...)
	r.data(id, true, framed(7, []byte("zz")))
	if st, _ := r.read(id, false).grpcStatus(t); st != 13 {
		t.Errorf("flag 7: grpc-status %d, want 13", st)
	}
	id += 2

	// two request messages for a unary method; none at all; a truncated one: INTERNAL
	r.headers(id, false, grpcRequest("/test.Test/Echo")...)
	r.data(id, true, append(framed(0, []byte("a")), framed(0, []byte("b"))...))
	if st, _ := r.read(id, false).grpcStatus(t); st != 13 {
		t.Errorf("two messages: grpc-status %d, want 13", st)
	}
	id += 2
	r.headers(id, true, grpcRequest("/test.Test/Echo")...)
	if st, _ := r.read(id, false).grpcStatus(t); st != 13 {
		t.Errorf("no message: grpc-status %d, want 13", st)
	}
	id += 2
	r.headers(id, false, grpcRequest("/test.Test/Echo")...)
	r.data(id, true, framed(0, []byte("abc"))[:6])
	if st, _ := r.read(id, false).grpcStatus(t); st != 13 {
		t.Errorf("truncated message: grpc-status %d, want 13", st)
	}
	id += 2

	// a header list above 16 KiB: RESOURCE_EXHAUSTED
	big := grpcRequest("/test.Test/Echo", [2]string{"x-a", string(bytes.Repeat([]byte("a"), 9000))},
		[2]string{"x-b", string(bytes.Repeat([]byte("b"), 9000))})
	block := r.block(big)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:len(block)/2]}); err != nil {
		t.Fatal(err)
	}
	if err := r.fr.WriteContinuation(id, true, block[len(block)/2:]); err != nil {
		t.Fatal(err)
	}
	r.data(id, true, echo)
	if st, _ := r.read(id, false).grpcStatus(t); st != 8 {
		t.Errorf("17 KiB header list: grpc-status %d, want 8", st)
	}
	id += 2

	// after all of that the connection still serves, with a raw socket path as :authority
	h = grpcRequest("/test.Test/Echo")
	h[3][1] = s.sock
	r.headers(id, false, h...)
	r.data(id, true, echo)
	rep = r.read(id, false)
	if st, _ := rep.grpcStatus(t); st != 0 || !bytes.Equal(rep.data, echo) {
		t.Errorf("echo after the bad requests: status %d data %q", st, rep.data)
	}
	if rep.headers[0][":status"] != "200" || rep.headers[0]["content-type"] != "application/grpc" {
		t.Errorf("response headers %v", rep.headers[0])
	}
}

// An early answer (before the request ended) is followed by RST_STREAM(NO_ERROR).
func TestRawEarlyAnswerResets(t *testing.T) {
	s := startServer(t)
	r := rawDial(t, s.sock)
	r.headers(1, false, grpcRequest("/test.Test/Nope")...)
	rep := r.read(1, true)
	if st, _ := rep.grpcStatus(t); st != 12 {
		t.Errorf("unknown method: grpc-status %d, want 12", st)
	}
	if len(rep.headers) != 1 || rep.headers[0][":status"] != "200" {
		t.Errorf("want Trailers-Only, got %v", rep.headers)
	}
	if rep.rstCode != http2.ErrCodeNo {
		t.Errorf("RST_STREAM %v, want NO_ERROR", rep.rstCode)
	}
	// declared length above 4 MiB: answered from the prefix alone
	r.headers(3, false, grpcRequest("/test.Test/Echo")...)
	r.data(3, false, []byte{0, 0, 0x50, 0, 0})
	rep = r.read(3, true)
	if st, msg := rep.grpcStatus(t); st != 8 {
		t.Errorf("5 MiB prefix: grpc-status %d (%s), want 8", st, msg)
	}
}

// The server enforces grpc-timeout itself: DEADLINE_EXCEEDED trailers, then RST_STREAM(CANCEL),
// and the call is freed.
func TestRawServerDeadline(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	r := rawDial(t, s.sock)
	start := time.Now()
	r.headers(1, false, grpcRequest("/test.Test/Slow", [2]string{"grpc-timeout", "200m"})...)
	r.data(1, true, framed(0, be32s(60000)))
	rep := r.read(1, true)
	if st, _ := rep.grpcStatus(t); st != 4 {
		t.Errorf("grpc-status %d, want 4", st)
	}
	if rep.rstCode != http2.ErrCodeCancel {
		t.Errorf("RST_STREAM %v, want CANCEL", rep.rstCode)
	}
	if d := rep.lastRead.Sub(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("deadline of 200ms enforced after %v", d)
	}
	waitLive(t, cc, base)

	// a stream with a deadline: trailers DEADLINE_EXCEEDED after the open stream
	r.headers(3, false, grpcRequest("/test.Test/Stream", [2]string{"grpc-timeout", "100000u"})...)
	r.data(3, true, framed(0, be32s(0, 0)))
	if st, _ := r.read(3, true).grpcStatus(t); st != 4 {
		t.Errorf("stream deadline: grpc-status %d, want 4", st)
	}
	// a zero timeout is already expired
	r.headers(5, false, grpcRequest("/test.Test/Slow", [2]string{"grpc-timeout", "0n"})...)
	r.data(5, true, framed(0, be32s(60000)))
	if st, _ := r.read(5, true).grpcStatus(t); st != 4 {
		t.Errorf("grpc-timeout 0n: grpc-status %d, want 4", st)
	}
	waitLive(t, cc, base)
}

// SIGTERM: the open stream gets grpc-status UNAVAILABLE, the connection a GOAWAY(NO_ERROR),
// then EOF; the process exits 0.
func TestRawShutdownGoaway(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	r := rawDial(t, s.sock)
	r.headers(1, false, grpcRequest("/test.Test/Stream")...)
	r.data(1, true, framed(0, be32s(0, 0)))
	waitFor(t, 5*time.Second, "the open stream", func() bool { return live(t, cc).live == 1 })
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var status string
	var goaway *http2.GoAwayFrame
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			break // EOF after the GOAWAY
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				status = f.PseudoValue("status") + "/" + headerValue(f, "grpc-status")
			}
		case *http2.GoAwayFrame:
			goaway = f
		}
	}
	if status != "200/14" {
		t.Errorf("open stream ended with :status/grpc-status %q, want 200/14", status)
	}
	if goaway == nil || goaway.ErrCode != http2.ErrCodeNo || goaway.LastStreamID != 1 {
		t.Errorf("GOAWAY %+v, want NO_ERROR with last stream 1", goaway)
	}
	s.terminate()
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// A peer RST_STREAM cancels the call (cancel callback, freed); connection EOF too.
func TestRawResetAndEOF(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	r := rawDial(t, s.sock)
	r.headers(1, false, grpcRequest("/test.Test/Slow")...)
	r.data(1, true, framed(0, be32s(60000)))
	r.headers(3, false, grpcRequest("/test.Test/Stream")...)
	r.data(3, true, framed(0, be32s(0, 0)))
	waitFor(t, 5*time.Second, "two open calls", func() bool { return live(t, cc).live == base.live+2 })
	if err := r.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "one open call", func() bool {
		c := live(t, cc)
		return c.live == base.live+1 && c.calls == base.calls+1
	})
	r.c.Close()
	waitLive(t, cc, base)
}

// Arbitrary bytes close that connection only.
func TestRawGarbage(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	inputs := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		append([]byte(http2.ClientPreface), bytes.Repeat([]byte{0xff}, 64)...),
		append([]byte(http2.ClientPreface), 0, 0, 4, 0x1, 0x4, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0xff), // bad HPACK
	}
	for i, in := range inputs {
		c, err := net.Dial("unix", s.sock)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(in); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("input %d: the server did not close the connection", i)
				}
				break // EOF or reset: closed
			}
		}
		c.Close()
		if resp, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("ok")); err != nil || string(resp) != "ok" {
			t.Fatalf("input %d: Echo on another connection: %v", i, err)
		}
	}
}

// Rapid reset (CVE-2023-44487): a flood of HEADERS + RST_STREAM gets that connection a GOAWAY,
// the server keeps serving others.
func TestRawRapidReset(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	r := rawDial(t, s.sock)
	go func() { // writes only; t is not used here
		for id := uint32(1); id < 2*3000; id += 2 {
			p := http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
				BlockFragment: r.block(grpcRequest("/test.Test/Echo"))}
			if r.fr.WriteHeaders(p) != nil || r.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	}()
	var goaway *http2.GoAwayFrame
	for goaway == nil {
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goaway = g
		}
	}
	// nghttp2's rate limiter (burst 1000, 33/s) answers with GOAWAY INTERNAL_ERROR
	if goaway.ErrCode != http2.ErrCodeInternal {
		t.Errorf("GOAWAY %v, want INTERNAL_ERROR (nghttp2's stream reset rate limit)", goaway.ErrCode)
	}
	if goaway.LastStreamID < 2*1000-1 || goaway.LastStreamID > 2*3000 {
		t.Errorf("GOAWAY after stream %d, want after ~1000 resets", goaway.LastStreamID)
	}
	if resp, err := call(cc, 5*time.Second, "/test.Test/Echo", []byte("ok")); err != nil || string(resp) != "ok" {
		t.Fatalf("Echo on another connection: %v", err)
	}
}

// Random frames after a valid start: every connection ends or is answered, none brings the
// server down or leaks (connections and calls return to the baseline; ASan checks the rest).
func TestRawRandomFrames(t *testing.T) {
	s := startServer(t)
	cc := dial(t, s.sock, "localhost")
	base := live(t, cc)
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 300; i++ {
		c, fr, _ := rawStart(s.sock, 5*time.Second)
		if c == nil {
			t.Fatal("dial failed")
		}
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		for _, h := range grpcRequest("/test.Test/Stream") {
			_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		_ = fr.WriteData(1, true, framed(0, be32s(0, 0)))
		sprayFrames(fr, rng, 20, 64, 11, 8)
		c.Close()
	}
	waitFor(t, 10*time.Second, "connections and calls back to the baseline", func() bool {
		c := live(t, cc)
		return c.conns == base.conns && c.calls == base.calls && c.live == base.live
	})
}
