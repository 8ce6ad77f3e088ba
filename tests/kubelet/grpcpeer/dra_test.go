// SPDX-License-Identifier: Apache-2.0

package grpcpeer

// The core's DRA service (dp/dra.h, through tests/grpc/dra_server's scripted driver) called by
// grpc-go as the kubelet calls a DRA driver: NodePrepareResources and NodeUnprepareResources,
// answered now, later, with errors, never (the kubelet's deadline), and refused when malformed.

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	dra "sdp/drav1"
	"sdp/kubelet"
)

type draServer struct {
	*kubelet.Daemon
	sock string
}

func startDRA(t *testing.T) *draServer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "dra.sock")
	d, err := kubelet.StartDaemon(filepath.Join(filepath.Dir(testBinary(t)), "dra_server"), nil, sock)
	if err != nil {
		t.Fatalf("start dra_server: %v", err)
	}
	s := &draServer{Daemon: d, sock: sock}
	t.Cleanup(func() {
		if !s.Exited() {
			if code, err := s.Stop(20 * time.Second); err != nil || code != 0 {
				t.Errorf("dra_server at SIGTERM: exit %d, %v\n%s", code, err, s.Log())
			}
		}
		checkSanitizers(t, "dra_server", s.Log())
	})
	waitFor(t, 10*time.Second, "the DRA socket", func() bool {
		if s.Exited() {
			t.Fatalf("dra_server exited early: %s\n%s", s.ExitDescription(), s.Log())
		}
		return listening(t, sock)
	})
	return s
}

func draClient(t *testing.T, sock string) dra.DRAPluginClient {
	t.Helper()
	_, cc := regClient(t, sock) // the same dial as the kubelet's: unix, insecure, protobuf
	return dra.NewDRAPluginClient(cc)
}

func claim(name string) *dra.Claim {
	return &dra.Claim{Namespace: "sdp-test", Uid: "uid-" + name, Name: name}
}

// devices prints a claim's answer as one line, for comparison.
func devices(r *dra.NodePrepareResourceResponse) string {
	if r.Error != "" {
		return "error " + r.Error
	}
	var out []string
	for _, d := range r.Devices {
		s := fmt.Sprintf("%s/%s req=%v cdi=%v", d.PoolName, d.DeviceName, d.RequestNames, d.CdiDeviceIds)
		if sh, ok := d.Share.(*dra.Device_ShareId); ok {
			s += " share=" + sh.ShareId
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// One call of four claims answered at once, later and with an error: one map entry per claim
// UID, each with what the driver said, once every claim is answered; then unprepared.
func TestDRAPrepareAndUnprepare(t *testing.T) {
	s := startDRA(t)
	c := draClient(t, s.sock)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: []*dra.Claim{
		claim("gpu-a"), claim("later-b"), claim("fail-c"), claim("share-d")}})
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	want := map[string]string{
		"uid-gpu-a":   "node-a/gpu-a req=[req] cdi=[example.com/dev=gpu-a example.com/dev=common]",
		"uid-later-b": "node-a/later-b req=[req] cdi=[example.com/dev=later-b example.com/dev=common]",
		"uid-fail-c":  "error refused fail-c",
		"uid-share-d": "node-a/share-d req=[req] cdi=[example.com/dev=share-d example.com/dev=common] share=share-uid-share-d",
	}
	if len(resp.Claims) != len(want) {
		t.Fatalf("%d claims answered, want %d: %v", len(resp.Claims), len(want), resp.Claims)
	}
	for uid, w := range want {
		if r, ok := resp.Claims[uid]; !ok || devices(r) != w {
			t.Errorf("claim %s: %v, want %q", uid, r, w)
		}
	}
	if d := resp.Claims["uid-gpu-a"].Devices[0]; d.Share != nil {
		t.Errorf("a device without a share ID has one on the wire: %v", d.Share)
	}
	un, err := c.NodeUnprepareResources(ctx, &dra.NodeUnprepareResourcesRequest{Claims: []*dra.Claim{
		claim("gpu-a"), claim("fail-c")}})
	if err != nil {
		t.Fatalf("NodeUnprepareResources: %v", err)
	}
	if len(un.Claims) != 2 || un.Claims["uid-gpu-a"] == nil || un.Claims["uid-gpu-a"].Error != "" ||
		un.Claims["uid-fail-c"] == nil || un.Claims["uid-fail-c"].Error != "cannot unprepare" {
		t.Fatalf("NodeUnprepareResources: %v", un.Claims)
	}
	// no claims: an empty answer
	if resp, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{}); err != nil || len(resp.Claims) != 0 {
		t.Fatalf("no claims: %v %v", resp, err)
	}
	got := s.Stdout.Lines()
	sort.Strings(got)
	wantLines := []string{
		"prepare sdp-test/fail-c uid-fail-c", "prepare sdp-test/gpu-a uid-gpu-a",
		"prepare sdp-test/later-b uid-later-b", "prepare sdp-test/share-d uid-share-d",
		"unprepare sdp-test/fail-c uid-fail-c", "unprepare sdp-test/gpu-a uid-gpu-a",
	}
	if strings.Join(got, "\n") != strings.Join(wantLines, "\n") {
		t.Fatalf("the driver was told:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
}

// A claim the driver does not answer: the kubelet's deadline ends the call, and the driver is
// told to forget it (cancel), as it is for a claim still out when the service stops.
func TestDRACancelled(t *testing.T) {
	s := startDRA(t)
	c := draClient(t, s.sock)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: []*dra.Claim{
		claim("gpu-a"), claim("hold-b")}})
	wantCode(t, err, codes.DeadlineExceeded, "a held claim")
	waitFor(t, 5*time.Second, "the held claim cancelled", func() bool {
		return strings.Contains(s.Stdout.String(), "cancel uid-hold-b\n")
	})
	if strings.Contains(s.Stdout.String(), "cancel uid-gpu-a") {
		t.Fatalf("an answered claim was cancelled:\n%s", s.Stdout.String())
	}
	// a held call when the service stops: UNAVAILABLE for the caller, cancel for the driver
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: []*dra.Claim{claim("hold-c")}})
		errc <- err
	}()
	waitFor(t, 5*time.Second, "the second held claim asked", func() bool {
		return strings.Contains(s.Stdout.String(), "prepare sdp-test/hold-c uid-hold-c\n")
	})
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-errc, codes.Unavailable, "a held claim when the service stops")
	if code, err := s.Wait(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("exit %d, %v\n%s", code, err, s.Log())
	}
	if !strings.Contains(s.Stdout.String(), "cancel uid-hold-c\n") {
		t.Fatalf("the claim held at stop was not cancelled:\n%s", s.Stdout.String())
	}
}

