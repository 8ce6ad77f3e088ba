package kubelet

// Scenarios: what the daemons make of the requests kubelet never sends: IDs with a NUL byte or
// named twice, the optional methods they do not advertise, hostile Allocate requests that
// protobuf-c unpacked into hundreds of MB, a health request with a NUL, and the largest legal
// Allocate. Decoding: core/src/requests/endpoint_decode.c; limits: docs/architecture.md, "Requests".

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	api "sdp/v1beta1"
)

// hostileBudgetKiB bounds the growth of a daemon's VmHWM while it answers one hostile request of
// 4 MiB: the message itself (buffered by the transport until complete) plus what its decoding
// may hold (docs/architecture.md, "Requests": nothing for a refused request, 8 bytes per device
// for a valid one). protobuf-c's unpack took 143-419 MiB here. (Measured: +7.9 MiB natively,
// +8.6 MiB under ASan with its quarantine off, +5.7 MiB under valgrind.)
const hostileBudgetKiB = 12 * 1024

func expectStatus(t *testing.T, what string, err error, code codes.Code, words ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("%s: message %q does not say %q", what, st.Message(), w)
		}
	}
}

func oneContainer(ids ...string) *api.AllocateRequest {
	return &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}}}
}

func TestHyperlightAllocateNulID(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	// protobuf-c ends a string at its first NUL: this was served as "hyperlight-0".
	_, err := p.Client().Allocate(ctx, oneContainer("hyperlight-0\x00../x"))
	expectStatus(t, "Allocate [hyperlight-0\\0../x]", err, codes.InvalidArgument, "NUL byte", `"hyperlight-0\u0000../x"`)
	// A health check naming "readiness\0..." is not the readiness check.
	hc := healthpb.NewHealthClient(s.dial(p))
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness\x00x"})
	expectStatus(t, "health Check [readiness\\0x]", err, codes.InvalidArgument, "NUL byte")
	// A Watch keeps its service name for the stream's life: a long one is refused.
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 257)})
	expectStatus(t, "health Check of a 257-byte service", err, codes.InvalidArgument, "longer than 256 bytes")
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", 256)}); status.Code(err) != codes.NotFound {
		t.Errorf("health Check of a 256-byte service: %v, want NotFound", err)
	}
	if r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness Check afterwards: %v, %v", r, err)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Errorf("kubelet's Allocate afterwards: %v", err)
	}
}

func TestHyperlightAllocateDuplicateIDs(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	_, err := p.Client().Allocate(ctx, oneContainer("hyperlight-1", "hyperlight-1"))
	expectStatus(t, "Allocate [hyperlight-1 hyperlight-1]", err, codes.InvalidArgument,
		`duplicate device IDs for hyperlight.dev/hypervisor: "hyperlight-1"`)
	_, err = p.Client().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{"hyperlight-2"}}, {DevicesIds: []string{"hyperlight-0", "hyperlight-2"}}}})
	expectStatus(t, "Allocate of hyperlight-2 to two containers", err, codes.InvalidArgument, `"hyperlight-2"`)
	// More IDs than devices: refused before any is looked up.
	_, err = p.Client().Allocate(ctx, oneContainer("hyperlight-0", "hyperlight-1", "hyperlight-2", "hyperlight-0"))
	expectStatus(t, "Allocate of 4 IDs", err, codes.InvalidArgument, "names more than 3 device IDs")
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-1"}); err != nil {
		t.Errorf("kubelet's Allocate afterwards: %v", err)
	}
}

// The optional methods are not served where the options do not advertise them.
func TestHyperlightUnadvertisedMethods(t *testing.T) {
	s := newScenario(t, "DEVICE_COUNT=3")
	p := s.ready(3)
	if p.Options.GetPreferredAllocationAvailable || p.Options.PreStartRequired {
		t.Fatalf("options %+v advertise an optional method", p.Options)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	_, err := p.Client().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{
		ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"hyperlight-0", "hyperlight-1"}, AllocationSize: 1}}})
	expectStatus(t, "GetPreferredAllocation", err, codes.Unimplemented)
	_, err = p.Client().PreStartContainer(ctx, &api.PreStartContainerRequest{DevicesIds: []string{"hyperlight-0"}})
	expectStatus(t, "PreStartContainer", err, codes.Unimplemented)
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-0"}); err != nil {
		t.Errorf("kubelet's Allocate afterwards: %v", err)
	}
}

