// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The C client (grpc_test_server --client) against grpc-go 1.33 servers and raw HTTP/2 peers.

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"sdp/kubelet"
)

// seen is what a grpc-go handler observed about one call.
type seen struct {
	method    string
	authority []string
	userAgent []string
	deadline  time.Time
	hasDL     bool
	ctxErr    error // the handler context's error when a blocking handler returned
}

type goServer struct {
	sock string
	srv  *grpc.Server
	mu   sync.Mutex
	seen []seen
}

type handlerFn func(ctx context.Context, method string, req []byte, st grpc.ServerStream) ([]byte, error)

// startGoServer serves every method through handle with the raw codec.
func startGoServer(t *testing.T, sock string, handle handlerFn) *goServer {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := &goServer{sock: sock}
	g.srv = grpc.NewServer(grpc.CustomCodec(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ interface{}, st grpc.ServerStream) error {
			ctx := st.Context()
			method, _ := grpc.MethodFromServerStream(st)
			md, _ := metadata.FromIncomingContext(ctx)
			dl, hasDL := ctx.Deadline()
			s := seen{method: method, authority: md[":authority"], userAgent: md["user-agent"],
				deadline: dl, hasDL: hasDL}
			var req []byte
			if err := st.RecvMsg(&req); err != nil {
				return err
			}
			resp, err := handle(ctx, method, req, st)
			s.ctxErr = ctx.Err()
			g.mu.Lock()
			g.seen = append(g.seen, s)
			g.mu.Unlock()
			if err != nil || resp == nil {
				return err
			}
			return st.SendMsg(resp)
		}))
	go func() { _ = g.srv.Serve(lis) }()
	t.Cleanup(g.srv.Stop)
	return g
}

func (g *goServer) calls() []seen {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]seen(nil), g.seen...)
}

type clientResult struct {
	status  int
	message string
	resp    []byte
}

var resultRe = regexp.MustCompile(`^status=(\d+) message=("(?:[^"\\]|\\.)*") resp=([0-9a-f]*)\n$`)

// runClient runs one C client call and parses its output.
func runClient(t *testing.T, sock, method string, req []byte, timeoutMs int) clientResult {
	t.Helper()
	cmd := startClient(t, sock, method, req, timeoutMs)
	return cmd.wait(t)
}

type clientCmd struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	stderr kubelet.LogBuffer
}

func startClient(t *testing.T, sock, method string, req []byte, timeoutMs int) *clientCmd {
	t.Helper()
	c := &clientCmd{}
	prog, argv := kubelet.Emulated(testBinary(t), "--client", sock, method, hex.EncodeToString(req),
		strconv.Itoa(timeoutMs))
	c.cmd = exec.Command(prog, argv...)
	c.cmd.Stdout = &c.out
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *clientCmd) wait(t *testing.T) clientResult {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("client: %v\n%s", err, c.stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		t.Fatalf("client did not finish within 30s")
	}
	checkSanitizers(t, "client", c.stderr.String())
	m := resultRe.FindStringSubmatch(c.out.String())
	if m == nil {
		t.Fatalf("client output %q", c.out.String())
	}
	var r clientResult
	r.status, _ = strconv.Atoi(m[1])
	msg, err := strconv.Unquote(m[2])
	if err != nil {
		t.Fatalf("client message %s: %v", m[2], err)
	}
	r.message = msg
	r.resp, _ = hex.DecodeString(m[3])
	return r
}

// blockRelease lets /test.Test/Block answer (TestClientDeadline closes it once its client ended).
var blockRelease = make(chan struct{})

