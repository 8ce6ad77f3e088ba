package kubelet

// One debug line per Allocate (core/src/endpoint/endpoint_alloclog.c; docs/operations.md, "By
// log line"): at LOG_LEVEL=debug each Allocate answered, granted or refused, leaves
// msg="Allocate answered" with the resource, the IDs asked for per container request, the CDI
// names answered and the status (and the reason of an error); none at info. A flood is bounded:
// at most allocLogBurst lines per resource per second, then one msg="Allocate lines suppressed"
// line with the count once the second is over.

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	allocLogMsg        = "Allocate answered"
	allocSuppressedMsg = "Allocate lines suppressed"
	allocLogBurst      = 10 // lines per resource per window
	allocLogWindow     = time.Second
	allocLogMaxLine    = 2048 // bytes: the line's fields are bounded (IDs and names truncated)
)

// logValue returns the value of key in a logfmt line (unquoted), and whether it is there.
func logValue(line, key string) (string, bool) {
	re := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(key) + `=("(?:[^"\\]|\\.)*"|\S*)`)
	m := re.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	if strings.HasPrefix(m[1], `"`) {
		var u string
		if json.Unmarshal([]byte(m[1]), &u) == nil {
			return u, true
		}
		return strings.Trim(m[1], `"`), true
	}
	return m[1], true
}

// expectLogFields checks line's fields (a missing key: want "<absent>").
func expectLogFields(t *testing.T, line string, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := logValue(line, k)
		if !ok {
			got = "<absent>"
		}
		if got != v {
			t.Errorf("%s=%q, want %q in line %q", k, got, v, line)
		}
	}
}

// allocLine waits for the n-th (1-based) debug Allocate line and returns it.
func allocLine(t *testing.T, d *Daemon, n int) string {
	t.Helper()
	var l []string
	if !Poll(eventBound, func() bool { l = logLines(d, "debug", allocLogMsg); return len(l) >= n }) {
		t.Fatalf("%d debug %q lines within %v, want %d; log:\n%s", len(l), allocLogMsg, eventBound, n, d.Log())
	}
	return l[n-1]
}

func TestAllocateLogHyperlight(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=debug")
	p := s.ready(3)
	s.allocateOK("at debug level")
	expectLogFields(t, allocLine(t, s.d, 1), map[string]string{
		"resource": HyperlightResource, "containers": "1", "ids": "hyperlight-0",
		"cdi": HyperlightResource + "=kvm", "status": "OK", "message": "<absent>",
	})
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	// Two container requests: the IDs of each, the names answered to each.
	_, err := p.Client().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{"hyperlight-1"}}, {DevicesIds: []string{"hyperlight-0", "hyperlight-2"}}}})
	if err != nil {
		t.Fatalf("Allocate of two containers: %v", err)
	}
	expectLogFields(t, allocLine(t, s.d, 2), map[string]string{
		"containers": "2", "ids": "hyperlight-1 hyperlight-0,hyperlight-2",
		"cdi": HyperlightResource + "=kvm " + HyperlightResource + "=kvm", "status": "OK",
	})
	// Refused before the device: the status and the client's message (which names the IDs).
	_, err = p.Client().Allocate(ctx, oneContainer("nope-7"))
	expectStatus(t, "Allocate [nope-7]", err, codes.InvalidArgument, "nope-7")
	l := allocLine(t, s.d, 3)
	expectLogFields(t, l, map[string]string{"resource": HyperlightResource, "status": "INVALID_ARGUMENT",
		"containers": "<absent>", "ids": "<absent>", "cdi": "<absent>"})
	if m, _ := logValue(l, "message"); !strings.Contains(m, `"nope-7"`) {
		t.Errorf("message=%q does not name the unknown ID; line %q", m, l)
	}
	// The device fails its recheck: UNAVAILABLE with the probe's reason, no CDI names.
	s.shim("HVSHIM_API_VERSION=11")
	_, err = p.Client().Allocate(ctx, oneContainer("hyperlight-2"))
	expectStatus(t, "Allocate with a failing probe", err, codes.Unavailable, "API version 11")
	l = allocLine(t, s.d, 4)
	expectLogFields(t, l, map[string]string{"ids": "hyperlight-2", "cdi": "<absent>", "status": "UNAVAILABLE"})
	if m, _ := logValue(l, "message"); !strings.Contains(m, "API version 11") {
		t.Errorf("message=%q does not give the reason; line %q", m, l)
	}
}

func TestAllocateLogKata(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon("LOG_LEVEL=debug")
	s.kataReady(kataExpect(kataMain))
	a, err := s.k.Allocate(KataGPU, []string{"1", "3"})
	if err != nil {
		s.fatalf("Allocate: %v", err)
	}
	checkKataAllocation(t, a.Response, KataGPU, []string{"1", "3"})
	l := allocLine(t, s.d, 1)
	expectLogFields(t, l, map[string]string{
		"resource": KataGPU, "containers": "1", "ids": "1,3",
		"cdi": KataGPU + "=1," + KataGPU + "=3", "status": "OK", "message": "<absent>",
	})
}

