package kubelet

// 5. The memory limit under hostile input, in the pod shape: the hyperlight main plugin and kata
// in their charts' limit (64 MiB), one hostile client on a plugin socket at a time. While the client
// holds on, the daemon must not be OOM-killed nor restarted, must answer its exec liveness probe
// and kubelet's Allocate. The figures (cgroup peak, VmHWM) are logged, not asserted (make bench).

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	api "sdp/v1beta1"
)

// hostileBound bounds one hostile client's run (its writes give up after writeBound each).
const hostileBound = 30 * time.Second

// hostileDaemon is a daemon under hostile input: its pod, and the resource (and a device ID)
// whose socket the hostile client uses and kubelet's Allocate checks.
type hostileDaemon struct {
	name     string
	resource string
	id       string
}

var hostileDaemons = []hostileDaemon{{"hyperlight", HyperlightResource, "hyperlight-0"}, {"kata", KataGPU, "0"}}

// hostilePod starts the daemon's pod (the hyperlight main plugin with env; kata on a node with
// two GPUs) and waits until it is registered and advertising.
func hostilePod(t *testing.T, d hostileDaemon, env ...string) (*podScenario, *Plugin) {
	t.Helper()
	var s *podScenario
	n := 2
	if d.name == "kata" {
		s = newPodNode(t, false)
		tree, err := NewKataTree(s.node.Root)
		if err != nil {
			t.Fatal(err)
		}
		for i, bdf := range []string{"0000:41:00.0", "0000:42:00.0"} {
			if err := tree.Add(i, GPU(bdf, 0)); err != nil {
				t.Fatal(err)
			}
		}
		spec, m, err := KataPod(s.node, tree, env...)
		s.start(spec, m, err)
	} else {
		s = newPodNode(t, true)
		s.hyperlight(env...)
		n = s.deviceCount()
	}
	s.target = d
	p := s.registered(d.resource, 1, startBound)
	s.devices(d.resource, n, Healthy, eventBound)
	return s, p
}

// survived checks the daemon after (and while) a hostile client ran: the exec liveness probe
// and kubelet's Allocate answered (the daemon's loop went round after the hostile input), then
// no OOM kill and the same process; and logs the figures.
func (s *podScenario) survived(what string, pid int) {
	t := s.t
	t.Helper()
	s.probeOK("--health-check")
	d := s.target
	if a, err := s.k.Allocate(d.resource, []string{d.id}); err != nil {
		t.Errorf("%s: kubelet's Allocate: %v", what, err)
	} else if d.name == "kata" {
		checkKataAllocation(t, a.Response, d.resource, []string{d.id})
	} else {
		checkAllocation(t, a.Response)
	}
	peak, _ := s.pod.MemoryPeak()
	hwm := "unknown (the process is gone)"
	if kib := VmHWMKiB(pid); kib > 0 {
		hwm = fmt.Sprintf("%.1f MiB", float64(kib)/1024)
	}
	t.Logf("%s: cgroup peak %.1f MiB of %d MiB, daemon VmHWM %s", what, float64(peak)/(1<<20),
		s.pod.Spec.MemoryLimit>>20, hwm)
	if n, err := s.pod.OOMKills(); err != nil {
		t.Fatal(err)
	} else if n != 0 {
		t.Fatalf("%s: the daemon was OOM-killed %d time(s) in its %d MiB limit", what, n, s.pod.Spec.MemoryLimit>>20)
	}
	first := s.pod.Containers()[0]
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil || s.pod.Restarts() != 0 || first.Exited() {
		first.Wait(exitBound) //nolint:errcheck // for the description only
		t.Fatalf("%s: the daemon did not survive: run #0 %s, %d restart(s)", what, first.ExitDescription(), s.pod.Restarts())
	}
}

// settle waits until the daemon has taken in everything the hostile clients wrote: nothing of
// theirs is left unread on its side of the sockets (it read it, or it closed the connection),
// or it died. Then what the input costs it is in its memory when survived looks. Not a quiet
// period of its memory: a daemon the host's load holds back is waited for, not taken as
// settled. A daemon that leaves a connection unread (it may stop reading a client that does
// not read its answers) is waited for up to hostileBound, and the test goes on: what is
// asserted is survived's.
func (s *podScenario) settle(conns []*RawH2) {
	unread := func() int {
		n := 0
		for _, r := range conns {
			if u := r.Unread(); u > 0 {
				n += u
			}
		}
		return n
	}
	if !Poll(hostileBound, func() bool {
		return s.pod.Restarts() != 0 || s.pod.Current().Exited() || unread() == 0
	}) {
		s.t.Logf("after %v the daemon still leaves the hostile clients' data unread (SIOCOUTQ %d)", hostileBound, unread())
	}
}

