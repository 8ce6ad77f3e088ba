/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/loop.h"
#include "dp_test.h"

#define BOUND_USEC (5 * DP_USEC_PER_SEC)

static bool run_until_count(dp_loop *l, const int *count, int want)
{
	uint64_t end = dp_now_usec() + BOUND_USEC;

	while (*count < want && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	return *count >= want;
}

/* ---- io ---- */

struct io_state {
	int calls;
	uint32_t revents;
	char data[16];
	bool done;
};

static int on_io(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	struct io_state *st = userdata;

	st->calls++;
	st->revents = revents;
	if (revents & EPOLLIN) {
		ssize_t n = read(fd, st->data, sizeof(st->data) - 1);
		assert_true(n > 0);
		st->data[n] = '\0';
	}
	st->done = true;
	return 0;
}

static void test_io_readiness(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct io_state st = {0};
	dp_source *s;
	int p[2];

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	assert_int_equal(dp_io_add(l, p[0], EPOLLIN, on_io, &st, &s), 0);
	assert_ptr_equal(dp_source_loop(s), l);

	/* Nothing readable yet: a zero-timeout iteration dispatches nothing. */
	assert_int_equal(dp_loop_run_once(l, 0), 0);
	assert_int_equal(st.calls, 0);

	assert_int_equal(write(p[1], "hello", 5), 5);
	assert_true(dpt_run_until(l, &st.done, BOUND_USEC));
	assert_int_equal(st.calls, 1);
	assert_true(st.revents & EPOLLIN);
	assert_string_equal(st.data, "hello");

	/* Switch the write end to EPOLLOUT interest on a second source. */
	struct io_state wst = {0};
	dp_source *w;
	assert_int_equal(dp_io_add(l, p[1], 0, on_io, &wst, &w), 0);
	assert_int_equal(dp_loop_run_once(l, 0), 0);
	assert_int_equal(wst.calls, 0);
	assert_int_equal(dp_io_set_events(w, EPOLLOUT), 0);
	assert_true(dpt_run_until(l, &wst.done, BOUND_USEC));
	assert_true(wst.revents & EPOLLOUT);

	/* The same fd twice in one loop is refused. */
	dp_source *dup;
	assert_int_equal(dp_io_add(l, p[0], EPOLLIN, on_io, &st, &dup), -EEXIST);

	dp_source_free(w);
	dp_source_free(s);
	close(p[0]);
	close(p[1]);
}

static void test_io_bad_args(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct io_state st = {0};
	dp_source *s = NULL;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_io_add(l, -1, EPOLLIN, on_io, &st, &s), -EINVAL);
	assert_int_equal(dp_io_add(l, 1000000, EPOLLIN, on_io, &st, &s), -EBADF);
	assert_int_equal(dp_io_add(l, 0, EPOLLIN, NULL, &st, &s), -EINVAL);
	assert_null(s);
	assert_int_equal(dp_io_set_events(NULL, EPOLLIN), -EINVAL);
	assert_null(dp_source_free(NULL));
	assert_null(dp_loop_free(NULL));
}

/* Hundreds of connections: every one of them is dispatched (several batches). */
static void test_many_sources(void **state)
{
	enum { N = 300 };
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	static int sv[N][2];
	static struct io_state st[N];
	static dp_source *src[N];
	struct rlimit rl;
	int n = N, done = 0;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < 2 * N + 64) { /* raise the soft limit up to the hard one */
		rl.rlim_cur = rl.rlim_max < 2 * N + 64 ? rl.rlim_max : 2 * N + 64;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	}
	if (rl.rlim_cur < 2 * N + 64)
		n = (int)(rl.rlim_cur - 64) / 2;
	assert_true(n >= 100);

	assert_int_equal(dp_loop_new(&l), 0);
	for (int i = 0; i < n; i++) {
		memset(&st[i], 0, sizeof(st[i]));
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv[i]), 0);
		assert_int_equal(dp_io_add(l, sv[i][0], EPOLLIN, on_io, &st[i], &src[i]), 0);
		assert_int_equal(write(sv[i][1], "x", 1), 1);
	}
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (done < n && dp_now_usec() < end) {
		assert_true(dp_loop_run_once(l, 10) >= 0);
		done = 0;
		for (int i = 0; i < n; i++)
			done += st[i].done;
	}
	assert_int_equal(done, n);
	for (int i = 0; i < n; i++) {
		assert_int_equal(st[i].calls, 1);
		dp_source_free(src[i]);
		close(sv[i][0]);
		close(sv[i][1]);
	}
}

