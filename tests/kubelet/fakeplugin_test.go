package kubelet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"

	api "sdp/v1beta1"
)

// fakeCall is one RPC the fake plugin served.
type fakeCall struct {
	Method      string
	At          time.Time
	HasDeadline bool
	Deadline    time.Time
	Request     interface{}
}

// fakePlugin is a tiny grpc-go device plugin used to prove the mock kubelet.
type fakePlugin struct {
	api.UnimplementedDevicePluginServer
	t        *testing.T
	resource string
	socket   string
	opts     api.DevicePluginOptions
	server   *grpc.Server
	lis      *sniffListener

	mu       sync.Mutex
	calls    []fakeCall
	devices  []*api.Device
	changed  chan struct{} // closed and replaced on every device change
	endAll   chan struct{} // closed to end every stream with OK
	open     int           // open ListAndWatch streams
	ended    []error       // how each ListAndWatch stream ended (server side)
	failOpts error
}

func newFakePlugin(t *testing.T, dir, name, resource string, opts api.DevicePluginOptions, devs ...*api.Device) *fakePlugin {
	t.Helper()
	f := &fakePlugin{t: t, resource: resource, socket: filepath.Join(dir, name), opts: opts,
		devices: devs, changed: make(chan struct{}), endAll: make(chan struct{})}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatalf("fake plugin listen: %v", err)
	}
	f.lis = &sniffListener{Listener: l}
	f.server = grpc.NewServer()
	api.RegisterDevicePluginServer(f.server, f)
	go f.server.Serve(f.lis) //nolint:errcheck
	t.Cleanup(f.stop)
	return f
}

func (f *fakePlugin) stop() { f.server.Stop() }

func (f *fakePlugin) record(ctx context.Context, method string, req interface{}) {
	c := fakeCall{Method: method, At: time.Now(), Request: req}
	c.Deadline, c.HasDeadline = ctx.Deadline()
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakePlugin) Calls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fakePlugin) methods() []string {
	var m []string
	for _, c := range f.Calls() {
		m = append(m, c.Method)
	}
	return m
}

func (f *fakePlugin) setDevices(devs ...*api.Device) {
	f.mu.Lock()
	f.devices = devs
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakePlugin) endStreams() { close(f.endAll) }

func (f *fakePlugin) streamState() (open int, ended []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open, append([]error(nil), f.ended...)
}

func (f *fakePlugin) GetDevicePluginOptions(ctx context.Context, e *api.Empty) (*api.DevicePluginOptions, error) {
	f.record(ctx, "GetDevicePluginOptions", e)
	if f.failOpts != nil {
		return nil, f.failOpts
	}
	o := f.opts
	return &o, nil
}

func (f *fakePlugin) ListAndWatch(e *api.Empty, s api.DevicePlugin_ListAndWatchServer) (err error) {
	f.record(s.Context(), "ListAndWatch", e)
	f.mu.Lock()
	f.open++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.open--
		f.ended = append(f.ended, err)
		f.mu.Unlock()
	}()
	for {
		f.mu.Lock()
		devs, changed := f.devices, f.changed
		f.mu.Unlock()
		if err := s.Send(&api.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-f.endAll:
			return nil
		case <-s.Context().Done():
			return s.Context().Err()
		}
	}
}

func (f *fakePlugin) GetPreferredAllocation(ctx context.Context, r *api.PreferredAllocationRequest) (*api.PreferredAllocationResponse, error) {
	f.record(ctx, "GetPreferredAllocation", r)
	resp := &api.PreferredAllocationResponse{}
	for _, cr := range r.ContainerRequests {
		n := int(cr.AllocationSize)
		if n > len(cr.AvailableDeviceIDs) {
			n = len(cr.AvailableDeviceIDs)
		}
		resp.ContainerResponses = append(resp.ContainerResponses,
			&api.ContainerPreferredAllocationResponse{DeviceIDs: cr.AvailableDeviceIDs[:n]})
	}
	return resp, nil
}

