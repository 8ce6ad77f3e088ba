package kubelet

// 5. The memory limit under hostile input, in the pod shape: the hyperlight main plugin in its
// chart's limit (64 MiB), one hostile client on its plugin socket at a time. While the client
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

// hostilePod starts the main plugin's pod and waits until it is registered and advertising.
func hostilePod(t *testing.T, env ...string) (*podScenario, *Plugin) {
	s := newPodNode(t, true)
	s.hyperlight(env...)
	p := s.registered(HyperlightResource, 1, startBound)
	s.devices(HyperlightResource, s.deviceCount(), Healthy, eventBound)
	return s, p
}

// survived checks the daemon after (and while) a hostile client ran: no OOM kill, the same
// process, the exec liveness probe and kubelet's Allocate answered; and logs the figures.
func (s *podScenario) survived(what string, pid int) {
	t := s.t
	t.Helper()
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
	s.probeOK("--health-check")
	if a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Errorf("%s: kubelet's Allocate: %v", what, err)
	} else {
		checkAllocation(t, a.Response)
	}
}

// settle waits (bounded) until the daemon's memory stops moving for a while, or it died.
func (s *podScenario) settle(pid int) {
	var last int64
	changed := time.Now()
	Poll(hostileBound, func() bool {
		u, err := s.pod.MemoryUsage()
		if err != nil || s.pod.Restarts() != 0 || s.pod.Current().Exited() {
			return true
		}
		if d := u - last; d > 256<<10 || d < -(256<<10) {
			last, changed = u, time.Now()
		}
		return time.Since(changed) > 500*time.Millisecond
	})
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
	t.Run("unfinished-4MiB-16-streams", func(t *testing.T) {
		s, p := hostilePod(t)
		pid := s.pod.Current().Pid()
		for _, r := range partial(t, p.Socket, 1, 16) {
			defer r.Close()
		}
		s.settle(pid)
		s.survived("16 streams with unfinished 4 MiB messages", pid)
	})
	t.Run("unfinished-4MiB-2-connections", func(t *testing.T) {
		s, p := hostilePod(t)
		pid := s.pod.Current().Pid()
		for _, r := range partial(t, p.Socket, 2, 32) {
			defer r.Close()
		}
		s.settle(pid)
		s.survived("2 connections x 32 streams with unfinished 4 MiB messages", pid)
	})
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"allocate-1M-container-requests", AllocateManyContainers(MaxMessage / 4)},
		{"allocate-2M-unknown-fields", AllocateUnknownFields("hyperlight-0", (MaxMessage-32)/2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := hostilePod(t)
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
	t.Run("listandwatch-never-read", func(t *testing.T) {
		s, p := hostilePod(t, "DEVICE_COUNT=100000")
		pid := s.pod.Current().Pid()
		opened := 0
		for c := 0; c < 8; c++ {
			r, err := DialRawH2(p.Socket, 1<<31-1, false)
			if err != nil {
				t.Logf("connection %d: %v", c, err)
				continue
			}
			defer r.Close()
			for k := 0; k < 16; k++ {
				if err := r.SendUnread(uint32(1+2*k), MethodListAndWatch, nil); err != nil {
					break
				}
				opened++
			}
		}
		t.Logf("%d ListAndWatch streams opened on 8 connections that are never read", opened)
		s.settle(pid)
		s.survived("8 connections x 16 ListAndWatch streams never read, 100000 devices", pid)
	})
	t.Run("64-listandwatch-connections", func(t *testing.T) {
		s, p := hostilePod(t)
		pid := s.pod.Current().Pid()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		defer wg.Wait()
		var mu sync.Mutex
		streaming, opened := 0, 0
		for c := 0; c < 64; c++ {
			cc, err := DialPlugin(ctx, p.Socket, 2*time.Second) // a hostile client's, not an event's
			if err != nil {
				t.Logf("connection %d: %v", c, err)
				continue
			}
			defer cc.Close()
			st, err := api.NewDevicePluginClient(cc).ListAndWatch(ctx, &api.Empty{})
			if err != nil {
				continue
			}
			opened++
			wg.Add(1)
			go func(st api.DevicePlugin_ListAndWatchClient) {
				defer wg.Done()
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
			}(st)
		}
		Poll(eventBound, func() bool { mu.Lock(); defer mu.Unlock(); return streaming >= opened })
		mu.Lock()
		t.Logf("%d of 64 connections hold a ListAndWatch stream", streaming)
		mu.Unlock()
		s.survived("64 connections held by ListAndWatch streams", pid)
		cancel()
	})
}