// At info (the default) an Allocate leaves no line.
func TestAllocateLogAbsentAtInfo(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=info")
	s.ready(3)
	s.allocateOK("at info level")
	_, _ = s.k.Allocate(HyperlightResource, []string{"nope"})
	// The daemon's own next line proves the Allocates were handled before the log is read.
	s.shim("HVSHIM_API_VERSION=11")
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Allocate with a failing probe: %v, want Unavailable", err)
	}
	waitLine(t, s.d, eventBound, "warn", "device unusable, advertising every device Unhealthy")
	for _, l := range s.d.Stderr.Lines() {
		if m := logField(l, "msg"); m == allocLogMsg || m == allocSuppressedMsg || logField(l, "level") == "debug" {
			t.Errorf("line at LOG_LEVEL=info: %q", l)
		}
	}
}

// A burst of 1000 Allocates: every one accounted for (a line or a suppressed count), at most
// allocLogBurst lines per window and one summary per window that suppressed any.
func TestAllocateLogBurstBounded(t *testing.T) {
	const n, workers = 1000, 8
	s := newKata(t)
	s.add(kataMain...)
	s.startDaemon("LOG_LEVEL=debug")
	s.kataReady(kataExpect(kataMain))
	p := s.k.Current(KataGPU)
	before := len(logLines(s.d, "debug", allocLogMsg))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ctx, cancel := context.WithTimeout(context.Background(), 3*eventBound)
				_, err := p.Client().Allocate(ctx, oneContainer(strconv.Itoa(i%4)))
				cancel()
				if err != nil {
					errs <- fmt.Errorf("Allocate %d: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every Allocate is a line or counted in a summary, which comes once its window is over.
	var lines, sums []string
	var suppressed int
	if !Poll(allocLogWindow+2*eventBound, func() bool {
		lines = logLines(s.d, "debug", allocLogMsg)[before:]
		sums = logLines(s.d, "debug", allocSuppressedMsg)
		suppressed = 0
		for _, l := range sums {
			v, _ := logValue(l, "suppressed")
			k, _ := strconv.Atoi(v)
			suppressed += k
		}
		return len(lines)+suppressed >= n
	}) {
		t.Fatalf("%d lines + %d suppressed for %d Allocates; log tail:\n%s", len(lines), suppressed, n,
			tail(s.d.Stderr.Lines(), 30))
	}
	// The burst spans at most this many windows (each opens at a line and lasts a second).
	windows := int(elapsed/allocLogWindow) + 2
	t.Logf("%d Allocates in %v: %d lines, %d summary lines (%d suppressed)", n, elapsed.Round(time.Millisecond),
		len(lines), len(sums), suppressed)
	if len(lines)+suppressed != n {
		t.Errorf("%d lines + %d suppressed, want %d exactly", len(lines), suppressed, n)
	}
	if len(lines) > allocLogBurst*windows || len(sums) > windows || len(sums) == 0 {
		t.Errorf("%d Allocate lines and %d summaries over at most %d windows: want at most %d lines per window and one summary",
			len(lines), len(sums), windows, allocLogBurst)
	}
	if elapsed < allocLogWindow && (len(lines) > allocLogBurst || len(sums) != 1) {
		t.Errorf("a burst within one window gave %d lines and %d summaries, want at most %d and 1",
			len(lines), len(sums), allocLogBurst)
	}
	for _, l := range sums {
		expectLogFields(t, l, map[string]string{"resource": KataGPU, "window_ms": "1000"})
	}
	// Once the window is over, lines are back.
	if _, err := s.k.Allocate(KataGPU, []string{"2"}); err != nil {
		t.Fatal(err)
	}
	if !Poll(eventBound, func() bool {
		l := logLines(s.d, "debug", allocLogMsg, "ids=2 ")
		return len(l) > 0 && strings.Contains(l[len(l)-1], "status=OK")
	}) {
		t.Errorf("no Allocate line after the burst's window; log tail:\n%s", tail(s.d.Stderr.Lines(), 10))
	}
}

// A request of many IDs: the line is bounded, its lists cut with a marker of what is left out.
func TestAllocateLogLongRequestTruncated(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=500", "LOG_LEVEL=debug")
	p := s.ready(500)
	var ids []string
	for i := 0; i < 500; i++ {
		ids = append(ids, fmt.Sprintf("hyperlight-%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	if _, err := p.Client().Allocate(ctx, oneContainer(ids...)); err != nil {
		t.Fatal(err)
	}
	l := allocLine(t, s.d, 1)
	if len(l) > allocLogMaxLine {
		t.Errorf("line of %d bytes, want at most %d: %q", len(l), allocLogMaxLine, l)
	}
	v, _ := logValue(l, "ids")
	m := regexp.MustCompile(`^hyperlight-0,hyperlight-1,(hyperlight-\d+,)*\.\.\.\+(\d+)$`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("ids=%q: want the first IDs then ...+<left out>", v)
	}
	if shown := strings.Count(v, ","); shown+mustAtoi(t, m[2]) != 500 {
		t.Errorf("ids=%q: %d shown + %s left out, want 500", v, shown, m[2])
	}
	// hyperlight answers one name per container whatever the count
	expectLogFields(t, l, map[string]string{"cdi": HyperlightResource + "=kvm", "status": "OK"})
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
