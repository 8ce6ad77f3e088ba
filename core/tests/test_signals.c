/* SPDX-License-Identifier: Apache-2.0 */
/* signals: what dp_signals_block blocks, and a stray signal ignored and said once at info. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/signals.h"

static sigset_t saved_mask;

static int restore_mask(void **state)
{
	(void)state;
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	return 0;
}

static void block_blocks_the_set(void **state)
{
	sigset_t old, now;
	(void)state;
	dp_signals_block(&old);
	assert_int_equal(sigprocmask(SIG_BLOCK, NULL, &now), 0);
	static const int want[] = { SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_true(sigismember(&now, want[i]));
	/* SIGQUIT keeps its core dump; SIGKILL cannot be blocked anyway */
	assert_false(sigismember(&now, SIGQUIT));
	/* the old mask comes back untouched */
	assert_false(sigismember(&old, SIGTERM));
}

/* Run the loop until the pending signals are read (bounded). */
static void drain(dp_loop *l)
{
	for (int i = 0; i < 10; i++)
		(void)dp_loop_run_once(l, 10);
}

static void stray_signals_ignored_once(void **state)
{
	(void)state;
	dp_loop *l = NULL;
	dp_signals_block(NULL);
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_signals_ignore(l), 0);

	int fd = memfd_create("log", MFD_CLOEXEC);
	assert_true(fd >= 0);
	int saved = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	assert_true(saved >= 0);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	dp_log_set_level(DP_LOG_INFO);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(raise(SIGHUP), 0);
		drain(l);
	}
	assert_int_equal(raise(SIGUSR1), 0);
	drain(l);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);

	char buf[4096] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	assert_true(n > 0);
	/* still running (a default SIGHUP would have ended this test), one line per signal */
	const char *p = strstr(buf, "msg=\"ignoring signal\" signal=HUP");
	assert_non_null(p);
	const char *eol = strchr(p, '\n');
	assert_non_null(eol);
	assert_null(strstr(eol, "signal=HUP"));
	assert_non_null(strstr(buf, "msg=\"ignoring signal\" signal=USR1"));
	dp_loop_free(l);
}

int main(void)
{
	sigprocmask(SIG_BLOCK, NULL, &saved_mask);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(block_blocks_the_set, restore_mask),
		cmocka_unit_test_teardown(stray_signals_ignored_once, restore_mask),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
