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

func TestHyperlightHostDeviceDirWatched(t *testing.T) {
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	node := newNode(t, true) // the pod's copy of /dev/kvm
	hostDir := filepath.Join(node.Root, "host-dev")
	host := filepath.Join(hostDir, "kvm")
	must(os.Mkdir(hostDir, 0o755))
	must(Mknod(host, KVMMajor, KVMMinor))
	s := prepare(t, node)
	s.startDaemon("DEVICE_COUNT=3", "HOST_DEVICE_DIR=/host-dev")
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