/* ---- timers ---- */

struct timer_state {
	int count;
	int stop_at;     /* disarm itself at this count (periodic) */
	bool done;
	uint64_t step[2]; /* the grid step (now / DP_TIMER_GRID_USEC) of the first two expiries */
};

static void record_step(struct timer_state *t)
{
	t->count++;
	if (t->count <= 2)
		t->step[t->count - 1] = dp_now_usec() / DP_TIMER_GRID_USEC;
}

static int on_timer(dp_source *s, void *userdata)
{
	struct timer_state *t = userdata;

	record_step(t);
	t->done = true;
	if (t->stop_at && t->count == t->stop_at)
		assert_int_equal(dp_timer_set(s, 0, 0), 0);
	return 0;
}

static void test_timer_oneshot_rearm(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state t = {0}, guard = {0};
	dp_source *s, *g;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, 1000, 0, on_timer, &t, &s), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 1);

	/* A later timer fires while the one-shot stays silent. */
	assert_int_equal(dp_timer_add(l, 20 * DP_USEC_PER_MSEC, 0, on_timer, &guard, &g), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 1);

	/* Re-arm the one-shot (still allocated). */
	t.done = false;
	assert_int_equal(dp_timer_set(s, 1000, 0), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 2);

	/* "As soon as possible". */
	t.done = false;
	assert_int_equal(dp_timer_set_asap(s), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 3);

	/* dp_timer_add with 0: as soon as possible. */
	struct timer_state z = {0};
	dp_source *zs;
	assert_int_equal(dp_timer_add(l, 0, 0, on_timer, &z, &zs), 0);
	assert_true(dpt_run_until(l, &z.done, BOUND_USEC));
	assert_int_equal(z.count, 1);

	/* Disarm before expiry: never fires; the guard proves time passed. */
	t.done = false;
	guard.done = false;
	assert_int_equal(dp_timer_set(s, 5000, 0), 0);
	assert_int_equal(dp_timer_set(s, 0, 0), 0);
	assert_int_equal(dp_timer_set(g, 30 * DP_USEC_PER_MSEC, 0), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 3);

	assert_int_equal(dp_timer_set(g, 0, 0), 0);
	dp_source_free(zs);
	dp_source_free(g);
	dp_source_free(s);
}

/* A disarmed timer stays silent (a later guard timer proves time passed) until armed. */
static void test_timer_disarmed(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state t = {0}, guard = {0};
	dp_source *s, *g;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add_disarmed(l, NULL, &t, &s), -EINVAL);
	assert_int_equal(dp_timer_add_disarmed(l, on_timer, &t, &s), 0);
	assert_int_equal(dp_timer_add(l, 20 * DP_USEC_PER_MSEC, 0, on_timer, &guard, &g), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 0);

	assert_int_equal(dp_timer_set(s, 1000, 0), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 1);
	dp_source_free(g);
	dp_source_free(s);
}

static void test_timer_periodic(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state t = {.stop_at = 3}, guard = {0};
	dp_source *s, *g;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, 1000, 1000, on_timer, &t, &s), 0);
	assert_true(run_until_count(l, &t.count, 3));
	/* It disarmed itself at 3: a 30 ms guard fires and the count stays. */
	assert_int_equal(dp_timer_add(l, 30 * DP_USEC_PER_MSEC, 0, on_timer, &guard, &g), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 3);

	/* usec 0 with an interval: first fire at once, then periodic again. */
	t.stop_at = 6;
	assert_int_equal(dp_timer_set(s, 0, 1000), 0);
	assert_true(run_until_count(l, &t.count, 6));
	dp_source_free(g);
	dp_source_free(s);
}

/* Two coarse timers armed at different moments (a periodic backstop and a one-shot check)
 * expire together: the process wakes once for both. Below the grid, coarse is exact. */
