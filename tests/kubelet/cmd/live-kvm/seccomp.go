package main

// The daemon's seccomp filter on this kernel. Enforced (the default): the preloaded
// tests/fakes/libscprobe.so tries calls the filter refuses, from inside a running daemon, and
// the kernel answers them. Log mode (SDP_SECCOMP=log): the filters of the daemon and of its
// helper children allow every call and the kernel logs each one they would refuse (an audit
// record, type=1326, in the kernel's log): a run through start, registration, the probe, an
// Allocate, the node labels and SIGTERM must log nothing but the preloaded check's own calls.

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sdp/kubelet"
)

// startSeccompDaemon starts a root daemon with tests/fakes/libscprobe.so preloaded: at its
// first loop iteration (after it confined itself) it tries calls the filter must refuse.
func (r *liveRun) startSeccompDaemon() string {
	_ = os.Remove(scprobeOut)
	s := r.startDaemonEnv(0, append(daemonEnv(), "LD_PRELOAD="+scprobeLib, "SCPROBE_OUT="+scprobeOut))
	return s + ", " + scprobeLib + " preloaded"
}

// confinedWant is what the preloaded check's calls give in a confined daemon (no node
// labelling: no inet socket either).
var confinedWant = []string{"seccomp=2", "nnp=1", "execve=EPERM", "execveat=EPERM",
	"socket_inet=EPERM", "socket_unix=ok", "clone3=ENOSYS"}

// scprobeResult waits for the preloaded check's line.
func (r *liveRun) scprobeResult() []string {
	var line string
	if !kubelet.Poll(eventBound, func() bool {
		b, err := os.ReadFile(scprobeOut)
		line = string(b)
		return err == nil && strings.HasSuffix(line, "\n")
	}) {
		r.fail("no seccomp check result in %s within %v", scprobeOut, eventBound)
	}
	return strings.Fields(line)
}

// seccompEnforced: this kernel refused the calls (the daemon's filter, not a mode it logged),
// and the probe helper ran under the filter (Healthy before, Allocate after).
func (r *liveRun) seccompEnforced() string {
	got := r.scprobeResult()
	for _, w := range confinedWant {
		if !contains(got, w) {
			r.fail("the daemon's own calls: %s; want %s", strings.Join(got, " "), strings.Join(confinedWant, " "))
		}
	}
	return fmt.Sprintf("from inside the daemon: %s; log: %s", strings.Join(got, " "), r.confined())
}

// confined: the daemon's "confined" line says enforce and its /proc status shows the filter.
func (r *liveRun) confined() string {
	line := r.waitLog(0, "msg=confined")
	if !strings.Contains(line, "seccomp=enforce") {
		r.fail("the daemon is not confined with seccomp=enforce: %s", line)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.daemon().Pid()))
	r.check(err)
	if !strings.Contains(string(status), "\nSeccomp:\t2\n") {
		r.fail("/proc/%d/status lacks \"Seccomp: 2\" (a filter)", r.daemon().Pid())
	}
	return "msg=confined seccomp=enforce, Seccomp: 2 in /proc/PID/status"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// seccompLogSteps runs the daemon at path in log mode with node labelling (a stub API server),
// with the preloaded check when preload is set, and then reads the kernel's log: the preloaded
// check's refused calls (execve, execveat) must be there (the log works), and no other.
func (r *liveRun) seccompLogSteps(name, path string, preload bool) {
	var mark, lost int
	r.step(name+"-start", func() string {
		recs, suppressed := r.auditSeccomp()
		mark, lost = len(recs), suppressed
		r.startAPIStub()
		env := append(append(daemonEnv(), "SDP_SECCOMP=log"), r.labelEnv()...)
		what := path + ", SDP_SECCOMP=log, NODE_NAME and a stub API server"
		if preload {
			_ = os.Remove(scprobeOut)
			env = append(env, "LD_PRELOAD="+scprobeLib, "SCPROBE_OUT="+scprobeOut)
			what += ", " + scprobeLib + " preloaded"
		}
		return r.startDaemonAt(path, 0, env) + "; " + what
	})
	r.registeredHealthy()
	r.step("allocate", r.allocateOK)
	r.step("labelled", r.labelled)
	r.step("daemon-stop", r.stopDaemon)
	r.step(name+"-audit", func() string {
		var want []string
		if preload {
			got := r.scprobeResult()
			for _, w := range []string{"seccomp=2", "execve=ENOENT", "execveat=ENOENT", "socket_inet=ok"} {
				if !contains(got, w) {
					r.fail("the preloaded check in log mode: %s; want %s among them", strings.Join(got, " "), w)
				}
			}
			// socket(AF_INET) is allowed: with NODE_NAME the daemon's list carries the label
			// child's inet sockets (hyperlight/confine.c).
			want = []string{sysName(unix.SYS_EXECVE), sysName(unix.SYS_EXECVEAT)}
		}
		recs, suppressed := r.auditSeccomp()
		if suppressed != lost {
			r.fail("the kernel suppressed audit records (printk rate limit): the log is incomplete")
		}
		got := recs[mark:]
		calls := map[string]bool{}
		for _, rec := range got {
			calls[sysName(rec.syscall)] = true
		}
		var names []string
		for n := range calls {
			names = append(names, n)
		}
		sort.Strings(names)
		sort.Strings(want)
		if strings.Join(names, " ") != strings.Join(want, " ") {
			r.fail("the kernel logged the filter refusing %v (want %v): %v", names, want, got)
		}
		if len(got) == 0 {
			return "the kernel logged no call the filter would refuse"
		}
		return fmt.Sprintf("the kernel logged only the preloaded check's calls (%s), %d record(s)", strings.Join(names, ", "), len(got))
	})
}

// auditRecord is one "audit: type=1326" line: a call a seccomp filter logged.
type auditRecord struct {
	pid, syscall int
	comm         string
}

func (a auditRecord) String() string {
	return fmt.Sprintf("pid %d (%s) %s", a.pid, a.comm, sysName(a.syscall))
}

// auditSeccomp returns every seccomp audit record in the kernel's log, oldest first, and how
// many times the log says audit records were suppressed (kauditd's printk is rate-limited).
func (r *liveRun) auditSeccomp() (recs []auditRecord, suppressed int) {
	log, err := kernelLog()
	r.check(err)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "kauditd_printk_skb") && strings.Contains(l, "suppressed") {
			suppressed++
		}
		if !strings.Contains(l, "type=1326") {
			continue
		}
		var a auditRecord
		for _, f := range strings.Fields(l) {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "pid":
				a.pid, _ = strconv.Atoi(v)
			case "syscall":
				a.syscall, _ = strconv.Atoi(v)
			case "comm":
				a.comm = strings.Trim(v, `"`)
			}
		}
		recs = append(recs, a)
	}
	return recs, suppressed
}

// sysName names the system calls the checks expect; others by number.
func sysName(nr int) string {
	switch nr {
	case unix.SYS_EXECVE:
		return "execve"
	case unix.SYS_EXECVEAT:
		return "execveat"
	}
	return "#" + strconv.Itoa(nr)
}
