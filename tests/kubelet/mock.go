// Package kubelet is a mock kubelet device manager built on grpc-go (the library kubelet itself
// uses), plus helpers that run a device plugin daemon on a simulated node. It behaves like
// pkg/kubelet/cm/devicemanager: it serves v1beta1.Registration on <dir>/kubelet.sock, validates
// Register, dials the plugin back inside the Register handler, calls GetDevicePluginOptions,
// runs ListAndWatch and records every snapshot, and calls GetPreferredAllocation, Allocate and
// PreStartContainer in kubelet's order. Restart and RecreateSocketOnly simulate the two ways a
// plugin sees kubelet come back.
package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	api "sdp/v1beta1"
)

// DefaultDialTimeout is kubelet's dial-back timeout inside Register.
const DefaultDialTimeout = 10 * time.Second

// Event is one thing the mock kubelet saw or did, in order.
type Event struct {
	Time     time.Time
	Kind     string // register, register-rejected, devices, stream-ended, disconnect, allocate, restart, socket-recreated, serving, stopped
	Resource string
	Endpoint string
	Text     string
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ts=%s event=%s", e.Time.Format("15:04:05.000"), e.Kind)
	if e.Resource != "" {
		fmt.Fprintf(&b, " resource=%s", e.Resource)
	}
	if e.Endpoint != "" {
		fmt.Fprintf(&b, " endpoint=%s", e.Endpoint)
	}
	if e.Text != "" {
		fmt.Fprintf(&b, " msg=%q", e.Text)
	}
	return b.String()
}

// Snapshot is one ListAndWatch response (a full device list), with the time it arrived.
type Snapshot struct {
	Time    time.Time
	Devices []*api.Device
}

// MockKubelet is the kubelet side of the device plugin protocol. Create it with New.
type MockKubelet struct {
	Dir          string
	dialTimeout  time.Duration
	onEvent      func(Event)
	beforeReturn func(*Plugin)

	evMu sync.Mutex // serialises OnEvent calls

	mu      sync.Mutex
	server  *grpc.Server
	lis     *net.UnixListener
	ctx     context.Context // cancelled when the registration server stops (kubelet "dies")
	cancel  context.CancelFunc
	gen     int // incremented by every Restart/Stop
	current map[string]*Plugin
	all     map[string][]*Plugin
	events  []Event
	stopped bool
}

// Config configures a mock kubelet.
type Config struct {
	Dir string // the device plugin directory
	// DialTimeout bounds the dial-back inside Register (default: kubelet's 10 s).
	DialTimeout time.Duration
	// OnEvent, when set, is called for every event in order (never concurrently).
	OnEvent func(Event)
	// BeforeRegisterReturns, when set, runs inside Register after the plugin is registered
	// and its ListAndWatch started, before the answer goes back (to end the stream while the
	// plugin still waits for Register).
	BeforeRegisterReturns func(*Plugin)
}

// New starts a mock kubelet with kubelet's defaults on dir.
func New(dir string) (*MockKubelet, error) { return Start(Config{Dir: dir}) }

// Start creates the directory (0750), removes a stale kubelet.sock and serves Registration on it.
func Start(c Config) (*MockKubelet, error) {
	k := &MockKubelet{
		Dir:          c.Dir,
		dialTimeout:  c.DialTimeout,
		onEvent:      c.OnEvent,
		beforeReturn: c.BeforeRegisterReturns,
		current:      map[string]*Plugin{},
		all:          map[string][]*Plugin{},
	}
	if k.dialTimeout <= 0 {
		k.dialTimeout = DefaultDialTimeout
	}
	if err := os.MkdirAll(k.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("mock kubelet: %v", err)
	}
	if err := k.serve(); err != nil {
		return nil, err
	}
	return k, nil
}

// SocketPath is <dir>/kubelet.sock.
func (k *MockKubelet) SocketPath() string { return filepath.Join(k.Dir, KubeletSocket) }

func (k *MockKubelet) listen() (*net.UnixListener, error) {
	path := k.SocketPath()
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("mock kubelet: remove stale %s: %v", path, err)
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("mock kubelet: listen %s: %v", path, err)
	}
	// A killed kubelet leaves its socket behind; the next one removes it. Never unlink on Close.
	lis.SetUnlinkOnClose(false)
	return lis, nil
}

func (k *MockKubelet) serve() error {
	lis, err := k.listen()
	if err != nil {
		return err
	}
	return k.serveOn(lis)
}

// bindOnly binds kubelet.sock without listening: a connect is refused until listenBound, as
// between the bind and the listen of a starting kubelet's net.Listen.
func (k *MockKubelet) bindOnly() (int, error) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mock kubelet: socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: k.SocketPath()}); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("mock kubelet: bind %s: %v", k.SocketPath(), err)
	}
	return fd, nil
}

