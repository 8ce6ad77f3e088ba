package kubelet

import (
	"fmt"
	"time"

	api "sdp/v1beta1"
)

// PollInterval is how often Poll re-checks its condition.
const PollInterval = 5 * time.Millisecond

// Poll checks cond until it is true or timeout passes; it reports whether cond became true.
// cond is always checked at least once, and once more after the bound.
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollEvery(PollInterval, timeout, cond)
}

// PollEvery is Poll checking every interval.
func PollEvery(interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(interval)
	}
}

// WaitRegistered waits until resource has registered successfully at least count times in
// total and returns the current (newest) registration.
func (k *MockKubelet) WaitRegistered(resource string, count int, timeout time.Duration) (*Plugin, error) {
	if !Poll(timeout, func() bool { return k.Registrations(resource) >= count }) {
		return nil, fmt.Errorf("resource %s registered %d time(s) within %v, want %d",
			resource, k.Registrations(resource), timeout, count)
	}
	p := k.Current(resource)
	if p == nil {
		return nil, fmt.Errorf("resource %s registered but has no current endpoint (disconnected)", resource)
	}
	return p, nil
}

// DevicePredicate judges a full device list.
type DevicePredicate func([]*api.Device) bool

// WaitDevices waits until the newest snapshot on the current endpoint of resource satisfies
// pred, and returns that device list.
func (k *MockKubelet) WaitDevices(resource string, pred DevicePredicate, timeout time.Duration) ([]*api.Device, error) {
	var last []*api.Device
	var have bool
	ok := Poll(timeout, func() bool {
		p := k.Current(resource)
		if p == nil {
			return false
		}
		s, ok := p.Latest()
		if !ok {
			return false
		}
		last, have = s.Devices, true
		return pred(s.Devices)
	})
	if !ok {
		if !have {
			return nil, fmt.Errorf("no ListAndWatch snapshot for %s within %v", resource, timeout)
		}
		return last, fmt.Errorf("device list of %s did not reach the expected state within %v; last: %s",
			resource, timeout, DescribeDevices(last))
	}
	return last, nil
}

// AllHealth is true for a non-empty list whose devices all have the given health.
func AllHealth(health string) DevicePredicate {
	return func(devs []*api.Device) bool {
		if len(devs) == 0 {
			return false
		}
		for _, d := range devs {
			if d.Health != health {
				return false
			}
		}
		return true
	}
}

// CountHealth is true when the list has n devices, all with the given health.
func CountHealth(n int, health string) DevicePredicate {
	all := AllHealth(health)
	return func(devs []*api.Device) bool { return len(devs) == n && all(devs) }
}
