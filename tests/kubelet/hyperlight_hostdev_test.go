package kubelet

// Scenario: the main plugin in its pod's layout. /dev/kvm is the pod's own copy of the node
// (same number), the host's /dev is at HOST_DEVICE_DIR; the host's node going, coming back or
// being replaced by another device changes the advertised health through the watch on
// HOST_DEVICE_DIR, not at the 30 s periodic check.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Well under the 30 s periodic check (a healthy daemon's next check is ~30 s after the last
// one), generous for a loaded machine: only the watch explains a change seen within it, and the
// daemon's debug line naming the host node and the event says so too.
const watchBound = 10 * time.Second

// podLayout starts the daemon with the pod's /dev/kvm and the host's at <root>/host-dev/kvm
// (HOST_DEVICE_DIR=/host-dev), 3 devices, and waits for them Healthy; it returns the host
// node's path and a check that fails the test on an error.
func podLayout(t *testing.T) (s *scenario, node *Node, host string, must func(error)) {
	must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	node = newNode(t, true) // the pod's copy of /dev/kvm
	host = filepath.Join(node.Root, "host-dev", "kvm")
	must(os.Mkdir(filepath.Dir(host), 0o755))
	must(Mknod(host, KVMMajor, KVMMinor))
	s = prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev")
	return s, node, host, must
}

func TestHyperlightHostDeviceDirWatched(t *testing.T) {
	s, node, host, must := podLayout(t)
	hostDir := filepath.Dir(host)
	p := s.ready(3)

	// watched waits until the daemon says the host node's watch asked for a check (after the
	// count seen so far), then for the devices' health.
	seen := map[string]int{} // the watch's log lines so far, by event
	watched := func(step, event, health string) {
		t.Helper()
		start := time.Now()
		s.devices(3, health, watchBound)
		t.Logf("%s: %d %s seen by kubelet after %v", step, 3, health, time.Since(start).Round(time.Millisecond))
		n := waitCount(s.d, seen[event]+1, "device node watch: checking now", "node="+host, "event="+event)
		if n <= seen[event] {
			t.Errorf("%s: no log line of the watch on %s (event %q) asking for the check", step, host, event)
		}
		seen[event] = n
	}

	// rmmod on the host: the host's node goes, the pod's copy stays.
	must(os.Remove(host))
	watched("host node removed", "node", Unhealthy)
	if waitCount(s.d, 1, "device unusable", "host device "+host+" missing") < 1 {
		t.Errorf("no warning naming the missing host node %s", host)
	}
	if _, err := os.Stat(node.KVMPath()); err != nil {
		t.Fatalf("the pod's node: %v", err)
	}

	// modprobe: back with the same number.
	must(Mknod(host, KVMMajor, KVMMinor))
	watched("host node back", "node", Healthy)

	// Replaced (renamed over, as devtmpfs or a careless admin might) by another device.
	tmp := filepath.Join(hostDir, ".kvm.new")
	must(Mknod(tmp, KVMMajor, KVMMinor+1))
	must(os.Rename(tmp, host))
	watched("host node replaced by another device", "node", Unhealthy)
	if waitCount(s.d, 1, "device unusable", host, "has device number") < 1 {
		t.Errorf("no warning naming the host node's new device number")
	}

	// The whole host directory goes and comes back (a remount): the watch re-arms itself.
	must(os.Remove(host))
	must(os.Remove(hostDir))
	must(os.Mkdir(hostDir, 0o755))
	must(Mknod(host, KVMMajor, KVMMinor))
	watched("host directory re-created", "directory", Healthy)
	must(os.Remove(host))
	watched("host node removed from the new directory", "node", Unhealthy)

	if s.k.Current(HyperlightResource) != p {
		t.Errorf("the daemon re-registered; health changes go through the open stream")
	}
	if strings.Contains(s.d.Log(), "level=error") {
		t.Errorf("errors in the daemon's log")
	}
}

// An Allocate sent after the host's node went away is not answered by a probe that started
// before (and may have seen the node there): it waits for a fresh probe, which fails.
func TestHyperlightHostNodeGoneDuringProbe(t *testing.T) {
	s, _, host, must := podLayout(t)
	s.ready(3)
	before := helpersSoFar(s.d)
	s.shim("HVSHIM_DELAY_MS=1000") // a slow but successful probe: it is in flight a while
	first := make(chan error, 1)
	go func() {
		_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"})
		first <- err
	}()
	if !s.wait(eventBound, func() bool { return len(helperPids(s.d)) > before }) {
		s.fatalf("no probe started for the first Allocate")
	}
	must(os.Remove(host))
	if waitCount(s.d, 1, "device node watch: checking now", "node="+host, "event=node") < 1 {
		s.fatalf("the watch did not see %s go", host)
	}
	_, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"})
	unavailable(t, err, "host device "+host+" missing")
	select {
	case err := <-first: // either verdict: its probe started as the node went
		t.Logf("the Allocate sent before the node went: %v", err)
	case <-time.After(hangBound + eventBound):
		t.Errorf("the first Allocate got no answer")
	}
	s.devices(3, Unhealthy, eventBound)
}
