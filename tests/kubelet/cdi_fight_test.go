package kubelet

// Scenario: two releases on one node. Two hyperlight daemons with different DEVICE_UID share
// one CDI directory (bind-mounted, as two pods' hostPath of /var/run/cdi are), each with its
// own mock kubelet. Both own hyperlight.json and render it differently: they must not repair
// each other's spec in a write storm. Each repairs a few times at once, then backs off (1 s,
// doubling), logs the episode once at warn naming the other's content, and advertises its
// devices Unhealthy with the reason.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	cdiWrittenMsg  = `msg="cdi: spec written"`      // core, debug: every write of the spec
	cdiBackedOff   = `msg="cdi: repair backed off"` // core, debug: a repair deferred, delay_ms=N
	cdiFightMsg    = `msg="CDI spec keeps being replaced by another writer, repairs backed off"`
	cdiFightReason = `another writer keeps replacing `
)

// cpuTicks is the process's user + system time in clock ticks (0 when unknown).
func cpuTicks(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return u + k
}

func TestHyperlightCDIFight(t *testing.T) {
	daemonBinary(t)
	privateMountNamespace(t)
	a := prepare(t, newNode(t, true))
	b := prepare(t, newNode(t, true))
	mount(t, b.node.CDIDir, "--bind", a.node.CDIDir, b.node.CDIDir)
	a.startDaemon("DEVICE_COUNT=3", "DEVICE_UID=1000")
	a.ready(3)
	b.startDaemon("DEVICE_COUNT=3", "DEVICE_UID=2000")

	// Over a window of a few seconds (the storm would be thousands of writes), each one wrote a
	// bounded number of times: its first write, 4 immediate repairs, one after its 1 s wait, one
	// after its 2 s wait, and slack for the other's first write arriving between two of its own.
	// The window is the bound of a wait for the storm, which must not come.
	const window = 6 * time.Second
	const maxWrites = 9
	storm := func() bool {
		return countLines(a.d, cdiWrittenMsg) > maxWrites || countLines(b.d, cdiWrittenMsg) > maxWrites
	}
	stormed := Poll(window, func() bool { return storm() || a.d.Exited() || b.d.Exited() })
	wa, wb := countLines(a.d, cdiWrittenMsg), countLines(b.d, cdiWrittenMsg)
	t.Logf("spec writes in %v: %d by DEVICE_UID=1000, %d by DEVICE_UID=2000; CPU ticks %d and %d",
		window, wa, wb, cpuTicks(a.d.Pid()), cpuTicks(b.d.Pid()))
	if stormed {
		a.fatalf("write storm: the daemons wrote the shared spec %d and %d times (at most %d each with the back-off)", wa, wb, maxWrites)
	}
	// Both back off: each one's repair after the first wait was replaced again (a 2 s wait).
	settled := func(d *Daemon) bool { return countLines(d, cdiBackedOff, "delay_ms=2000 ") > 0 }
	if !a.wait(eventBound, func() bool { return settled(a.d) && settled(b.d) }) {
		a.fatalf("the two daemons did not both reach a 2 s back-off (%v, %v)", settled(a.d), settled(b.d))
	}

	// Each told the episode once, naming the other's content (the line with the other uid).
	for _, c := range []struct {
		s     *scenario
		other string
	}{{a, `\"uid\": 2000,`}, {b, `\"uid\": 1000,`}} {
		if n := countLines(c.s.d, cdiFightMsg); n != 1 {
			c.s.fatalf("%d episode warnings in the log, want 1", n)
		}
		if countLines(c.s.d, cdiFightMsg, "level=warn", "other=", c.other) != 1 {
			c.s.fatalf("the episode warning does not name the other content (%s)", c.other)
		}
	}
	// Both advertise their devices Unhealthy, say why, and never Healthy again during the
	// episode (not even from a probe that was running when it began).
	for _, s := range []*scenario{a, b} {
		s.devices(3, Unhealthy, eventBound)
		if countLines(s.d, `msg="device unusable, advertising every device Unhealthy"`, cdiFightReason) == 0 {
			s.fatalf("no Unhealthy verdict giving the fight as its reason in the log")
		}
		fighting := false
		for _, l := range s.d.Stderr.Lines() {
			fighting = fighting || strings.Contains(l, cdiFightMsg)
			if fighting && strings.Contains(l, `msg="device usable"`) {
				s.fatalf("Healthy again during the episode: %s", l)
			}
		}
	}
	if n, m := countLines(a.d, cdiWrittenMsg), countLines(b.d, cdiWrittenMsg); n > maxWrites || m > maxWrites {
		a.fatalf("writes went on after the back-off: %d and %d", n, m)
	}
}