// partial sends, on each of conns connections, streams Allocate requests whose 4 MiB message
// never ends (one byte short).
func partial(t *testing.T, sock string, conns, streams int) []*RawH2 {
	var mu sync.Mutex
	var out []*RawH2
	var wg sync.WaitGroup
	body := append(GRPCFrame(MaxMessage), make([]byte, MaxMessage-1)...)
	sent := 0
	for c := 0; c < conns; c++ {
		r, err := DialRawH2(sock, 0, true)
		if err != nil {
			t.Logf("connection %d: %v", c, err)
			continue
		}
		out = append(out, r)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < streams; k++ {
				id := uint32(1 + 2*k)
				if err := r.Request(id, MethodAllocate); err != nil {
					return
				}
				if err := r.Send(id, body, false); err != nil {
					return
				}
				mu.Lock()
				sent++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d unfinished 4 MiB messages sent in full", sent, conns*streams)
	return out
}

func TestPodShapeMemory(t *testing.T) {
	if build, err := BuildDir(); err == nil && Instrumented(build+"/"+HyperlightBinary) {
		t.Skip("an instrumented (ASan) build's memory is not the daemon's: the chart's limit is checked on the " +
			"production build by make test")
	}
	for _, d := range hostileDaemons {
		d := d
		t.Run(d.name, func(t *testing.T) { hostileInputs(t, d) })
	}
}

// hostileInputs runs, each against a fresh pod of d, the hostile clients every daemon meets
// the same way (the gRPC layer is libdp's).
func hostileInputs(t *testing.T, d hostileDaemon) {
	t.Run("unfinished-4MiB-16-streams", func(t *testing.T) {
		s, p := hostilePod(t, d)
		pid := s.pod.Current().Pid()
		conns := partial(t, p.Socket, 1, 16)
		for _, r := range conns {
			defer r.Close()
		}
		s.settle(conns)
		s.survived("16 streams with unfinished 4 MiB messages", pid)
	})
	t.Run("unfinished-4MiB-2-connections", func(t *testing.T) {
		s, p := hostilePod(t, d)
		pid := s.pod.Current().Pid()
		conns := partial(t, p.Socket, 2, 32)
		for _, r := range conns {
			defer r.Close()
		}
		s.settle(conns)
		s.survived("2 connections x 32 streams with unfinished 4 MiB messages", pid)
	})
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"allocate-1M-container-requests", AllocateManyContainers(MaxMessage / 4)},
		{"allocate-2M-unknown-fields", AllocateUnknownFields(d.id, (MaxMessage-32)/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := hostilePod(t, d)
			pid := s.pod.Current().Pid()
			cc, err := DialPlugin(context.Background(), p.Socket, eventBound)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			// Its answer is the daemon's to choose (refused over the budget, or decoded
			// without amplification); only its survival is asserted.
			_, err = CallRaw(cc, exitBound, MethodAllocate, tc.msg)
			t.Logf("a %d-byte Allocate: answer %v", len(tc.msg), err)
			s.survived(tc.name, pid)
		})
	}
	t.Run("metrics-port-flood", func(t *testing.T) {
		s, _ := hostilePod(t, d, metricsEnv)
		pid := s.pod.Current().Pid()
		addr := waitPodMetricsAddr(t, s.pod)
		floodMetrics(t, addr)
		s.survived("the metrics port flooded (held heads, 64 connections, oversized heads)", pid)
		if _, err := scrape(addr); err != nil {
			t.Errorf("scrape after the flood: %v", err)
		}
	})
	t.Run("64-listandwatch-connections", func(t *testing.T) {
		s, p := hostilePod(t, d)
		pid := s.pod.Current().Pid()
		streaming := holdStreams(t, p.Socket, 64)
		t.Logf("%d connections hold a ListAndWatch stream (and kubelet's one)", streaming)
		s.survived("64 connections held by ListAndWatch streams", pid)
	})
	// Answers a client never reads: against the hyperlight main plugin with a large device
	// list (kata advertises what the node has, a handful of devices).
	if d.name != "hyperlight" {
		return
	}
	t.Run("listandwatch-never-read", func(t *testing.T) {
		s, p := hostilePod(t, d, "DEVICE_COUNT=100000")
		pid := s.pod.Current().Pid()
		opened := 0
		var conns []*RawH2
		for c := 0; c < 8; c++ {
			r, err := DialRawH2(p.Socket, 1<<31-1, false)
			if err != nil {
				t.Logf("connection %d: %v", c, err)
				continue
			}
			defer r.Close()
			conns = append(conns, r)
			for k := 0; k < 16; k++ {
				if err := r.SendUnread(uint32(1+2*k), MethodListAndWatch, nil); err != nil {
					break
				}
				opened++
			}
		}
		t.Logf("%d ListAndWatch streams opened on 8 connections that are never read", opened)
		s.settle(conns)
		s.survived("8 connections x 16 ListAndWatch streams never read, 100000 devices", pid)
	})
}

// holdStreams opens connections one by one, each holding a ListAndWatch stream that is read,
// until max streams are live or the server refused twice (a connection closed at once, or no
// first snapshot within 2 s): every connection slot is held by a call, none left idle to be
// evicted. The connections close at the test's end.
func holdStreams(t *testing.T, sock string, max int) int {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	streaming, refused := 0, 0
	for streaming < max && refused < 2 {
		cc, err := DialPlugin(ctx, sock, 2*time.Second) // a hostile client's bound, not an event's
		if err != nil {
			refused++
			t.Logf("connection %d: %v", streaming+refused, err)
			continue
		}
		t.Cleanup(func() { cc.Close() })
		first := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := api.NewDevicePluginClient(cc).ListAndWatch(ctx, &api.Empty{})
			if err == nil {
				_, err = st.Recv()
			}
			first <- err
			for err == nil {
				_, err = st.Recv()
			}
		}()
		select {
		case err = <-first:
		case <-time.After(2 * time.Second):
			err = fmt.Errorf("no first snapshot within 2 s")
		}
		if err != nil {
			refused++
			t.Logf("connection %d: %v", streaming+refused, err)
			cc.Close()
			continue
		}
		streaming++
	}
	return streaming
}
