// Command sdp-kubelet-restarts restarts the kubelet's own device-manager registration server
// (k8s.io/kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1, the release in go.mod) the way
// a kubelet restart does, with a device plugin daemon registered to it, and measures how the
// daemon re-registers.
//
//	sdp-kubelet-restarts -dir DIR -resource NAME [-n 200] [-json FILE] -- DAEMON [ARGS...]
//
// The daemon runs with this program's environment (build it with CGO_ENABLED=0: an LD_PRELOAD
// meant for the daemon then does nothing here). One restart is the kubelet's own sequence,
// back to back: Stop() of the running server (every plugin client disconnected, the gRPC server
// stopped), then NewServer() and Start() of a fresh one on DIR/kubelet.sock (Start cleans the
// directory through the handler's CleanupPluginDirectory, as the device manager's does: every
// socket but the checkpoint, then listens). The handler does what the device manager does
// with a plugin: PluginConnected calls GetDevicePluginOptions (inside Register, after the
// kubelet's own client dialled the plugin back), the kubelet's client then runs ListAndWatch.
//
// For each restart: the time from Start() to the first Register the new server accepted
// (PluginConnected), and how many Registers that server accepted until the daemon was quiet
// for -settle after the first ListAndWatch response (one per restart is the expectation);
// also the Registers the stopping server accepted (between its Stop() and the end of Stop()).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

var (
	dir        = flag.String("dir", "", "the device-plugins directory (kubelet.sock is served there)")
	resource   = flag.String("resource", "", "the resource the daemon registers")
	n          = flag.Int("n", 200, "kubelet restarts")
	settle     = flag.Duration("settle", 300*time.Millisecond, "after a restart's first ListAndWatch response, how long the daemon must register no more before the next restart")
	timeout    = flag.Duration("timeout", 20*time.Second, "how long one restart may take to a registration")
	jsonOut    = flag.String("json", "", "write every restart's figures to this file (JSON)")
	daemonLog  = flag.String("daemon-log", "", "write the daemon's output to this file")
	kubeletLog = flag.String("kubelet-log", "", "write the kubelet code's log (klog, -v 4) to this file")
	countLine  = flag.String("count", "", "count the daemon's output lines containing this string, per restart (e.g. 'level=info msg=re-registering')")
)

// registration is one Register a server accepted.
type registration struct {
	at     time.Time
	gen    int
	socket string
	first  time.Time // its first ListAndWatch response, zero until then
}

// recorder collects what every server generation saw.
type recorder struct {
	mu       sync.Mutex
	regs     []*registration
	arrivals []time.Time // every Register that reached a server (the kubelet's own log line)
	lines    []time.Time // the daemon's lines matching -count
	notify   chan struct{}
}

func (r *recorder) add(list *[]time.Time) {
	r.mu.Lock()
	*list = append(*list, time.Now())
	r.mu.Unlock()
}

// between counts the times in [from, to).
func (r *recorder) between(list *[]time.Time, from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range *list {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

func (r *recorder) poke() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// handler is one server generation's RegistrationHandler and ClientHandler.
type handler struct {
	rec        *recorder
	gen        int
	checkpoint string
}

// CleanupPluginDirectory is the device manager's (manager.go): every socket in dir but the
// checkpoint file is removed; directories and other files stay.
func (h *handler) CleanupPluginDirectory(logger klog.Logger, dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		if p == h.checkpoint {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			logger.Error(err, "Failed to stat file", "path", p)
			continue
		}
		if st.IsDir() || st.Mode()&os.ModeSocket == 0 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			logger.Error(err, "Failed to remove file", "path", p)
		}
	}
	return nil
}

// PluginConnected is the device manager's first step with a new plugin (inside Register).
func (h *handler) PluginConnected(ctx context.Context, name string, p plugin.DevicePlugin) error {
	if _, err := p.API().GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		return fmt.Errorf("failed to get device plugin options: %v", err)
	}
	now := time.Now()
	if name != *resource {
		return nil
	}
	h.rec.mu.Lock()
	h.rec.regs = append(h.rec.regs, &registration{at: now, gen: h.gen, socket: p.SocketPath()})
	h.rec.mu.Unlock()
	h.rec.poke()
	return nil
}

func (h *handler) PluginDisconnected(klog.Logger, string, string) {}

