package kubelet

// Hostile clients for a plugin socket, shared by the pod-shape scenarios and make bench: a
// hand-driven HTTP/2 connection (golang.org/x/net/http2's framer) for what grpc-go never sends
// (unfinished messages, answers never read), and the valid-looking but amplifying Allocate
// requests, sent through grpc-go with a pass-through codec.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

// gRPC method paths of the device plugin service.
const (
	MethodAllocate     = "/v1beta1.DevicePlugin/Allocate"
	MethodListAndWatch = "/v1beta1.DevicePlugin/ListAndWatch"
	// MaxMessage is the daemons' largest gRPC message (DP_GRPC_MAX_MESSAGE).
	MaxMessage = 4 << 20
)

// RawH2 is one client connection driven frame by frame.
type RawH2 struct {
	Conn net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex
	enc  *hpack.Encoder
	hb   bytes.Buffer

	mu        sync.Mutex
	cond      *sync.Cond
	connWin   int64
	initWin   int64
	streamWin map[uint32]int64
	reset     map[uint32]bool
	streams   map[uint32]*H2Stream
	readErr   error
	goAway    bool
}

// H2Stream is what the client saw of one of its streams: the answer's grpc-status and when it
// came, when the client sent END_STREAM, and the server's RST_STREAM.
type H2Stream struct {
	Status    string // grpc-status ("" none yet)
	Answered  time.Time
	Ended     time.Time // END_STREAM sent
	Reset     time.Time
	ResetCode http2.ErrCode
}

// Errors Send stops with when the server told the client to stop sending.
var (
	ErrStreamReset = errors.New("stream reset by the server")
	ErrGoAway      = errors.New("GOAWAY from the server")
)

// writeBound is how long one frame write may block before the client gives up (the server
// stopped reading: it is defending itself).
const writeBound = 3 * time.Second

// DialRawH2 connects to sock, sends the preface and SETTINGS; window > 0 also sets
// SETTINGS_INITIAL_WINDOW_SIZE and raises the connection window to it (a client that lets the
// server send that much without reading). With read, a goroutine reads every frame: it tracks
// the flow-control windows SendMessage needs, acknowledges SETTINGS and PING and returns the
// windows of DATA it receives. Without read, nothing is ever read from the socket.
func DialRawH2(sock string, window uint32, read bool) (*RawH2, error) {
	c, err := net.DialTimeout("unix", sock, writeBound)
	if err != nil {
		return nil, err
	}
	r := &RawH2{Conn: c, fr: http2.NewFramer(c, c), connWin: 65535, initWin: 65535,
		streamWin: map[uint32]int64{}, reset: map[uint32]bool{}, streams: map[uint32]*H2Stream{}}
	r.cond = sync.NewCond(&r.mu)
	r.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	r.enc = hpack.NewEncoder(&r.hb)
	var settings []http2.Setting
	if window > 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	}
	err = r.write(func() error {
		if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
			return err
		}
		if err := r.fr.WriteSettings(settings...); err != nil {
			return err
		}
		if window > 65535 {
			return r.fr.WriteWindowUpdate(0, window-65535)
		}
		return nil
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	if read {
		go r.readLoop()
	}
	return r, nil
}

// Close closes the connection.
func (r *RawH2) Close() error { return r.Conn.Close() }

// Unread is what the kernel still holds of the data written on the connection that the server
// has not read (SIOCOUTQ: on a unix stream socket, the buffers queued on the server's side, in
// bytes of memory, not of data; 0 once it has read everything, or closed the connection), or
// -1 when it cannot be known.
func (r *RawH2) Unread() int {
	sc, ok := r.Conn.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	if cerr := raw.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			n = v
		}
	}); cerr != nil {
		return -1
	}
	return n
}

func (r *RawH2) write(f func() error) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.Conn.SetWriteDeadline(time.Now().Add(writeBound))
	return f()
}

func (r *RawH2) readLoop() {
	for {
		f, err := r.fr.ReadFrame()
		r.mu.Lock()
		if err != nil {
			r.readErr = err
			r.cond.Broadcast()
			r.mu.Unlock()
			return
		}
		var ack func() error
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					for id := range r.streamWin {
						r.streamWin[id] += int64(v) - r.initWin
					}
					r.initWin = int64(v)
				}
				ack = r.fr.WriteSettingsAck
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				r.connWin += int64(f.Increment)
			} else {
				r.streamWin[f.StreamID] += int64(f.Increment)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				ack = func() error { return r.fr.WritePing(true, data) }
			}
		case *http2.GoAwayFrame:
			r.goAway = true
		case *http2.RSTStreamFrame:
			r.reset[f.StreamID] = true
			if st := r.stream(f.StreamID); st.Reset.IsZero() {
				st.Reset, st.ResetCode = time.Now(), f.ErrCode
			}
		case *http2.MetaHeadersFrame:
			st := r.stream(f.StreamID)
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" && st.Status == "" {
					st.Status, st.Answered = hf.Value, time.Now()
				}
			}
		case *http2.DataFrame:
			if n := uint32(len(f.Data())); n > 0 {
				id := f.StreamID
				ack = func() error {
					if err := r.fr.WriteWindowUpdate(0, n); err != nil {
						return err
					}
					return r.fr.WriteWindowUpdate(id, n)
				}
			}
		}
		r.cond.Broadcast()
		r.mu.Unlock()
		if ack != nil {
			_ = r.write(ack)
		}
	}
}