// listenBound listens on the socket bindOnly bound and returns it as a listener.
func (k *MockKubelet) listenBound(fd int) (*net.UnixListener, error) {
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("mock kubelet: listen %s: %v", k.SocketPath(), err)
	}
	f := os.NewFile(uintptr(fd), k.SocketPath())
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("mock kubelet: listener %s: %v", k.SocketPath(), err)
	}
	lis := l.(*net.UnixListener)
	lis.SetUnlinkOnClose(false)
	return lis, nil
}

func (k *MockKubelet) serveOn(lis *net.UnixListener) error {
	srv := grpc.NewServer() // kubelet uses grpc-go defaults: no server options
	api.RegisterRegistrationServer(srv, &registrationServer{k: k})
	ctx, cancel := context.WithCancel(context.Background())
	k.mu.Lock()
	k.server, k.lis, k.ctx, k.cancel, k.stopped = srv, lis, ctx, cancel, false
	k.mu.Unlock()
	go srv.Serve(lis) //nolint:errcheck // returns when stopped
	k.emit(Event{Kind: "serving", Text: k.SocketPath()})
	return nil
}

// stopServer stops the Registration server as a dying kubelet would: every connection to
// kubelet.sock is closed, in-flight Register calls are abandoned, the socket file stays.
func (k *MockKubelet) stopServer() {
	k.mu.Lock()
	srv, cancel := k.server, k.cancel
	k.server, k.lis, k.cancel = nil, nil, nil
	k.gen++
	k.stopped = true
	k.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if srv != nil {
		srv.Stop()
	}
}

// closeAllPlugins closes every plugin connection (a dead kubelet process: every plugin sees EOF).
func (k *MockKubelet) closeAllPlugins(reason string) {
	k.mu.Lock()
	var ps []*Plugin
	for _, list := range k.all {
		ps = append(ps, list...)
	}
	k.current = map[string]*Plugin{}
	k.mu.Unlock()
	for _, p := range ps {
		p.disconnect(reason)
	}
}

// cleanupDir removes every socket in the directory, like kubelet's CleanupPluginDirectory:
// regular files (the checkpoint, DEPRECATION) and directories stay.
func (k *MockKubelet) cleanupDir() error {
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		return fmt.Errorf("mock kubelet: read %s: %v", k.Dir, err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		p := filepath.Join(k.Dir, e.Name())
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("mock kubelet: remove %s: %v", p, err)
		}
	}
	return nil
}

// Restart simulates a kubelet restart: the Registration server stops, every plugin connection
// is closed, every socket in the directory is deleted, then kubelet.sock is served again.
func (k *MockKubelet) Restart() error {
	k.stopServer()
	k.closeAllPlugins("kubelet restarted")
	if err := k.cleanupDir(); err != nil {
		return err
	}
	k.emit(Event{Kind: "restart", Text: "sockets deleted"})
	return k.serve()
}

// RestartListenLater is Restart with a slow kubelet start: the new kubelet.sock is bound (its
// creation seen by inotify) and refuses connections for hold before kubelet listens on it.
func (k *MockKubelet) RestartListenLater(hold time.Duration) error {
	k.stopServer()
	k.closeAllPlugins("kubelet restarted")
	if err := k.cleanupDir(); err != nil {
		return err
	}
	k.emit(Event{Kind: "restart", Text: "sockets deleted"})
	fd, err := k.bindOnly()
	if err != nil {
		return err
	}
	k.emit(Event{Kind: "bound", Text: k.SocketPath()})
	time.Sleep(hold)
	lis, err := k.listenBound(fd)
	if err != nil {
		return err
	}
	return k.serveOn(lis)
}

// RecreateSocketOnly deletes kubelet.sock and serves a new listener at the same path. Plugin
// sockets and plugin connections are left alone.
func (k *MockKubelet) RecreateSocketOnly() error {
	k.mu.Lock()
	srv, old := k.server, k.lis
	k.mu.Unlock()
	if srv == nil {
		return fmt.Errorf("mock kubelet: not serving")
	}
	if old != nil {
		old.Close()
	}
	lis, err := k.listen() // removes the old file first
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.lis = lis
	k.mu.Unlock()
	go srv.Serve(lis) //nolint:errcheck
	k.emit(Event{Kind: "socket-recreated", Text: k.SocketPath()})
	return nil
}

// Stop stops serving, closes every plugin connection and removes kubelet.sock.
func (k *MockKubelet) Stop() {
	k.stopServer()
	k.closeAllPlugins("kubelet stopped")
	os.Remove(k.SocketPath())
	k.emit(Event{Kind: "stopped"})
}

