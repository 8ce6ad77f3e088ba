// SPDX-License-Identifier: Apache-2.0

package kubelet

// No request left hanging (issue 21, item 5): a large request the daemon refuses reaches a
// client that honours flow control, whether the refusal comes after its upload (the client
// then reads the answer) or before (then RST_STREAM(NO_ERROR) tells it to stop uploading,
// RFC 9113 8.1). The client here is golang.org/x/net/http2's framer driven as such a client
// is: it sends only within the windows, reads every frame meanwhile, stops on a reset, and
// looks at the answer's headers only once its upload is done.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	api "sdp/v1beta1"
)

const methodPreferred = "/v1beta1.DevicePlugin/GetPreferredAllocation"

// preferredMustInclude is a PreferredAllocationRequest (hand-encoded protobuf) of one container
// request naming n must-include IDs of 7 bytes: 9 bytes per ID on the wire.
func preferredMustInclude(n int) []byte {
	var inner []byte
	for i := 0; i < n; i++ {
		inner = append(inner, 0x12, 7)
		inner = append(inner, fmt.Sprintf("%07d", i)...)
	}
	inner = append(inner, 0x18, 1) // allocation_size 1
	out := []byte{0x0a}
	out = binary.AppendUvarint(out, uint64(len(inner)))
	return append(out, inner...)
}

// uploader is one stream's client on its own connection, as the issue describes it.
type uploader struct {
	c    net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex
	mu   sync.Mutex
	cond *sync.Cond
	// guarded by mu
	connWin, streamWin, initWin int64
	status                      string // grpc-status of the answer ("" none yet)
	answered, rst               time.Time
	rstCode                     http2.ErrCode
	started, uploaded           time.Time // HEADERS sent, END_STREAM sent
	readErr                     error
	goAway                      bool
}

func dialUploader(sock string) (*uploader, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	u := &uploader{c: c, fr: http2.NewFramer(c, c), connWin: 65535, streamWin: 65535, initWin: 65535}
	u.cond = sync.NewCond(&u.mu)
	u.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	if _, err := c.Write([]byte(http2.ClientPreface)); err == nil {
		err = u.fr.WriteSettings()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	go u.readLoop()
	return u, nil
}

func (u *uploader) write(f func() error) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	return f()
}

// readLoop reads every frame: windows, the answer's headers (recorded, looked at later), a
// reset of the stream (stream 1, the only one).
func (u *uploader) readLoop() {
	for {
		f, err := u.fr.ReadFrame()
		u.mu.Lock()
		if err != nil {
			u.readErr = err
			u.cond.Broadcast()
			u.mu.Unlock()
			return
		}
		var ack func() error
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					u.streamWin += int64(v) - u.initWin
					u.initWin = int64(v)
				}
				ack = u.fr.WriteSettingsAck
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				ack = func() error { return u.fr.WritePing(true, data) }
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				u.connWin += int64(f.Increment)
			} else {
				u.streamWin += int64(f.Increment)
			}
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" && u.status == "" {
					u.status, u.answered = hf.Value, time.Now()
				}
			}
		case *http2.RSTStreamFrame:
			if u.rst.IsZero() {
				u.rst, u.rstCode = time.Now(), f.ErrCode
			}
		case *http2.GoAwayFrame:
			u.goAway = true
		}
		u.cond.Broadcast()
		u.mu.Unlock()
		if ack != nil {
			_ = u.write(ack)
		}
	}
}

// upload sends HEADERS and msg on stream 1 within the windows, up to END_STREAM or a reset (or
// the connection's end); it fails when no window comes for bound.
func (u *uploader) upload(msg []byte, bound time.Duration) error {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, h := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", methodPreferred},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: h[0], Value: h[1]})
	}
	p := append(append(make([]byte, 0, 5+len(msg)), 0, 0, 0, 0, 0), msg...)
	binary.BigEndian.PutUint32(p[1:], uint32(len(msg)))
	u.mu.Lock()
	u.started = time.Now()
	u.mu.Unlock()
	if err := u.write(func() error {
		return u.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	}); err != nil {
		return err
	}
	for len(p) > 0 {
		u.mu.Lock()
		timer := time.AfterFunc(bound, func() { u.mu.Lock(); u.cond.Broadcast(); u.mu.Unlock() })
		start := time.Now()
		for u.readErr == nil && !u.goAway && u.rst.IsZero() && (u.connWin <= 0 || u.streamWin <= 0) &&
			time.Since(start) < bound {
			u.cond.Wait()
		}
		timer.Stop()
		stop := u.readErr != nil || u.goAway || !u.rst.IsZero()
		n := int64(len(p))
		for _, w := range []int64{16384, u.connWin, u.streamWin} {
			if n > w {
				n = w
			}
		}
		u.connWin -= n
		u.streamWin -= n
		u.mu.Unlock()
		if stop {
			return nil // the client stops uploading and looks at what it got
		}
		if n <= 0 {
			return fmt.Errorf("no window for %v with %d bytes left to send", bound, len(p))
		}
		chunk := p[:n]
		p = p[n:]
		if len(p) == 0 { // END_STREAM goes now: an answer after this is not an early one
			u.mu.Lock()
			u.uploaded = time.Now()
			u.mu.Unlock()
		}
		if err := u.write(func() error { return u.fr.WriteData(1, len(p) == 0, chunk) }); err != nil {
			return err
		}
	}
	return nil
}

