// Command peer: the grpc-go side of the fuzz corpus capture (fuzz/capture/capture.sh).
//
//	peer client SOCKET   one connection per call: every DevicePlugin method and health Check
//	peer server SOCKET   serves Registration.Register and grpc.health.v1 until killed
//	peer protos DIR      writes one grpc-go (golang/protobuf) encoding per message type
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/golang/protobuf/proto"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "sdp/v1beta1"
)

type reg struct{}

func (reg) Register(context.Context, *pb.RegisterRequest) (*pb.Empty, error) { return &pb.Empty{}, nil }

func dial(sock string) *grpc.ClientConn {
	cc, err := grpc.Dial("unix://"+sock, grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return cc
}

func client(sock string) {
	calls := []func(ctx context.Context, cc *grpc.ClientConn) error{
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewDevicePluginClient(cc).GetDevicePluginOptions(ctx, &pb.Empty{})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			s, err := pb.NewDevicePluginClient(cc).ListAndWatch(ctx, &pb.Empty{})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewDevicePluginClient(cc).Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{
				{DevicesIds: []string{"0", "1"}}, {DevicesIds: []string{"dev-2"}}}})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewDevicePluginClient(cc).Allocate(ctx, &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{
				{DevicesIds: []string{"nope"}}}})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewDevicePluginClient(cc).GetPreferredAllocation(ctx, &pb.PreferredAllocationRequest{
				ContainerRequests: []*pb.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"0", "1", "dev-2"},
					MustIncludeDeviceIDs: []string{"1"}, AllocationSize: 2}}})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewDevicePluginClient(cc).PreStartContainer(ctx, &pb.PreStartContainerRequest{DevicesIds: []string{"0"}})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			s, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = s.Recv()
			}
			return err
		},
		func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := pb.NewRegistrationClient(cc).Register(ctx, &pb.RegisterRequest{Version: "v1beta1"})
			return err
		},
	}
	for i, call := range calls {
		cc := dial(sock)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := call(ctx, cc)
		cancel()
		cc.Close()
		fmt.Printf("call %d: %v\n", i, err)
	}
}

func server(sock string) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	s := grpc.NewServer()
	pb.RegisterRegistrationServer(s, reg{})
	hs := health.NewServer()
	hs.SetServingStatus("readiness", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	_ = s.Serve(l)
}

func protos(dir string) {
	msgs := map[string]proto.Message{
		"register":     &pb.RegisterRequest{Version: "v1beta1", Endpoint: "fuzz-1-1.sock", ResourceName: "fuzz.dev/dev", Options: &pb.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}},
		"allocate":     &pb.AllocateRequest{ContainerRequests: []*pb.ContainerAllocateRequest{{DevicesIds: []string{"0", "1"}}, {DevicesIds: []string{"dev-2"}}}},
		"preferred":    &pb.PreferredAllocationRequest{ContainerRequests: []*pb.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: []string{"0", "1"}, MustIncludeDeviceIDs: []string{"1"}, AllocationSize: 1}}},
		"prestart":     &pb.PreStartContainerRequest{DevicesIds: []string{"0"}},
		"health":       &healthpb.HealthCheckRequest{Service: "readiness"},
		"listandwatch": &pb.ListAndWatchResponse{Devices: []*pb.Device{{ID: "0", Health: "Healthy", Topology: &pb.TopologyInfo{Nodes: []*pb.NUMANode{{ID: 1}}}}, {ID: "1", Health: "Unhealthy"}}},
		"allocate-response": &pb.AllocateResponse{ContainerResponses: []*pb.ContainerAllocateResponse{{Envs: map[string]string{"A": "b"},
			Annotations: map[string]string{"k": "v"}, Devices: []*pb.DeviceSpec{{ContainerPath: "/dev/kvm", HostPath: "/dev/kvm", Permissions: "rw"}},
			CdiDevices: []*pb.CDIDevice{{Name: "hyperlight.dev/hypervisor=kvm"}}}}},
	}
	for name, m := range msgs {
		b, err := proto.Marshal(m)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "grpcgo-"+name), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: peer client|server SOCKET")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "client":
		client(os.Args[2])
	case "protos":
		protos(os.Args[2])
	default:
		server(os.Args[2])
	}
}
