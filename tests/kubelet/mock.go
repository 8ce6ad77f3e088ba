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
	Kind     string // register, register-held, register-cut, register-rejected, devices, stream-ended, disconnect, allocate, restart, socket-recreated, serving, stopped
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
	conns   *connTracker    // the connections the current server accepted
	hold    bool            // Registers reaching the current server are held (RestartAsKubelet): events register-held, then register-cut
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
	ct := &connTracker{}
	k.mu.Lock()
	k.server, k.lis, k.ctx, k.cancel, k.stopped = srv, lis, ctx, cancel, false
	k.conns, k.hold = ct, false
	k.mu.Unlock()
	go srv.Serve(trackingListener{lis, ct}) //nolint:errcheck // returns when stopped
	k.emit(Event{Kind: "serving", Text: k.SocketPath()})
	return nil
}

// connTracker holds the connections one server accepted, to cut them at once.
type connTracker struct {
	mu    sync.Mutex
	conns []net.Conn
}

// trackingListener records every connection it accepts.
type trackingListener struct {
	*net.UnixListener
	t *connTracker
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.UnixListener.Accept()
	if err == nil {
		l.t.mu.Lock()
		l.t.conns = append(l.t.conns, c)
		l.t.mu.Unlock()
	}
	return c, err
}

// cut shuts every connection down (shutdown(2)): the peer reads EOF now, whenever Go closes
// the file itself (its close waits for a goroutine still reading it).
func (t *connTracker) cut() {
	t.mu.Lock()
	cs := t.conns
	t.conns = nil
	t.mu.Unlock()
	for _, c := range cs {
		sc, ok := c.(syscall.Conn)
		if !ok {
			continue
		}
		if rc, err := sc.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) }) //nolint:errcheck // a closed one is cut already
		}
	}
}

// detach takes the current server out of service (no new registration completes on it) and
// returns it with its listener and connections, for the caller to stop.
func (k *MockKubelet) detach() (*grpc.Server, *net.UnixListener, *connTracker) {
	k.mu.Lock()
	srv, lis, ct, cancel := k.server, k.lis, k.conns, k.cancel
	k.server, k.lis, k.cancel = nil, nil, nil
	k.gen++
	k.stopped = true
	k.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return srv, lis, ct
}

// stopServer stops the Registration server as a dying kubelet would: every connection to
// kubelet.sock is closed, in-flight Register calls are abandoned, the socket file stays.
func (k *MockKubelet) stopServer() {
	if srv, _, _ := k.detach(); srv != nil {
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

// KubeletRestart is the kubelet's own restart, step by step as its device manager's
// registration server does it (pkg/kubelet/cm/devicemanager/plugin/v1beta1, server.go: Stop of
// the running server, then Start of a new one):
//  1. every plugin client disconnected (Stop's visitClients): their ListAndWatch streams end;
//     then AfterDisconnect;
//  2. the gRPC server stops: its listener closes (kubelet.sock stays, refusing), its connections
//     are cut (Registers in flight get no answer), unless CutLate;
//  3. Start: every socket in the directory deleted (CleanupPluginDirectory), kubelet.sock
//     created and listened on;
//  4. with CutLate, the stopped server's connections are cut only now: grpc-go's Stop closes
//     a connection's file when the goroutine reading it lets go, which can be after the new
//     server started.
//
// BeforeCut runs right before the cut.
type KubeletRestart struct {
	// HoldRegisters: a Register that reaches the stopping kubelet (after step 1) is held,
	// unanswered, until its connection is cut; event "register-held" says it arrived.
	HoldRegisters   bool
	CutLate         bool
	AfterDisconnect func()
	BeforeCut       func()
}

// RestartAsKubelet restarts the mock as the kubelet's own code does (KubeletRestart).
func (k *MockKubelet) RestartAsKubelet(r KubeletRestart) error {
	k.mu.Lock()
	k.hold = r.HoldRegisters
	k.mu.Unlock()
	k.closeAllPlugins("kubelet restarting")
	if r.AfterDisconnect != nil {
		r.AfterDisconnect()
	}
	srv, lis, ct := k.detach()
	if lis != nil {
		lis.Close() // the file stays (SetUnlinkOnClose(false)): connects are refused
	}
	stop := func() {
		if r.BeforeCut != nil {
			r.BeforeCut()
		}
		if ct != nil {
			ct.cut()
		}
		if srv != nil {
			srv.Stop()
		}
	}
	if !r.CutLate {
		stop()
	}
	if err := k.cleanupDir(); err != nil {
		return err
	}
	k.emit(Event{Kind: "restart", Text: "sockets deleted"})
	if err := k.serve(); err != nil {
		return err
	}
	if r.CutLate {
		stop()
	}
	return nil
}

// EventsSince returns the events of kind from index from on.
func (k *MockKubelet) EventsSince(from int, kind string) []Event {
	var out []Event
	for i, e := range k.Events() {
		if i >= from && e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
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
	srv, old, ct := k.server, k.lis, k.conns
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
	go srv.Serve(trackingListener{lis, ct}) //nolint:errcheck
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

func (s *registrationServer) Register(ctx context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	return s.k.register(ctx, r)
}

func (k *MockKubelet) reject(r *api.RegisterRequest, err error) (*api.Empty, error) {
	k.emit(Event{Kind: "register-rejected", Resource: r.ResourceName, Endpoint: r.Endpoint, Text: err.Error()})
	return nil, err
}

func (k *MockKubelet) register(rpc context.Context, r *api.RegisterRequest) (*api.Empty, error) {
	if !versionSupported(r.Version) {
		return k.reject(r, fmt.Errorf(errUnsupportedVersion, r.Version, SupportedVersions))
	}
	if !IsExtendedResourceName(r.ResourceName) {
		return k.reject(r, fmt.Errorf(errInvalidResourceName, r.ResourceName))
	}
	k.mu.Lock()
	ctx, gen, timeout, hold := k.ctx, k.gen, k.dialTimeout, k.hold
	k.mu.Unlock()
	if hold { // until the connection is cut: no answer ever reaches the plugin
		k.emit(Event{Kind: "register-held", Resource: r.ResourceName, Endpoint: r.Endpoint})
		<-rpc.Done()
		k.emit(Event{Kind: "register-cut", Resource: r.ResourceName, Endpoint: r.Endpoint})
		return nil, fmt.Errorf("kubelet stopped during registration")
	}
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
