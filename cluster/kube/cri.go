package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criClean is `sdp-kube cri-clean ENDPOINT`, used by make cluster-down once the kubelet is
// stopped: every pod sandbox the runtime still has is stopped (its containers killed, its network
// torn down by the CNI plugins, its network namespace removed) and removed, through the CRI as
// the kubelet itself would. Prints one line per sandbox; exit 1 if one could not be removed.
func criClean(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sdp-kube cri-clean unix:///path/to/containerd.sock")
		return 2
	}
	conn, err := grpc.NewClient(args[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-clean: %s: %v\n", args[0], err)
		return 1
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-clean: ListPodSandbox: %v\n", err)
		return 1
	}
	rc := 0
	for _, sb := range sbs.Items {
		name := sb.Metadata.Namespace + "/" + sb.Metadata.Name
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-clean: StopPodSandbox %s (%s): %v\n", name, sb.Id[:12], err)
			rc = 1
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-clean: RemovePodSandbox %s (%s): %v\n", name, sb.Id[:12], err)
			rc = 1
			continue
		}
		fmt.Printf("removed pod sandbox %s (%s)\n", name, sb.Id[:12])
	}
	// containers outside any sandbox (none with the kubelet; checked anyway)
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cri-clean: ListContainers: %v\n", err)
		return 1
	}
	for _, c := range cs.Containers {
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			fmt.Fprintf(os.Stderr, "cri-clean: RemoveContainer %s: %v\n", c.Id[:12], err)
			rc = 1
		}
	}
	return rc
}