func echoHandler(ctx context.Context, method string, req []byte, st grpc.ServerStream) ([]byte, error) {
	switch method {
	case "/test.Test/Echo":
		return req, nil
	case "/test.Test/Fail":
		return nil, status.Error(codes.FailedPrecondition, string(req))
	case "/test.Test/Block":
		// Its answer (UNKNOWN: this grpc-go sends a context error as that) waits for the client
		// to have given up: under ASan on a loaded machine the server's copy of the deadline
		// (grpc-timeout) answered first and the client reported the server's UNKNOWN instead
		// of its own DEADLINE_EXCEEDED.
		<-ctx.Done()
		select {
		case <-blockRelease:
		case <-time.After(5 * time.Second): // bounded: a client that never gives up fails the test
		}
		return nil, ctx.Err()
	case "/test.Test/Big":
		return make([]byte, 4*1024*1024+1), nil
	case "/test.Test/Empty":
		return []byte{}, nil
	case "/test.Test/NoMessage":
		return nil, nil // OK without a response message
	case "/test.Test/Two":
		if err := st.SendMsg([]byte("one")); err != nil {
			return nil, err
		}
		return []byte("two"), nil
	}
	return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
}

func TestClientOK(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "go.sock")
	g := startGoServer(t, sock, echoHandler)
	req := []byte("hello \x00\xff world")
	r := runClient(t, sock, "/test.Test/Echo", req, 5000)
	if r.status != 0 || !bytes.Equal(r.resp, req) || r.message != "" {
		t.Fatalf("Echo: %+v", r)
	}
	calls := g.calls()
	if len(calls) != 1 {
		t.Fatalf("server saw %d calls", len(calls))
	}
	c := calls[0]
	if len(c.authority) != 1 || c.authority[0] != "localhost" {
		t.Errorf(":authority %v, want [localhost]", c.authority)
	}
	if len(c.userAgent) != 1 || !strings.HasPrefix(c.userAgent[0], "sdp/") {
		t.Errorf("user-agent %v, want sdp/<version>", c.userAgent)
	}
	if !c.hasDL {
		t.Errorf("no deadline: grpc-timeout was not sent")
	} else if left := time.Until(c.deadline); left <= 0 || left > 5*time.Second {
		t.Errorf("deadline %v from now, want within (0, 5s]", left)
	}
	// an empty response message is a valid OK answer
	r = runClient(t, sock, "/test.Test/Empty", nil, 5000)
	if r.status != 0 || len(r.resp) != 0 {
		t.Fatalf("Empty: %+v", r)
	}
}

func TestClientErrorMessage(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "go.sock")
	startGoServer(t, sock, echoHandler)
	for _, msg := range []string{
		"plain words with spaces",
		"100% done, 50%% left, %zz %",
		"caf\u00e9 \u20ac \u2603 \U0001F600",
		"tab\tnewline\nquote\" backslash\\",
	} {
		r := runClient(t, sock, "/test.Test/Fail", []byte(msg), 5000)
		if r.status != int(codes.FailedPrecondition) || r.message != msg || len(r.resp) != 0 {
			t.Errorf("Fail(%q): got %+v", msg, r)
		}
	}
	r := runClient(t, sock, "/test.Test/Nope", nil, 5000)
	if r.status != int(codes.Unimplemented) {
		t.Errorf("unknown method: %+v", r)
	}
}

func TestClientDeadline(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "go.sock")
	g := startGoServer(t, sock, echoHandler)
	r := runClient(t, sock, "/test.Test/Block", nil, 300)
	close(blockRelease)
	if r.status != int(codes.DeadlineExceeded) {
		t.Fatalf("blocked handler: %+v, want DEADLINE_EXCEEDED", r)
	}
	// the server's handler context ends too (RST_STREAM or its own deadline)
	waitFor(t, 5*time.Second, "the handler to return", func() bool { return len(g.calls()) == 1 })
	if err := g.calls()[0].ctxErr; err == nil {
		t.Errorf("handler context not done")
	}
}

func TestClientConnectRetry(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "go.sock")
	c := startClient(t, sock, "/test.Test/Echo", []byte("late server"), 5000)
	// The server appears once the client's first connect has failed: dp_grpc_client_call_new
	// makes that attempt before the client's loop first waits in epoll_wait.
	waitFor(t, 5*time.Second, "the client's loop to wait (its first connect failed)", func() bool {
		return inEpollWait(t, c.cmd.Process.Pid)
	})
	startGoServer(t, sock, echoHandler)
	r := c.wait(t)
	if r.status != 0 || string(r.resp) != "late server" {
		t.Fatalf("call with a late server: %+v", r)
	}
}