// refusal waits (up to bound) for what the client then reads: the answer's grpc-status and,
// when the answer came before its upload ended (END_STREAM sent), the RST_STREAM(NO_ERROR) that
// stopped the upload. It returns the status and when the client had all it needed.
func (u *uploader) refusal(bound time.Duration) (string, time.Duration, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	timer := time.AfterFunc(bound, func() { u.mu.Lock(); u.cond.Broadcast(); u.mu.Unlock() })
	defer timer.Stop()
	early := func() bool { return u.uploaded.IsZero() || u.answered.Before(u.uploaded) }
	for start := time.Now(); time.Since(start) < bound && u.readErr == nil &&
		(u.status == "" || early() && u.rst.IsZero()); {
		u.cond.Wait()
	}
	switch {
	case u.status == "":
		return "", 0, fmt.Errorf("no answer within %v (reset %v %v, read error %v, GOAWAY %v)", bound,
			!u.rst.IsZero(), u.rstCode, u.readErr, u.goAway)
	case !early():
		return u.status, u.answered.Sub(u.started), nil
	case u.rst.IsZero():
		return "", 0, fmt.Errorf("answered (grpc-status %s) before the upload ended, but no RST_STREAM within %v",
			u.status, bound)
	case u.rstCode != http2.ErrCodeNo:
		return "", 0, fmt.Errorf("answered before the upload ended, then RST_STREAM %v, want NO_ERROR", u.rstCode)
	}
	return u.status, u.rst.Sub(u.started), nil
}

// The scenario 20 times in a row: a 540 KB GetPreferredAllocation (60,000 must-include
// IDs, more than twice the resource's 4 devices: INVALID_ARGUMENT) on its own connection while
// three small Allocates run on others. Every refusal must reach the client; a client waiting
// 5 s for window or an answer counts as left hanging. The latencies are logged with whether the
// slowest is within the 100 ms (a time is reported, not asserted: a loaded CI host must
// not fail what is a figure; docs/reliability.md has the measured ones).
func TestKataLargeRequestRefusedNotHanging(t *testing.T) {
	const runs, bound, giveUp = 20, 100 * time.Millisecond, 5 * time.Second
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon()
	ps := s.kataReady(kataExpect(kataMain))
	sock := ps[KataGPU].Socket
	msg := preferredMustInclude(60000)
	var lat []time.Duration
	var hung []string
	for run := 0; run < runs; run++ {
		d, err := s.refusalRun(sock, msg, giveUp)
		if err != nil {
			hung = append(hung, fmt.Sprintf("run %d: %v", run, err))
			continue
		}
		lat = append(lat, d)
	}
	sorted := append([]time.Duration(nil), lat...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("%d-byte request: refusal seen in %d of %d runs; latencies in order %v", len(msg), len(lat), runs, lat)
	if len(hung) > 0 {
		t.Errorf("%d of %d runs left the request hanging:\n%s", len(hung), runs, strings.Join(hung, "\n"))
	}
	if n := len(sorted); n > 0 {
		t.Logf("slowest refusal seen after %v (issue 21's bound %v: within=%v)", sorted[n-1], bound, sorted[n-1] <= bound)
	}
}

// refusalRun is one run: three small Allocates, each on its own grpc-go connection, and at the
// same time the large request on the uploader's. It returns how long after the request's
// HEADERS the client had the refusal.
func (s *kataScenario) refusalRun(sock string, msg []byte, giveUp time.Duration) (time.Duration, error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			conn, err := DialPlugin(context.Background(), sock, eventBound)
			if err != nil {
				s.t.Errorf("dial: %v", err)
				return
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), eventBound)
			defer cancel()
			if _, err := api.NewDevicePluginClient(conn).Allocate(ctx, &api.AllocateRequest{
				ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{id}}}}); err != nil {
				s.t.Errorf("a small Allocate beside the large request: %v", err)
			}
		}(fmt.Sprint(i))
	}
	u, err := dialUploader(sock)
	if err != nil {
		return 0, err
	}
	defer u.c.Close()
	if err := u.upload(msg, giveUp); err != nil {
		return 0, err
	}
	st, d, err := u.refusal(giveUp)
	if err == nil && st != "3" {
		err = fmt.Errorf("grpc-status %s, want 3 (INVALID_ARGUMENT: more IDs than the resource allows)", st)
	}
	return d, err
}