// PluginListAndWatchReceiver marks the first response of the newest registration of that
// generation.
func (h *handler) PluginListAndWatchReceiver(_ klog.Logger, name string, _ *pluginapi.ListAndWatchResponse) {
	if name != *resource {
		return
	}
	now := time.Now()
	h.rec.mu.Lock()
	for i := len(h.rec.regs) - 1; i >= 0; i-- {
		if r := h.rec.regs[i]; r.gen == h.gen {
			if r.first.IsZero() {
				r.first = now
			}
			break
		}
	}
	h.rec.mu.Unlock()
	h.rec.poke()
}

// restart is one restart's figures.
type restart struct {
	MS            float64 `json:"ms"`               // Start() to the first accepted Register
	Registrations int     `json:"registrations"`    // Registers the new server accepted
	Stopping      int     `json:"stopping"`         // Registers the stopping server accepted during Stop()
	Arrived       int     `json:"arrived"`          // Registers that reached the new server (accepted or not)
	ArrivedStop   int     `json:"arrived_stopping"` // Registers that reached the stopping server during Stop()
	Lines         int     `json:"lines"`            // the daemon's lines matching -count, from Stop() to the next one
}

// report is the JSON written by -json.
type report struct {
	Kubernetes string    `json:"kubernetes"`
	Go         string    `json:"go"`
	Settle     float64   `json:"settle_ms"`
	Count      string    `json:"count,omitempty"`
	Restarts   []restart `json:"restarts"`
}

type harness struct {
	rec    *recorder
	logger klog.Logger
	srv    plugin.Server
	gen    int
}

func (h *harness) socket() string { return filepath.Join(*dir, "kubelet.sock") }

func (h *harness) start() time.Time {
	h.gen++
	hd := &handler{rec: h.rec, gen: h.gen, checkpoint: filepath.Join(*dir, "kubelet_internal_checkpoint")}
	s, err := plugin.NewServer(h.logger, h.socket(), hd, hd)
	if err != nil {
		fatal("NewServer: %v", err)
	}
	t := time.Now()
	if err := s.Start(h.logger); err != nil {
		fatal("Start: %v", err)
	}
	h.srv = s
	return t
}

// wait returns the generation's registrations once its first one has a ListAndWatch response
// and none came for -settle since then and since the last one.
func (h *harness) wait(gen int) []registration {
	deadline := time.Now().Add(*timeout)
	for {
		var regs []registration
		var quiet time.Time
		h.rec.mu.Lock()
		for _, r := range h.rec.regs {
			if r.gen != gen {
				continue
			}
			regs = append(regs, *r)
			if !r.first.IsZero() && r.first.After(quiet) {
				quiet = r.first
			}
			if r.at.After(quiet) && len(regs) > 1 {
				quiet = r.at
			}
		}
		h.rec.mu.Unlock()
		if len(regs) > 0 && !regs[0].first.IsZero() || len(regs) > 1 && !quiet.IsZero() {
			left := time.Until(quiet.Add(*settle))
			if left <= 0 {
				return regs
			}
			h.sleep(left)
			continue
		}
		if time.Now().After(deadline) {
			fatal("restart %d: no registration with a ListAndWatch response within %v", gen-1, *timeout)
		}
		h.sleep(time.Until(deadline))
	}
}

func (h *harness) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.rec.notify:
	case <-t.C:
	}
}

func (h *harness) count(gen int) int {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	c := 0
	for _, r := range h.rec.regs {
		if r.gen == gen {
			c++
		}
	}
	return c
}

func main() {
	flag.Parse()
	if *dir == "" || *resource == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: sdp-kubelet-restarts -dir DIR -resource NAME [-n N] [-json FILE] -- DAEMON [ARGS...]")
		os.Exit(2)
	}
	rec := &recorder{notify: make(chan struct{}, 1)}
	logger := setupLog(rec)
	if err := os.MkdirAll(*dir, 0o750); err != nil {
		fatal("%v", err)
	}
	h := &harness{rec: rec, logger: logger}
	h.start()
	d := startDaemon(flag.Args(), rec)
	defer stopDaemon(d)
	h.wait(h.gen)
	rep := report{Kubernetes: kubernetesVersion(), Go: runtime.Version(), Settle: float64(*settle) / 1e6, Count: *countLine}
	for i := 0; i < *n; i++ {
		old := h.gen
		before := h.count(old)
		ts := time.Now()
		if err := h.srv.Stop(logger); err != nil {
			fatal("Stop: %v", err)
		}
		stopping := h.count(old) - before
		t0 := h.start()
		regs := h.wait(h.gen)
		end := time.Now()
		rep.Restarts = append(rep.Restarts, restart{MS: float64(regs[0].at.Sub(t0)) / 1e6,
			Registrations: len(regs), Stopping: stopping,
			Arrived: rec.between(&rec.arrivals, t0, end), ArrivedStop: rec.between(&rec.arrivals, ts, t0),
			Lines: rec.between(&rec.lines, ts, end)})
		if d.exited() {
			fatal("the daemon exited: %v", d.cmd.ProcessState)
		}
	}
	if err := h.srv.Stop(logger); err != nil {
		fatal("Stop: %v", err)
	}
	summary(rep)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "\t")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fatal("%v", err)
		}
	}
}

