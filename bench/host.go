package main

// The host during the run: what else used the machine while the bench measured. The bench runs
// on a shared virtual machine: the hypervisor's other guests take its virtual CPUs away (steal,
// /proc/stat) and other processes of the same machine compete for them (the load average; the
// CPU time that is not the bench's). Each round, and each part measured once, is bracketed by a
// sample, and the document says which figures a noisy stretch touched. Noise is reported, never
// a reason to refuse a run.

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// stealLimit is the steal (% of the elapsed CPU time) above which a stretch is marked noisy:
// a quiet guest's steal stays under 1%; at 5% one tick in twenty went to another guest, each
// such theft a host time slice of milliseconds, the size of the start-up and restart figures
// themselves and a hundred Allocate round trips.
const stealLimit = 5.0

// othersLimit is the share of the machine's CPU time (%) used by processes that are not the
// bench's above which a stretch is marked busy: more than half a CPU of this machine's two,
// beside the bench's own client and daemon (alternating, about one CPU between them), so the
// bench's threads then wait for a CPU (the tables show the bench's own share beside it).
const othersLimit = 25.0

// hostSample is one reading of the host.
type hostSample struct {
	at           time.Time
	ok           bool  // /proc/stat read
	total, steal int64 // jiffies, every CPU: user nice system idle iowait irq softirq steal
	busy         int64 // jiffies: the total but idle, iowait and steal
	self         int64 // the bench's own CPU (utime+stime and its reaped children's), ticks
	load         [3]float64
	loadOK       bool
}

func readHost() hostSample {
	s := hostSample{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 9 || f[0] != "cpu" {
				continue
			}
			// user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
			// already in user and nice.
			var v [8]int64
			for i := range v {
				v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
				s.total += v[i]
			}
			s.steal = v[7]
			s.busy = s.total - v[3] - v[4] - v[7]
			s.ok = true
			break
		}
	}
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		str := string(b)
		if i := strings.LastIndexByte(str, ')'); i > 0 && i+2 < len(str) {
			f := strings.Fields(str[i+2:])
			if len(f) > 15 { // utime stime cutime cstime: fields 14-17 of stat
				for _, x := range f[11:15] {
					v, _ := strconv.ParseInt(x, 10, 64)
					s.self += v
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			s.loadOK = true
			for i := 0; i < 3; i++ {
				s.load[i], _ = strconv.ParseFloat(f[i], 64)
			}
		}
	}
	return s
}

// hostSpan is the host over one stretch of the run.
type hostSpan struct {
	name       string // "1", "2", ... for a round; else the part's name
	order      string // a round's order of the daemons
	dur        time.Duration
	steal      float64 // % of the elapsed CPU time; < 0: unknown
	others     float64 // % of the machine's CPU time used by processes not the bench's; < 0: unknown
	self       float64 // % of the machine's CPU time used by the bench (driver, daemons, helpers)
	load0      float64 // the 1-min load average at the start and at the end
	load1      float64
	loadKnown  bool
	figures    string // what it measured, for the notes
	stealNoisy bool
	othersBusy bool
}

func (h hostSpan) noisy() bool { return h.stealNoisy || h.othersBusy }

// span is the host between two samples, the bench's own processes reaped at both.
func span(name string, a, b hostSample) hostSpan {
	h := hostSpan{name: name, dur: b.at.Sub(a.at), steal: -1, others: -1, self: -1}
	if a.ok && b.ok && b.total > a.total {
		dt := float64(b.total - a.total)
		h.steal = 100 * float64(b.steal-a.steal) / dt
		o := float64((b.busy - a.busy) - (b.self - a.self))
		if o < 0 {
			o = 0
		}
		h.others = 100 * o / dt
		h.self = 100 * float64(b.self-a.self) / dt
	}
	h.load0, h.load1, h.loadKnown = a.load[0], b.load[0], a.loadOK && b.loadOK
	h.stealNoisy = h.steal > stealLimit
	h.othersBusy = h.others > othersLimit
	return h
}

// hostLog is the host over the whole run: before it, each round, the parts measured once.
type hostLog struct {
	before hostSample
	rounds []hostSpan
	parts  []hostSpan
	last   hostSample
}

func newHostLog() *hostLog {
	s := readHost()
	return &hostLog{before: s, last: s}
}

// mark closes the stretch begun at the last mark (or the start) and returns it.
func (l *hostLog) mark(name, figures string) hostSpan {
	s := readHost()
	h := span(name, l.last, s)
	h.figures = figures
	l.last = s
	return h
}

// round records round i (0-based) ending now.
func (l *hostLog) round(i int, order []string) {
	h := l.mark(strconv.Itoa(i+1), "")
	h.order = strings.Join(order, ", ")
	l.rounds = append(l.rounds, h)
}

// part records a part measured once, ending now.
func (l *hostLog) part(name, figures string) {
	l.parts = append(l.parts, l.mark(name, figures))
}

// skip forgets the stretch since the last mark (a part not worth a row).
func (l *hostLog) skip() { l.last = readHost() }

// noisyRounds are the 0-based indices of the noisy rounds.
func (l *hostLog) noisyRounds() []int {
	var out []int
	for i, h := range l.rounds {
		if h.noisy() {
			out = append(out, i)
		}
	}
	return out
}

