/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helper: one deadline-bounded child process at a time, joined by concurrent requests.
 *
 * States of the helper:
 *   idle     no child; a request starts a run.
 *   running  a child runs; requests join h->run_waiters; ends with the reap (result parsed from
 *            the exit status and stdout) or the deadline (SIGKILL, "timeout after ...").
 *   dying    killed at its deadline, result already delivered, not reaped yet. Requests wait
 *            in h->pending until the reap (then a new run starts for them) or until the grace
 *            period after the SIGKILL passed: from then on the helper is blocked and every
 *            request fails at once, until the reap.
 * Results reach requesters only from loop callbacks: waits whose result is known are queued on
 * h->ready, and a "kick" timer (or the loop callback that produced the result) delivers them.
 */
#include "dp/helper.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "dp/fdreserve.h"
#include "dp/list.h"
#include "dp/log.h"
#include "helper_internal.h"

typedef struct wait_list {
	dp_helper_wait *head, *tail;
} wait_list;

struct dp_helper_wait {
	dp_helper *h;
	wait_list *list; /* the list it is on */
	DP_LIST_FIELDS(dp_helper_wait);
	dp_helper_done_fn done;
	void *userdata;
	dp_helper_result result; /* valid on h->ready */
};

struct dp_helper {
	dp_loop *loop;
	char **argv; /* {exe, DP_HELPER_ARG, name, args..., NULL} */
	int exe_fd;  /* O_PATH fd of argv[0], or -1 */
	uint64_t deadline_usec, kill_grace_usec;

	dp_source *deadline, *grace, *kick; /* timers */
	dp_source *child;                   /* pidfd of the child until it is reaped */
	dp_source *out;                     /* its stdout pipe */
	int out_fd;
	pid_t pid;
	helper_output output;

	bool running, dying;
	uint64_t killed_at;

	wait_list run_waiters, pending, ready;

	dp_helper_result last;
	bool has_last;
	unsigned runs;
	uint64_t run_started; /* when the run in flight started */

	unsigned busy; /* >0 while a helper callback runs */
	bool freed;    /* dp_helper_free() called while busy: release memory on leave */
};

/* ---------------------------------------------------------------- wait lists */

static void list_append(wait_list *l, dp_helper_wait *w)
{
	w->list = l;
	DP_LIST_INSERT_AFTER(l->head, l->tail, w);
	l->tail = w;
}

static void list_unlink(dp_helper_wait *w)
{
	wait_list *l = w->list;

	if (!l)
		return;
	if (l->tail == w)
		l->tail = w->prev;
	DP_LIST_REMOVE(l->head, w);
	w->list = NULL;
}

static void list_free_all(wait_list *l)
{
	while (l->head) {
		dp_helper_wait *w = l->head;
		/* a wait at l->head has w->list == l: list_unlink takes it off before the free */
		list_unlink(w); // NOLINT(clang-analyzer-unix.Malloc)
		free(w);
	}
}

/* Give every wait on l the result r and queue it for delivery. */
static void list_complete(dp_helper *h, wait_list *l, const dp_helper_result *r)
{
	while (l->head) {
		dp_helper_wait *w = l->head;
		list_unlink(w);
		w->result = *r;
		list_append(&h->ready, w);
	}
}

/* Call back every ready wait. A callback may cancel other waits, make requests or free h. */
static void deliver_ready(dp_helper *h)
{
	while (!h->freed && h->ready.head) {
		dp_helper_wait *w = h->ready.head;
		/* a wait at ready.head has w->list == &h->ready: list_unlink takes it off before the free */
		dp_helper_result r = w->result; // NOLINT(clang-analyzer-unix.Malloc)
		dp_helper_done_fn done = w->done;
		void *userdata = w->userdata;

		list_unlink(w);
		free(w);
		done(&r, userdata);
	}
}

static void enter(dp_helper *h)
{
	h->busy++;
}

/* Deliver what is ready, then release h if a callback freed it meanwhile. The fds a finished
 * run closed go back to the reserve before anything else can take them. */