// Malformed calls are refused whole (INVALID_ARGUMENT) and the driver is told nothing.
func TestDRABadRequests(t *testing.T) {
	s := startDRA(t)
	c := draClient(t, s.sock)
	raw := dial(t, s.sock, "localhost")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	many := make([]*dra.Claim, 257)
	for i := range many {
		many[i] = claim(fmt.Sprintf("c%d", i))
	}
	for what, claims := range map[string][]*dra.Claim{
		"no UID":        {{Namespace: "ns", Name: "a"}},
		"no namespace":  {{Uid: "u", Name: "a"}},
		"no name":       {{Namespace: "ns", Uid: "u"}},
		"one UID twice": {claim("a"), {Namespace: "other", Uid: "uid-a", Name: "b"}},
		"254 bytes":     {{Namespace: "ns", Uid: "u", Name: strings.Repeat("n", 254)}},
		"257 claims":    many,
	} {
		_, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: claims})
		wantCode(t, err, codes.InvalidArgument, what)
		_, err = c.NodeUnprepareResources(ctx, &dra.NodeUnprepareResourcesRequest{Claims: claims})
		wantCode(t, err, codes.InvalidArgument, what+" (unprepare)")
	}
	for what, req := range map[string][]byte{
		"truncated":     {0x0a, 0x05, 0x0a},
		"claim as int":  {0x08, 0x01},
		"NUL in a name": {0x0a, 0x0c, 0x0a, 0x02, 'n', 's', 0x12, 0x01, 'u', 0x1a, 0x03, 'a', 0, 'b'},
		"field as int":  {0x0a, 0x02, 0x08, 0x01},
	} {
		_, err := call(raw, 5*time.Second, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", req)
		wantCode(t, err, codes.InvalidArgument, what)
	}
	// 256 claims of 253-byte strings: served
	most := make([]*dra.Claim, 256)
	for i := range most {
		most[i] = &dra.Claim{Namespace: "ns", Uid: fmt.Sprintf("%0253d", i), Name: "n"}
	}
	resp, err := c.NodePrepareResources(ctx, &dra.NodePrepareResourcesRequest{Claims: most})
	if err != nil || len(resp.Claims) != 256 {
		t.Fatalf("256 claims: %v (%d answered)", err, len(resp.GetClaims()))
	}
	if n := len(s.Stdout.Lines()); n != 256 {
		t.Fatalf("the driver was told %d claims, want only the 256 of the valid call", n)
	}
}
