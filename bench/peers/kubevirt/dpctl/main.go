// Command sdp-kubevirt-dpctl calls a device plugin over its unix socket with grpc-go (the device
// plugin API v1beta1 client as KubeVirt vendors it) and prints one line: for allocate, the
// response as JSON or "error code=<gRPC code> message=<message>"; for list, the first
// ListAndWatch response as JSON (then it closes the stream). Exit 0 either way; 1 when the
// plugin cannot be reached.
//
//	sdp-kubevirt-dpctl allocate SOCKET ID...
//	sdp-kubevirt-dpctl list SOCKET
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pluginapi "kubevirt.io/kubevirt/pkg/virt-handler/device-manager/deviceplugin/v1beta1"
)

func main() {
	if len(os.Args) < 3 || (os.Args[1] != "allocate" && os.Args[1] != "list") || (os.Args[1] == "allocate") != (len(os.Args) > 3) {
		fmt.Fprintln(os.Stderr, "usage: sdp-kubevirt-dpctl allocate SOCKET ID... | list SOCKET")
		os.Exit(2)
	}
	sock := os.Args[2]
	conn, err := grpc.NewClient("passthrough:///"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := pluginapi.NewDevicePluginClient(conn)
	if os.Args[1] == "list" {
		stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
		var first *pluginapi.ListAndWatchResponse
		if err == nil {
			first, err = stream.Recv()
		}
		if err != nil {
			fmt.Printf("error code=%s message=%q\n", status.Code(err), status.Convert(err).Message())
			return
		}
		b, _ := json.Marshal(first)
		fmt.Println(string(b))
		return
	}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: os.Args[3:]}},
	})
	if err != nil {
		st := status.Convert(err)
		if st.Code().String() == "Unavailable" && ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("error code=%s message=%q\n", st.Code(), st.Message())
		return
	}
	b, _ := json.Marshal(resp)
	fmt.Println(string(b))
}