// inEpollWait reports whether pid sleeps in epoll_wait (/proc/PID/wchan).
func inEpollWait(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "epoll_wait") || string(b) == "ep_poll"
}

func TestClientNoServer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	r := runClient(t, sock, "/test.Test/Echo", nil, 200)
	if r.status != int(codes.DeadlineExceeded) {
		t.Fatalf("no server: %+v, want DEADLINE_EXCEEDED", r)
	}
	// a path below a regular file (ENOTDIR) cannot appear later: no retry, UNAVAILABLE (a client
	// that retried until its deadline would answer DEADLINE_EXCEEDED)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = runClient(t, filepath.Join(file, "sock"), "/test.Test/Echo", nil, 5000)
	if r.status != int(codes.Unavailable) || !strings.Contains(r.message, "connect") {
		t.Fatalf("ENOTDIR: %+v, want UNAVAILABLE naming connect", r)
	}
}

func TestClientResponseLimits(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "go.sock")
	startGoServer(t, sock, echoHandler)
	if r := runClient(t, sock, "/test.Test/Big", nil, 10000); r.status != int(codes.ResourceExhausted) {
		t.Errorf("4 MiB + 1 response: %+v, want RESOURCE_EXHAUSTED", r)
	}
	if r := runClient(t, sock, "/test.Test/NoMessage", nil, 5000); r.status != int(codes.Internal) ||
		r.message != "no response message" {
		t.Errorf("OK without a message: %+v, want INTERNAL \"no response message\"", r)
	}
	if r := runClient(t, sock, "/test.Test/Two", nil, 5000); r.status != int(codes.Internal) {
		t.Errorf("two response messages: %+v, want INTERNAL", r)
	}
}

// ---- raw HTTP/2 peers for what grpc-go servers never do ----

type rawPeer struct {
	fr      *http2.Framer
	c       net.Conn
	enc     *hpack.Encoder
	hb      bytes.Buffer
	headers map[string]string
	pings   int
	body    []byte
}

// rawServe accepts one connection, reads the client's request (counting PINGs) and hands it
// to respond. The result of the serving goroutine arrives on the returned channel.
func rawServe(t *testing.T, sock string, respond func(p *rawPeer, id uint32) error) <-chan error {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	res := make(chan error, 1)
	go func() { res <- rawServeOne(lis, respond) }()
	return res
}

func rawServeOne(lis net.Listener, respond func(p *rawPeer, id uint32) error) error {
	c, err := lis.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return fmt.Errorf("client preface: %q %v", preface, err)
	}
	p := &rawPeer{fr: http2.NewFramer(c, c), c: c, headers: map[string]string{}}
	p.enc = hpack.NewEncoder(&p.hb)
	p.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	if err := p.fr.WriteSettings(); err != nil {
		return err
	}
	var id uint32
	for ended := false; !ended; {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return fmt.Errorf("reading the request: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = p.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			p.pings++
		case *http2.MetaHeadersFrame:
			id = f.StreamID
			for _, hf := range f.Fields {
				p.headers[hf.Name] = hf.Value
			}
			ended = f.StreamEnded()
		case *http2.DataFrame:
			p.body = append(p.body, f.Data()...)
			ended = f.StreamEnded()
		}
	}
	return respond(p, id)
}

func (p *rawPeer) writeHeaders(id uint32, end bool, hdrs ...[2]string) error {
	p.hb.Reset()
	for _, h := range hdrs {
		_ = p.enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.hb.Bytes(),
		EndStream: end, EndHeaders: true})
}

// drain reads until the client closes (so its RST_STREAM and PINGs, if any, are seen).
func (p *rawPeer) drain() (rst http2.ErrCode, sawRst bool) {
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			rst, sawRst = f.ErrCode, true
		case *http2.PingFrame:
			if !f.IsAck() {
				p.pings++
			}
		}
	}
}

