package main

// Hostile clients on the plugin socket of a daemon in its pod (the clients of
// tests/kubelet/podshape_hostile.go): the daemon's peak VmHWM under each, and the OOM kills of
// its memory cgroup (the chart's limit).

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	k "sdp/kubelet"
	api "sdp/v1beta1"
)

// hostileInput is one hostile input, sent by clients clients at once.
type hostileInput struct {
	name    string // the table's row
	clients int    // 1 or 64
	large   bool   // hyperlight at DEVICE_COUNT=adLargeCount
	run     func(sock, id string, clients int) (cleanup func(), note string)
}

var hostileInputs = []hostileInput{
	{name: "unfinished 4 MiB messages on 16 streams of one connection", clients: 1, run: hostilePartial(16)},
	{name: "unfinished 4 MiB messages on 16 streams of one connection", clients: 64, run: hostilePartial(16)},
	{name: "unfinished 4 MiB messages on 2 connections × 32 streams", clients: 1, run: hostilePartial2},
	{name: "a 4 MiB Allocate of 1M one-ID container requests", clients: 1, run: hostileAllocate(manyContainers)},
	{name: "a 4 MiB Allocate of 1M one-ID container requests", clients: 64, run: hostileAllocate(manyContainers)},
	{name: "a 4 MiB Allocate of one ID and 2M unknown fields", clients: 1, run: hostileAllocate(unknownFields)},
	{name: "a 4 MiB Allocate of one ID and 2M unknown fields", clients: 64, run: hostileAllocate(unknownFields)},
	{name: fmt.Sprintf("answers never read: 16 ListAndWatch streams on a connection never read (hyperlight: %d devices)", adLargeCount),
		clients: 1, large: true, run: hostileUnread},
	{name: fmt.Sprintf("answers never read: 16 ListAndWatch streams on a connection never read (hyperlight: %d devices)", adLargeCount),
		clients: 64, large: true, run: hostileUnread},
	{name: "connections holding a ListAndWatch stream", clients: 64, run: hostileHolders},
}

// hostileResult is what one input did to a fresh pod.
type hostileResult struct {
	hwm      int64 // KiB, the daemon's peak VmHWM (every run of the pod, sampled every 10 ms)
	peak     int64 // bytes, the cgroup's peak usage
	limit    int64 // bytes
	oom      int64
	restarts int
	exit     string // how the first run ended, when it did
	note     string // the client's side
	err      string // not measured
}

// hwmSampler follows the peak VmHWM of every run of a pod.
type hwmSampler struct {
	stop, done chan struct{}
	max        int64
}