// summary prints one line: the latencies (p50/p99/max, nearest rank as sdp-bench) and the
// registrations per restart; to stderr every restart slower than 5 ms or not registered once.
func summary(rep report) {
	var ms []float64
	one, more, stopping, arrived, arrivedStop, lines, linesMax := 0, 0, 0, 0, 0, 0, 0
	for i, r := range rep.Restarts {
		ms = append(ms, r.MS)
		if r.Registrations == 1 {
			one++
		} else {
			more++
		}
		stopping += r.Stopping
		arrived += r.Arrived
		arrivedStop += r.ArrivedStop
		lines += r.Lines
		if r.Lines > linesMax {
			linesMax = r.Lines
		}
		if r.MS > 5 || r.Registrations != 1 || r.Stopping != 0 || r.Arrived != 1 {
			fmt.Fprintf(os.Stderr, "restart %d: %.3f ms, %d registrations (%d Registers arrived), %d with the stopping server (%d arrived), %d lines\n",
				i, r.MS, r.Registrations, r.Arrived, r.Stopping, r.ArrivedStop, r.Lines)
		}
	}
	sort.Float64s(ms)
	p := func(q float64) float64 {
		if len(ms) == 0 {
			return 0
		}
		i := int(float64(len(ms))*q+0.5) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(ms) {
			i = len(ms) - 1
		}
		return ms[i]
	}
	fmt.Printf("kubelet-restarts kubernetes=%s go=%s n=%d p50_ms=%.3f p99_ms=%.3f max_ms=%.3f registered_once=%d more=%d arrived=%d stopping_registered=%d stopping_arrived=%d lines=%d lines_max=%d\n",
		rep.Kubernetes, rep.Go, len(ms), p(0.5), p(0.99), p(1), one, more, arrived, stopping, arrivedStop, lines, linesMax)
}

func kubernetesVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "k8s.io/kubernetes" {
				return m.Version
			}
		}
	}
	return "unknown"
}

// registerLine is what the kubelet's Register handler logs first, for every Register that
// reaches it (server.go).
const registerLine = "Got registration request from device plugin with resource"

// setupLog takes the kubelet code's klog output (its Register handler logs through the global
// logger): each Register's arrival is counted; with -kubelet-log everything goes to that file.
func setupLog(rec *recorder) klog.Logger {
	var f *os.File
	if *kubeletLog != "" {
		var err error
		if f, err = os.Create(*kubeletLog); err != nil {
			fatal("%v", err)
		}
	}
	var mu sync.Mutex
	l := funcr.New(func(prefix, args string) {
		if strings.Contains(args, registerLine) {
			rec.add(&rec.arrivals)
		}
		if f == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(f, "%s %s %s\n", time.Now().Format("15:04:05.000000"), prefix, args)
	}, funcr.Options{Verbosity: 4})
	klog.SetLogger(l)
	return l
}

// daemon is the plugin process; done is closed when it has exited.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// startDaemon runs the daemon with its output read line by line: to -daemon-log, and matched
// against -count.
func startDaemon(args []string, rec *recorder) *daemon {
	d := exec.Command(args[0], args[1:]...)
	var out io.Writer = io.Discard
	if *daemonLog != "" {
		f, err := os.Create(*daemonLog)
		if err != nil {
			fatal("%v", err)
		}
		out = f
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		fatal("%v", err)
	}
	d.Stdout, d.Stderr = pw, pw
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if *countLine != "" && strings.Contains(sc.Text(), *countLine) {
				rec.add(&rec.lines)
			}
			fmt.Fprintln(out, sc.Text())
		}
	}()
	defer pw.Close()
	d.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.Start(); err != nil {
		fatal("start %s: %v", args[0], err)
	}
	dm := &daemon{cmd: d, done: make(chan struct{})}
	go func() {
		_ = d.Wait()
		close(dm.done)
	}()
	return dm
}

// stopDaemon: SIGTERM, then SIGKILL after 10 s.
func stopDaemon(d *daemon) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func fatal(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "sdp-kubelet-restarts: "+format+"\n", a...)
	os.Exit(1)
}