static void test_timer_coarse_shared_wakeup(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state a = {.stop_at = 1}, b = {0}, c = {0};
	dp_source *sa, *sb, *sc;
	uint64_t end;
	int n = 0;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, DP_TIMER_GRID_USEC, DP_TIMER_GRID_USEC, on_timer, &a, &sa), 0);
	assert_int_equal(dp_timer_set_coarse(sa, DP_TIMER_GRID_USEC, DP_TIMER_GRID_USEC), 0);
	/* Below the grid: armed as asked, fires long before the coarse ones. */
	assert_int_equal(dp_timer_add(l, 0, 0, on_timer, &c, &sc), 0);
	assert_int_equal(dp_timer_set_coarse(sc, 1000, 0), 0);
	assert_true(dpt_run_until(l, &c.done, BOUND_USEC));
	assert_int_equal(a.count, 0);
	assert_int_equal(dp_timer_add(l, 0, 0, on_timer, &b, &sb), 0);
	assert_int_equal(dp_timer_set_coarse(sb, DP_TIMER_GRID_USEC, 0), 0);
	end = dp_now_usec() + 3 * DP_TIMER_GRID_USEC;
	while (!a.done && !b.done && dp_now_usec() < end)
		n = dp_loop_run_once(l, 100);
	assert_int_equal(n, 2); /* one batch, both timers */
	assert_int_equal(a.count, 1);
	assert_int_equal(b.count, 1);
	assert_int_equal(dp_timer_set_coarse(NULL, DP_TIMER_GRID_USEC, 0), -EINVAL);
	dp_source_free(sa);
	dp_source_free(sb);
	dp_source_free(sc);
}

/* A one-shot coarse timer re-armed from its own callback (as the periodic health check is)
 * stays on the instants of a periodic coarse timer of the same interval: every time it fires,
 * it fires on the periodic one's grid instant (so the two share a wake-up). The interval is two
 * grid steps, so that landing one step late would fall between the periodic expiries. */
static int on_timer_rearm(dp_source *s, void *userdata)
{
	record_step(userdata);
	assert_int_equal(dp_timer_set_coarse(s, 2 * DP_TIMER_GRID_USEC, 0), 0);
	return 0;
}

static void test_timer_coarse_rearm_stays_on_grid(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state a = {0}, b = {0};
	dp_source *sa, *sb;
	uint64_t end;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, 0, 0, on_timer, &a, &sa), 0);
	assert_int_equal(dp_timer_set_coarse(sa, 2 * DP_TIMER_GRID_USEC, 2 * DP_TIMER_GRID_USEC), 0);
	assert_int_equal(dp_timer_add(l, 0, 0, on_timer_rearm, &b, &sb), 0);
	assert_int_equal(dp_timer_set_coarse(sb, 2 * DP_TIMER_GRID_USEC, 0), 0);
	end = dp_now_usec() + 8 * DP_TIMER_GRID_USEC;
	while ((a.count < 2 || b.count < 2) && dp_now_usec() < end)
		(void)dp_loop_run_once(l, 100);
	assert_int_equal(b.count, 2);
	assert_int_equal(a.count, 2);
	/* Each expiry of the re-armed timer on the periodic one's grid instant. Not asserted: that
	 * one epoll_wait returns both; the two timerfds expire at the same instant but are signalled
	 * one after the other, and on 2 CPUs the loop may wake between them (a loaded make test
	 * run did). */
	assert_int_equal(b.step[0], a.step[0]);
	assert_int_equal(b.step[1], a.step[1]);
	dp_source_free(sa);
	dp_source_free(sb);
}

/* Wait (bounded) until the given delay has passed, so that timers are expired in the kernel. */
static void spin_until(uint64_t t)
{
	while (dp_now_usec() < t)
		;
}

struct pair_state {
	dp_source *other;
	int calls;
	int other_calls;
	bool done;
};

static int on_timer_disarm_other(dp_source *s, void *userdata)
{
	struct pair_state *p = userdata;

	p->calls++;
	if (p->other)
		assert_int_equal(dp_timer_set(p->other, 0, 0), 0);
	p->done = true;
	return 0;
}

/* An expiry already returned in the batch is dropped when the timer is disarmed meanwhile. */
static void test_timer_stale_in_batch(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct pair_state a = {0}, b = {0};
	dp_source *sa, *sb;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, 1, 0, on_timer_disarm_other, &a, &sa), 0);
	assert_int_equal(dp_timer_add(l, 1, 0, on_timer_disarm_other, &b, &sb), 0);
	a.other = sb;
	b.other = sa;
	spin_until(dp_now_usec() + 2000);
	/* Both events are in the batch (2 dispatched); the disarmed one's callback is not called. */
	assert_int_equal(dp_loop_run_once(l, 1000), 2);
	assert_int_equal(a.calls + b.calls, 1);
	dp_source_free(sa);
	dp_source_free(sb);
}

