// Command live-kvm is the test driver of `make test-live-kvm` and `make test-live-kvm-arm64`. It
// runs inside a QEMU guest (tests/live) whose /dev/kvm is a real KVM: on amd64 Debian's kvm and
// kvm-amd modules on QEMU's emulated EPYC CPU with SVM, on arm64 the KVM built into Debian's
// arm64 kernel, booted at EL2 of QEMU's emulated virt machine. The guest is the node: the
// daemon runs without SDP_TEST_ROOT on the real /dev, /var/lib/kubelet/device-plugins and
// /var/run/cdi, against the mock kubelet of package sdp/kubelet running in this process. Each
// step prints one transcript line with its timing; any failed step prints the logs and exits 1.
// Every wait is a bounded poll. -pod-daemon names the daemon the pod layout runs (default: the
// same daemon; on arm64 the image's musl build).
//
// With -no-kvm it runs the steps of a guest whose kernel has no KVM (nokvm.go: the second boot
// of make test-live-kvm-arm64, at EL1).
//
// With -mshv it instead runs the short live check of `make test-live-mshv` on an MSHV host
// (see mshv.go).
//
// `live-kvm exec-as UID GID PROGRAM [ARG...]` is an internal trampoline: it drops to UID/GID
// (no supplementary groups) and executes PROGRAM, so a daemon can run as an unprivileged user
// while still being captured by kubelet.StartDaemon. `live-kvm pod-exec PROGRAM [ARG...]` is the
// other: it executes PROGRAM in the pod layout (pod.go). `live-kvm microvm-exec ROOT GIDS NODE... --
// PROGRAM [ARG...]` is the micro-VM pod's runtime (microvm.go): started in new network and mount
// namespaces, it builds the pod in ROOT and executes PROGRAM there with CAP_NET_ADMIN only.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sdp/kubelet"
)

type stepError struct{ step, msg string }

func (e *stepError) Error() string { return e.step + ": " + e.msg }

// transcript prints the step lines and remembers what to show when a step fails.
type transcript struct {
	t0      time.Time
	cur     string
	k       *kubelet.MockKubelet
	daemons []*started
}

// started is a daemon process and the user it ran as.
type started struct {
	d   *kubelet.Daemon
	uid int
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
	fmt.Printf("%s ok   %-18s %s (%s)\n", t.stamp(), name, detail, ms(time.Since(start)))
}

// run runs every step; it returns the exit code. A failed step prints the logs.
func (t *transcript) run(steps func()) (code int) {
	t.t0 = time.Now()
	defer func() {
		r := recover()
		if r == nil {
			t.printDaemonLogs(false)
			return
		}
		se, ok := r.(*stepError)
		if !ok {
			panic(r)
		}
		fmt.Printf("%s FAIL %-18s %s\n", t.stamp(), se.step, se.msg)
		t.printDaemonLogs(true)
		if t.k != nil {
			fmt.Printf("--- mock kubelet events\n%s", t.k.EventLog())
		}
		code = 1
	}()
	steps()
	return 0
}

// printDaemonLogs prints every daemon's log (without debug lines unless all is set) and stops
// the daemons still running.
func (t *transcript) printDaemonLogs(all bool) {
	for i, s := range t.daemons {
		if !s.d.Exited() {
			s.d.Stop(5 * time.Second)
		}
		fmt.Printf("--- daemon %d log (pid %d, uid %d, %s)\n", i+1, s.d.Pid(), s.uid, s.d.ExitDescription())
		for _, l := range s.d.Stderr.Lines() {
			if all || !strings.Contains(l, " level=debug ") {
				fmt.Println(l)
			}
		}
	}
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// execAs is the exec-as trampoline. Since Go 1.16 Setgroups/Setgid/Setuid apply to every thread.
func execAs(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: live-kvm exec-as UID GID PROGRAM [ARG...]")
		return 2
	}
	uid, err1 := strconv.Atoi(args[0])
	gid, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "live-kvm exec-as: invalid UID or GID")
		return 2
	}
	if err := syscall.Setgroups(nil); err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm exec-as: setgroups:", err)
		return 1
	}
	if err := syscall.Setgid(gid); err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm exec-as: setgid:", err)
		return 1
	}
	if err := syscall.Setuid(uid); err != nil {
		fmt.Fprintln(os.Stderr, "live-kvm exec-as: setuid:", err)
		return 1
	}
	err := syscall.Exec(args[2], args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "live-kvm exec-as: exec %s: %v\n", args[2], err)
	return 1
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "exec-as" {
		os.Exit(execAs(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "pod-exec" {
		os.Exit(podExec(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "microvm-exec" {
		os.Exit(microvmExec(os.Args[2:]))
	}
	mshv := flag.Bool("mshv", false, "run the MSHV live check on this host (needs /dev/mshv and root)")
	noKVM := flag.Bool("no-kvm", false, "run the steps of a guest kernel without KVM")
	podDaemon := flag.String("pod-daemon", daemonPath, "the daemon the pod layout runs")
	build := flag.String("build", "", "with -mshv: the build directory holding "+kubelet.HyperlightBinary)
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: live-kvm [-no-kvm] [-pod-daemon PATH] | -mshv -build BUILD_DIR")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "live-kvm: must run as root (it loads modules, mounts and creates device nodes)")
		os.Exit(1)
	}
	if *mshv {
		os.Exit(runMSHV(*build))
	}
	if *noKVM {
		os.Exit(runNoKVM(*podDaemon))
	}
	os.Exit(runKVM(*podDaemon))
}
