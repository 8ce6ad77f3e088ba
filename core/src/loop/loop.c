/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop: epoll dispatch through epoll_event.data.ptr (one dp_source per registered fd), deferred
 * calls, and the plain fd sources (io, signalfd, inotify); timers are loop_timer.c's, child
 * exits loop_child.c's.
 *
 * Freeing: dp_source_free() marks the source dead, removes its fd from epoll and closes the fds
 * the loop owns at once. While a batch is dispatched (or deferred calls run) the memory is kept
 * on a dead list and released at the end of dp_loop_run_once(), so a pending event of a freed
 * source in the same batch is recognised (s->dead) and skipped.
 */
#include "dp/loop.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "dp/log.h"
#include "loop_internal.h"

#define DP_LOOP_BATCH 64
/* One read of an inotify source per turn: 128 events of a short name (16 + 16 bytes), and room for
 * one of the longest (16 + NAME_MAX + 1). */
#define INOTIFY_READ_BYTES 4096

typedef struct defer_entry {
	dp_defer_fn fn;
	void *userdata;
	struct defer_entry *next;
} defer_entry;

struct dp_loop {
	int epfd;
	bool exiting;
	int exit_code;
	unsigned dispatching; /* >0 while a batch or deferred calls run */
	dp_source *live;
	dp_source *dead;
	defer_entry *defer_head, **defer_tail;
};

uint64_t dp_now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * DP_USEC_PER_SEC + (uint64_t)ts.tv_nsec / 1000;
}

int dp_loop_new(dp_loop **ret)
{
	dp_loop *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (l->epfd < 0) {
		int r = -errno;
		free(l);
		return r;
	}
	l->defer_tail = &l->defer_head;
	*ret = l;
	return 0;
}

static void source_release(dp_source *s)
{
	free(s);
}

static void free_dead(dp_loop *l)
{
	while (l->dead) {
		dp_source *s = l->dead;
		l->dead = s->next;
		source_release(s);
	}
}

static void defer_clear(dp_loop *l)
{
	while (l->defer_head) {
		defer_entry *e = l->defer_head;
		l->defer_head = e->next;
		free(e);
	}
	l->defer_tail = &l->defer_head;
}

dp_loop *dp_loop_free(dp_loop *l)
{
	if (!l)
		return NULL;
	l->dispatching++; /* collect on the dead list, release below */
	while (l->live)
		/* dispatching > 0: the source moves to the dead list, it is not freed yet */
		dp_source_free(l->live); // NOLINT(clang-analyzer-unix.Malloc)
	l->dispatching--;
	free_dead(l);
	defer_clear(l);
	if (l->epfd >= 0)
		close(l->epfd);
	free(l);
	return NULL;
}

static void dispatch_io(dp_source *s, uint32_t revents)
{
	int r = s->fn.io(s, s->fd, revents, s->userdata);
	if (r < 0)
		dp_debug("io callback failed", "fd=%d error=%s", s->fd, dp_errname(r));
}