static int leave(dp_helper *h)
{
	deliver_ready(h);
	(void)dp_fd_reserve_refill();
	if (--h->busy == 0 && h->freed)
		free(h);
	return 0;
}

/* ---------------------------------------------------------------- running a child */

static void close_output(dp_helper *h)
{
	h->out = dp_source_free(h->out);
	if (h->out_fd >= 0) {
		close(h->out_fd);
		h->out_fd = -1;
	}
}

/* Read what the pipe holds now; keep HELPER_OUTPUT_MAX bytes, discard (and flag) the rest. */
static void drain_output(dp_helper *h)
{
	helper_output *o = &h->output;
	char scratch[1024];

	while (h->out_fd >= 0) {
		bool keep = o->len < HELPER_OUTPUT_MAX;
		ssize_t n = keep ? read(h->out_fd, o->buf + o->len, HELPER_OUTPUT_MAX - o->len)
				 : read(h->out_fd, scratch, sizeof(scratch));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			if (errno != EAGAIN)
				close_output(h); /* never spin on a broken pipe */
			return;
		}
		if (n == 0) {
			close_output(h); /* EOF */
			return;
		}
		if (keep)
			o->len += (size_t)n;
		else
			o->overflow = true;
	}
}

static int on_output(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	dp_helper *h = userdata;

	drain_output(h);
	return 0;
}

/* The run ends with result r: every waiter of the run gets it. */
static void finish_run(dp_helper *h, const dp_helper_result *res)
{
	dp_helper_result run = *res;
	const dp_helper_result *r = &run;
	run.run = h->runs;
	run.run_usec = dp_now_usec() - h->run_started;
	h->running = false;
	(void)dp_timer_set(h->deadline, 0, 0);
	close_output(h);
	h->last = *r;
	h->has_last = true;
	list_complete(h, &h->run_waiters, r);
	dp_debug("helper finished", "ok=%d runs=%u", r->ok, h->runs);
}

static int on_child(dp_source *s, const siginfo_t *si, void *userdata);

/* The binary to run, opened once (O_PATH): a daemon's seccomp filter allows exec through
 * this fd only. Reopened at the next run when it could not be opened before. */
static int open_exe(dp_helper *h)
{
	if (h->exe_fd >= 0)
		return 0;
	if (!h->argv || !h->argv[0]) /* helper_copy_argv never leaves it so; for the analyzer */
		return -EINVAL;
	h->exe_fd = open(h->argv[0], O_PATH | O_CLOEXEC);
	return h->exe_fd < 0 ? -errno : 0;
}

static int spawn_child(dp_helper *h, int out_w, pid_t *ret_pid)
{
	int r = open_exe(h);

	if (r < 0)
		return r;
	return dp_helper_spawn(h->exe_fd, h->argv[0], h->argv, out_w, ret_pid);
}

