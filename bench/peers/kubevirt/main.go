// Command sdp-kubevirt-pci-plugin runs KubeVirt's PCI host device plugin (kubevirt.io/kubevirt
// v1.7.0, pkg/virt-handler/device-manager) outside virt-handler, constructed the way
// virt-handler constructs it: a DeviceController (NewDeviceController, as
// pkg/virt-handler/vm.go calls it, with max-devices 1000 and "rwm") whose cluster configuration
// is a KubeVirt CR with spec.configuration.permittedHostDevices.pciHostDevices, one entry per
// -selector (vendor:device) for -resource. Run discovers the permitted devices with KubeVirt's
// own code (discoverPermittedHostPCIDevices: /sys/bus/pci/devices, vendor:device from each
// function's uevent PCI_ID, bound to vfio-pci, its iommu_group) and starts one
// NewPCIDevicePlugin per resource, which serves kubevirt-<resource>.sock in
// /var/lib/kubelet/device-plugins, registers at kubelet.sock there and watches
// /proc/1/root/dev/vfio/<group> for health.
//
// The cluster configuration comes from KubeVirt's fake informer (pkg/testutils) holding that CR,
// not from an API server; the permanent plugins (kvm, tun, vhost-net) are left out so that only
// the PCI plugin registers, and the feature gate DisableMDEVConfiguration is set (no API server
// to read the Node's mediated device types from). SIGTERM or SIGINT stops the controller, which stops the plugins
// (each sends an empty device list before it goes), and the command exits 0.
//
//	sdp-kubevirt-pci-plugin [-resource nvidia.com/gpu] [-selector 10de:2330,10de:20b0]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/testutils"
	devicemanager "kubevirt.io/kubevirt/pkg/virt-handler/device-manager"
)

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "the resource name of the permitted PCI devices")
	selectors := flag.String("selector", "10de:2330,10de:20b0", "comma-separated PCI vendor:device selectors (H100 SXM5 80GB, A100 SXM4 40GB)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "sdp-kubevirt-pci-plugin: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	var pci []v1.PciHostDevice
	for _, s := range strings.Split(*selectors, ",") {
		if s = strings.TrimSpace(s); s != "" {
			pci = append(pci, v1.PciHostDevice{PCIVendorSelector: s, ResourceName: *resource})
		}
	}
	cfg, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{
		PermittedHostDevices: &v1.PermittedHostDevices{PciHostDevices: pci},
		// no mediated devices here: virt-handler would read the Node through the API server for
		// their types on every configuration change (this feature gate is how an operator says so)
		DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{"DisableMDEVConfiguration"}},
	})
	host, _ := os.Hostname()
	// as pkg/virt-handler/vm.go: maxDevices 1000 (cmd/virt-handler's default), "rwm" on cgroup v2;
	// no clientset: it is only used to read the Node for mediated device types.
	dc := devicemanager.NewDeviceController(host, 1000, "rwm", nil, cfg, nil)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { dc.Run(stop); close(done) }()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	close(stop)
	<-done
}
