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