func (f *fakePlugin) Allocate(ctx context.Context, r *api.AllocateRequest) (*api.AllocateResponse, error) {
	f.record(ctx, "Allocate", r)
	resp := &api.AllocateResponse{}
	for _, cr := range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerAllocateResponse{
			Envs:       map[string]string{"FAKE_IDS": fmt.Sprint(cr.DevicesIds)},
			CdiDevices: []*api.CDIDevice{{Name: f.resource + "=" + cr.DevicesIds[0]}},
		})
	}
	return resp, nil
}

func (f *fakePlugin) PreStartContainer(ctx context.Context, r *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	f.record(ctx, "PreStartContainer", r)
	return &api.PreStartContainerResponse{}, nil
}

// register calls Register on kubelet.sock like a plugin would (after serving) and returns the
// time the call returned.
func (f *fakePlugin) register(kubeletSock, version string) (time.Time, error) {
	return registerAs(kubeletSock, &api.RegisterRequest{Version: version, Endpoint: filepath.Base(f.socket),
		ResourceName: f.resource, Options: &f.opts})
}

func registerAs(kubeletSock string, r *api.RegisterRequest) (time.Time, error) {
	conn, err := DialPlugin(context.Background(), kubeletSock, 5*time.Second)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_, err = api.NewRegistrationClient(conn).Register(ctx, r)
	return time.Now(), err
}

func dev(id, health string) *api.Device { return &api.Device{ID: id, Health: health} }

// sniffListener records every byte clients send on each accepted connection, so a test can
// decode the HTTP/2 request headers (":authority") the mock kubelet sent.
type sniffListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*sniffConn
}

type sniffConn struct {
	net.Conn
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool // Read saw EOF or an error: the peer closed the connection
}

func (l *sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &sniffConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, sc)
	l.mu.Unlock()
	return sc, nil
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if c.buf.Len() < 1<<20 {
		c.buf.Write(p[:n])
	}
	if err != nil {
		c.closed = true
	}
	c.mu.Unlock()
	return n, err
}

func (l *sniffListener) connections() []*sniffConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*sniffConn(nil), l.conns...)
}

func (c *sniffConn) peerClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// requestHeaders decodes the HEADERS of every request the client sent so far.
func (c *sniffConn) requestHeaders() ([]map[string]string, error) {
	c.mu.Lock()
	data := append([]byte(nil), c.buf.Bytes()...)
	c.mu.Unlock()
	if !bytes.HasPrefix(data, []byte(http2.ClientPreface)) {
		return nil, fmt.Errorf("no HTTP/2 client preface")
	}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(data[len(http2.ClientPreface):]))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	var out []map[string]string
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			return out, nil // end of what was captured
		}
		if mh, ok := frame.(*http2.MetaHeadersFrame); ok {
			h := map[string]string{}
			for _, f := range mh.Fields {
				h[f.Name] = f.Value
			}
			out = append(out, h)
		}
	}
}

// registeredFake is a new mock kubelet with a fake plugin of example.com/foo (one Healthy
// device "a" on fake-1.sock) registered, once kubelet has its first device list.
func registeredFake(t *testing.T) (*MockKubelet, *fakePlugin, *Plugin) {
	t.Helper()
	k := newMock(t, Config{})
	f := newFakePlugin(t, k.Dir, "fake-1.sock", "example.com/foo", api.DevicePluginOptions{}, dev("a", Healthy))
	if _, err := f.register(k.SocketPath(), APIVersion); err != nil {
		t.Fatal(err)
	}
	p, err := k.WaitRegistered("example.com/foo", 1, bound)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitSnapshots(1, bound); err != nil {
		t.Fatal(err)
	}
	return k, f, p
}

func newMock(t *testing.T, c Config) *MockKubelet {
	t.Helper()
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "mk-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c.Dir = filepath.Join(dir, "device-plugins")
	}
	k, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		k.Stop()
		if t.Failed() {
			t.Logf("mock kubelet events:\n%s", k.EventLog())
		}
	})
	return k
}
