/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/macro.h"
#include "dp/seccomp.h"

/* ---- mode from the environment ---- */

static void test_mode_from_env(void **state)
{
	static const struct {
		const char *value;
		int r;
		dp_seccomp_mode mode;
	} cases[] = {
		{ NULL, 0, DP_SECCOMP_ENFORCE }, { "enforce", 0, DP_SECCOMP_ENFORCE },
		{ "log", 0, DP_SECCOMP_LOG },    { "off", 0, DP_SECCOMP_OFF },
		{ "", -EINVAL, DP_SECCOMP_ENFORCE }, { "OFF", -EINVAL, DP_SECCOMP_ENFORCE },
		{ "of", -EINVAL, DP_SECCOMP_ENFORCE }, { "off ", -EINVAL, DP_SECCOMP_ENFORCE },
	};
	char err[128];
	dp_seccomp_mode mode;

	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		if (cases[i].value)
			setenv(DP_SECCOMP_ENV, cases[i].value, 1);
		else
			unsetenv(DP_SECCOMP_ENV);
		err[0] = '\0';
		mode = DP_SECCOMP_OFF;
		assert_int_equal(dp_seccomp_mode_from_env(&mode, err, sizeof(err)), cases[i].r);
		assert_int_equal(mode, cases[i].mode);
		if (cases[i].r < 0)
			assert_non_null(strstr(err, "is not one of enforce, log, off"));
		else
			assert_string_equal(err, "");
	}
	setenv(DP_SECCOMP_ENV, "of", 1);
	assert_int_equal(dp_seccomp_mode_from_env(&mode, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "SDP_SECCOMP=\"of\" is not one of enforce, log, off");
	unsetenv(DP_SECCOMP_ENV);
	assert_string_equal(dp_seccomp_mode_name(DP_SECCOMP_LOG), "log");
}

/* ---- filters, each loaded in a forked child ---- */

/* Run fn in a child; its exit status (0: every check passed, else the failed check's number). */
static int in_child(int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* "Seccomp:" of /proc/self/status: 0 none, 2 filter; -1 unreadable. */
static int seccomp_status(void)
{
	char buf[4096], *p;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strstr(buf, "\nSeccomp:");
	return p ? atoi(p + 9) : -1;
}

/* errno of a call that must fail, 0 when it succeeded (the fd is closed). */
static int fails_with(int r)
{
	if (r >= 0) {
		close(r);
		return 0;
	}
	return errno;
}

static int install_core(dp_seccomp_mode mode, int exe_fd)
{
	dp_seccomp_rule exec = dp_seccomp_exec_rule(exe_fd);
	const dp_seccomp_rule *lists[] = { dp_seccomp_core_rules, &exec };
	size_t counts[] = { dp_seccomp_n_core_rules, 1 };

	return dp_seccomp_install(lists, counts, 2, mode, NULL);
}

static int core_enforced(void)
{
	char *const argv[] = { (char *)"/nonexistent/x", NULL };
	int exe = open("/proc/self/exe", O_PATH | O_CLOEXEC);

	if (exe < 0 || install_core(DP_SECCOMP_ENFORCE, exe) < 0)
		return 1;
	if (seccomp_status() != 2)
		return 2;
	if (fails_with(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) != EPERM)
		return 3; /* only unix sockets */
	if (fails_with(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) != 0)
		return 4;
	if (execve(argv[0], argv, environ) == 0 || errno != EPERM)
		return 5;
	/* execveat: the daemon's own fd with AT_EMPTY_PATH only */
	if (syscall(SYS_execveat, AT_FDCWD, argv[0], argv, environ, 0) == 0 || errno != EPERM)
		return 6;
	if (syscall(SYS_execveat, exe, "", argv, environ, 0) == 0 || errno != EPERM)
		return 7;
	if (syscall(SYS_clone3, NULL, 0) == 0 || errno != ENOSYS)
		return 8; /* so that libc falls back to clone */
	if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
		return 9;
	if (syscall(SYS_mount, NULL, NULL, NULL, 0, NULL) == 0 || errno != EPERM)
		return 10; /* unconfined: EFAULT */
	pid_t pid = fork(); /* clone with fork's flags stays allowed */
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) != pid)
		return 11;
	return 0;
}

