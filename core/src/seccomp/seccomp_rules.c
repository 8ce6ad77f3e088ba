/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seccomp_rules: the system calls libdp makes after start-up, and what the C library needs around them.
 * Built from `strace -f` of the whole scenario suite and checked by running every test with
 * the filter enforced (docs/security.md: how to rebuild the list with SDP_SECCOMP=log).
 */
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>

#include "dp/macro.h"
#include "dp/seccomp.h"

#define ALL32 0xffffffffu
/* fork(): glibc's clone for a new process; threads and namespaces are refused. */
#define FORK_FLAGS (CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD)
/* the helper runner's clone (helper_spawn.c): the child shares memory until its exec */
#define SPAWN_FLAGS (CLONE_VM | CLONE_VFORK | SIGCHLD)

const dp_seccomp_rule dp_seccomp_core_rules[] = {
	/* event loop: epoll, timerfd, signalfd, inotify, child exits (pidfd; waitid polling) */
	DP_SC("epoll_wait"), DP_SC("epoll_pwait"), DP_SC("epoll_ctl"), DP_SC("epoll_create1"),
	DP_SC("timerfd_create"), DP_SC("timerfd_settime"), DP_SC("timerfd_gettime"),
	DP_SC("signalfd4"), DP_SC("rt_sigprocmask"), DP_SC("rt_sigreturn"),
	DP_SC("inotify_init1"), DP_SC("inotify_add_watch"), DP_SC("inotify_rm_watch"),
	DP_SC("pidfd_open"), DP_SC("pidfd_send_signal"), DP_SC("waitid"), DP_SC("wait4"),
	DP_SC("kill"), DP_SC("clock_nanosleep"), DP_SC("nanosleep"),
	/* the clock: vDSO calls that become real ones without a vDSO (and under valgrind) */
	DP_SC("clock_gettime"), DP_SC("gettimeofday"), DP_SC("time"), DP_SC("clock_getres"),
	DP_SC("restart_syscall"),
	/* I/O on every fd */
	DP_SC("read"), DP_SC("write"), DP_SC("readv"), DP_SC("writev"), DP_SC("close"),
	DP_SC("fcntl"), DP_SC("lseek"), DP_SC("pread64"), DP_SC("pipe2"),
	/* gRPC over unix sockets only: to kubelet, from kubelet, health probes */
	DP_SC_ARG("socket", 0, ALL32, AF_UNIX), DP_SC("socketpair"),
	DP_SC("bind"), DP_SC("listen"), DP_SC("accept4"), DP_SC("connect"), DP_SC("shutdown"),
	DP_SC("sendto"), DP_SC("recvfrom"), DP_SC("sendmsg"), DP_SC("recvmsg"),
	DP_SC("getsockopt"), DP_SC("setsockopt"), DP_SC("getsockname"), DP_SC("getpeername"),
	/* files: sockets' directory, the CDI writer (temp file, fsync, rename), /proc, sysfs */
	DP_SC("openat"), DP_SC("newfstatat"), DP_SC("fstat"), DP_SC("statx"), DP_SC("getdents64"),
	DP_SC("readlink"), DP_SC("readlinkat"), DP_SC("fsync"), DP_SC("fdatasync"),
	DP_SC("rename"), DP_SC("renameat"), DP_SC("renameat2"), DP_SC("unlink"), DP_SC("unlinkat"),
	DP_SC("chmod"), DP_SC("fchmod"), DP_SC("fchmodat"), DP_SC("mkdir"), DP_SC("mkdirat"),
	DP_SC("access"), DP_SC("faccessat"), DP_SC("faccessat2"), DP_SC_MUSL_LEGACY
	/* memory */
	DP_SC("brk"), DP_SC("mmap"), DP_SC("munmap"), DP_SC("mremap"), DP_SC("mprotect"),
	DP_SC("madvise"),
	/* the helper runner: clone, then in the child dup2/close_range/sigaction and the exec of
	 * the daemon's own binary (dp_seccomp_exec_rule); then the dynamic loader and the C
	 * library's start-up in the new image, until the helper installs its own filter */
#ifndef __GLIBC__
	/* musl's fork() makes the fork system call, not clone(SIGCHLD); its raise() and abort()
	 * send the signal with tkill, not tgkill */
	DP_SC("fork"), DP_SC("tkill"),
#endif
	DP_SC_ARG("clone", 0, ALL32, FORK_FLAGS), DP_SC_ARG("clone", 0, ALL32, SPAWN_FLAGS), DP_SC("dup2"), DP_SC("dup3"), DP_SC("close_range"),
	DP_SC("rt_sigaction"), DP_SC("arch_prctl"), DP_SC("set_tid_address"),
	DP_SC("set_robust_list"), DP_SC("rseq"), DP_SC("prlimit64"), DP_SC("getrandom"),
	/* a helper child adding its own, narrower filter (a filter can only take rights away) */
	DP_SC_ARG("prctl", 0, ALL32, PR_SET_NO_NEW_PRIVS), DP_SC("seccomp"),
	/* process */
	DP_SC("getpid"), DP_SC("gettid"), DP_SC("getuid"), DP_SC("geteuid"), DP_SC("getgid"),
	DP_SC("getegid"), DP_SC("tgkill"), DP_SC("exit"), DP_SC("exit_group"),
};
const size_t dp_seccomp_n_core_rules = DP_ELEMENTSOF(dp_seccomp_core_rules);

/* An API-server client child (sdp-kube-api, hyperlight-label-node: https.c): TCP to the API
 * server and waiting on it, and the C library's resolver when the host is a name (glibc sends
 * its A and AAAA queries with sendmmsg; musl with sendto). Reading the CA file and the token is
 * in the core list. */
const dp_seccomp_rule dp_seccomp_api_client_rules[] = {
	DP_SC_ARG("socket", 0, ALL32, AF_INET), DP_SC_ARG("socket", 0, ALL32, AF_INET6),
	DP_SC("poll"), DP_SC("ppoll"), DP_SC("sendmmsg"), DP_SC("uname"),
};
const size_t dp_seccomp_n_api_client_rules = DP_ELEMENTSOF(dp_seccomp_api_client_rules);
