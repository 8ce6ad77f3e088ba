package main

// The loop's longest stall: while the largest legal GetPreferredAllocation and Allocate (every
// ID the daemon advertises, hyperlight at its DEVICE_COUNT ceiling) are handled, other clients
// send liveness health checks (a new connection each, as the exec probe does) and one-ID
// Allocates (on one connection, as kubelet) back to back; the longest any of them waited.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/golang/protobuf/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	k "sdp/kubelet"
	api "sdp/v1beta1"
)

type stallResult struct {
	ids            int    // IDs advertised
	gpa, alloc     string // how the large requests ended
	healthMax      float64
	allocMax       float64 // ms
	healthN        int
	allocN         int
	healthPending  bool // a health check was still waiting when the bench stopped
	allocPending   bool
	healthFailures int
	allocFailures  int
	err            string
}

// longest is the longest wait of either kind, ms.
func (s stallResult) longest() float64 {
	if s.healthMax > s.allocMax {
		return s.healthMax
	}
	return s.allocMax
}

// smallCaller calls f back to back until its loop context ends, keeping the longest wait.
type smallCaller struct {
	max      float64
	n, fails int
	pending  bool
}

func (c *smallCaller) run(loop, calls context.Context, wg *sync.WaitGroup, f func(ctx context.Context) error) {
	defer wg.Done()
	for loop.Err() == nil {
		t := time.Now()
		err := f(calls)
		el := ms(time.Since(t))
		if el > c.max {
			c.max = el
		}
		if err != nil && calls.Err() != nil {
			c.pending = true // cut off by the end of the measurement: a lower bound
			return
		}
		c.n++
		if err != nil {
			c.fails++
			time.Sleep(time.Millisecond) // a refused call returns at once: no busy loop
		}
	}
}

// largest sends the request made of ids on a new connection, bounded by deadline; a request
// refused for its size (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, OUT_OF_RANGE: over a stated
// maximum) is sent again with half the IDs, until one is handled: the largest legal request.
// It says how each attempt ended; false when the last was not answered within the bound.
func largest(ctx context.Context, sock string, deadline time.Time, ids []string,
	send func(context.Context, api.DevicePluginClient, []string) error) (string, bool) {
	var out []string
	say := func(last string) string {
		if len(out) > 1 {
			out = []string{out[0], fmt.Sprintf("(%d more refused)", len(out)-1)}
		}
		return strings.Join(append(out, last), "; ")
	}
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		t := time.Now()
		cc, err := k.DialPlugin(cctx, sock, time.Until(deadline))
		if err == nil {
			err = send(cctx, api.NewDevicePluginClient(cc), ids)
			cc.Close()
		}
		el := time.Since(t)
		timedOut := cctx.Err() != nil
		cancel()
		switch {
		case err != nil && timedOut:
			return say(fmt.Sprintf("%d IDs: not answered within %v", len(ids), el.Round(100*time.Millisecond))), false
		case err == nil:
			return say(fmt.Sprintf("%d IDs: answered in %s ms", len(ids), f1(ms(el)))), true
		}
		last := fmt.Sprintf("%d IDs: %s in %s ms", len(ids), shortErr(err), f1(ms(el)))
		switch status.Code(err) {
		case codes.ResourceExhausted, codes.InvalidArgument, codes.OutOfRange:
			if len(ids) > 1 && attempt < 8 {
				out = append(out, last)
				ids = ids[:len(ids)/2]
				continue
			}
		}
		return say(last), true
	}
}

// fitIDs trims ids until the request made of them fits the daemons' message limit.
func fitIDs(ids []string, size func([]string) int) []string {
	for len(ids) > 0 && size(ids) > k.MaxMessage {
		ids = ids[:len(ids)*9/10]
	}
	return ids
}

func adStall(d adDaemon, ceiling int) stallResult {
	var r stallResult
	var env []string
	if !d.isKata() {
		env = append(env, fmt.Sprintf("DEVICE_COUNT=%d", ceiling))
	}
	ap, err := startADPod(d, d.name+"-stall", env...)
	if err != nil {
		r.err = err.Error()
		return r
	}
	defer ap.close()
	p := ap.nd.kub.Current(d.resource)
	snap, _ := p.Latest()
	var all []string
	for _, dev := range snap.Devices {
		all = append(all, dev.ID)
	}
	gpaReq := func(ids []string) *api.PreferredAllocationRequest {
		return &api.PreferredAllocationRequest{ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: ids, AllocationSize: int32(len(ids))}}}
	}
	allocReq := func(ids []string) *api.AllocateRequest {
		return &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}}}
	}
	gpaIDs := fitIDs(all, func(ids []string) int { return proto.Size(gpaReq(ids)) })
	allocIDs := fitIDs(all, func(ids []string) int { return proto.Size(allocReq(ids)) })
	r.ids = len(all)

	// loop: the small callers start no new call once it ends; ctx: the calls themselves, cut off
	// when the callers have had a grace second to finish the call they are in.
	loop, stopLoop := context.WithCancel(context.Background())
	defer stopLoop()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	small, err := k.DialPlugin(ctx, p.Socket, 3*time.Second)
	if err != nil {
		r.err = "cannot connect: " + err.Error()
		return r
	}
	defer small.Close()
	var hc, ac smallCaller
	var wg sync.WaitGroup
	wg.Add(2)
	go hc.run(loop, ctx, &wg, func(ctx context.Context) error {
		cc, err := k.DialPlugin(ctx, p.Socket, adStallBound+time.Second)
		if err != nil {
			return err
		}
		defer cc.Close()
		_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
	one := allocReq(all[:1])
	go ac.run(loop, ctx, &wg, func(ctx context.Context) error {
		_, err := api.NewDevicePluginClient(small).Allocate(ctx, one)
		return err
	})
	time.Sleep(200 * time.Millisecond)
	deadline := time.Now().Add(adStallBound)
	recv := grpc.MaxCallRecvMsgSize(1 << 30)
	var ok bool
	r.gpa, ok = largest(ctx, p.Socket, deadline, gpaIDs, func(c context.Context, cl api.DevicePluginClient, ids []string) error {
		_, err := cl.GetPreferredAllocation(c, gpaReq(ids), recv)
		return err
	})
	if ok {
		r.alloc, _ = largest(ctx, p.Socket, deadline, allocIDs, func(c context.Context, cl api.DevicePluginClient, ids []string) error {
			_, err := cl.Allocate(c, allocReq(ids), recv)
			return err
		})
	} else {
		r.alloc = "not sent (the loop was still busy with GetPreferredAllocation)"
	}
	time.Sleep(200 * time.Millisecond)
	stopLoop()
	waitGroup(&wg, time.Second)
	stop()
	wg.Wait()
	r.healthMax, r.healthN, r.healthPending, r.healthFailures = hc.max, hc.n, hc.pending, hc.fails
	r.allocMax, r.allocN, r.allocPending, r.allocFailures = ac.max, ac.n, ac.pending, ac.fails
	return r
}