// hostileAllocates are 4 MiB requests that protobuf-c unpacked into 82-187 MB (a counting
// allocator's figures) and the daemon's VmHWM into 143-419 MiB.
func hostileAllocates() map[string]*api.AllocateRequest {
	const size = 4<<20 - 64
	// ~838k container requests of one ID each (5 bytes apiece)
	many := make([]*api.ContainerAllocateRequest, size/5)
	for i := range many {
		many[i] = &api.ContainerAllocateRequest{DevicesIds: []string{"0"}}
	}
	// one container naming "hyperlight-0" ~290k times
	ids := make([]string, size/14)
	for i := range ids {
		ids[i] = "hyperlight-0"
	}
	// one ID and ~2M unknown fields (field 2, varint 0: two bytes each): a valid request
	unknown := make([]byte, 0, size)
	for len(unknown) < size-40 {
		unknown = append(unknown, 0x10, 0x00)
	}
	return map[string]*api.AllocateRequest{
		"838k containers": {ContainerRequests: many},
		"290k IDs":        oneContainer(ids...),
		"2M unknown fields": {ContainerRequests: []*api.ContainerAllocateRequest{
			{DevicesIds: []string{"hyperlight-0"}, XXX_unrecognized: unknown}}},
	}
}

func TestHyperlightHostileAllocateMemory(t *testing.T) {
	s := newScenario(t, append([]string{"DEVICE_COUNT=20"}, quarantineOff()...)...)
	p := s.ready(20)
	conn := s.dial(p)
	base := vmHWM(t, s.d.Pid())
	want := map[string]codes.Code{"838k containers": codes.InvalidArgument, "290k IDs": codes.InvalidArgument,
		"2M unknown fields": codes.OK}
	words := map[string]string{"838k containers": "more than 16 container requests",
		"290k IDs": "names more than 20 device IDs"}
	for name, req := range hostileAllocates() {
		ctx, cancel := context.WithTimeout(context.Background(), eventBound)
		resp, err := api.NewDevicePluginClient(conn).Allocate(ctx, req, grpc.MaxCallSendMsgSize(8<<20))
		cancel()
		if want[name] == codes.OK {
			if err != nil || len(resp.ContainerResponses) != 1 {
				t.Errorf("%s: %v, %v; want one container response", name, resp, err)
			}
		} else {
			expectStatus(t, name, err, want[name], words[name])
		}
		hwm := vmHWM(t, s.d.Pid())
		t.Logf("%s: VmHWM %d KiB (%+d KiB)", name, hwm, hwm-base)
		if hwm-base > hostileBudgetKiB {
			t.Errorf("%s: VmHWM %d KiB, %d KiB over the %d KiB before; budget %d KiB", name, hwm, hwm-base,
				base, hostileBudgetKiB)
		}
	}
	a, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-2"})
	if err != nil {
		s.fatalf("kubelet's Allocate after the hostile requests: %v", err)
	}
	checkAllocation(t, a.Response)
	if ended, err := p.Ended(); ended || s.k.Registrations(HyperlightResource) != 1 {
		t.Errorf("kubelet's stream ended (%v, %v) or the daemon re-registered", ended, err)
	}
}

// The largest legal Allocate at hyperlight's DEVICE_COUNT ceiling: every device in one
// container request (2.4 MB on the wire). Answered correctly; the time it took is logged, not
// asserted (the loop's longest stall is a figure of make bench).
func TestHyperlightLargestAllocate(t *testing.T) {
	s, p, ids := startAtCeiling(t)
	n := len(ids)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	start := time.Now()
	resp, err := p.Client().Allocate(ctx, oneContainer(ids...), grpc.MaxCallSendMsgSize(8<<20))
	took := time.Since(start)
	if err != nil || len(resp.ContainerResponses) != 1 {
		s.fatalf("Allocate of all %d devices: %v, %v", n, resp, err)
	}
	checkAllocation(t, resp.ContainerResponses[0])
	if key := "cdi.k8s.io/hyperlight.dev-hypervisor_" + ids[0]; resp.ContainerResponses[0].Annotations[key] == "" {
		t.Errorf("no annotation %s in %v", key, resp.ContainerResponses[0].Annotations)
	}
	t.Logf("Allocate of all %d devices: answered in %v", n, took)
	// One ID more than there are devices is refused (every ID is then known but one twice).
	_, err = p.Client().Allocate(ctx, oneContainer(append(ids, ids[0])...), grpc.MaxCallSendMsgSize(8<<20))
	expectStatus(t, "Allocate of one ID more", err, codes.InvalidArgument,
		fmt.Sprintf("names more than %d device IDs", n))
}

