package kubelet

// Refused requests are said at warn (a level seen by default), once per kind and then at most
// once a minute per kind: a client sending bad requests in a loop cannot flood the log.

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const refusedMsg = "request refused"

func TestRefusedRequestsLoggedOncePerKind(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3", "LOG_LEVEL=info")
	p := s.ready(3)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	allocate := func(n int, ids func(i int) []string) {
		t.Helper()
		for i := 0; i < n; i++ {
			_, err := p.Client().Allocate(ctx, &api.AllocateRequest{
				ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids(i)}}})
			if status.Code(err) != codes.InvalidArgument {
				s.fatalf("Allocate %v: %v, want InvalidArgument", ids(i), err)
			}
		}
	}
	// 50 unknown IDs, each request naming another one.
	allocate(50, func(i int) []string { return []string{fmt.Sprintf("nope-%d", i)} })
	// 50 duplicates: another kind, its own line.
	allocate(50, func(int) []string { return []string{"hyperlight-1", "hyperlight-1"} })
	// A third kind last: once its line is in, every line of the first two is.
	_, err := p.Client().Allocate(ctx, &api.AllocateRequest{})
	if status.Code(err) != codes.InvalidArgument {
		s.fatalf("empty Allocate: %v, want InvalidArgument", err)
	}
	waitLine(t, s.d, eventBound, "warn", refusedMsg, "no container requests")

	method := "method=/v1beta1.DevicePlugin/Allocate"
	unknown := logLines(s.d, "warn", refusedMsg, "unknown device IDs")
	if len(unknown) != 1 {
		t.Fatalf("%d warn lines for 50 unknown IDs, want exactly 1; log:\n%s", len(unknown), s.d.Log())
	}
	for _, want := range []string{"resource=" + HyperlightResource, method, "status=INVALID_ARGUMENT", "nope-0",
		"suppressed=0"} {
		if !strings.Contains(unknown[0], want) {
			t.Errorf("line %q lacks %q", unknown[0], want)
		}
	}
	dup := logLines(s.d, "warn", refusedMsg, "duplicate device IDs")
	if len(dup) != 1 {
		t.Fatalf("%d warn lines for 50 duplicate-ID requests, want exactly 1; log:\n%s", len(dup), s.d.Log())
	}
	for _, want := range []string{method, "status=INVALID_ARGUMENT", "hyperlight-1"} {
		if !strings.Contains(dup[0], want) {
			t.Errorf("line %q lacks %q", dup[0], want)
		}
	}
	if all := logLines(s.d, "", refusedMsg); len(all) != 3 {
		t.Errorf("%d %q lines in all, want 3 (one per kind); log:\n%s", len(all), refusedMsg, s.d.Log())
	}
	// Refusing changed nothing else: kubelet's stream is up and a good Allocate works.
	if ended, err := p.Ended(); ended {
		t.Errorf("kubelet's stream ended: %v", err)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"}); err != nil {
		t.Errorf("Allocate after the refused ones: %v", err)
	}
}