func sampleHWM(p *k.Pod) *hwmSampler {
	s := &hwmSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, c := range p.Containers() {
				if !c.Exited() {
					if v := int64(k.VmHWMKiB(c.Pid())); v > s.max {
						s.max = v
					}
				}
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *hwmSampler) finish() int64 {
	close(s.stop)
	<-s.done
	return s.max
}

// runHostile starts a fresh pod of d, lets the input's clients loose on its plugin socket,
// waits (bounded) until its memory settles, and takes the figures.
func runHostile(d adDaemon, in hostileInput) hostileResult {
	var r hostileResult
	var env []string
	if in.large && !d.isKata() {
		env = append(env, fmt.Sprintf("DEVICE_COUNT=%d", adLargeCount))
	}
	ap, err := startADPod(d, d.name+"-hostile", env...)
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer ap.close()
	r.limit = ap.pod.Spec.MemoryLimit
	first := ap.pod.Current()
	// The daemon has exec'ed (it registered): its VmHWM is its own from here.
	hwm := sampleHWM(ap.pod)
	sock := ap.nd.kub.Current(d.resource).Socket
	id := "0"
	if snap, ok := ap.nd.kub.Current(d.resource).Latest(); ok && len(snap.Devices) > 0 {
		id = snap.Devices[0].ID
	}
	cleanup, note := in.run(sock, id, in.clients)
	settle(ap.pod)
	r.hwm = hwm.finish()
	r.peak, _ = ap.pod.MemoryPeak()
	r.oom, _ = ap.pod.OOMKills()
	r.restarts = ap.pod.Restarts()
	if first.Exited() {
		r.exit = first.ExitDescription()
	}
	r.note = note + "; liveness: " + livenessCheck(ap.nd, d)
	cleanup()
	return r
}

// livenessBound bounds the liveness check (the exec probe's own timeout is of this order).
const livenessBound = time.Second

// livenessCheck is what the exec liveness probe would get now: grpc.health.v1 Check on a new
// connection to the registered endpoint, bounded by livenessBound.
func livenessCheck(nd *node, d adDaemon) string {
	p := nd.kub.Current(d.resource)
	if p == nil {
		return "✗ no registered endpoint"
	}
	ctx, cancel := context.WithTimeout(context.Background(), livenessBound)
	defer cancel()
	t := time.Now()
	cc, err := k.DialPlugin(ctx, p.Socket, livenessBound)
	if err == nil {
		defer cc.Close()
		var resp *healthpb.HealthCheckResponse
		resp, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.Status != healthpb.HealthCheckResponse_SERVING {
			return "✗ " + resp.Status.String()
		}
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Sprintf("✗ not answered within %v", livenessBound)
	}
	if err != nil {
		return "✗ " + shortErr(err)
	}
	return fmt.Sprintf("✓ %s ms", f1(ms(time.Since(t))))
}

// settle waits (bounded) until the pod's memory stops moving for 300 ms, or it restarted.
func settle(p *k.Pod) {
	var last int64
	changed := time.Now()
	k.Poll(adSettleBound, func() bool {
		u, err := p.MemoryUsage()
		if err != nil || p.Restarts() != 0 {
			return true
		}
		if d := u - last; d > 256<<10 || d < -(256<<10) {
			last, changed = u, time.Now()
		}
		return time.Since(changed) > 300*time.Millisecond
	})
}

// closeAll closes every client connection when the figures are taken.
func closeAll(conns []*k.RawH2) func() {
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// partialOn opens conns connections, each sending streams Allocate requests whose 4 MiB
// message never ends (one byte short), all at once; bounded by adHostileBound.
func partialOn(sock string, conns, streams int) (func(), string) {
	body := append(k.GRPCFrame(k.MaxMessage), make([]byte, k.MaxMessage-1)...)
	var mu sync.Mutex
	var open []*k.RawH2
	closed := false
	sent, refused := 0, 0
	var wg sync.WaitGroup
	for c := 0; c < conns; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := k.DialRawH2(sock, 0, true)
			mu.Lock()
			if err != nil {
				refused++
				mu.Unlock()
				return
			}
			if closed { // connected after the figures were taken
				mu.Unlock()
				r.Close()
				return
			}
			open = append(open, r)
			mu.Unlock()
			for s := 0; s < streams; s++ {
				id := uint32(1 + 2*s)
				if r.Request(id, k.MethodAllocate) != nil || r.Send(id, body, false) != nil {
					return
				}
				mu.Lock()
				sent++
				mu.Unlock()
			}
		}()
	}
	waitGroup(&wg, adHostileBound)
	mu.Lock()
	defer mu.Unlock()
	note := fmt.Sprintf("%d of %d unfinished messages sent in full", sent, conns*streams)
	if refused > 0 {
		note += fmt.Sprintf(", %d connection(s) refused", refused)
	}
	return func() {
		mu.Lock()
		closed = true
		conns := open
		mu.Unlock()
		closeAll(conns)()
	}, note
}

func hostilePartial(streams int) func(string, string, int) (func(), string) {
	return func(sock, _ string, clients int) (func(), string) { return partialOn(sock, clients, streams) }
}

func hostilePartial2(sock, _ string, clients int) (func(), string) {
	return partialOn(sock, 2*clients, 32)
}

