/* SPDX-License-Identifier: Apache-2.0 */
/* loop_child: child-exit sources: a pidfd, or a polling timerfd where pidfd_open is missing. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/log.h"
#include "loop_internal.h"

/* Child exit polling where pidfd_open is missing (kernels before 5.3, valgrind 3.19). */
#define CHILD_POLL_USEC 10000L

void loop_dispatch_child(dp_source *s)
{
	siginfo_t si;

	if (s->reaped)
		return;
	if (s->polled) {
		uint64_t expirations;
		(void)!read(s->fd, &expirations, sizeof(expirations));
	}
	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOHANG) < 0) {
		if (errno == EINTR)
			return;
		/* ECHILD: reaped elsewhere; report it with si_code 0 and the pid. */
		dp_debug("waitid failed", "pid=%d error=%s", (int)s->pid, dp_errname(errno));
		memset(&si, 0, sizeof(si));
		si.si_pid = s->pid;
	} else if (si.si_pid == 0) {
		return; /* not exited yet */
	}
	s->reaped = true;
	loop_source_epoll_del(s); /* a reaped pidfd stays readable */
	int r = s->fn.child(s, &si, s->userdata);
	if (r < 0)
		dp_debug("child callback failed", "pid=%d error=%s", (int)s->pid, dp_errname(r));
}

/* The fallback for a missing pidfd_open: a timerfd every CHILD_POLL_USEC (-1 with errno). */
static int poll_timer_new(void)
{
	struct itimerspec its = { .it_interval = { 0, CHILD_POLL_USEC * 1000L },
				  .it_value = { 0, CHILD_POLL_USEC * 1000L } };
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

	if (fd >= 0 && timerfd_settime(fd, 0, &its, NULL) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int dp_child_add(dp_loop *l, pid_t pid, dp_child_fn fn, void *userdata, dp_source **ret)
{
	dp_source *s = NULL;
	int fd, r;

	if (!l || !fn || !ret || pid <= 0)
		return -EINVAL;
	bool polled = false;

	fd = (int)syscall(SYS_pidfd_open, pid, 0); /* pidfds are always O_CLOEXEC */
	if (fd < 0 && errno == ENOSYS) {
		if (kill(pid, 0) < 0)
			return -errno;
		fd = poll_timer_new();
		polled = true;
	}
	if (fd < 0)
		return -errno;
	s = loop_source_new(l, SOURCE_CHILD, fd, true, EPOLLIN, (source_fn){ .child = fn }, userdata, &r);
	if (!s)
		return r;
	s->pid = pid;
	s->polled = polled;
	*ret = s;
	return 0;
}

int dp_child_kill(dp_source *s, int sig)
{
	if (!s || s->dead || s->type != SOURCE_CHILD)
		return -EINVAL;
	if (s->reaped)
		return -ESRCH;
	if (s->polled) /* not reaped, so the pid cannot have been recycled */
		return kill(s->pid, sig) < 0 ? -errno : 0;
	if (syscall(SYS_pidfd_send_signal, s->fd, sig, NULL, 0) < 0)
		return -errno;
	return 0;
}

bool dp_child_reaped(const dp_source *s)
{
	return s && s->type == SOURCE_CHILD && s->reaped;
}
