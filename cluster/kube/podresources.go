package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// podResources is `sdp-kube podresources SOCKET`: the kubelet's pod-resources API (the one
// monitoring agents and Kata's runtime read) asked List and GetAllocatableResources over its unix
// socket; both answers printed as one JSON object {"list": ..., "allocatable": ...} with the
// API's own field names. Exit 1 if either call fails.
func podResources(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sdp-kube podresources /var/lib/kubelet/pod-resources/kubelet.sock")
		return 2
	}
	conn, err := grpc.NewClient("unix://"+args[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources: %s: %v\n", args[0], err)
		return 1
	}
	defer conn.Close()
	c := podresourcesapi.NewPodResourcesListerClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources: List: %v\n", err)
		return 1
	}
	alloc, err := c.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources: GetAllocatableResources: %v\n", err)
		return 1
	}
	out := struct {
		List        *podresourcesapi.ListPodResourcesResponse     `json:"list"`
		Allocatable *podresourcesapi.AllocatableResourcesResponse `json:"allocatable"`
	}{list, alloc}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "podresources: %v\n", err)
		return 1
	}
	return 0
}