// row is the span's line in a host table; with order, a column for it after the name.
func (h hostSpan) row(order string) string {
	name := h.name
	if order != "" {
		name += " | " + order
	}
	return fmt.Sprintf("| %s | %.1f | %s | %s | %s | %s | %s |", name, h.dur.Seconds(), pct(h.steal), pct(h.others),
		pct(h.self), h.loadCell(), h.flag())
}

func pct(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", v)
}

func (h hostSpan) loadCell() string {
	if !h.loadKnown {
		return "n/a"
	}
	return fmt.Sprintf("%.2f → %.2f", h.load0, h.load1)
}

// flag is the span's mark in the tables: what was above its limit.
func (h hostSpan) flag() string {
	var w []string
	if h.stealNoisy {
		w = append(w, fmt.Sprintf("**steal > %g%%**", stealLimit))
	}
	if h.othersBusy {
		w = append(w, fmt.Sprintf("**others > %g%%**", othersLimit))
	}
	if len(w) == 0 {
		return "—"
	}
	return strings.Join(w, ", ")
}

// why says what made the span noisy, for a sentence.
func (h hostSpan) why() string {
	var w []string
	if h.stealNoisy {
		w = append(w, fmt.Sprintf("steal %s%%", pct(h.steal)))
	}
	if h.othersBusy {
		w = append(w, fmt.Sprintf("other processes %s%% of the CPU time", pct(h.others)))
	}
	if h.loadKnown {
		w = append(w, fmt.Sprintf("load %.2f → %.2f", h.load0, h.load1))
	}
	return strings.Join(w, ", ")
}

func loadLine(s hostSample) string {
	if !s.loadOK {
		return "not readable (/proc/loadavg)"
	}
	return fmt.Sprintf("%.2f / %.2f / %.2f (1, 5 and 15 min)", s.load[0], s.load[1], s.load[2])
}

// hostColumns explains the columns of the host tables.
func hostColumns(d *doc) {
	d.p("Steal: the time the hypervisor gave this machine's virtual CPUs to another guest (/proc/stat, the steal column),")
	d.p("as %% of the CPU time elapsed (every CPU's jiffies); above %g%% the stretch is marked: a quiet guest's steal stays", stealLimit)
	d.p("under 1%%, and at %g%% one tick in twenty went to another guest, each such theft a host time slice of milliseconds,", stealLimit)
	d.p("the size of the start-up and restart figures themselves. Others: the CPU time used by processes that are not the")
	d.p("bench's (every CPU's busy jiffies less the driver's and its reaped children's utime+stime, /proc/self/stat), as %%")
	d.p("of the machine's (bench: the driver's and its children's own share; kernel threads count as others, whoever they")
	d.p("work for); above %g%% (half a CPU of %d) the stretch is", othersLimit, runtime.NumCPU())
	d.p("marked: the bench's own client and daemon then wait for a CPU. Load: the 1-minute load average (/proc/loadavg) at")
	d.p("the stretch's start and end (it counts the bench's own runnable tasks and lags by its minute).")
}

// writeHost is the "Host during the run" section of docs/benchmarks.md.
func writeHost(d *doc, l *hostLog) {
	d.p("## Host during the run")
	d.p("")
	d.p("This machine is shared: its neighbours' load moves the same binary's round trip by a factor of 3 or more between")
	d.p("minutes. So the daemons are measured in rounds: each round runs every daemon once (its start-up, memory and")
	d.p("Allocate figures, and its slice of the kubelet restarts, CDI repairs and device-gone flips), in an order rotated")
	d.p("each round, and every ratio to the reference is taken within a round, where ours and the reference met the same")
	d.p("neighbours; the ratio columns below are the median of the per-round ratios (min–max over the rounds). Load average")
	d.p("before the run: %s.", loadLine(l.before))
	d.p("")
	hostColumns(d)
	d.p("")
	d.p("| round | order | duration (s) | steal (%%) | others (%%) | bench (%%) | load avg, 1 min | marked |")
	d.p("|---|---|---|---|---|---|---|---|")
	for _, h := range l.rounds {
		d.p("%s", h.row(h.order))
	}
	for _, h := range l.parts {
		d.p("%s", h.row("—"))
	}
	d.p("")
	var notes []string
	for _, h := range l.rounds {
		if h.noisy() {
			notes = append(notes, fmt.Sprintf("round %s (%s): every daemon's run of it (start-up, memory, Allocate), its pinned "+
				"runs and its slice of the restarts, CDI repairs and device-gone flips: its line in the table below", h.name, h.why()))
		}
	}
	for _, h := range l.parts {
		if h.noisy() {
			notes = append(notes, fmt.Sprintf("%s (%s): %s", h.name, h.why(), h.figures))
		}
	}
	if len(notes) == 0 {
		d.p("No stretch of this run is above either limit.")
	} else {
		d.p("Noisy stretches, and the figures they touched (kept, not refused: the within-round ratios share the noise):")
		d.p("")
		for _, n := range notes {
			d.p("- %s.", n)
		}
	}
	d.p("")
}