static void dispatch_signal(dp_source *s)
{
	struct signalfd_siginfo si;

	while (!s->dead && read(s->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		int r = s->fn.signal(s, &si, s->userdata);
		if (r < 0)
			dp_debug("signal callback failed", "signal=%u error=%s", si.ssi_signo, dp_errname(r));
	}
}

void loop_source_epoll_del(dp_source *s)
{
	if (s->in_epoll) {
		(void)epoll_ctl(s->loop->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		s->in_epoll = false;
	}
}

/*
 * One read of at most one buffer per turn: epoll is level-triggered, so what stays queued is
 * read at the next turn, after the other ready sources were served. Reading until EAGAIN, a
 * flood (a loop recreating a node makes events faster than they are handled) kept the loop in
 * here for good: no RPC, timer or signal was served while it lasted. A queue that overflows
 * meanwhile says so with IN_Q_OVERFLOW, which the consumers (dp_watch) answer with a rescan.
 */
static void dispatch_inotify(dp_source *s)
{
	char buf[INOTIFY_READ_BYTES] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(s->fd, buf, sizeof(buf));

	for (char *p = buf; n > 0 && p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)p;
		p += sizeof(*ev) + ev->len;
		if (s->dead || s->ignored)
			continue; /* drain, never call fn again */
		if (ev->mask & IN_IGNORED)
			s->ignored = true;
		int r = s->fn.inotify(s, ev, s->userdata);
		if (r < 0)
			dp_debug("inotify callback failed", "error=%s", dp_errname(r));
	}
	if (!s->dead && s->ignored)
		loop_source_epoll_del(s); /* no watch left */
}

static void dispatch(dp_source *s, uint32_t revents)
{
	switch (s->type) {
	case SOURCE_IO:
		dispatch_io(s, revents);
		break;
	case SOURCE_TIMER:
		loop_dispatch_timer(s);
		break;
	case SOURCE_SIGNAL:
		dispatch_signal(s);
		break;
	case SOURCE_CHILD:
		loop_dispatch_child(s);
		break;
	case SOURCE_INOTIFY:
		dispatch_inotify(s);
		break;
	}
}

static void run_defers(dp_loop *l)
{
	/* Only the calls queued so far: calls deferred from here run at the next iteration. */
	defer_entry *e = l->defer_head;

	l->defer_head = NULL;
	l->defer_tail = &l->defer_head;
	while (e) {
		defer_entry *next = e->next;
		e->fn(e->userdata);
		free(e);
		e = next;
	}
}

int dp_loop_run_once(dp_loop *l, int timeout_ms)
{
	struct epoll_event evs[DP_LOOP_BATCH];
	int n, dispatched = 0;

	if (!l)
		return -EINVAL;
	if (l->defer_head)
		timeout_ms = 0;
	n = epoll_wait(l->epfd, evs, DP_LOOP_BATCH, timeout_ms);
	if (n < 0 && errno != EINTR)
		return -errno;

	l->dispatching++;
	for (int i = 0; i < n; i++) {
		dp_source *s = evs[i].data.ptr;
		if (s->dead)
			continue;
		dispatch(s, evs[i].events);
		dispatched++;
	}
	run_defers(l);
	l->dispatching--;
	if (l->dispatching == 0)
		free_dead(l);
	return dispatched;
}

int dp_loop_run(dp_loop *l)
{
	if (!l)
		return -EINVAL;
	while (!l->exiting) {
		int r = dp_loop_run_once(l, -1);
		if (r < 0)
			return r;
	}
	return l->exit_code;
}

void dp_loop_exit(dp_loop *l, int code)
{
	if (!l)
		return;
	l->exiting = true;
	l->exit_code = code;
}

bool dp_loop_exiting(const dp_loop *l)
{
	return l && l->exiting;
}

int dp_defer(dp_loop *l, dp_defer_fn fn, void *userdata)
{
	defer_entry *e;

	if (!l || !fn)
		return -EINVAL;
	e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	*e = (defer_entry){ .fn = fn, .userdata = userdata };
	*l->defer_tail = e;
	l->defer_tail = &e->next;
	return 0;
}

/* Allocate a source around fd and register it for events. Returns the source, or NULL with
 * the negative errno in *ret_error (-ENOMEM, or epoll_ctl's); on failure an owned fd is closed.
 * Returning the pointer lets callers test it directly (the analyzers then see it is non-NULL). */
dp_source *loop_source_new(dp_loop *l, enum source_type type, int fd, bool owns_fd, uint32_t events,
			   source_fn fn, void *userdata, int *ret_error)
{
	struct epoll_event ev = {.events = events};
	dp_source *s = calloc(1, sizeof(*s));

	if (!s) {
		if (owns_fd)
			close(fd);
		*ret_error = -ENOMEM;
		return NULL;
	}
	s->loop = l;
	s->type = type;
	s->fd = fd;
	s->owns_fd = owns_fd;
	s->fn = fn;
	s->userdata = userdata;
	ev.data.ptr = s;
	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		*ret_error = -errno;
		if (owns_fd)
			close(fd);
		free(s);
		return NULL;
	}
	s->in_epoll = true;
	DP_LIST_PREPEND(l->live, s);
	return s;
}

int loop_source_add_owned(dp_loop *l, enum source_type type, int fd, source_fn fn, void *userdata,
			  dp_source **ret)
{
	dp_source *s;
	int r;

	if (fd < 0)
		return -errno;
	s = loop_source_new(l, type, fd, true, EPOLLIN, fn, userdata, &r);
	if (!s)
		return r;
	*ret = s;
	return 0;
}

dp_source *dp_source_free(dp_source *s)
{
	dp_loop *l;

	if (!s || s->dead)
		return NULL;
	l = s->loop;
	s->dead = true;
	loop_source_epoll_del(s);
	if (s->owns_fd && s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	DP_LIST_REMOVE(l->live, s);
	if (l->dispatching) {
		DP_LIST_PREPEND(l->dead, s);
	} else {
		source_release(s);
	}
	return NULL;
}

dp_loop *dp_source_loop(const dp_source *s)
{
	return s ? s->loop : NULL;
}

int dp_io_add(dp_loop *l, int fd, uint32_t events, dp_io_fn fn, void *userdata, dp_source **ret)
{
	dp_source *s = NULL;
	int r;

	if (!l || fd < 0 || !fn || !ret)
		return -EINVAL;
	s = loop_source_new(l, SOURCE_IO, fd, false, events, (source_fn){ .io = fn }, userdata, &r);
	if (!s)
		return r;
	*ret = s;
	return 0;
}

int dp_io_set_events(dp_source *s, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = s};

	if (!s || s->dead || s->type != SOURCE_IO)
		return -EINVAL;
	if (epoll_ctl(s->loop->epfd, EPOLL_CTL_MOD, s->fd, &ev) < 0)
		return -errno;
	return 0;
}

int dp_signal_add(dp_loop *l, int sig, dp_signal_fn fn, void *userdata, dp_source **ret)
{
	sigset_t mask;

	if (!l || !fn || !ret || sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP)
		return -EINVAL;
	sigemptyset(&mask);
	if (sigaddset(&mask, sig) < 0)
		return -EINVAL;
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		return -errno;
	return loop_source_add_owned(l, SOURCE_SIGNAL, signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC),
				     (source_fn){ .signal = fn }, userdata, ret);
}

int dp_inotify_add(dp_loop *l, const char *path, uint32_t mask, dp_inotify_fn fn, void *userdata,
		   dp_source **ret)
{
	int fd, r;

	if (!l || !path || !*path || !fn || !ret || mask == 0)
		return -EINVAL;
	fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (inotify_add_watch(fd, path, mask) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return loop_source_add_owned(l, SOURCE_INOTIFY, fd, (source_fn){ .inotify = fn }, userdata, ret);
}