// startAtCeiling starts hyperlight with DEVICE_COUNT at its ceiling (which the daemon's own
// error for a larger one names) and returns every device ID, last first.
func startAtCeiling(t *testing.T) (*scenario, *Plugin, []string) {
	s := prepare(t, newNode(t, true))
	ceiling := s.run(DaemonEnv(s.node.Root, "DEVICE_COUNT=99999999"))
	m := regexp.MustCompile(`out of range 1\.\.([0-9]+)`).FindStringSubmatch(ceiling.Stderr)
	if m == nil {
		t.Fatalf("no ceiling in the error for DEVICE_COUNT=99999999: %q", ceiling.Stderr)
	}
	n, _ := strconv.Atoi(m[1])
	s.startDaemon("DEVICE_COUNT=" + m[1])
	p := s.ready(n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("hyperlight-%d", n-1-i)
	}
	return s, p, ids
}

// Allocates waiting for the probe hold their decoded IDs (8 bytes each, 1.1 MB for all of the
// ceiling's devices); more than 4 MiB in total is refused, kubelet's small one is still served.
func TestHyperlightHeldAllocatesBounded(t *testing.T) {
	s, p, ids := startAtCeiling(t)
	s.shim("HVSHIM_DELAY_MS=1500") // every probe 1.5 s: the Allocates wait, holding their IDs
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*hangBound)
			defer cancel()
			_, errs[i] = p.Client().Allocate(ctx, oneContainer(ids...), grpc.MaxCallSendMsgSize(8<<20))
		}(i)
	}
	if _, ok := s.d.WaitLog(eventBound, func(l string) bool { return strings.Contains(l, `msg="helper started"`) }); !ok {
		t.Errorf("no probe started within %v", eventBound)
	}
	if _, err := s.k.Allocate(HyperlightResource, []string{"hyperlight-7"}); err != nil {
		t.Errorf("kubelet's Allocate while the large ones wait: %v", err)
	}
	wg.Wait()
	refused := 0
	for i, err := range errs {
		if status.Code(err) == codes.ResourceExhausted {
			// Either bound may refuse first: the endpoint's held IDs, or the gRPC layer's
			// request memory (the messages wait in it while their Allocates are held).
			refused++
			if m := status.Convert(err).Message(); !strings.Contains(m, "too many Allocate requests in progress") &&
				!strings.Contains(m, "the server's request memory is full") {
				t.Errorf("large Allocate %d: refused with %q, which names neither bound", i, m)
			}
		} else if err != nil {
			t.Errorf("large Allocate %d: %v", i, err)
		}
	}
	t.Logf("%d of %d large Allocates refused", refused, n)
	if refused == 0 {
		t.Errorf("all %d large Allocates (%d IDs each) were held at once, want at most 3", n, len(ids))
	}
}

func TestKataAllocateDuplicateAndNulIDs(t *testing.T) {
	s := newKata(t)
	s.add(kataMain...)
	want := kataExpect(kataMain)
	s.startDaemon()
	ps := s.kataReady(want)
	ctx, cancel := context.WithTimeout(context.Background(), eventBound)
	defer cancel()
	// This was answered with cdi_devices nvidia.com/gpu=0 twice.
	_, err := ps[KataGPU].Client().Allocate(ctx, oneContainer("0", "0"))
	expectStatus(t, "Allocate [0 0]", err, codes.InvalidArgument, `duplicate device IDs for nvidia.com/gpu: "0"`)
	// And this with nvidia.com/gpu=0.
	_, err = ps[KataGPU].Client().Allocate(ctx, oneContainer("0\x00../x"))
	expectStatus(t, "Allocate [0\\0../x]", err, codes.InvalidArgument, "NUL byte")
	// An empty GetPreferredAllocation is answered, with nothing.
	pr, err := ps[KataGPU].Client().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{})
	if err != nil || len(pr.GetContainerResponses()) != 0 {
		t.Errorf("empty GetPreferredAllocation: %v %v, want an empty answer", pr, err)
	}
	a, err := s.k.Allocate(KataGPU, []string{"1", "0"})
	if err != nil {
		s.fatalf("kubelet's Allocate afterwards: %v", err)
	}
	checkKataAllocation(t, a.Response, KataGPU, []string{"1", "0"})
}