func TestClientRequestHeadersAndTrailersOnly(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "raw.sock")
	res := rawServe(t, sock, func(p *rawPeer, id uint32) error {
		want := map[string]string{":method": "POST", ":scheme": "http", ":path": "/test.Test/Echo",
			":authority": "localhost", "content-type": "application/grpc", "te": "trailers"}
		for k, v := range want {
			if p.headers[k] != v {
				return fmt.Errorf("request header %s = %q, want %q", k, p.headers[k], v)
			}
		}
		if !regexp.MustCompile(`^\d{1,8}[HMSmun]$`).MatchString(p.headers["grpc-timeout"]) {
			return fmt.Errorf("grpc-timeout %q", p.headers["grpc-timeout"])
		}
		if !bytes.Equal(p.body, framed(0, []byte("abc"))) {
			return fmt.Errorf("request body %x", p.body)
		}
		// a server PING must be acknowledged
		if err := p.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
			return err
		}
		// Trailers-Only with a percent-encoded message
		if err := p.writeHeaders(id, true, [2]string{":status", "200"},
			[2]string{"content-type", "application/grpc"}, [2]string{"grpc-status", "7"},
			[2]string{"grpc-message", "no %E2%82%AC for you %zz"}); err != nil {
			return err
		}
		acked := false
		for !acked {
			f, err := p.fr.ReadFrame()
			if err != nil {
				return fmt.Errorf("waiting for the PING ack: %v", err)
			}
			if pf, ok := f.(*http2.PingFrame); ok {
				if pf.IsAck() && pf.Data == [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
					acked = true
				} else if !pf.IsAck() {
					p.pings++
				}
			}
		}
		p.drain()
		if p.pings != 0 {
			return fmt.Errorf("the client sent %d PINGs", p.pings)
		}
		return nil
	})
	r := runClient(t, sock, "/test.Test/Echo", []byte("abc"), 5000)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if r.status != 7 || r.message != "no \u20ac for you %zz" {
		t.Fatalf("Trailers-Only: %+v", r)
	}
}

func TestClientHTTPErrors(t *testing.T) {
	cases := []struct {
		name    string
		respond func(p *rawPeer, id uint32) error
		status  codes.Code
		msg     string
	}{
		{"503", func(p *rawPeer, id uint32) error {
			return p.writeHeaders(id, true, [2]string{":status", "503"}, [2]string{"content-type", "text/html"})
		}, codes.Unavailable, "503"},
		{"404", func(p *rawPeer, id uint32) error {
			return p.writeHeaders(id, true, [2]string{":status", "404"})
		}, codes.Unimplemented, "404"},
		{"content-type", func(p *rawPeer, id uint32) error {
			return p.writeHeaders(id, true, [2]string{":status", "200"}, [2]string{"content-type", "text/html"},
				[2]string{"grpc-status", "0"})
		}, codes.Unknown, "content-type"},
		{"rst cancel", func(p *rawPeer, id uint32) error {
			return p.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}, codes.Canceled, "CANCEL"},
		{"eof", func(p *rawPeer, id uint32) error {
			return p.c.Close()
		}, codes.Unavailable, "closed"},
		{"goaway processed", func(p *rawPeer, id uint32) error {
			if err := p.fr.WriteGoAway(id, http2.ErrCodeNo, nil); err != nil {
				return err
			}
			return p.c.Close()
		}, codes.Unavailable, ""},
		{"malformed grpc-status", func(p *rawPeer, id uint32) error {
			return p.writeHeaders(id, true, [2]string{":status", "200"},
				[2]string{"content-type", "application/grpc"}, [2]string{"grpc-status", "x1"})
		}, codes.Internal, "grpc-status"},
		{"data without trailers", func(p *rawPeer, id uint32) error {
			if err := p.writeHeaders(id, false, [2]string{":status", "200"},
				[2]string{"content-type", "application/grpc"}); err != nil {
				return err
			}
			return p.fr.WriteData(id, true, framed(0, []byte("x")))
		}, codes.Internal, "trailers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "raw.sock")
			res := rawServe(t, sock, func(p *rawPeer, id uint32) error {
				if err := tc.respond(p, id); err != nil {
					return err
				}
				p.drain()
				return nil
			})
			r := runClient(t, sock, "/test.Test/Echo", nil, 5000)
			if err := <-res; err != nil && !errors.Is(err, net.ErrClosed) {
				t.Fatal(err)
			}
			if r.status != int(tc.status) || !strings.Contains(r.message, tc.msg) {
				t.Fatalf("got %+v, want %v with a message containing %q", r, tc.status, tc.msg)
			}
		})
	}
}

