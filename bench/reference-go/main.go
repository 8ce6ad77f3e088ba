// Command reference-go-plugin is the benchmark's reference: a device plugin written the way most
// plugins are, with plain grpc-go and fsnotify from Debian. It advertises DEVICE_COUNT devices
// of reference.dev/device, writes one CDI JSON spec at start, answers Allocate with a CDI name,
// watches the device-plugins directory and restarts its server and re-registers when
// kubelet.sock is created, and marks every device Unhealthy while <root>/dev/kvm is missing
// (fsnotify on <root>/dev). Paths are under $SDP_TEST_ROOT (default /).
package main

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"

	api "sdp/v1beta1"
)

const (
	resource = "reference.dev/device"
	endpoint = "reference.sock"
)

type plugin struct {
	root, kubeletDir, devPath string
	count                     int

	mu      sync.Mutex
	healthy bool
	subs    map[chan struct{}]struct{}
	server  *grpc.Server
}

func (p *plugin) devices() []*api.Device {
	p.mu.Lock()
	h := "Healthy"
	if !p.healthy {
		h = "Unhealthy"
	}
	p.mu.Unlock()
	devs := make([]*api.Device, p.count)
	for i := range devs {
		devs[i] = &api.Device{ID: "dev" + strconv.Itoa(i), Health: h}
	}
	return devs
}

func (p *plugin) setHealth(h bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healthy == h {
		return
	}
	p.healthy = h
	for c := range p.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *plugin) ListAndWatch(_ *api.Empty, s api.DevicePlugin_ListAndWatchServer) error {
	c := make(chan struct{}, 1)
	p.mu.Lock()
	p.subs[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.subs, c)
		p.mu.Unlock()
	}()
	for {
		if err := s.Send(&api.ListAndWatchResponse{Devices: p.devices()}); err != nil {
			return err
		}
		select {
		case <-c:
		case <-s.Context().Done():
			return nil
		}
	}
}

func (p *plugin) GetPreferredAllocation(_ context.Context, r *api.PreferredAllocationRequest) (*api.PreferredAllocationResponse, error) {
	resp := &api.PreferredAllocationResponse{}
	for _, cr := range r.ContainerRequests {
		ids := append([]string(nil), cr.MustIncludeDeviceIDs...)
		for _, id := range cr.AvailableDeviceIDs {
			if len(ids) >= int(cr.AllocationSize) {
				break
			}
			ids = append(ids, id)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *plugin) Allocate(_ context.Context, r *api.AllocateRequest) (*api.AllocateResponse, error) {
	resp := &api.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerAllocateResponse{
			CdiDevices: []*api.CDIDevice{{Name: resource + "=kvm"}},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *api.PreStartContainerRequest) (*api.PreStartContainerResponse, error) {
	return &api.PreStartContainerResponse{}, nil
}

// writeCDI writes the CDI spec as JSON.
func (p *plugin) writeCDI() error {
	spec := map[string]interface{}{
		"cdiVersion": "0.3.0",
		"kind":       resource,
		"devices": []interface{}{map[string]interface{}{
			"name": "kvm",
			"containerEdits": map[string]interface{}{
				"deviceNodes": []interface{}{map[string]interface{}{"path": "/dev/kvm", "type": "c", "permissions": "rw"}},
			},
		}},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(p.root, "var/run/cdi")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "reference.json"), b, 0o644)
}

// serve (re)starts the gRPC server on the plugin socket and registers with kubelet.
func (p *plugin) serve() error {
	p.mu.Lock()
	if p.server != nil {
		p.server.Stop()
	}
	p.mu.Unlock()
	sock := filepath.Join(p.kubeletDir, endpoint)
	os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	api.RegisterDevicePluginServer(srv, p)
	go srv.Serve(lis)
	p.mu.Lock()
	p.server = srv
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, filepath.Join(p.kubeletDir, "kubelet.sock"), grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", addr)
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = api.NewRegistrationClient(conn).Register(ctx, &api.RegisterRequest{
		Version: "v1beta1", Endpoint: endpoint, ResourceName: resource,
		Options: &api.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	return err
}

func main() {
	root := os.Getenv("SDP_TEST_ROOT")
	if root == "" {
		root = "/"
	}
	count := 1
	if v := os.Getenv("DEVICE_COUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			log.Fatalf("invalid DEVICE_COUNT %q", v)
		}
		count = n
	}
	p := &plugin{root: root, kubeletDir: filepath.Join(root, "var/lib/kubelet/device-plugins"),
		devPath: filepath.Join(root, "dev/kvm"), count: count, subs: map[chan struct{}]struct{}{}}
	_, err := os.Stat(p.devPath)
	p.healthy = err == nil
	if err := p.writeCDI(); err != nil {
		log.Fatalf("write CDI spec: %v", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Add(p.kubeletDir); err != nil {
		log.Fatal(err)
	}
	if err := w.Add(filepath.Dir(p.devPath)); err != nil {
		log.Fatal(err)
	}
	if err := p.serve(); err != nil {
		log.Printf("register: %v", err)
	}
	kubeletSock := filepath.Join(p.kubeletDir, "kubelet.sock")
	for {
		select {
		case ev := <-w.Events:
			switch {
			case ev.Name == kubeletSock && ev.Op&fsnotify.Create != 0:
				if err := p.serve(); err != nil {
					log.Printf("re-register: %v", err)
				}
			case ev.Name == p.devPath && ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0:
				p.setHealth(false)
			case ev.Name == p.devPath && ev.Op&fsnotify.Create != 0:
				p.setHealth(true)
			}
		case err := <-w.Errors:
			log.Printf("fsnotify: %v", err)
		}
	}
}