// stream is id's record (made on first use); r.mu held.
func (r *RawH2) stream(id uint32) *H2Stream {
	st := r.streams[id]
	if st == nil {
		st = &H2Stream{}
		r.streams[id] = st
	}
	return st
}

// Stream is a copy of what the client saw of stream id so far.
func (r *RawH2) Stream(id uint32) H2Stream {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.stream(id)
}

// Await waits up to bound until done (called with the stream's record, under the client's
// lock) holds or the connection fails; it returns the record, done's last answer and the read
// error (nil while the connection works).
func (r *RawH2) Await(id uint32, bound time.Duration, done func(H2Stream) bool) (H2Stream, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	timer := time.AfterFunc(bound, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timer.Stop()
	ok := done(*r.stream(id))
	for start := time.Now(); !ok && r.readErr == nil && time.Since(start) < bound; ok = done(*r.stream(id)) {
		r.cond.Wait()
	}
	return *r.stream(id), ok, r.readErr
}

// Request opens stream id with a gRPC request's headers for method.
func (r *RawH2) Request(id uint32, method string) error {
	r.mu.Lock()
	r.streamWin[id] = r.initWin
	r.mu.Unlock()
	return r.write(func() error {
		r.hb.Reset()
		for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", method},
			{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
			_ = r.enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
		}
		return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hb.Bytes(), EndHeaders: true})
	})
}

// GRPCFrame is a gRPC length-prefixed message header announcing n bytes.
func GRPCFrame(n int) []byte {
	b := make([]byte, 5)
	binary.BigEndian.PutUint32(b[1:], uint32(n))
	return b
}

// Send writes p on stream id as DATA frames within the flow-control windows (the read
// goroutine must run), END_STREAM on the last when end. It stops with an error when the
// windows stay closed past writeBound, the stream is reset, or the connection fails.
func (r *RawH2) Send(id uint32, p []byte, end bool) error {
	for first := true; first || len(p) > 0; first = false {
		r.mu.Lock()
		deadline := time.Now().Add(writeBound)
		timer := time.AfterFunc(writeBound, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
		for r.readErr == nil && !r.reset[id] && !r.goAway && len(p) > 0 &&
			(r.connWin <= 0 || r.streamWin[id] <= 0) && time.Now().Before(deadline) {
			r.cond.Wait()
		}
		timer.Stop()
		var err error
		switch {
		case r.readErr != nil:
			err = r.readErr
		case r.reset[id]:
			err = fmt.Errorf("stream %d: %w", id, ErrStreamReset)
		case r.goAway:
			err = ErrGoAway
		case len(p) > 0 && (r.connWin <= 0 || r.streamWin[id] <= 0):
			err = fmt.Errorf("stream %d: flow-control window closed for %v", id, writeBound)
		}
		n := int64(len(p))
		for _, lim := range []int64{16384, r.connWin, r.streamWin[id]} {
			if n > lim {
				n = lim
			}
		}
		if n < 0 {
			n = 0
		}
		r.connWin -= n
		r.streamWin[id] -= n
		r.mu.Unlock()
		if err != nil {
			return err
		}
		chunk := p[:n]
		p = p[n:]
		if end && len(p) == 0 { // END_STREAM goes now: an answer after this is not an early one
			r.mu.Lock()
			r.stream(id).Ended = time.Now()
			r.mu.Unlock()
		}
		if err := r.write(func() error { return r.fr.WriteData(id, end && len(p) == 0, chunk) }); err != nil {
			return err
		}
	}
	return nil
}

// SendUnread writes a complete small request on stream id without flow control (for a
// client whose read goroutine does not run): HEADERS, then msg framed with END_STREAM.
func (r *RawH2) SendUnread(id uint32, method string, msg []byte) error {
	if err := r.Request(id, method); err != nil {
		return err
	}
	return r.write(func() error { return r.fr.WriteData(id, true, append(GRPCFrame(len(msg)), msg...)) })
}

// ---- amplifying Allocate requests (valid protobuf, at most MaxMessage bytes)

// AllocateManyContainers is an AllocateRequest of n ContainerAllocateRequests holding one
// empty ID each: 4 bytes per request on the wire.
func AllocateManyContainers(n int) []byte {
	b := make([]byte, 0, 4*n)
	for i := 0; i < n; i++ {
		b = append(b, 0x0a, 0x02, 0x0a, 0x00)
	}
	return b
}

// AllocateUnknownFields is an AllocateRequest of one container request with one ID, then n
// unknown fields (field 2, varint 0: 2 bytes each).
func AllocateUnknownFields(id string, n int) []byte {
	inner := append([]byte{0x0a, byte(len(id))}, id...)
	b := append([]byte{0x0a, byte(len(inner))}, inner...)
	for i := 0; i < n; i++ {
		b = append(b, 0x10, 0x00)
	}
	return b
}

// rawCodec passes []byte through unchanged.
type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// CallRaw makes a unary call with req as the serialized request and returns the serialized
// answer.
func CallRaw(cc *grpc.ClientConn, timeout time.Duration, method string, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var resp []byte
	err := cc.Invoke(ctx, method, &req, &resp, grpc.ForceCodec(rawCodec{}))
	return resp, err
}
