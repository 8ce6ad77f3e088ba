package main

// The MSHV live check (`TEST_MSHV_LIVE=1 make test-live-mshv`) runs on the host itself, which
// must have /dev/mshv. It does not touch the host's kubelet or CDI directories: the daemon runs
// under SDP_TEST_ROOT on a temporary node whose dev/mshv is a node with the host device's
// number, so the daemon's probe reaches the real hypervisor.

import (
	"fmt"
	"os"
	"time"

	"sdp/kubelet"
)

const mshvPath = "/dev/mshv"

func runMSHV(build string) int {
	if build == "" {
		fmt.Fprintln(os.Stderr, "live-kvm -mshv: -build BUILD_DIR is required")
		return 2
	}
	bin, err := kubelet.Executable(build, kubelet.HyperlightBinary)
	if err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm -mshv:", err)
		return 1
	}
	r := &liveRun{cdiName: kubelet.HyperlightResource + "=mshv"}
	var node *kubelet.Node
	defer func() {
		if node != nil {
			node.Remove()
		}
	}()
	return r.run(func() {
		r.step("preflight", func() string {
			maj, min, err := charDev(mshvPath)
			r.check(err)
			node, err = kubelet.NewNode()
			r.check(err)
			r.kdir, r.cdi = node.KubeletDir, node.CDIPath()
			r.check(kubelet.Mknod(node.DevDir+"/mshv", maj, min))
			return fmt.Sprintf("%s is %d:%d; node root %s with dev/mshv %d:%d", mshvPath, maj, min, node.Root, maj, min)
		})
		r.step("mock-kubelet", func() string {
			k, err := kubelet.Start(kubelet.Config{Dir: node.KubeletDir})
			r.check(err)
			r.k = k
			return "serving " + k.SocketPath()
		})
		r.step("daemon-start", func() string {
			r.nextReg = 1
			d, err := kubelet.StartDaemon(bin, kubelet.PlainDaemonEnv(node.Root))
			r.check(err)
			r.daemons = append(r.daemons, &started{d: d})
			return fmt.Sprintf("pid %d, SDP_TEST_ROOT=%s", d.Pid(), node.Root)
		})
		r.step("registered", r.registered)
		r.step("healthy", func() string { return r.healthy(startBound) })
		r.step("cdi-spec", func() string {
			b, err := os.ReadFile(r.cdi)
			r.check(err)
			spec, err := kubelet.ParseCDI(b)
			r.check(err)
			if spec.Kind != resource || len(spec.Devices) != 1 || spec.Devices[0].Name != "mshv" ||
				len(spec.Devices[0].ContainerEdits.DeviceNodes) != 1 ||
				spec.Devices[0].ContainerEdits.DeviceNodes[0].Path != mshvPath {
				r.fail("unexpected spec:\n%s", b)
			}
			return fmt.Sprintf("kind %s, device mshv, node %s", spec.Kind, mshvPath)
		})
		r.step("allocate", r.allocateOK)
		r.step("sigterm", func() string {
			s := r.stopDaemon()
			r.k.Stop()
			return s
		})
		fmt.Printf("%s live-mshv: every step passed (%s)\n", r.stamp(), time.Now().Format(time.RFC3339))
	})
}