func (k *MockKubelet) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	k.evMu.Lock()
	defer k.evMu.Unlock()
	k.mu.Lock()
	k.events = append(k.events, e)
	cb := k.onEvent
	k.mu.Unlock()
	if cb != nil {
		cb(e)
	}
}

// Events returns a copy of every event so far.
func (k *MockKubelet) Events() []Event {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]Event(nil), k.events...)
}

// EventLog renders the events one per line (for test failure output).
func (k *MockKubelet) EventLog() string {
	var b strings.Builder
	for _, e := range k.Events() {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Registrations is the number of successful registrations of resource so far.
func (k *MockKubelet) Registrations(resource string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.all[resource])
}

// Current is the endpoint kubelet uses for resource (the newest registration), or nil.
func (k *MockKubelet) Current(resource string) *Plugin {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current[resource]
}

// Plugins returns every registration of resource, oldest first.
func (k *MockKubelet) Plugins(resource string) []*Plugin {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*Plugin(nil), k.all[resource]...)
}

// Resources lists the resources that registered at least once, sorted.
func (k *MockKubelet) Resources() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var rs []string
	for r := range k.all {
		rs = append(rs, r)
	}
	sort.Strings(rs)
	return rs
}

// registrationServer is the v1beta1.Registration service.
type registrationServer struct {
	api.UnimplementedRegistrationServer
	k *MockKubelet
}

func (s *registrationServer) Register(_ context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	return s.k.register(r)
}

func (k *MockKubelet) reject(r *api.RegisterRequest, err error) (*api.Empty, error) {
	k.emit(Event{Kind: "register-rejected", Resource: r.ResourceName, Endpoint: r.Endpoint, Text: err.Error()})
	return nil, err
}

func (k *MockKubelet) register(r *api.RegisterRequest) (*api.Empty, error) {
	if !versionSupported(r.Version) {
		return k.reject(r, fmt.Errorf(errUnsupportedVersion, r.Version, SupportedVersions))
	}
	if !IsExtendedResourceName(r.ResourceName) {
		return k.reject(r, fmt.Errorf(errInvalidResourceName, r.ResourceName))
	}
	k.mu.Lock()
	ctx, gen, timeout := k.ctx, k.gen, k.dialTimeout
	k.mu.Unlock()
	if ctx == nil {
		return k.reject(r, fmt.Errorf("kubelet is stopping"))
	}
	socket := filepath.Join(k.Dir, r.Endpoint)
	conn, err := DialPlugin(ctx, socket, timeout)
	if err != nil {
		return k.reject(r, fmt.Errorf(errFailedToDialDevicePlugin+" %v", err))
	}
	client := api.NewDevicePluginClient(conn)
	// kubelet: context.Background(), no deadline. Ours is cancelled only if the mock stops.
	opts, err := client.GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil {
		conn.Close()
		return k.reject(r, fmt.Errorf("failed to get device plugin options: %v", err))
	}
	pctx, pcancel := context.WithCancel(context.Background())
	p := &Plugin{
		Resource: r.ResourceName, Endpoint: r.Endpoint, Socket: socket,
		Request: r, Options: opts, Registered: time.Now(),
		k: k, conn: conn, client: client, ctx: pctx, cancel: pcancel, closeOnEnd: true,
		done: make(chan struct{}),
	}
	k.mu.Lock()
	if k.gen != gen || k.stopped {
		k.mu.Unlock()
		pcancel()
		conn.Close()
		return k.reject(r, fmt.Errorf("kubelet restarted during registration"))
	}
	old := k.current[r.ResourceName]
	k.current[r.ResourceName] = p
	k.all[r.ResourceName] = append(k.all[r.ResourceName], p)
	p.Seq = len(k.all[r.ResourceName])
	k.mu.Unlock()
	if old != nil {
		old.disconnect("replaced by a newer registration")
	}
	k.emit(Event{Kind: "register", Resource: p.Resource, Endpoint: p.Endpoint,
		Text: fmt.Sprintf("version=%s seq=%d pre_start_required=%v get_preferred_allocation_available=%v",
			r.Version, p.Seq, opts.PreStartRequired, opts.GetPreferredAllocationAvailable)})
	go p.run()
	if k.beforeReturn != nil {
		k.beforeReturn(p)
	}
	return &api.Empty{}, nil
}

// DialPlugin dials a plugin socket exactly like kubelet does: blocking, with a timeout,
// insecure, authority "localhost", through a unix dialer.
func DialPlugin(ctx context.Context, socket string, timeout time.Duration) (*grpc.ClientConn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return grpc.DialContext(ctx, socket,
		grpc.WithAuthority("localhost"),
		grpc.WithInsecure(),
		grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}),
	)
}
