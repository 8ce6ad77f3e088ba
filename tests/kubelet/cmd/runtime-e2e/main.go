// Command runtime-e2e is the kubelet side of `make test-runtime` (tests/runtime/run.sh): it
// serves the mock kubelet (package sdp/kubelet) in-process on -dir, the host side of the
// directory bind-mounted into a plugin container as /var/lib/kubelet/device-plugins, waits until
// -resource has registered, then reads commands from stdin, one a line, until end of input:
//
//	allocate   waits until the current endpoint advertises at least -count healthy devices,
//	           allocates the first -count of them (sorted IDs) in kubelet's order and prints
//	           the answer as one JSON line on stdout:
//	           {"resource":"...","devices":[...],"calls":[...],"cdi":["vendor/class=name",...],
//	            "envs":{...},"annotations":{...},"mounts":N,"deviceSpecs":N}
//	devices    waits until the current endpoint advertises at least -count devices, of any
//	           health, and prints how many, by health, as one JSON line on stdout:
//	           {"resource":"...","devices":N,"health":{"Healthy":N,"Unhealthy":N}}
//	           (the arm64 hyperlight plugin under qemu-user, which cannot run its probe)
//
// The kubelet keeps serving between commands (the plugin stays registered, as on a node).
// The event log goes to stderr. Exit status 1 (with the reason on stderr) on any failure.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"sdp/kubelet"
	api "sdp/v1beta1"
)

type answer struct {
	Resource    string            `json:"resource"`
	Devices     []string          `json:"devices"`
	Calls       []string          `json:"calls"`
	CDI         []string          `json:"cdi"`
	Envs        map[string]string `json:"envs"`
	Annotations map[string]string `json:"annotations"`
	Mounts      int               `json:"mounts"`
	DeviceSpecs int               `json:"deviceSpecs"`
}

func fail(k *kubelet.MockKubelet, format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "runtime-e2e: "+format+"\n", a...)
	if k != nil {
		fmt.Fprint(os.Stderr, k.EventLog())
		k.Stop()
	}
	os.Exit(1)
}

func main() {
	dir := flag.String("dir", "", "device plugin directory (kubelet.sock is served here)")
	resource := flag.String("resource", "", "extended resource name to allocate")
	count := flag.Int("count", 1, "devices to allocate")
	timeout := flag.Duration("timeout", 30*time.Second, "bound for registration and devices")
	flag.Parse()
	if *dir == "" || *resource == "" || *count < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: runtime-e2e -dir DIR -resource NAME [-count N] [-timeout D]")
		os.Exit(2)
	}
	k, err := kubelet.Start(kubelet.Config{Dir: *dir,
		OnEvent: func(e kubelet.Event) {
			if e.Kind != "devices" {
				fmt.Fprintln(os.Stderr, e.String())
			}
		}})
	if err != nil {
		fail(nil, "%v", err)
	}
	if _, err := k.WaitRegistered(*resource, 1, *timeout); err != nil {
		fail(k, "%v", err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "allocate":
			allocate(k, *resource, *count, *timeout)
		case "devices":
			devices(k, *resource, *count, *timeout)
		default:
			fail(k, "unknown command %q", in.Text())
		}
	}
	k.Stop()
}

func allocate(k *kubelet.MockKubelet, resource string, count int, timeout time.Duration) {
	devs, err := k.WaitDevices(resource, func(d []*api.Device) bool {
		return len(d) >= count && kubelet.AllHealth(kubelet.Healthy)(d)
	}, timeout)
	if err != nil {
		fail(k, "%v", err)
	}
	ids := make([]string, 0, len(devs))
	for _, d := range devs {
		ids = append(ids, d.ID)
	}
	sort.Strings(ids)
	ids = ids[:count]
	a, err := k.Allocate(resource, ids)
	if err != nil {
		fail(k, "Allocate %v: %v", ids, err)
	}
	out := answer{Resource: resource, Devices: ids, Calls: a.Calls, CDI: []string{},
		Envs: a.Response.Envs, Annotations: a.Response.Annotations,
		Mounts: len(a.Response.Mounts), DeviceSpecs: len(a.Response.Devices)}
	for _, c := range a.Response.CdiDevices {
		out.CDI = append(out.CDI, c.Name)
	}
	b, err := json.Marshal(out)
	if err != nil {
		fail(k, "%v", err)
	}
	fmt.Println(string(b))
}

type listing struct {
	Resource string         `json:"resource"`
	Devices  int            `json:"devices"`
	Health   map[string]int `json:"health"`
}

func devices(k *kubelet.MockKubelet, resource string, count int, timeout time.Duration) {
	devs, err := k.WaitDevices(resource, func(d []*api.Device) bool { return len(d) >= count }, timeout)
	if err != nil {
		fail(k, "%v", err)
	}
	out := listing{Resource: resource, Devices: len(devs), Health: map[string]int{}}
	for _, d := range devs {
		out.Health[d.Health]++
	}
	b, err := json.Marshal(out)
	if err != nil {
		fail(k, "%v", err)
	}
	fmt.Println(string(b))
}