static void test_core_enforced(void **state)
{
	assert_int_equal(in_child(core_enforced), 0);
}

/* The allowed exec really runs: the child re-executes /bin/true through its fd. */
static int exec_through_fd(void)
{
	char *const argv[] = { (char *)"true", NULL };
	int exe = open("/bin/true", O_PATH | O_CLOEXEC);

	if (exe < 0 || install_core(DP_SECCOMP_ENFORCE, exe) < 0)
		return 1;
	syscall(SYS_execveat, exe, "", argv, environ, AT_EMPTY_PATH);
	return 2; /* exec failed */
}

static void test_exec_through_fd(void **state)
{
	assert_int_equal(in_child(exec_through_fd), 0);
}

static int log_mode(void)
{
	if (install_core(DP_SECCOMP_LOG, -1) < 0)
		return 1;
	if (seccomp_status() != 2)
		return 2;
	return fails_with(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == 0 ? 0 : 3;
}

static void test_log_mode_refuses_nothing(void **state)
{
	assert_int_equal(in_child(log_mode), 0);
}

static int off_mode(void)
{
	if (install_core(DP_SECCOMP_OFF, -1) != 0)
		return 1;
	return seccomp_status() == 0 ? 0 : 2;
}

static void test_off_mode_installs_nothing(void **state)
{
	assert_int_equal(in_child(off_mode), 0);
}

/* A second, narrower filter takes rights away; the first still holds. */
static int narrower(void)
{
	static const dp_seccomp_rule only[] = { DP_SC("write"), DP_SC("exit_group"), DP_SC("close") };
	const dp_seccomp_rule *lists[] = { only };
	size_t counts[] = { DP_ELEMENTSOF(only) };

	if (install_core(DP_SECCOMP_ENFORCE, -1) < 0 ||
	    dp_seccomp_install(lists, counts, 1, DP_SECCOMP_ENFORCE, NULL) < 0)
		return 1;
	if (fails_with(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) != EPERM)
		return 2;
	errno = 0; /* getuid: in the core list, not in the second one */
	if (syscall(SYS_getuid) != -1 || errno != EPERM)
		return 3;
	return 0;
}

static void test_narrower_filter(void **state)
{
	assert_int_equal(in_child(narrower), 0);
}

/* Bad lists: a clear error naming the entry, nothing installed. */
static int bad_lists(void)
{
	static const dp_seccomp_rule unknown[] = { DP_SC("read"), DP_SC("no_such_syscall") };
	static const dp_seccomp_rule bad_arg[] = { DP_SC_ARG("socket", 6, 1, 1) };
	const dp_seccomp_rule *l1[] = { unknown }, *l2[] = { bad_arg };
	size_t c1[] = { 2 }, c2[] = { 1 };
	const char *bad = NULL;
	char err[128];
	dp_seccomp_mode mode;

	if (dp_seccomp_install(l1, c1, 1, DP_SECCOMP_ENFORCE, &bad) != -EINVAL || !bad ||
	    strcmp(bad, "no_such_syscall") != 0)
		return 1;
	if (dp_seccomp_install(l2, c2, 1, DP_SECCOMP_ENFORCE, &bad) != -EINVAL)
		return 2;
	if (dp_seccomp_install(NULL, NULL, 1, DP_SECCOMP_ENFORCE, NULL) != -EINVAL)
		return 3;
	if (dp_seccomp_confine(unknown, 2, -1, &mode, err, sizeof(err)) != -EINVAL ||
	    strcmp(err, "invalid allow-list entry \"no_such_syscall\"") != 0)
		return 4;
	return seccomp_status() == 0 ? 0 : 5;
}

static void test_bad_lists(void **state)
{
	assert_int_equal(in_child(bad_lists), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode_from_env),
		cmocka_unit_test(test_core_enforced),
		cmocka_unit_test(test_exec_through_fd),
		cmocka_unit_test(test_log_mode_refuses_nothing),
		cmocka_unit_test(test_off_mode_installs_nothing),
		cmocka_unit_test(test_narrower_filter),
		cmocka_unit_test(test_bad_lists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