// The client resets the stream at its deadline (RST_STREAM CANCEL).
func TestClientDeadlineResets(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "raw.sock")
	var rst http2.ErrCode
	var sawRst bool
	res := rawServe(t, sock, func(p *rawPeer, id uint32) error {
		rst, sawRst = p.drain() // never answer
		return nil
	})
	r := runClient(t, sock, "/test.Test/Echo", nil, 200)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	if r.status != int(codes.DeadlineExceeded) {
		t.Fatalf("got %+v, want DEADLINE_EXCEEDED", r)
	}
	if !sawRst || rst != http2.ErrCodeCancel {
		t.Fatalf("RST_STREAM seen %v code %v, want CANCEL", sawRst, rst)
	}
}

// A request the server refused unprocessed (RST_STREAM REFUSED_STREAM, or a GOAWAY below its
// stream: a server closing the connection to make room) is sent again on a new connection, at
// most 3 more times (RFC 9113 8.7, as grpc-go retries transparently); then the refusal is the
// result. A stream the server processed (GOAWAY at its ID) is never sent again.
func TestClientRetriesRefused(t *testing.T) {
	refuse := map[string]func(p *rawPeer, id uint32) error{
		"rst refused": func(p *rawPeer, id uint32) error { return p.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) },
		"goaway unprocessed": func(p *rawPeer, id uint32) error {
			if err := p.fr.WriteGoAway(0, http2.ErrCodeNo, nil); err != nil {
				return err
			}
			return p.c.Close()
		},
	}
	ok := func(p *rawPeer, id uint32) error {
		if err := p.writeHeaders(id, false, [2]string{":status", "200"},
			[2]string{"content-type", "application/grpc"}); err != nil {
			return err
		}
		if err := p.fr.WriteData(id, false, framed(0, p.body[5:])); err != nil {
			return err
		}
		return p.writeHeaders(id, true, [2]string{"grpc-status", "0"})
	}
	for name, r := range refuse {
		for _, refusals := range []int{1, 3, 4} {
			t.Run(fmt.Sprintf("%s/%d", name, refusals), func(t *testing.T) {
				sock := filepath.Join(t.TempDir(), "raw.sock")
				lis, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				defer lis.Close()
				served := make(chan int, 1)
				go func() {
					n := 0
					for ; n < 4; n++ {
						respond := ok
						if n < refusals {
							respond = r
						}
						err := rawServeOne(lis, func(p *rawPeer, id uint32) error {
							if err := respond(p, id); err != nil {
								return err
							}
							p.drain()
							return nil
						})
						if err != nil || n >= refusals {
							n++
							break
						}
					}
					served <- n
				}()
				res := runClient(t, sock, "/test.Test/Echo", []byte("again"), 5000)
				lis.Close()
				n := <-served
				if refusals <= 3 {
					if res.status != 0 || string(res.resp) != "again" {
						t.Fatalf("after %d refusals: %+v, want the answer", refusals, res)
					}
					if n != refusals+1 {
						t.Errorf("the server saw %d connections, want %d", n, refusals+1)
					}
					return
				}
				if res.status != int(codes.Unavailable) || !strings.Contains(res.message, "REFUSED_STREAM") {
					t.Fatalf("refused 4 times: %+v, want UNAVAILABLE (REFUSED_STREAM)", res)
				}
				if n != 4 {
					t.Errorf("the server saw %d connections, want 4 (1 + 3 retries)", n)
				}
			})
		}
	}
}
