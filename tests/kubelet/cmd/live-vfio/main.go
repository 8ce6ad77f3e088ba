// Command live-vfio is the test driver of `make test-live-vfio` and `make test-live-vfio-iommufd`.
// It runs inside a QEMU guest (tests/live/run-vfio.sh) whose PCI devices sit behind QEMU's
// emulated Intel IOMMU, so the kernel gives them real IOMMU groups. `live-vfio legacy` (the
// default): Debian's 6.1 and its VFIO modules give group nodes (/dev/vfio/<N>, /dev/vfio/vfio: no
// IOMMUFD, the daemon's legacy backend). `live-vfio iommufd`: a 6.12 built with IOMMUFD and
// VFIO_DEVICE_CDEV gives the cdevs /dev/vfio/devices/vfioN and /dev/iommu, and the daemon's auto
// backend must pick iommufd. The guest is the node:
// kata-device-plugin runs on the real /dev/vfio, sysfs, /var/lib/kubelet/device-plugins and
// /var/run/cdi against the mock kubelet of package sdp/kubelet in this process. Each step prints
// one transcript line with its timing; a failed step prints the logs and exits 1. Every wait is a
// bounded poll.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"sdp/kubelet"
)

type stepError struct{ step, msg string }

func (e *stepError) Error() string { return e.step + ": " + e.msg }

// transcript prints the step lines and remembers what to show when a step fails.
type transcript struct {
	t0     time.Time
	cur    string
	k      *kubelet.MockKubelet
	daemon *kubelet.Daemon
}

func (t *transcript) fail(format string, args ...interface{}) {
	panic(&stepError{t.cur, fmt.Sprintf(format, args...)})
}

func (t *transcript) check(err error) {
	if err != nil {
		t.fail("%v", err)
	}
}

func (t *transcript) stamp() string {
	return fmt.Sprintf("[%8.3fs]", time.Since(t.t0).Seconds())
}

// step runs fn as the named step and prints "ok <name> <detail> (<duration>)".
func (t *transcript) step(name string, fn func() string) {
	t.cur = name
	start := time.Now()
	detail := fn()
	fmt.Printf("%s ok   %-22s %s (%s)\n", t.stamp(), name, detail, ms(time.Since(start)))
}

// run runs every step; it returns the exit code. A failed step prints the logs.
func (t *transcript) run(steps func()) (code int) {
	t.t0 = time.Now()
	defer func() {
		r := recover()
		if r == nil {
			t.printDaemonLog(false)
			return
		}
		se, ok := r.(*stepError)
		if !ok {
			panic(r)
		}
		fmt.Printf("%s FAIL %-22s %s\n", t.stamp(), se.step, se.msg)
		t.printDaemonLog(true)
		if t.k != nil {
			fmt.Printf("--- mock kubelet events\n%s", t.k.EventLog())
		}
		code = 1
	}()
	steps()
	return 0
}

// printDaemonLog prints the daemon's log (without debug lines unless all is set) and stops it.
func (t *transcript) printDaemonLog(all bool) {
	d := t.daemon
	if d == nil {
		return
	}
	if !d.Exited() {
		d.Stop(5 * time.Second)
	}
	fmt.Printf("--- daemon log (pid %d, %s)\n", d.Pid(), d.ExitDescription())
	for _, l := range d.Stderr.Lines() {
		if all || !strings.Contains(l, " level=debug ") {
			fmt.Println(l)
		}
	}
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func main() {
	mode := "legacy"
	if len(os.Args) == 2 {
		mode = os.Args[1]
	}
	if len(os.Args) > 2 || (mode != "legacy" && mode != "iommufd") {
		fmt.Fprintln(os.Stderr, "usage: live-vfio [legacy|iommufd] (inside the guest of make test-live-vfio[-iommufd])")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "live-vfio: must run as root (it binds drivers through sysfs)")
		os.Exit(1)
	}
	os.Exit(runVFIO(mode == "iommufd"))
}