/* Start a child. On failure nothing is left behind and the negative errno is returned. */
static int start_run_fds(dp_helper *h)
{
	_cleanup_close_ int rd = -1, wr = -1;
	int p[2], r;
	pid_t pid = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	rd = p[0];
	wr = p[1];
	if (fcntl(rd, F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	r = spawn_child(h, wr, &pid);
	if (r < 0)
		return r;
	if (pid <= 0) /* set on success; never kill(0 or -1) below */
		return -ECHILD;
	h->runs++;
	h->run_started = dp_now_usec();
	r = dp_child_add(h->loop, pid, on_child, h, &h->child);
	if (r < 0) {
		/* Cannot track it: kill and reap it here (immediate after SIGKILL). */
		kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return r;
	}
	r = dp_io_add(h->loop, rd, EPOLLIN, on_output, h, &h->out);
	if (r < 0) {
		(void)dp_child_kill(h->child, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		h->child = dp_source_free(h->child);
		return r;
	}
	h->out_fd = TAKE_FD(rd);
	h->pid = pid;
	h->output.len = 0;
	h->output.overflow = false;
	h->running = true;
	(void)dp_timer_set(h->deadline, h->deadline_usec, 0);
	dp_debug("helper started", "pid=%d name=%s", (int)pid, h->argv[2]);
	return 0;
}

/* start_run_fds with the fd reserve released: clients holding connections up to the fd limit
 * cannot keep the child from starting. The reserve is refilled before the loop runs again. */
static int start_run(dp_helper *h)
{
	int r;

	dp_fd_reserve_release();
	r = start_run_fds(h);
	(void)dp_fd_reserve_refill();
	return r;
}

/* Start a run for the waits on pending (moved to run_waiters); on failure they get the error. */
static void start_for_pending(dp_helper *h)
{
	dp_helper_result r;
	int e = start_run(h);

	if (e < 0) {
		helper_result_set(&r, false, "cannot start helper %s: %s", h->argv[0], strerror(-e));
		r.start_error = e;
		h->last = r;
		h->has_last = true;
		list_complete(h, &h->pending, &r);
		return;
	}
	while (h->pending.head) {
		dp_helper_wait *w = h->pending.head;
		list_unlink(w);
		list_append(&h->run_waiters, w);
	}
}

static int on_child(dp_source *s, const siginfo_t *si, void *userdata)
{
	dp_helper *h = userdata;
	dp_helper_result r;

	enter(h);
	h->child = dp_source_free(h->child);
	if (h->dying) {
		dp_debug("helper reaped after SIGKILL", "pid=%d", (int)h->pid);
		h->dying = false;
		(void)dp_timer_set(h->grace, 0, 0);
		if (h->pending.head)
			start_for_pending(h);
	} else if (h->running) {
		drain_output(h);
		helper_result_of_exit(&h->output, si, h->pid, &r);
		finish_run(h, &r);
	}
	return leave(h);
}

static void blocked_result(const dp_helper *h, dp_helper_result *r)
{
	helper_result_set(r, false, "previous helper (pid %d) not reaped after SIGKILL; probes blocked",
		   (int)h->pid);
}

static int on_deadline(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;
	dp_helper_result r;

	if (!h->running)
		return 0;
	enter(h);
	(void)dp_child_kill(h->child, SIGKILL);
	h->killed_at = dp_now_usec();
	h->dying = true;
	/* The grace timer makes the block visible to waits queued meanwhile. */
	if (h->kill_grace_usec > 0)
		(void)dp_timer_set(h->grace, h->kill_grace_usec, 0);
	else
		(void)dp_timer_set_asap(h->grace);
	helper_result_timeout(&r, h->deadline_usec);
	dp_debug("helper timed out, killed", "pid=%d", (int)h->pid);
	finish_run(h, &r);
	return leave(h);
}

/* Every wait on l fails: the helper is blocked. */
static void fail_blocked(dp_helper *h, wait_list *l)
{
	dp_helper_result r;

	blocked_result(h, &r);
	list_complete(h, l, &r);
}

static int on_grace(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;

	if (!h->dying)
		return 0;
	enter(h);
	dp_debug("helper not reaped after SIGKILL: blocked", "pid=%d", (int)h->pid);
	fail_blocked(h, &h->pending);
	return leave(h);
}

static int on_kick(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;

	enter(h);
	return leave(h);
}

/* ---------------------------------------------------------------- public API */

int dp_helper_new(dp_loop *loop, const char *exe, char *const argv[], uint64_t deadline_usec,
		  uint64_t kill_grace_usec, dp_helper **ret)
{
	_cleanup_(dp_helper_freep) dp_helper *h = NULL;
	char self[PATH_MAX];
	int r;

	if (!loop || !argv || !argv[0] || !*argv[0] || deadline_usec == 0 || !ret ||
	    (exe && !*exe))
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->out_fd = -1;
	h->exe_fd = -1;
	h->deadline_usec = deadline_usec;
	h->kill_grace_usec = kill_grace_usec;
	h->argv = helper_copy_argv(exe ? exe : helper_self_exe(self, sizeof(self)), argv);
	if (!h->argv)
		// cppcheck-suppress memleak ; h is freed by its _cleanup_ attribute, which the analyzers do not model
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	(void)open_exe(h); /* a failure is reported by the first run */
	if ((r = dp_timer_add_disarmed(loop, on_deadline, h, &h->deadline)) < 0 ||
	    (r = dp_timer_add_disarmed(loop, on_grace, h, &h->grace)) < 0 ||
	    (r = dp_timer_add_disarmed(loop, on_kick, h, &h->kick)) < 0)
		return r;
	*ret = TAKE_PTR(h);
	return 0;
}

static int reap_orphan(dp_source *s, const siginfo_t *si, void *userdata)
{
	dp_source_free(s);
	return 0;
}

int dp_helper_set_argv(dp_helper *h, char *const argv[])
{
	char **v;

	if (!h || !argv || !argv[0] || !*argv[0])
		return -EINVAL;
	if (dp_helper_running(h))
		return -EBUSY;
	if (!(v = helper_copy_argv(h->argv[0], argv)))
		return -ENOMEM;
	helper_free_argv(h->argv);
	h->argv = v;
	return 0;
}

dp_helper *dp_helper_free(dp_helper *h)
{
	if (!h || h->freed)
		return NULL;
	if (h->child && !dp_child_reaped(h->child)) {
		dp_source *orphan;
		(void)dp_child_kill(h->child, SIGKILL);
		/* Not reaped yet, so the pid cannot be recycled: let the loop reap it. */
		if (dp_child_add(h->loop, h->pid, reap_orphan, NULL, &orphan) < 0)
			dp_debug("cannot track killed helper", "pid=%d", (int)h->pid);
	}
	h->child = dp_source_free(h->child);
	close_output(h);
	h->deadline = dp_source_free(h->deadline);
	h->grace = dp_source_free(h->grace);
	h->kick = dp_source_free(h->kick);
	list_free_all(&h->run_waiters);
	list_free_all(&h->pending);
	list_free_all(&h->ready);
	helper_free_argv(h->argv);
	h->argv = NULL;
	if (h->exe_fd >= 0)
		close(TAKE_FD(h->exe_fd));
	h->freed = true;
	if (h->busy == 0)
		free(h);
	return NULL;
}

int dp_helper_exe_fd(const dp_helper *h)
{
	if (!h || h->freed)
		return -EINVAL;
	return h->exe_fd >= 0 ? h->exe_fd : -EBADF;
}

bool dp_helper_blocked(const dp_helper *h)
{
	return h && h->dying && dp_now_usec() >= h->killed_at + h->kill_grace_usec;
}

int dp_helper_request(dp_helper *h, dp_helper_done_fn done, void *userdata, dp_helper_wait **ret_wait)
{
	dp_helper_wait *w;

	if (!h || h->freed || !done)
		return -EINVAL;
	w = malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (dp_helper_wait){ .h = h, .done = done, .userdata = userdata };

	if (h->running) {
		list_append(&h->run_waiters, w); /* join the run in flight */
	} else if (h->dying && dp_helper_blocked(h)) {
		blocked_result(h, &w->result);
		list_append(&h->ready, w);
		(void)dp_timer_set_asap(h->kick);
	} else if (h->dying) {
		list_append(&h->pending, w); /* until the reap or the end of the grace period */
	} else {
		list_append(&h->pending, w);
		start_for_pending(h);
		if (h->ready.head)
			(void)dp_timer_set_asap(h->kick);
	}
	if (ret_wait)
		*ret_wait = w;
	return 0;
}

void dp_helper_wait_cancel(dp_helper_wait *w)
{
	if (!w)
		return;
	list_unlink(w);
	free(w);
}

bool dp_helper_running(const dp_helper *h)
{
	return h && h->running;
}

const dp_helper_result *dp_helper_last(const dp_helper *h)
{
	return h && h->has_last ? &h->last : NULL;
}

unsigned dp_helper_runs(const dp_helper *h)
{
	return h ? h->runs : 0;
}