/* ---- "as soon as possible", requested again and again ---- */

/* A burst of requests makes one callback; a disarm or a later time cancels a request not yet
 * served, and a request after that arms the timer again. */
static void test_timer_asap_burst(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct timer_state t = {0}, guard = {0};
	dp_source *s, *g;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add_disarmed(l, on_timer, &t, &s), 0);
	assert_int_equal(dp_timer_add_disarmed(l, on_timer, &guard, &g), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(dp_timer_set_asap(s), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(dp_timer_set(g, 20 * DP_USEC_PER_MSEC, 0), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 1);

	/* requested, then disarmed: silent; requested again: fires */
	t.done = guard.done = false;
	assert_int_equal(dp_timer_set_asap(s), 0);
	assert_int_equal(dp_timer_set(s, 0, 0), 0);
	assert_int_equal(dp_timer_set(g, 20 * DP_USEC_PER_MSEC, 0), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 1);
	assert_int_equal(dp_timer_set_asap(s), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 2);

	/* requested, then set later: the later time holds until requested again */
	t.done = guard.done = false;
	assert_int_equal(dp_timer_set_asap(s), 0);
	assert_int_equal(dp_timer_set(s, 60 * DP_USEC_PER_SEC, 0), 0);
	assert_int_equal(dp_timer_set(g, 20 * DP_USEC_PER_MSEC, 0), 0);
	assert_true(dpt_run_until(l, &guard.done, BOUND_USEC));
	assert_int_equal(t.count, 2);
	assert_int_equal(dp_timer_set_asap(s), 0);
	assert_true(dpt_run_until(l, &t.done, BOUND_USEC));
	assert_int_equal(t.count, 3);
	dp_source_free(g);
	dp_source_free(s);
}

static int on_count(dp_source *s, void *userdata)
{
	(*(int *)userdata)++;
	return 0;
}

/* In a forked child whose seccomp filter makes timerfd_settime fail with EPERM once the timer
 * was requested: the burst's further requests make no system call (they succeed), the
 * callback runs once, and a request after it arms the timer again (and meets the filter).
 * Returns 0, or the number of the first check that failed. */
static int asap_checks_without_settime(void)
{
	dp_loop *l = NULL;
	dp_source *s = NULL;
	scmp_filter_ctx ctx;
	int calls = 0;

	if (dp_loop_new(&l) < 0 || dp_timer_add_disarmed(l, on_count, &calls, &s) < 0 ||
	    dp_timer_set_asap(s) < 0)
		return 1;
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(timerfd_settime), 0) < 0 ||
	    seccomp_load(ctx) < 0)
		return 2;
	seccomp_release(ctx);
	for (int i = 0; i < 1000; i++)
		if (dp_timer_set_asap(s) != 0)
			return 3;
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (calls == 0 && dp_now_usec() < end)
		(void)dp_loop_run_once(l, 10);
	if (calls != 1 || dp_loop_run_once(l, 20) != 0 || calls != 1)
		return 4;
	if (dp_timer_set_asap(s) != -EPERM)
		return 5;
	dp_source_free(s);
	dp_loop_free(l);
	return 0;
}

static void test_timer_asap_no_rearm(void **state)
{
	int status;
	pid_t pid;

	if (dpt_seccomp_unavailable())
		skip();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(asap_checks_without_settime());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0); /* else: the number of the failed check */
}

/* ---- freeing during a batch ---- */

struct free_state {
	dp_source **other; /* freed by whichever callback runs first */
	int *calls;
	bool free_self;
};

static int on_io_free_other(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	struct free_state *f = userdata;

	(*f->calls)++;
	*f->other = dp_source_free(*f->other);
	if (f->free_self)
		dp_source_free(s);
	/* After freeing itself the source's memory must still be valid in this batch. */
	return 0;
}

static void test_free_other_in_batch(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	dp_source *sa, *sb;
	int calls = 0, p1[2], p2[2];
	struct free_state fa = {.other = &sb, .calls = &calls, .free_self = true};
	struct free_state fb = {.other = &sa, .calls = &calls, .free_self = true};

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(pipe2(p1, O_CLOEXEC), 0);
	assert_int_equal(pipe2(p2, O_CLOEXEC), 0);
	assert_int_equal(write(p1[1], "a", 1), 1);
	assert_int_equal(write(p2[1], "b", 1), 1);
	assert_int_equal(dp_io_add(l, p1[0], EPOLLIN, on_io_free_other, &fa, &sa), 0);
	assert_int_equal(dp_io_add(l, p2[0], EPOLLIN, on_io_free_other, &fb, &sb), 0);

	/* Both are readable, both events come in one batch; the second is skipped. */
	assert_int_equal(dp_loop_run_once(l, 1000), 1);
	assert_int_equal(calls, 1);
	/* Both sources are gone: more iterations dispatch nothing although data is pending. */
	assert_int_equal(dp_loop_run_once(l, 0), 0);
	assert_int_equal(calls, 1);
	close(p1[0]);
	close(p1[1]);
	close(p2[0]);
	close(p2[1]);
}

static int on_timer_free_other(dp_source *s, void *userdata)
{
	struct pair_state *p = userdata;

	p->calls++;
	p->other = dp_source_free(p->other);
	return 0;
}

/* An owned fd (timerfd) is closed at once when freed in a batch; its event is skipped. */
static void test_free_owned_in_batch(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct pair_state a = {0}, b = {0};
	dp_source *sa, *sb;
	int before = dpt_count_fds();

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, 1, 0, on_timer_free_other, &a, &sa), 0);
	assert_int_equal(dp_timer_add(l, 1, 0, on_timer_free_other, &b, &sb), 0);
	a.other = sb;
	b.other = sa;
	assert_int_equal(dpt_count_fds(), before + 3);
	spin_until(dp_now_usec() + 2000);
	assert_int_equal(dp_loop_run_once(l, 1000), 1);
	assert_int_equal(a.calls + b.calls, 1);
	assert_int_equal(dpt_count_fds(), before + 2);
	dp_source_free(a.calls ? sa : sb);
	assert_int_equal(dpt_count_fds(), before + 1);
}

/* ---- signals ---- */

struct sig_state {
	uint32_t signo;
	int count;
	bool done;
};

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct sig_state *st = userdata;

	st->signo = si->ssi_signo;
	st->count++;
	st->done = true;
	return 0;
}

static void test_signal(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct sig_state st = {0};
	dp_source *s;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_signal_add(l, SIGKILL, on_signal, &st, &s), -EINVAL);
	assert_int_equal(dp_signal_add(l, 0, on_signal, &st, &s), -EINVAL);
	assert_int_equal(dp_signal_add(l, SIGUSR1, on_signal, &st, &s), 0);
	assert_int_equal(raise(SIGUSR1), 0);
	assert_true(dpt_run_until(l, &st.done, BOUND_USEC));
	assert_int_equal(st.signo, SIGUSR1);
	assert_int_equal(st.count, 1);
	dp_source_free(s);
}

/* ---- children ---- */

struct child_state {
	siginfo_t si;
	int calls;
	bool done;
};

static int on_child(dp_source *s, const siginfo_t *si, void *userdata)
{
	struct child_state *c = userdata;

	c->si = *si;
	c->calls++;
	c->done = true;
	assert_true(dp_child_reaped(s));
	return 0;
}

static void test_child_exit(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct child_state c = {0};
	dp_source *s;
	pid_t pid;

	assert_int_equal(dp_loop_new(&l), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(7);
	assert_int_equal(dp_child_add(l, pid, on_child, &c, &s), 0);
	assert_false(dp_child_reaped(s));
	assert_true(dpt_run_until(l, &c.done, BOUND_USEC));
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.si.si_pid, pid);
	assert_int_equal(c.si.si_code, CLD_EXITED);
	assert_int_equal(c.si.si_status, 7);
	assert_true(dp_child_reaped(s));
	assert_int_equal(dp_child_kill(s, SIGKILL), -ESRCH);
	/* The reaped pidfd stays readable: the loop must not dispatch it again. */
	assert_int_equal(dp_loop_run_once(l, 0), 0);
	assert_int_equal(c.calls, 1);
	dp_source_free(s);
}

static void test_child_kill(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct child_state c = {0};
	dp_source *s;
	pid_t pid;

	assert_int_equal(dp_loop_new(&l), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (;;)
			pause();
	}
	assert_int_equal(dp_child_add(l, pid, on_child, &c, &s), 0);
	assert_int_equal(dp_child_kill(s, SIGKILL), 0);
	assert_true(dpt_run_until(l, &c.done, BOUND_USEC));
	assert_int_equal(c.si.si_code, CLD_KILLED);
	assert_int_equal(c.si.si_status, SIGKILL);
	dp_source_free(s);

	/* A pid that does not exist (reaped above). */
	assert_int_equal(dp_child_add(l, pid, on_child, &c, &s), -ESRCH);
	assert_int_equal(dp_child_add(l, 0, on_child, &c, &s), -EINVAL);
}

/* Where pidfd_open is missing (valgrind 3.19, kernels before 5.3): children are polled. Runs in
 * a forked child whose seccomp filter makes both pidfd calls fail with ENOSYS; returns 0, or
 * the number of the first check that failed. */
static int child_checks_without_pidfd(void)
{
	struct child_state c = {0}, k = {0};
	dp_loop *l = NULL;
	dp_source *s = NULL;
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	pid_t pid;

	if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(pidfd_open), 0) < 0 ||
	    seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(pidfd_send_signal), 0) < 0 ||
	    seccomp_load(ctx) < 0)
		return 1;
	seccomp_release(ctx);
	if (syscall(SYS_pidfd_open, getpid(), 0) >= 0 || errno != ENOSYS || dp_loop_new(&l) < 0)
		return 2;
	if ((pid = fork()) == 0)
		_exit(7);
	if (pid < 0 || dp_child_add(l, pid, on_child, &c, &s) < 0 || !dpt_run_until(l, &c.done, BOUND_USEC))
		return 3;
	if (c.calls != 1 || c.si.si_pid != pid || c.si.si_code != CLD_EXITED || c.si.si_status != 7)
		return 4;
	if (dp_child_kill(s, SIGKILL) != -ESRCH)
		return 5;
	s = dp_source_free(s);
	if ((pid = fork()) == 0)
		for (;;)
			pause();
	if (pid < 0 || dp_child_add(l, pid, on_child, &k, &s) < 0 || dp_child_kill(s, SIGKILL) < 0 ||
	    !dpt_run_until(l, &k.done, BOUND_USEC))
		return 6;
	if (k.si.si_code != CLD_KILLED || k.si.si_status != SIGKILL)
		return 7;
	s = dp_source_free(s);
	/* reaped above: the pid is gone, as with a pidfd */
	if (dp_child_add(l, pid, on_child, &k, &s) != -ESRCH)
		return 8;
	dp_loop_free(l);
	return 0;
}

static void test_child_without_pidfd(void **state)
{
	int status;
	pid_t pid;

	if (dpt_seccomp_unavailable()) /* the missing pidfd calls are made with a filter */
		skip();
	pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(child_checks_without_pidfd());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0); /* else: the number of the failed check */
}

/* ---- inotify ---- */

#define MAX_EVENTS 16
struct ino_state {
	uint32_t mask[MAX_EVENTS];
	char name[MAX_EVENTS][32];
	int n;
	int calls_after_ignored;
	bool ignored;
};

static int on_inotify(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	struct ino_state *st = userdata;

	if (st->ignored)
		st->calls_after_ignored++;
	if (st->n < MAX_EVENTS) {
		st->mask[st->n] = ev->mask;
		snprintf(st->name[st->n], sizeof(st->name[0]), "%s", ev->len ? ev->name : "");
		st->n++;
	}
	if (ev->mask & IN_IGNORED)
		st->ignored = true;
	return 0;
}

static bool saw(const struct ino_state *st, uint32_t bit, const char *name)
{
	for (int i = 0; i < st->n; i++)
		if ((st->mask[i] & bit) && strcmp(st->name[i], name) == 0)
			return true;
	return false;
}

static void test_inotify(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct ino_state st = {0};
	char dir[] = "/tmp/test_loop.XXXXXX", file[64];
	dp_source *s;
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/created", dir);
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_inotify_add(l, "/nonexistent/dir", IN_CREATE, on_inotify, &st, &s), -ENOENT);
	assert_int_equal(dp_inotify_add(l, dir, IN_CREATE | IN_DELETE, on_inotify, &st, &s), 0);

	fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!saw(&st, IN_CREATE, "created") && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	assert_true(saw(&st, IN_CREATE, "created"));

	assert_int_equal(unlink(file), 0);
	end = dp_now_usec() + BOUND_USEC;
	while (!saw(&st, IN_DELETE, "created") && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	assert_true(saw(&st, IN_DELETE, "created"));

	/* Removing the watched directory ends the watch with IN_IGNORED. */
	assert_int_equal(rmdir(dir), 0);
	assert_true(dpt_run_until(l, &st.ignored, BOUND_USEC));
	assert_true(st.mask[st.n - 1] & IN_IGNORED);
	assert_int_equal(st.calls_after_ignored, 0);
	assert_int_equal(dp_loop_run_once(l, 0), 0);
	assert_int_equal(st.calls_after_ignored, 0);
	dp_source_free(s);
}

/* ---- a flood of inotify events ---- */

#define FLOOD_FILES 1000   /* events queued at any time: each one handled makes the next */
#define FLOOD_LIMIT 20000 /* then the flood stops: the bound of a turn that would never end */
#define FLOOD_TURNS 20
#define EVENTS_PER_READ (4096 / sizeof(struct inotify_event)) /* one 4 KiB buffer, at most */

struct flood_state {
	char dir[64];
	int events;    /* inotify callbacks */
	int io_calls;  /* the pipe's callbacks (it stays readable: one per turn) */
	int signal_at; /* events handled when the signal raised at the first one was served */
};

/* Each event makes the next one, as a loop recreating a node does: a created entry is
 * removed, a removed one created again; after FLOOD_LIMIT events nothing more is made. */
static int on_flood(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	struct flood_state *f = userdata;
	char path[128];

	if (++f->events == 1)
		assert_int_equal(raise(SIGUSR1), 0);
	if (f->events > FLOOD_LIMIT || !ev->len)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", f->dir, ev->name);
	if (ev->mask & IN_CREATE) {
		assert_int_equal(unlink(path), 0);
	} else {
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		close(fd);
	}
	return 0;
}

static int on_flood_io(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	((struct flood_state *)userdata)->io_calls++;
	return 0;
}

static int on_flood_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct flood_state *f = userdata;
	f->signal_at = f->events;
	return 0;
}

/* While an inotify source always has events queued (each one handled makes another), every turn
 * reads at most one buffer of them and serves the other ready sources too: a readable pipe each
 * turn, a signal raised during the first turn at the next one. Before, the first turn read until
 * the queue was empty, which a flood never lets happen (here: until FLOOD_LIMIT). */
static void test_inotify_flood_fair(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct flood_state f = { .signal_at = -1 };
	dp_source *ino, *sig, *io;
	char path[128];
	int p[2];

	assert_int_equal(dpt_tmpdir(f.dir, sizeof(f.dir), "test_loop_flood"), 0);
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_inotify_add(l, f.dir, IN_CREATE | IN_DELETE, on_flood, &f, &ino), 0);
	assert_int_equal(dp_signal_add(l, SIGUSR1, on_flood_signal, &f, &sig), 0);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(dp_io_add(l, p[0], EPOLLIN, on_flood_io, &f, &io), 0);
	for (int i = 0; i < FLOOD_FILES; i++) {
		snprintf(path, sizeof(path), "%s/f%04d", f.dir, i);
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		close(fd);
	}
	for (int turn = 1; turn <= FLOOD_TURNS; turn++) {
		int before = f.events;
		assert_true(dp_loop_run_once(l, 1000) > 0);
		assert_int_equal(f.io_calls, turn);
		assert_in_range(f.events - before, 1, EVENTS_PER_READ);
	}
	assert_in_range(f.signal_at, 1, 2 * EVENTS_PER_READ);
	dp_source_free(io);
	dp_source_free(sig);
	dp_source_free(ino);
	close(p[0]);
	close(p[1]);
	assert_int_equal(dpt_rmtree(f.dir), 0);
}

/* ---- defer, run/exit, fds ---- */

static char order[16];

static void on_defer(void *userdata)
{
	size_t n = strlen(order);

	order[n] = *(const char *)userdata;
	order[n + 1] = '\0';
}

