package kubelet

import (
	"context"
	"fmt"
	"strings"
	"time"

	api "sdp/v1beta1"
)

// Allocation is what kubelet got for one container.
type Allocation struct {
	Calls     []string                         // RPCs made, in order
	Preferred *api.PreferredAllocationResponse // nil unless GetPreferredAllocation was called
	Response  *api.ContainerAllocateResponse   // ContainerResponses[0]
	Full      *api.AllocateResponse            // the whole answer
}

// Allocate allocates ids of resource to one container in kubelet's order: GetPreferredAllocation
// only if the plugin's options ask for it (available = healthy devices of the newest snapshot,
// allocation size = len(ids)), Allocate with exactly one ContainerAllocateRequest, then
// PreStartContainer only if pre_start_required, with kubelet's 30 s deadline. Calls on an
// endpoint whose stream ended fail as kubelet's do ("endpoint ... has been stopped").
func (k *MockKubelet) Allocate(resource string, ids []string) (*Allocation, error) {
	p := k.Current(resource)
	if p == nil {
		return nil, fmt.Errorf("unknown resource %s (not registered)", resource)
	}
	if ended, _ := p.Ended(); ended {
		return nil, fmt.Errorf("endpoint %v has been stopped", p.Socket)
	}
	a := &Allocation{}
	defer func() {
		k.emit(Event{Kind: "allocate", Resource: resource, Endpoint: p.Endpoint,
			Text: fmt.Sprintf("ids=%s calls=%s", strings.Join(ids, ","), strings.Join(a.Calls, ","))})
	}()
	if p.Options.GetGetPreferredAllocationAvailable() {
		var available []string
		if s, ok := p.Latest(); ok {
			for _, d := range s.Devices {
				if d.Health == Healthy {
					available = append(available, d.ID)
				}
			}
		}
		a.Calls = append(a.Calls, "GetPreferredAllocation")
		pref, err := p.client.GetPreferredAllocation(context.Background(), &api.PreferredAllocationRequest{
			ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
				AvailableDeviceIDs: available, AllocationSize: int32(len(ids)),
			}},
		})
		if err != nil {
			return a, err
		}
		a.Preferred = pref
	}
	a.Calls = append(a.Calls, "Allocate")
	resp, err := p.client.Allocate(context.Background(), &api.AllocateRequest{
		ContainerRequests: []*api.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return a, err
	}
	a.Full = resp
	if len(resp.ContainerResponses) == 0 {
		return a, fmt.Errorf("no containers return in allocation response %v", resp)
	}
	a.Response = resp.ContainerResponses[0]
	if p.Options.GetPreStartRequired() {
		a.Calls = append(a.Calls, "PreStartContainer")
		ctx, cancel := context.WithTimeout(context.Background(), PreStartContainerTimeoutSecs*time.Second)
		defer cancel()
		if _, err := p.client.PreStartContainer(ctx, &api.PreStartContainerRequest{DevicesIds: ids}); err != nil {
			return a, err
		}
	}
	return a, nil
}

// Preferred is one GetPreferredAllocation as kubelet's device manager makes it (v1.26,
// shared/reference/kubelet-allocation.md) for a container asking size devices of resource, with
// taken devices already allocated to other containers, and a NUMA affinity hint (nil: none):
//   - free = the healthy devices of the newest snapshot that are not taken;
//   - no hint: available = free, no must-include;
//   - a hint: aligned = the free devices whose TopologyInfo holds the hint's node; more than size
//     aligned: available = aligned; fewer: must-include = aligned, available = free; exactly size:
//     no call (kubelet takes them; Called is false).
//
// Answer is what kubelet would then Allocate: the plugin's answer, checked as kubelet checks it
// (size IDs, a subset of available, holding every must-include ID).
type Preferred struct {
	Called    bool
	Available []string
	Must      []string
	Answer    []string
}

func (k *MockKubelet) Prefer(resource string, size int, taken []string, hint *int64) (*Preferred, error) {
	p := k.Current(resource)
	if p == nil {
		return nil, fmt.Errorf("unknown resource %s (not registered)", resource)
	}
	s, ok := p.Latest()
	if !ok {
		return nil, fmt.Errorf("%s: no device list yet", resource)
	}
	out := &Preferred{}
	isTaken := map[string]bool{}
	for _, id := range taken {
		isTaken[id] = true
	}
	var free, aligned []string
	for _, d := range s.Devices {
		if d.Health != Healthy || isTaken[d.ID] {
			continue
		}
		free = append(free, d.ID)
		if hint != nil && d.Topology != nil {
			for _, n := range d.Topology.Nodes {
				if n.ID == *hint {
					aligned = append(aligned, d.ID)
				}
			}
		}
	}
	switch {
	case hint == nil:
		out.Available = free
	case len(aligned) > size:
		out.Available = aligned
	case len(aligned) < size:
		out.Must, out.Available = aligned, free
	default:
		out.Answer = aligned
		return out, nil
	}
	out.Called = true
	resp, err := p.client.GetPreferredAllocation(context.Background(), &api.PreferredAllocationRequest{
		ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: out.Available, MustIncludeDeviceIDs: out.Must, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return out, err
	}
	if len(resp.ContainerResponses) != 1 {
		return out, fmt.Errorf("%d container responses, want 1", len(resp.ContainerResponses))
	}
	out.Answer = resp.ContainerResponses[0].DeviceIDs
	return out, checkPreferred(out, size)
}

// checkPreferred is kubelet's check of the answer: size distinct IDs of available, every
// must-include one among them.
func checkPreferred(p *Preferred, size int) error {
	avail, seen := map[string]bool{}, map[string]bool{}
	for _, id := range p.Available {
		avail[id] = true
	}
	for _, id := range p.Answer {
		if !avail[id] || seen[id] {
			return fmt.Errorf("answer %v: %q is not available or repeated (available %v)", p.Answer, id, p.Available)
		}
		seen[id] = true
	}
	for _, id := range p.Must {
		if !seen[id] {
			return fmt.Errorf("answer %v lacks must-include %q", p.Answer, id)
		}
	}
	if len(p.Answer) != size {
		return fmt.Errorf("answer %v: %d IDs, want %d", p.Answer, len(p.Answer), size)
	}
	return nil
}
