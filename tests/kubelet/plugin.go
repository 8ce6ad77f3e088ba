package kubelet

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"

	api "sdp/v1beta1"
)

// Plugin is one successful registration: the dial-back connection kubelet keeps to a plugin
// endpoint, its options and the ListAndWatch snapshots received on it.
type Plugin struct {
	Resource   string
	Endpoint   string // as sent in RegisterRequest
	Socket     string // filepath.Join(kubelet dir, Endpoint)
	Request    *api.RegisterRequest
	Options    *api.DevicePluginOptions // from GetDevicePluginOptions (what kubelet uses)
	Registered time.Time
	Seq        int // 1 for the first registration of the resource, 2 for the next...

	k          *MockKubelet
	conn       *grpc.ClientConn
	client     api.DevicePluginClient
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan struct{} // closed when the ListAndWatch goroutine returns
	closeOnEnd bool          // kubelet closes the connection when the stream ends

	// guarded by k.mu
	snapshots []Snapshot
	ended     bool
	endErr    error
	endTime   time.Time
	closed    bool
}

// Client is the DevicePlugin client on kubelet's connection.
func (p *Plugin) Client() api.DevicePluginClient { return p.client }

// Conn is kubelet's connection to the plugin.
func (p *Plugin) Conn() *grpc.ClientConn { return p.conn }

// run is kubelet's client.Run: ListAndWatch with no deadline, every response recorded; when the
// stream ends for any reason kubelet logs it and closes the connection (disconnectClient).
func (p *Plugin) run() {
	defer close(p.done)
	stream, err := p.client.ListAndWatch(p.ctx, &api.Empty{})
	if err == nil {
		for {
			var resp *api.ListAndWatchResponse
			resp, err = stream.Recv()
			if err != nil {
				break
			}
			s := Snapshot{Time: time.Now(), Devices: resp.Devices}
			p.k.mu.Lock()
			p.snapshots = append(p.snapshots, s)
			n := len(p.snapshots)
			p.k.mu.Unlock()
			p.k.emit(Event{Time: s.Time, Kind: "devices", Resource: p.Resource, Endpoint: p.Endpoint,
				Text: fmt.Sprintf("snapshot %d: %s", n, DescribeDevices(s.Devices))})
		}
	}
	if err == io.EOF {
		err = fmt.Errorf("EOF (stream closed with OK status)")
	}
	p.k.mu.Lock()
	p.ended, p.endErr, p.endTime = true, err, time.Now()
	closeConn := p.closeOnEnd
	p.k.mu.Unlock()
	p.k.emit(Event{Kind: "stream-ended", Resource: p.Resource, Endpoint: p.Endpoint,
		Text: fmt.Sprintf("stream ended: %v", err)})
	if closeConn {
		p.closeConn()
	}
}

func (p *Plugin) closeConn() {
	p.k.mu.Lock()
	already := p.closed
	p.closed = true
	p.k.mu.Unlock()
	if !already {
		p.conn.Close()
	}
}

// disconnect closes kubelet's connection to the plugin (the plugin sees EOF).
func (p *Plugin) disconnect(reason string) {
	p.k.mu.Lock()
	already := p.closed
	p.k.mu.Unlock()
	if already {
		return
	}
	p.cancel()
	p.closeConn()
	p.k.emit(Event{Kind: "disconnect", Resource: p.Resource, Endpoint: p.Endpoint, Text: reason})
}

// EndStream cancels kubelet's ListAndWatch call (the plugin sees RST_STREAM CANCEL). With
// keepConn the connection stays open so the plugin must notice the stream end by itself;
// without it kubelet then closes the connection, as its disconnectClient does.
func (p *Plugin) EndStream(keepConn bool) {
	p.k.mu.Lock()
	p.closeOnEnd = !keepConn
	p.k.mu.Unlock()
	p.cancel()
}

// CloseConn closes the connection without cancelling the call first (connection loss).
func (p *Plugin) CloseConn() { p.disconnect("connection closed by kubelet") }

// Snapshots returns a copy of the ListAndWatch responses received so far.
func (p *Plugin) Snapshots() []Snapshot {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	return append([]Snapshot(nil), p.snapshots...)
}

// Latest returns the newest snapshot, if any.
func (p *Plugin) Latest() (Snapshot, bool) {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	if len(p.snapshots) == 0 {
		return Snapshot{}, false
	}
	return p.snapshots[len(p.snapshots)-1], true
}

// Ended reports whether the ListAndWatch stream ended, and with which error.
func (p *Plugin) Ended() (bool, error) {
	p.k.mu.Lock()
	defer p.k.mu.Unlock()
	return p.ended, p.endErr
}

// WaitEnded waits until the ListAndWatch stream ended; it returns the stream's error.
func (p *Plugin) WaitEnded(timeout time.Duration) (error, bool) {
	select {
	case <-p.done:
		_, err := p.Ended()
		return err, true
	case <-time.After(timeout):
		return nil, false
	}
}

// WaitSnapshots waits until at least n snapshots arrived and returns them.
func (p *Plugin) WaitSnapshots(n int, timeout time.Duration) ([]Snapshot, error) {
	var got []Snapshot
	ok := Poll(timeout, func() bool {
		got = p.Snapshots()
		return len(got) >= n
	})
	if !ok {
		return got, fmt.Errorf("%d ListAndWatch snapshot(s) from %s after %v, want %d", len(got), p.Endpoint, timeout, n)
	}
	return got, nil
}

// DescribeDevices summarises a device list: count, health counts, first IDs.
func DescribeDevices(devs []*api.Device) string {
	health := map[string]int{}
	var ids []string
	for i, d := range devs {
		health[d.Health]++
		if i < 3 {
			ids = append(ids, d.ID)
		}
	}
	if len(devs) > 3 {
		ids = append(ids, "...", devs[len(devs)-1].ID)
	}
	var hs []string
	for _, h := range []string{Healthy, Unhealthy} {
		if health[h] > 0 {
			hs = append(hs, fmt.Sprintf("%d %s", health[h], h))
			delete(health, h)
		}
	}
	for h, n := range health {
		hs = append(hs, fmt.Sprintf("%d %q", n, h))
	}
	return fmt.Sprintf("%d devices [%s] (%s)", len(devs), strings.Join(ids, " "), strings.Join(hs, ", "))
}