func manyContainers(string) []byte { return k.AllocateManyContainers(k.MaxMessage / 4) }

// unknownFields: one ID the daemon advertises, then 2M unknown fields.
func unknownFields(id string) []byte { return k.AllocateUnknownFields(id, (k.MaxMessage-32)/2) }

// hostileAllocate sends msg(id) as an Allocate from clients connections at once; each call
// bounded.
func hostileAllocate(msg func(id string) []byte) func(string, string, int) (func(), string) {
	return func(sock, id string, clients int) (func(), string) {
		m := msg(id)
		codes := map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var conns []*grpc.ClientConn
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cc, err := k.DialPlugin(context.Background(), sock, 3*time.Second)
				if err != nil {
					mu.Lock()
					codes["connect: "+err.Error()]++
					mu.Unlock()
					return
				}
				mu.Lock()
				conns = append(conns, cc)
				mu.Unlock()
				_, err = k.CallRaw(cc, 8*time.Second, k.MethodAllocate, m)
				what := "OK"
				if err != nil {
					what = shortErr(err)
				}
				mu.Lock()
				codes[what]++
				mu.Unlock()
			}()
		}
		waitGroup(&wg, adHostileBound)
		mu.Lock()
		defer mu.Unlock()
		var parts []string
		for c, n := range codes {
			parts = append(parts, fmt.Sprintf("%d× %s", n, c))
		}
		sort.Strings(parts)
		cs := append([]*grpc.ClientConn(nil), conns...)
		return func() {
			for _, c := range cs {
				c.Close()
			}
		}, "answers: " + strings.Join(parts, "; ")
	}
}

// hostileUnread: clients connections, each opening 16 ListAndWatch streams with a 2 GiB
// window and never reading a byte.
func hostileUnread(sock, _ string, clients int) (func(), string) {
	var open []*k.RawH2
	opened := 0
	for c := 0; c < clients; c++ {
		r, err := k.DialRawH2(sock, 1<<31-1, false)
		if err != nil {
			continue
		}
		open = append(open, r)
		for s := 0; s < 16; s++ {
			if r.SendUnread(uint32(1+2*s), k.MethodListAndWatch, nil) != nil {
				break
			}
			opened++
		}
	}
	return closeAll(open), fmt.Sprintf("%d streams opened on %d connection(s)", opened, len(open))
}

// hostileHolders: clients grpc-go connections, each holding a ListAndWatch stream it reads.
func hostileHolders(sock, _ string, clients int) (func(), string) {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var conns []*grpc.ClientConn
	streaming := 0
	for c := 0; c < clients; c++ {
		cc, err := k.DialPlugin(ctx, sock, 2*time.Second)
		if err != nil {
			continue
		}
		conns = append(conns, cc)
		st, err := api.NewDevicePluginClient(cc).ListAndWatch(ctx, &api.Empty{})
		if err != nil {
			continue
		}
		go func() {
			first := true
			for {
				if _, err := st.Recv(); err != nil {
					return
				}
				if first {
					mu.Lock()
					streaming++
					mu.Unlock()
					first = false
				}
			}
		}()
	}
	k.Poll(3*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return streaming >= len(conns) })
	mu.Lock()
	note := fmt.Sprintf("%d of %d connections streaming", streaming, clients)
	mu.Unlock()
	return func() {
		cancel()
		for _, c := range conns {
			c.Close()
		}
	}, note
}

// waitGroup waits for wg at most bound.
func waitGroup(wg *sync.WaitGroup, bound time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
	}
}

// shortErr is a gRPC error's code and the start of its message.
func shortErr(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "rpc error: ")
	if i := strings.Index(s, " desc = "); i >= 0 {
		code := strings.TrimPrefix(s[:i], "code = ")
		desc := s[i+len(" desc = "):]
		if len(desc) > 60 {
			desc = desc[:60] + "…"
		}
		return code + " (" + desc + ")"
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }
