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
#include <sys/resource.h>
#include <unistd.h>

#include "dp/fdreserve.h"
#include "dp/helper.h"
#include "dp_test.h"

#define BOUND_USEC (10 * DP_USEC_PER_SEC)
#define LONG_DEADLINE (10 * DP_USEC_PER_SEC)
#define SELF "/proc/self/exe"

/* ---------------------------------------------------------------- child entries */

static void h_ok(int argc, char **argv)
{
	dp_helper_reply_ok("probe fine");
}

static void h_echo(int argc, char **argv)
{
	dp_helper_reply_ok(argc > 1 ? argv[1] : "");
}

static void h_fail(int argc, char **argv)
{
	dp_helper_reply_fail("cannot open %s: %s", "/dev/kvm", "No such file or directory");
}

static void h_sleep(int argc, char **argv)
{
	for (;;)
		pause();
}

/* Sleeps the first time (creates the marker argv[1]); answers ok when the marker exists. */
static void h_sleep_once(int argc, char **argv)
{
	int fd = open(argv[1], O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);

	if (fd < 0) {
		dp_helper_reply_ok("second run");
		return;
	}
	close(fd);
	h_sleep(argc, argv);
}

/* Writes its pid into the file argv[1], then sleeps. */
static void h_sleep_pid(int argc, char **argv)
{
	FILE *f = fopen(argv[1], "we");

	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	h_sleep(argc, argv);
}

static void h_crash(int argc, char **argv)
{
	abort();
}

static void h_exit3(int argc, char **argv)
{
	_exit(3);
}

static void h_garbage(int argc, char **argv)
{
	static const char junk[] = "\x01hello\tworld \xff garbage that is longer than sixty-four bytes, "
				   "which is cut\n";
	(void)!write(STDOUT_FILENO, junk, sizeof(junk) - 1);
}

static void h_two_lines(int argc, char **argv)
{
	(void)!write(STDOUT_FILENO, "ok\nok\n", 6);
}

static void h_no_newline(int argc, char **argv)
{
	(void)!write(STDOUT_FILENO, "ok", 2);
}

static void h_fail_ctrl(int argc, char **argv)
{
	static const char line[] = "fail bad\x1b[31m red\r\n";

	(void)!write(STDOUT_FILENO, line, sizeof(line) - 1);
}

static void h_silent(int argc, char **argv)
{
}

static void h_big(int argc, char **argv)
{
	static char buf[10240];

	memset(buf, 'x', sizeof(buf));
	for (size_t o = 0; o < sizeof(buf);) {
		ssize_t n = write(STDOUT_FILENO, buf + o, sizeof(buf) - o);
		if (n <= 0)
			_exit(9);
		o += (size_t)n;
	}
}

static void h_fail_exit(int argc, char **argv)
{
	dp_helper_reply_fail("device busy");
	_exit(4);
}

static const dp_helper_entry entries[] = {
	{"ok", h_ok},		{"echo", h_echo},	  {"fail", h_fail},
	{"sleep", h_sleep},	{"sleep-once", h_sleep_once}, {"crash", h_crash},
	{"exit3", h_exit3},	{"garbage", h_garbage},	  {"two-lines", h_two_lines},
	{"no-newline", h_no_newline}, {"silent", h_silent}, {"big", h_big},
	{"fail-exit", h_fail_exit}, {"sleep-pid", h_sleep_pid},
	{"fail-ctrl", h_fail_ctrl},
};

/* ---------------------------------------------------------------- test utilities */

struct res {
	int calls;
	bool done;
	dp_helper_result r;
	uint64_t at; /* when the callback ran */
};

static void on_done(const dp_helper_result *r, void *userdata)
{
	struct res *x = userdata;

	x->calls++;
	x->done = true;
	x->r = *r;
	x->at = dp_now_usec();
}


struct fixture {
	dp_loop *loop;
	dp_helper *h;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(dp_loop_new(&f->loop), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	dp_helper_free(f->h);
	dp_loop_free(f->loop);
	free(f);
	return 0;
}

static dp_helper *new_helper(struct fixture *f, const char *name, const char *arg,
			     uint64_t deadline, uint64_t grace)
{
	char *argv[] = {(char *)name, (char *)arg, NULL};

	assert_int_equal(dp_helper_new(f->loop, SELF, argv, deadline, grace, &f->h), 0);
	return f->h;
}

/* One request, run to completion; the callback never runs inside dp_helper_request. */
static void run_one(struct fixture *f, struct res *x)
{
	assert_int_equal(dp_helper_request(f->h, on_done, x, NULL), 0);
	assert_int_equal(x->calls, 0);
	assert_true(dpt_run_until(f->loop, &x->done, BOUND_USEC));
	assert_int_equal(x->calls, 1);
}

static void expect_result(void **state, const char *name, bool ok, const char *reason)
{
	struct fixture *f = *state;
	struct res x = {0};
	dp_helper *h = new_helper(f, name, NULL, LONG_DEADLINE, DP_USEC_PER_SEC);

	assert_null(dp_helper_last(h));
	run_one(f, &x);
	assert_int_equal(x.r.ok, ok);
	assert_string_equal(x.r.reason, reason);
	assert_int_equal(dp_helper_runs(h), 1);
	assert_false(dp_helper_running(h));
	assert_false(dp_helper_blocked(h));
	assert_non_null(dp_helper_last(h));
	assert_int_equal(dp_helper_last(h)->ok, ok);
	assert_string_equal(dp_helper_last(h)->reason, reason);
}

/* ---------------------------------------------------------------- results */

static void test_ok(void **state)
{
	expect_result(state, "ok", true, "probe fine");
}

static void test_fail_reason(void **state)
{
	expect_result(state, "fail", false, "cannot open /dev/kvm: No such file or directory");
}

static void test_signal(void **state)
{
	expect_result(state, "crash", false, "helper killed by signal 6 (SIGABRT)");
}

static void test_exit_status(void **state)
{
	expect_result(state, "exit3", false, "helper exited with status 3");
}

static void test_exit_status_with_reason(void **state)
{
	expect_result(state, "fail-exit", false, "helper exited with status 4: device busy");
}

static void test_unknown_entry(void **state)
{
	expect_result(state, "no-such-entry", false, "helper exited with status 2: unknown helper no-such-entry");
}

static void test_reason_control_chars(void **state)
{
	expect_result(state, "fail-ctrl", false, "bad?[31m red?");
}

static void test_garbage(void **state)
{
	expect_result(state, "garbage", false,
		      "helper printed an invalid result: ?hello?world ? garbage that is longer than "
		      "sixty-four bytes, whi");
}

static void test_two_lines(void **state)
{
	expect_result(state, "two-lines", false, "helper printed an invalid result: ok?ok?");
}

static void test_no_newline(void **state)
{
	expect_result(state, "no-newline", false, "helper printed an invalid result: ok");
}

static void test_silent(void **state)
{
	expect_result(state, "silent", false, "helper exited without a result");
}

static void test_oversize(void **state)
{
	expect_result(state, "big", false, "helper printed more than 4096 bytes");
}

static void test_arguments(void **state)
{
	struct fixture *f = *state;
	struct res x = {0};

	new_helper(f, "echo", "hello world", LONG_DEADLINE, DP_USEC_PER_SEC);
	run_one(f, &x);
	assert_true(x.r.ok);
	assert_string_equal(x.r.reason, "hello world");
}

/* New arguments for the next runs, not while one is in progress; the executable's fd stays. */
static void test_set_argv(void **state)
{
	struct fixture *f = *state;
	struct res x = {0}, y = {0};
	char *first[] = {"echo", "first call", NULL}, *second[] = {"echo", "second call", NULL};
	char *empty[] = {"", NULL};

	new_helper(f, "echo", "hello", LONG_DEADLINE, DP_USEC_PER_SEC);
	int fd = dp_helper_exe_fd(f->h);
	assert_int_equal(dp_helper_set_argv(f->h, first), 0);
	assert_int_equal(dp_helper_request(f->h, on_done, &x, NULL), 0);
	assert_int_equal(dp_helper_set_argv(f->h, second), -EBUSY);
	assert_true(dpt_run_until(f->loop, &x.done, BOUND_USEC));
	assert_string_equal(x.r.reason, "first call");
	assert_int_equal(dp_helper_set_argv(f->h, empty), -EINVAL);
	assert_int_equal(dp_helper_set_argv(f->h, second), 0);
	run_one(f, &y);
	assert_string_equal(y.r.reason, "second call");
	assert_int_equal(dp_helper_exe_fd(f->h), fd);
	assert_int_equal(dp_helper_runs(f->h), 2);
}

static void test_exec_failure(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"ok", NULL};
	struct res x = {0};

	assert_int_equal(dp_helper_new(f->loop, "/nonexistent/helper", argv, LONG_DEADLINE, 0, &f->h), 0);
	run_one(f, &x);
	assert_false(x.r.ok);
	assert_string_equal(x.r.reason, "cannot start helper /nonexistent/helper: No such file or directory");
	assert_int_equal(dp_helper_runs(f->h), 0);
}

/* Every fd up to the limit taken (a client holding connections); the limit lowered to 64 to
 * keep it quick. The fds taken go to taken[] (at most 64), their count is returned. */
#define LOW_LIMIT 64
static int exhaust_fds(struct rlimit *saved, int taken[LOW_LIMIT])
{
	struct rlimit low = { .rlim_cur = LOW_LIMIT, .rlim_max = 0 };
	int fd, n = 0;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, saved), 0);
	low.rlim_max = saved->rlim_max;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < LOW_LIMIT && (fd = fcntl(0, F_DUPFD_CLOEXEC, 0)) >= 0)
		taken[n++] = fd;
	assert_true(n < LOW_LIMIT);
	assert_int_equal(errno, EMFILE);
	return n;
}

static void release_fds(const struct rlimit *saved, const int *taken, int n)
{
	for (int i = 0; i < n; i++)
		close(taken[i]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, saved), 0);
}

/* Out of fds and no reserve: the run cannot start, and the result says so (start_error), so
 * the caller can tell "could not run" from what the helper checks. */
static void test_start_error_emfile(void **state)
{
	struct fixture *f = *state;
	struct rlimit saved;
	struct res x = {0};
	int taken[LOW_LIMIT], n;

	new_helper(f, "ok", NULL, LONG_DEADLINE, DP_USEC_PER_SEC);
	assert_int_equal(dp_fd_reserve(0), 0);
	n = exhaust_fds(&saved, taken);
	run_one(f, &x);
	release_fds(&saved, taken, n);
	assert_false(x.r.ok);
	assert_int_equal(x.r.start_error, -EMFILE);
	assert_int_equal(x.r.run, 0);
	assert_non_null(strstr(x.r.reason, "Too many open files"));
}

/* A run that ran has no start error, even when it failed. */
static void test_start_error_clear(void **state)
{
	struct fixture *f = *state;
	struct res x = {0};

	new_helper(f, "fail", NULL, LONG_DEADLINE, DP_USEC_PER_SEC);
	run_one(f, &x);
	assert_false(x.r.ok);
	assert_int_equal(x.r.start_error, 0);
}

/* Out of fds with the reserve held: the child starts on the reserve's fds, twice (the reserve
 * is refilled after each run, before anything else can take the fds back). */
static void test_reserve_lets_run_start(void **state)
{
	struct fixture *f = *state;
	struct rlimit saved;
	struct res x = {0}, y = {0};
	int taken[LOW_LIMIT], n;

	new_helper(f, "ok", NULL, LONG_DEADLINE, DP_USEC_PER_SEC);
	assert_int_equal(dp_fd_reserve(8), 0);
	n = exhaust_fds(&saved, taken);
	run_one(f, &x);
	run_one(f, &y);
	assert_int_equal(dp_fd_reserve_held(), 8);
	release_fds(&saved, taken, n);
	assert_int_equal(dp_fd_reserve(0), 0);
	assert_true(x.r.ok);
	assert_true(y.r.ok);
	assert_int_equal(x.r.start_error, 0);
}

static void test_bad_arguments(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"ok", NULL}, *empty[] = {NULL};
	dp_helper *h = NULL;

	assert_int_equal(dp_helper_new(f->loop, SELF, argv, 0, 0, &h), -EINVAL);
	assert_int_equal(dp_helper_new(f->loop, SELF, empty, LONG_DEADLINE, 0, &h), -EINVAL);
	assert_int_equal(dp_helper_new(NULL, SELF, argv, LONG_DEADLINE, 0, &h), -EINVAL);
	assert_int_equal(dp_helper_new(f->loop, "", argv, LONG_DEADLINE, 0, &h), -EINVAL);
	assert_null(h);
	new_helper(f, "ok", NULL, LONG_DEADLINE, 0);
	assert_int_equal(dp_helper_request(f->h, NULL, NULL, NULL), -EINVAL);
	assert_int_equal(dp_helper_request(NULL, on_done, NULL, NULL), -EINVAL);
	dp_helper_wait_cancel(NULL);
	assert_null(dp_helper_free(NULL));
	assert_int_equal(dp_helper_runs(f->h), 0);
}

/* ---------------------------------------------------------------- deadlines */

static void expect_timeout(void **state, uint64_t deadline, const char *reason)
{
	struct fixture *f = *state;
	struct res x = {0};
	uint64_t start = dp_now_usec();

	new_helper(f, "sleep", NULL, deadline, 5 * DP_USEC_PER_SEC);
	run_one(f, &x);
	assert_false(x.r.ok);
	assert_string_equal(x.r.reason, reason);
	assert_true(x.at - start < deadline + 3 * DP_USEC_PER_SEC);
	assert_string_equal(dp_helper_last(f->h)->reason, reason);
	assert_false(dp_helper_running(f->h));
}

static void test_timeout_ms(void **state)
{
	expect_timeout(state, 150 * DP_USEC_PER_MSEC, "timeout after 150 ms");
}

static void test_timeout_s(void **state)
{
	expect_timeout(state, DP_USEC_PER_SEC, "timeout after 1 s");
}

/* A request while the killed child is not reaped yet waits for the reap, then runs anew. */
static void test_request_waits_for_reap(void **state)
{
	struct fixture *f = *state;
	char marker[] = "/tmp/test_helper.XXXXXX";
	struct res a = {0}, b = {0};
	int fd = mkstemp(marker);

	assert_true(fd >= 0);
	close(fd);
	unlink(marker); /* the first run creates it, then sleeps */
	new_helper(f, "sleep-once", marker, 150 * DP_USEC_PER_MSEC, 5 * DP_USEC_PER_SEC);
	run_one(f, &a);
	assert_string_equal(a.r.reason, "timeout after 150 ms");
	/* Right after the timeout callback the child is (almost surely) not reaped yet. */
	assert_int_equal(dp_helper_request(f->h, on_done, &b, NULL), 0);
	assert_false(dp_helper_blocked(f->h));
	assert_true(dpt_run_until(f->loop, &b.done, BOUND_USEC));
	assert_true(b.r.ok);
	assert_string_equal(b.r.reason, "second run");
	assert_int_equal(dp_helper_runs(f->h), 2);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	unlink(marker);
}

struct blocked_ctx {
	struct fixture *f;
	struct res first, second;
	bool second_inside_request;
	bool blocked_in_callback;
};

static void on_second(const dp_helper_result *r, void *userdata)
{
	struct blocked_ctx *c = userdata;

	on_done(r, &c->second);
}

static void on_first_request_again(const dp_helper_result *r, void *userdata)
{
	struct blocked_ctx *c = userdata;

	on_done(r, &c->first);
	/* The killed child cannot be reaped before we return: grace 0 means blocked now. */
	c->blocked_in_callback = dp_helper_blocked(c->f->h);
	assert_int_equal(dp_helper_request(c->f->h, on_second, c, NULL), 0);
	c->second_inside_request = c->second.calls > 0;
}

static void test_blocked_then_recovers(void **state)
{
	struct fixture *f = *state;
	char marker[] = "/tmp/test_helper.XXXXXX";
	struct blocked_ctx c = {.f = f};
	const char *prefix = "previous helper (pid ";
	const char *suffix = ") not reaped after SIGKILL; probes blocked";
	int fd = mkstemp(marker);

	assert_true(fd >= 0);
	close(fd);
	unlink(marker);
	new_helper(f, "sleep-once", marker, 150 * DP_USEC_PER_MSEC, 0);
	assert_int_equal(dp_helper_request(f->h, on_first_request_again, &c, NULL), 0);
	assert_true(dpt_run_until(f->loop, &c.second.done, BOUND_USEC));
	assert_string_equal(c.first.r.reason, "timeout after 150 ms");
	assert_true(c.blocked_in_callback);
	assert_false(c.second_inside_request);
	assert_false(c.second.r.ok);
	assert_memory_equal(c.second.r.reason, prefix, strlen(prefix));
	assert_true(strlen(c.second.r.reason) > strlen(suffix));
	assert_string_equal(c.second.r.reason + strlen(c.second.r.reason) - strlen(suffix), suffix);
	assert_int_equal(dp_helper_runs(f->h), 1);
	/* A blocked failure is not a run: the last run's result stays the timeout. */
	assert_string_equal(dp_helper_last(f->h)->reason, "timeout after 150 ms");

	/* The loop reaps the killed child; the block ends and a new request runs. */
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (dp_helper_blocked(f->h) && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_false(dp_helper_blocked(f->h));
	struct res x = {0};
	run_one(f, &x);
	assert_true(x.r.ok);
	assert_string_equal(x.r.reason, "second run");
	assert_int_equal(dp_helper_runs(f->h), 2);
	assert_int_equal(c.first.calls, 1);
	assert_int_equal(c.second.calls, 1);
	unlink(marker);
}

/* ---------------------------------------------------------------- joining and cancelling */

static void test_join_in_flight(void **state)
{
	struct fixture *f = *state;
	struct res x[3] = {0};

	new_helper(f, "fail", NULL, LONG_DEADLINE, 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dp_helper_request(f->h, on_done, &x[i], NULL), 0);
		assert_true(dp_helper_running(f->h));
	}
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!(x[0].done && x[1].done && x[2].done) && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_int_equal(dp_helper_runs(f->h), 1);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(x[i].calls, 1);
		assert_false(x[i].r.ok);
		assert_string_equal(x[i].r.reason, "cannot open /dev/kvm: No such file or directory");
	}
}

static void test_cancel_one_waiter(void **state)
{
	struct fixture *f = *state;
	struct res x[3] = {0};
	dp_helper_wait *w[3];

	new_helper(f, "ok", NULL, LONG_DEADLINE, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(dp_helper_request(f->h, on_done, &x[i], &w[i]), 0);
	dp_helper_wait_cancel(w[1]);
	assert_true(dpt_run_until(f->loop, &x[2].done, BOUND_USEC));
	assert_true(x[0].done);
	assert_int_equal(x[0].calls, 1);
	assert_int_equal(x[1].calls, 0);
	assert_int_equal(x[2].calls, 1);
	assert_true(x[0].r.ok);
	assert_string_equal(x[2].r.reason, "probe fine");
	assert_int_equal(dp_helper_runs(f->h), 1);
	assert_true(dp_helper_last(f->h)->ok);
}

static void test_cancel_all_run_goes_on(void **state)
{
	struct fixture *f = *state;
	struct res x = {0};
	dp_helper_wait *w;

	new_helper(f, "fail", NULL, LONG_DEADLINE, 0);
	assert_int_equal(dp_helper_request(f->h, on_done, &x, &w), 0);
	dp_helper_wait_cancel(w);
	assert_true(dp_helper_running(f->h));
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!dp_helper_last(f->h) && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_non_null(dp_helper_last(f->h));
	assert_string_equal(dp_helper_last(f->h)->reason,
			    "cannot open /dev/kvm: No such file or directory");
	assert_int_equal(x.calls, 0);
	assert_false(dp_helper_running(f->h));
}

struct free_ctx {
	struct fixture *f;
	int calls;
};

static void on_done_free_helper(const dp_helper_result *r, void *userdata)
{
	struct free_ctx *c = userdata;

	c->calls++;
	c->f->h = dp_helper_free(c->f->h);
}

/* The first callback frees the helper: the other waiters get no callback, nothing breaks. */
static void test_free_from_callback(void **state)
{
	struct fixture *f = *state;
	struct free_ctx c = {.f = f};

	new_helper(f, "ok", NULL, LONG_DEADLINE, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(dp_helper_request(f->h, on_done_free_helper, &c, NULL), 0);
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (f->h && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_null(f->h);
	assert_int_equal(c.calls, 1);
	assert_true(dp_loop_run_once(f->loop, 0) >= 0);
	assert_int_equal(c.calls, 1);
}

/* Freeing with a run and waiters: no callback; the child is killed and the loop reaps it. */
static void test_free_while_running(void **state)
{
	struct fixture *f = *state;
	char pidfile[] = "/tmp/test_helper.XXXXXX";
	struct res x = {0};
	int pid = 0, fd = mkstemp(pidfile);
	FILE *pf;

	assert_true(fd >= 0);
	close(fd);
	new_helper(f, "sleep-pid", pidfile, LONG_DEADLINE, 0);
	assert_int_equal(dp_helper_request(f->h, on_done, &x, NULL), 0);
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (pid <= 0 && dp_now_usec() < end) {
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
		pf = fopen(pidfile, "re");
		assert_non_null(pf);
		if (fscanf(pf, "%d", &pid) != 1)
			pid = 0;
		fclose(pf);
	}
	assert_true(pid > 0);
	assert_int_equal(kill(pid, 0), 0);
	f->h = dp_helper_free(f->h);
	/* Gone for good (not even a zombie) once the loop has reaped it. */
	end = dp_now_usec() + BOUND_USEC;
	while (kill(pid, 0) == 0 && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
	assert_int_equal(x.calls, 0);
	unlink(pidfile);
}

/* ---------------------------------------------------------------- fds */

static void test_no_fd_leak(void **state)
{
	int before = dpt_count_fds();
	static const char *const names[] = {"ok", "big", "garbage", "sleep"};

	for (size_t i = 0; i < DP_ELEMENTSOF(names); i++) {
		dp_loop *l;
		dp_helper *h;
		char *argv[] = {(char *)names[i], NULL};
		struct res x = {0};

		assert_int_equal(dp_loop_new(&l), 0);
		assert_int_equal(dp_helper_new(l, SELF, argv, 150 * DP_USEC_PER_MSEC, 0, &h), 0);
		assert_int_equal(dp_helper_request(h, on_done, &x, NULL), 0);
		assert_true(dpt_run_until(l, &x.done, BOUND_USEC));
		/* Let the loop reap a killed child too. */
		uint64_t end = dp_now_usec() + BOUND_USEC;
		while (dp_helper_blocked(h) && dp_now_usec() < end)
			assert_true(dp_loop_run_once(l, 10) >= 0);
		dp_helper_free(h);
		dp_loop_free(l);
		assert_int_equal(dpt_count_fds(), before);
	}
}

/* dp_helper_sibling: the name in this test binary's own directory; bad names and a buffer too
 * small are errors that leave the buffer alone. */
static void test_sibling(void **state)
{
	char self[4096], want[4200], buf[4200], small[8] = "keep";
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	assert_true(n > 0);
	self[n] = '\0';
	*strrchr(self, '/') = '\0';
	snprintf(want, sizeof(want), "%s/hyperlight-label-node", self);
	assert_int_equal(dp_helper_sibling("hyperlight-label-node", buf, sizeof(buf)), 0);
	assert_string_equal(buf, want);
	assert_int_equal(dp_helper_sibling("a/b", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(dp_helper_sibling("", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(dp_helper_sibling("x", small, sizeof(small)), -ENAMETOOLONG);
	assert_string_equal(small, "keep");
}

int main(int argc, char **argv)
{
	dp_helper_main(argc, argv, entries, DP_ELEMENTSOF(entries));

	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ok, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fail_reason, setup, teardown),
		cmocka_unit_test_setup_teardown(test_signal, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_status, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exit_status_with_reason, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_entry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reason_control_chars, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_newline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_silent, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_argv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_ms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout_s, setup, teardown),
		cmocka_unit_test_setup_teardown(test_request_waits_for_reap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_blocked_then_recovers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_join_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_one_waiter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_all_run_goes_on, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_from_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_while_running, setup, teardown),
		cmocka_unit_test(test_no_fd_leak),
		cmocka_unit_test_setup_teardown(test_start_error_emfile, setup, teardown),
		cmocka_unit_test_setup_teardown(test_start_error_clear, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_lets_run_start, setup, teardown),
		cmocka_unit_test(test_sibling),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
