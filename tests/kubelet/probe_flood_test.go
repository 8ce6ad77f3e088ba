package kubelet

// The probe slot against a connect flood (issue 21, item 2): clients that connect in a loop and
// never send the HTTP/2 preface fill every connection slot again and again; the exec probe's
// connection, which sends its preface and request at once, must still be read and answered.

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connectFlood dials sock from workers goroutines in a loop, never writing; each connection is
// held until the daemon closes it, at most inFlight per worker at once. stop ends it and waits.
func connectFlood(sock string, workers, inFlight int) (dialled *int64, stop func()) {
	var n int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots := make(chan struct{}, inFlight)
			var held sync.WaitGroup
			defer held.Wait()
			for {
				select {
				case <-done:
					return
				case slots <- struct{}{}:
				}
				c, err := net.DialTimeout("unix", sock, time.Second)
				if err != nil {
					<-slots
					continue
				}
				atomic.AddInt64(&n, 1)
				held.Add(1)
				go func() {
					defer held.Done()
					go func() { <-done; c.Close() }()
					_, _ = io.Copy(io.Discard, c) // until the daemon closes it
					c.Close()
					<-slots
				}()
			}
		}()
	}
	var once sync.Once
	return &n, func() { once.Do(func() { close(done) }); wg.Wait() }
}

// While 4 clients keep every connection slot full with connections that never handshake (a
// new one as soon as one is closed), `--health-check` is answered every time.
func TestHealthCheckUnderConnectFlood(t *testing.T) {
	const probes = 20
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	env := DaemonEnv(s.node.Root, "DEVICE_COUNT=3")
	dialled, stop := connectFlood(filepath.Join(s.node.KubeletDir, p.Endpoint), 4, 32)
	defer stop()
	if !Poll(eventBound, func() bool { return atomic.LoadInt64(dialled) > 128 }) {
		s.fatalf("the flood dialled only %d connections", atomic.LoadInt64(dialled))
	}
	failed := 0
	for i := 0; i < probes; i++ {
		if r := s.run(env, "--health-check"); r.Code != 0 {
			failed++
			t.Errorf("probe %d under the connect flood: exit %d: %s", i, r.Code, r.Stderr)
		}
	}
	t.Logf("%d of %d probes answered; %d flood connections dialled", probes-failed, probes,
		atomic.LoadInt64(dialled))
	stop()
	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered under the flood")
	}
}