struct defer_ctx {
	dp_loop *loop;
	const char *mark;
};

static void on_defer_again(void *userdata)
{
	struct defer_ctx *c = userdata;

	on_defer((void *)c->mark);
	assert_int_equal(dp_defer(c->loop, on_defer, (void *)"z"), 0);
}

static void test_defer_order(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	struct defer_ctx ctx;

	order[0] = '\0';
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_defer(l, NULL, NULL), -EINVAL);
	assert_int_equal(dp_defer(l, on_defer, (void *)"1"), 0);
	assert_int_equal(dp_defer(l, on_defer, (void *)"2"), 0);
	assert_int_equal(dp_defer(l, on_defer, (void *)"3"), 0);
	assert_string_equal(order, ""); /* never inside dp_defer */
	assert_int_equal(dp_loop_run_once(l, -1), 0);
	assert_string_equal(order, "123");

	/* A call deferred from a deferred call runs in the next iteration, which does not block. */
	ctx.loop = l;
	ctx.mark = "a";
	assert_int_equal(dp_defer(l, on_defer_again, &ctx), 0);
	assert_int_equal(dp_loop_run_once(l, -1), 0);
	assert_string_equal(order, "123a");
	assert_int_equal(dp_loop_run_once(l, -1), 0);
	assert_string_equal(order, "123az");
}

static int on_timer_exit(dp_source *s, void *userdata)
{
	dp_loop_exit(dp_source_loop(s), 3);
	return 0;
}

static void test_run_exit(void **state)
{
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	dp_source *s;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_false(dp_loop_exiting(l));
	assert_int_equal(dp_timer_add(l, 1000, 0, on_timer_exit, NULL, &s), 0);
	assert_int_equal(dp_loop_run(l), 3);
	assert_true(dp_loop_exiting(l));
	dp_source_free(s);
}

static void test_free_loop_closes_fds(void **state)
{
	struct sig_state sst = {0};
	struct child_state c = {0};
	struct ino_state ist = {0};
	struct timer_state t = {0};
	char dir[] = "/tmp/test_loop.XXXXXX";
	dp_loop *l;
	dp_source *s;
	int before = dpt_count_fds();
	pid_t pid;

	assert_non_null(mkdtemp(dir));
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_timer_add(l, DP_USEC_PER_SEC, 0, on_timer, &t, &s), 0);
	assert_int_equal(dp_signal_add(l, SIGUSR2, on_signal, &sst, &s), 0);
	assert_int_equal(dp_inotify_add(l, dir, IN_CREATE, on_inotify, &ist, &s), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(0);
	assert_int_equal(dp_child_add(l, pid, on_child, &c, &s), 0);
	assert_true(dpt_run_until(l, &c.done, BOUND_USEC));
	assert_int_equal(dp_defer(l, on_defer, (void *)"x"), 0); /* dropped, not run */
	assert_int_equal(dpt_count_fds(), before + 5);
	order[0] = '\0';
	assert_null(dp_loop_free(l));
	assert_string_equal(order, "");
	assert_int_equal(dpt_count_fds(), before);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_io_readiness),
		cmocka_unit_test(test_io_bad_args),
		cmocka_unit_test(test_many_sources),
		cmocka_unit_test(test_timer_oneshot_rearm),
		cmocka_unit_test(test_timer_disarmed),
		cmocka_unit_test(test_timer_periodic),
		cmocka_unit_test(test_timer_coarse_shared_wakeup),
		cmocka_unit_test(test_timer_coarse_rearm_stays_on_grid),
		cmocka_unit_test(test_timer_stale_in_batch),
		cmocka_unit_test(test_timer_asap_burst),
		cmocka_unit_test(test_timer_asap_no_rearm),
		cmocka_unit_test(test_free_other_in_batch),
		cmocka_unit_test(test_free_owned_in_batch),
		cmocka_unit_test(test_signal),
		cmocka_unit_test(test_child_exit),
		cmocka_unit_test(test_child_kill),
		cmocka_unit_test(test_child_without_pidfd),
		cmocka_unit_test(test_inotify),
		cmocka_unit_test(test_inotify_flood_fair),
		cmocka_unit_test(test_defer_order),
		cmocka_unit_test(test_run_exit),
		cmocka_unit_test(test_free_loop_closes_fds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
