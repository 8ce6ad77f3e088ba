// SPDX-License-Identifier: Apache-2.0

package kubelet

// What the gRPC layer reports about its callers (issue 21, item 3): every call of a method the
// daemon does not serve is counted in sdp_grpc_unimplemented_total and its name logged at warn
// once, quoted (the caller chooses it), for the first 16 names, then one line saying further
// ones are not logged; every hit of a gRPC limit is counted in
// sdp_grpc_limit_hits_total{what} while its warn line comes once per episode.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

const (
	unknownMethodMsg  = "unknown gRPC method"
	unknownFurtherMsg = "further unknown gRPC methods not logged"
	unknownLogged     = 16 // DP_GRPC_UNKNOWN_METHODS
)

func TestHyperlightUnknownMethodsReported(t *testing.T) {
	// promtool first: on a fresh build directory scripts/debian-tool.sh fetches it (seconds),
	// which must not eat the calls' deadline (it did once, in a fresh clone's make test)
	debianTool(t, "prometheus", "promtool")
	s := newScenario(t, "DEVICE_COUNT=3", metricsEnv)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	conn := s.dial(p)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	calls := 0
	call := func(method string) {
		t.Helper()
		calls++
		if err := conn.Invoke(ctx, method, &api.Empty{}, &api.Empty{}); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s: %v, want Unimplemented", method, err)
		}
	}
	// Two names called twice each (one line each), the second one a logfmt trap; then 22 more
	// names, as a client trying names in a loop would.
	names := []string{"/v1beta1.DevicePlugin/NoSuchMethod", `/evil.Svc/a b"c=d level=error`}
	for i := 0; len(names) < unknownLogged+8; i++ {
		names = append(names, fmt.Sprintf("/guess.Svc/M%d", i))
	}
	for i, n := range names {
		call(n)
		if i < 2 {
			call(n)
		}
	}
	waitLine(t, s.d, eventBound, "warn", unknownFurtherMsg, fmt.Sprintf("logged=%d", unknownLogged))
	lines := logLines(s.d, "warn", unknownMethodMsg)
	if len(lines) != unknownLogged {
		t.Fatalf("%d %q lines for %d names, want %d; log:\n%s", len(lines), unknownMethodMsg, len(names),
			unknownLogged, s.d.Log())
	}
	for i, want := range []string{`method=/v1beta1.DevicePlugin/NoSuchMethod`, `method="/evil.Svc/a b\"c=d level=error"`,
		`method=/guess.Svc/M0`} {
		if !strings.HasSuffix(lines[i], " "+want) {
			t.Errorf("line %q, want it to end with %s", lines[i], want)
		}
	}
	if logField(lines[1], "level") != "warn" {
		t.Errorf("the quoted name changed the line's level: %q", lines[1])
	}
	if n := len(logLines(s.d, "warn", unknownFurtherMsg)); n != 1 {
		t.Errorf("%d %q lines, want 1", n, unknownFurtherMsg)
	}
	text := mustScrape(t, addr)
	promtoolCheck(t, text)
	expectMetric(t, text, float64(calls), "sdp_grpc_unimplemented_total")
	if strings.Contains(text, "guess.Svc") || strings.Contains(text, "evil.Svc") {
		t.Errorf("a method name became a label:\n%s", text)
	}
	// The connection and the daemon keep serving (a deadline of its own: the scrape and
	// promtool took some of ctx's).
	actx, acancel := context.WithTimeout(context.Background(), eventBound)
	defer acancel()
	if _, err := api.NewDevicePluginClient(conn).Allocate(actx, &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: []string{"hyperlight-0"}}}}); err != nil {
		t.Errorf("Allocate on the same connection afterwards: %v", err)
	}
}

// 70 connections that never say a word, beside kubelet's, on a server of 64 slots: each one past
// the limit closes another (a hit, counted) and the warn line comes once.
func TestHyperlightGRPCLimitHitsCounted(t *testing.T) {
	const extra, slots = 70, 64
	s := newScenario(t, "DEVICE_COUNT=3", metricsEnv)
	addr := metricsAddr(t, s.d)
	p := s.ready(3)
	for i := 0; i < extra; i++ {
		c, err := net.Dial("unix", p.Socket)
		if err != nil {
			s.fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
	}
	// kubelet's connection and the 70: at least 7 past the limit.
	hits := waitMetric(t, addr, eventBound, func(v float64) bool { return v >= extra+1-slots },
		"sdp_grpc_limit_hits_total", "what", "connections")
	t.Logf("%v hits of the connection limit", hits)
	waitLine(t, s.d, eventBound, "warn", overloadLine, "what=connections")
	if n := overloadLines(s.d, "connections"); n != 1 {
		t.Errorf("%d %q lines what=connections for %v hits, want 1 (one episode)", n, overloadLine, hits)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Errorf("kubelet's Allocate after the flood: %v", err)
	}
}
