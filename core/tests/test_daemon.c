/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: the shell a test daemon runs in: its arguments and --help, then dp_daemon_main's exit
 * statuses, log lines and callbacks on every path (stop exactly once, whatever failed).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/daemon.h"
#include "dp/endpoint.h"
#include "dp/paths.h"
#include "dp/usage.h"
#include "dp_version.h"
#include "dp_test.h"

/* ---- the test daemon ---- */

struct calls {
	int configure, prepare, start, seccomp, stop, prefixes;
	int configure_status; /* what configure returns */
	int prepare_error;    /* what prepare returns */
	int start_error;      /* < 0: start fails with it */
	int exit_status;      /* >= 0: start asks the loop to exit with it; -1: raise SIGTERM */
	bool bad_rule;        /* seccomp gives a rule no kernel knows */
	dp_daemon_args prefix_args;
};

/* The calls of the dp_daemon_main running (health_prefixes has no userdata). */
static struct calls *current;

static int t_prefixes(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max, size_t *ret_n)
{
	current->prefixes++;
	current->prefix_args = *a;
	snprintf(names[0], DP_DAEMON_PREFIX_MAX, "test-daemon-sock");
	*ret_n = 1;
	return 0;
}

static int t_configure(const dp_daemon_args *a, void *userdata)
{
	struct calls *c = userdata;
	c->configure++;
	return c->configure_status;
}

static int t_prepare(dp_loop *loop, void *userdata)
{
	struct calls *c = userdata;
	c->prepare++;
	return c->prepare_error;
}

static int t_start(dp_loop *loop, void *userdata)
{
	struct calls *c = userdata;
	c->start++;
	if (c->start_error < 0)
		return c->start_error;
	if (c->exit_status >= 0)
		dp_loop_exit(loop, c->exit_status);
	else
		(void)raise(SIGTERM); /* blocked since dp_daemon_main's first step: pending for the loop */
	return 0;
}

static size_t t_seccomp(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd)
{
	struct calls *c = userdata;
	c->seccomp++;
	*ret_exe_fd = -1;
	if (!c->bad_rule || max < 1)
		return 0;
	rules[0] = (dp_seccomp_rule)DP_SC("no_such_system_call");
	return 1;
}

static void t_stop(void *userdata)
{
	struct calls *c = userdata;
	c->stop++;
}

static void t_usage(FILE *f)
{
	fputs("Does nothing, for tests.\n\n  --fake                    a fake flag\n", f);
}

static void t_usage_env(FILE *f)
{
	fputs("  FAKE_VAR              a fake variable\n", f);
}

static const dp_daemon_flag t_flags[] = {
	{ .name = "--fake", .mode = "fake-mode", .no_metrics = true },
	{ .name = "--other" },
};

static const dp_daemon test_daemon = {
	.prog = "test-daemon",
	.flags = t_flags,
	.n_flags = DP_ELEMENTSOF(t_flags),
	.mode = "default-mode",
	.usage = t_usage,
	.usage_env = t_usage_env,
	.exit_startup = "the fake thing missing",
	.exit_invalid = "FAKE_VAR",
	.exit_more = "3 when the fake thing changed",
	.health_prefixes = t_prefixes,
	.configure = t_configure,
	.prepare = t_prepare,
	.start = t_start,
	.seccomp = t_seccomp,
	.stop = t_stop,
};

/* Run dp_daemon_main with argv (NULL-terminated after the program name); its log in *log. */
static int run_main(struct calls *c, struct dpt_capture *log, ...)
{
	char *argv[8] = { (char *)"test-daemon" };
	int argc = 1;
	va_list ap;
	va_start(ap, log);
	for (char *a; argc < 7 && (a = va_arg(ap, char *));)
		argv[argc++] = a;
	va_end(ap);
	current = c;
	dpt_capture_start(log, STDERR_FILENO);
	int r = dp_daemon_main(&test_daemon, c, argc, argv);
	dpt_capture_end(log);
	return r;
}

static sigset_t saved_mask;

static int setup(void **state)
{
	unsetenv("METRICS_ADDRESS");
	unsetenv("LOG_LEVEL");
	setenv("SDP_SECCOMP", "off", 1); /* never confine the test process */
	return 0;
}

static int teardown(void **state)
{
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	return 0;
}

/* ---- dp_daemon_parse ---- */

static dp_daemon_parse_result parse(const char *a1, const char *a2, char *out, char *err, dp_daemon_args *ret)
{
	char *argv[] = { (char *)"test-daemon", (char *)a1, (char *)a2, NULL };
	int argc = a1 ? (a2 ? 3 : 2) : 1;
	FILE *o = fmemopen(out, 16384, "w"), *e = fmemopen(err, 16384, "w");
	assert_non_null(o);
	assert_non_null(e);
	dp_daemon_parse_result r = dp_daemon_parse(&test_daemon, argc, argv, o, e, ret);
	fclose(o);
	fclose(e);
	return r;
}

static void parse_flags_and_health_check(void **state)
{
	static char out[16384], err[16384];
	dp_daemon_args a;
	assert_int_equal(parse("--other", "--health-check=readiness", out, err, &a), DP_DAEMON_RUN);
	assert_true(a.health_check && a.readiness);
	assert_false(dp_daemon_flag_given(&a, 0));
	assert_true(dp_daemon_flag_given(&a, 1));
	assert_int_equal(parse("--fake", "--health-check", out, err, &a), DP_DAEMON_RUN);
	assert_true(a.health_check);
	assert_false(a.readiness);
	assert_true(dp_daemon_flag_given(&a, 0));
	assert_false(dp_daemon_flag_given(&a, 1));
	assert_int_equal(parse(NULL, NULL, out, err, &a), DP_DAEMON_RUN);
	assert_false(a.health_check || a.flags);
	assert_string_equal(out, "");
	assert_string_equal(err, "");
}

static void parse_version(void **state)
{
	static char out[16384], err[16384];
	dp_daemon_args a = { .flags = 77 };
	assert_int_equal(parse("--version", "-x", out, err, &a), DP_DAEMON_DONE);
	assert_string_equal(out, "test-daemon " DP_VERSION " (commit " DP_GIT_COMMIT ")\n");
	assert_string_equal(err, "");
	assert_int_equal(a.flags, 77); /* written only to run */
}

static const char help_text[] =
	"Usage: test-daemon [--fake] [--other] [--health-check[=readiness]] [--version] [-h|--help]\n"
	"Does nothing, for tests.\n"
	"\n"
	"  --fake                    a fake flag\n"
	"  --version                 print version and git commit\n"
	"  -h, --help                print this help\n"
	"\n"
	"Environment:\n"
	"  FAKE_VAR              a fake variable\n" DP_USAGE_ENV_COMMON "\n"
	"Exit status: 0 after SIGTERM or SIGINT; 1 for a startup error (the fake thing missing);\n"
	"2 for a bad argument or an invalid FAKE_VAR or METRICS_ADDRESS; 3 when the fake thing\n"
	"changed. --health-check: 0 healthy, 1 not.\n";

static void parse_help(void **state)
{
	static char out[16384], err[16384], out_h[16384];
	dp_daemon_args a = { .flags = 77 };
	assert_int_equal(parse("--help", NULL, out, err, &a), DP_DAEMON_DONE);
	assert_string_equal(out, help_text);
	assert_string_equal(err, "");
	assert_int_equal(parse("--other", "-h", out_h, err, &a), DP_DAEMON_DONE);
	assert_string_equal(out_h, out);
	assert_int_equal(a.flags, 77);
}

/* The exit-status paragraph as kata-device-plugin's --help had it, written by hand. */
static void usage_wraps_as_before(void **state)
{
	dp_daemon kata = {
		.prog = "kata-device-plugin",
		.exit_startup = "/dev/vfio/devices unreadable, the seccomp filter refused by the kernel",
		.exit_invalid = "RESOURCE_NAMING",
		.exit_more = "3 when the VFIO device set changed (the DaemonSet restarts the daemon)",
	};
	static char out[16384];
	FILE *f = fmemopen(out, sizeof(out), "w");
	assert_non_null(f);
	dp_daemon_usage(&kata, f);
	fclose(f);
	const char *p = strstr(out, "Exit status:");
	assert_non_null(p);
	assert_string_equal(p,
		"Exit status: 0 after SIGTERM or SIGINT; 1 for a startup error (/dev/vfio/devices\n"
		"unreadable, the seccomp filter refused by the kernel); 2 for a bad argument or an\n"
		"invalid RESOURCE_NAMING or METRICS_ADDRESS; 3 when the VFIO device set changed (the\n"
		"DaemonSet restarts the daemon). --health-check: 0 healthy, 1 not.\n");
}

static void parse_unknown_argument(void **state)
{
	static char out[16384], err[16384];
	dp_daemon_args a = { .flags = 77 };
	assert_int_equal(parse("--fake", "-x", out, err, &a), DP_DAEMON_BAD_ARGUMENT);
	assert_string_equal(out, "");
	assert_true(strncmp(err, "test-daemon: unknown argument '-x'\n", 35) == 0);
	assert_string_equal(err + 35, help_text);
	assert_int_equal(a.flags, 77);
	assert_int_equal(parse("--health-check=liveness", NULL, out, err, &a), DP_DAEMON_BAD_ARGUMENT);
	assert_int_equal(parse("--fak", NULL, out, err, &a), DP_DAEMON_BAD_ARGUMENT);
}

/* ---- dp_daemon_main ---- */

static void main_bad_argument(void **state)
{
	struct calls c = { 0 };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, "-x", NULL), DP_EXIT_USAGE);
	assert_non_null(strstr(log.text, "test-daemon: unknown argument '-x'\n"));
	assert_int_equal(c.configure + c.stop + c.prefixes, 0);
}

static void main_version(void **state)
{
	struct calls c = { 0 };
	struct dpt_capture log, out;
	dpt_capture_start(&out, STDOUT_FILENO);
	int r = run_main(&c, &log, "--version", NULL);
	dpt_capture_end(&out);
	assert_int_equal(r, DP_EXIT_OK);
	assert_string_equal(out.text, "test-daemon " DP_VERSION " (commit " DP_GIT_COMMIT ")\n");
	assert_string_equal(log.text, "");
	assert_int_equal(c.configure + c.stop, 0);
}

static void main_configure_fails(void **state)
{
	struct calls c = { .configure_status = DP_EXIT_USAGE };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, NULL), DP_EXIT_USAGE);
	assert_int_equal(c.configure, 1);
	assert_int_equal(c.prepare + c.start, 0);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "msg=starting program=test-daemon version=" DP_VERSION));
	assert_null(strstr(log.text, "msg=stopped"));
}

static void main_prepare_fails(void **state)
{
	struct calls c = { .prepare_error = -EMFILE };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, NULL), DP_EXIT_FAILURE);
	assert_int_equal(c.prepare, 1);
	assert_int_equal(c.start, 0);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "level=error msg=\"cannot set up the event loop\" error=Too many open files\n"));
	assert_null(strstr(log.text, "msg=stopped"));
}

static void main_start_fails(void **state)
{
	struct calls c = { .start_error = -ENODEV };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, NULL), DP_EXIT_FAILURE);
	assert_int_equal(c.start, 1);
	assert_int_equal(c.seccomp, 0); /* never confined */
	assert_int_equal(c.stop, 1);
	assert_null(strstr(log.text, "msg=stopped"));
}

static void main_confine_fails(void **state)
{
	struct calls c = { .bad_rule = true };
	struct dpt_capture log;
	setenv("SDP_SECCOMP", "enforce", 1); /* the unknown name fails before anything is loaded */
	int r = run_main(&c, &log, NULL);
	setenv("SDP_SECCOMP", "off", 1);
	assert_int_equal(r, DP_EXIT_FAILURE);
	assert_int_equal(c.seccomp, 1);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "msg=\"cannot confine the daemon\""));
	assert_non_null(strstr(log.text, "no_such_system_call"));
}

static void main_daemon_exit_status(void **state)
{
	struct calls c = { .exit_status = 3 };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, NULL), 3);
	assert_int_equal(c.configure + c.prepare + c.start + c.seccomp, 4);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "msg=starting program=test-daemon version=" DP_VERSION " commit=" DP_GIT_COMMIT
					 " mode=default-mode\n"));
	assert_non_null(strstr(log.text, "msg=confined seccomp=off"));
	assert_non_null(strstr(log.text, "level=info msg=stopped exit=3\n"));
}

static void main_sigterm_exits_0(void **state)
{
	struct calls c = { .exit_status = -1 };
	struct dpt_capture log;
	assert_int_equal(run_main(&c, &log, "--other", NULL), DP_EXIT_OK);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "level=info msg=\"shutting down\" signal=TERM\n"));
	assert_non_null(strstr(log.text, "level=info msg=stopped exit=0\n"));
	assert_true(strstr(log.text, "shutting down") < strstr(log.text, "msg=stopped"));
}

/* An invalid METRICS_ADDRESS is a configuration error (2), unless a flag turns metrics off. */
static void main_metrics_invalid(void **state)
{
	struct calls c = { .exit_status = 3 };
	struct dpt_capture log;
	setenv("METRICS_ADDRESS", "not an address", 1);
	int r = run_main(&c, &log, NULL);
	assert_int_equal(r, DP_EXIT_USAGE);
	assert_int_equal(c.start, 0);
	assert_int_equal(c.stop, 1);
	assert_non_null(strstr(log.text, "msg=\"invalid METRICS_ADDRESS\""));

	c = (struct calls){ .exit_status = 3 };
	r = run_main(&c, &log, "--fake", NULL);
	unsetenv("METRICS_ADDRESS");
	assert_int_equal(r, 3);
	assert_int_equal(c.stop, 1);
	assert_null(strstr(log.text, "METRICS_ADDRESS"));
	assert_non_null(strstr(log.text, " mode=fake-mode\n"));
}

static void main_log_level_warned_once(void **state)
{
	struct calls c = { .exit_status = 0 };
	struct dpt_capture log;
	setenv("LOG_LEVEL", "loud", 1);
	int r = run_main(&c, &log, NULL);
	unsetenv("LOG_LEVEL");
	assert_int_equal(r, 0);
	assert_int_equal(dpt_count(log.text, "LOG_LEVEL"), 1);
	assert_non_null(strstr(log.text, "level=warn msg=\"invalid LOG_LEVEL, keeping info\""));
}

/* SDP_TEST_ROOT of a length that makes the kubelet directory dirlen bytes (not created). */
static void root_for_dir_length(size_t dirlen)
{
	char root[256];
	size_t n = dirlen - strlen(DP_KUBELET_DIR);
	assert_true(n > 1 && n < sizeof(root));
	root[0] = '/';
	memset(root + 1, 'r', n - 1);
	root[n] = '\0';
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
}

/* A kubelet directory too long for our socket paths: one error line with the directory, its
 * length and the maximum, exit 1, before configure; the health check says the same. */
static void main_kubelet_dir_too_long(void **state)
{
	struct calls c = { 0 };
	struct dpt_capture log;
	char want[128];
	root_for_dir_length(DP_SOCKET_DIR_MAX + 1);
	int r = run_main(&c, &log, NULL);
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	struct calls h = { 0 };
	struct dpt_capture hlog;
	int hr = run_main(&h, &hlog, "--health-check", NULL);
	unsetenv(DP_TEST_ROOT_ENV);
	dp_paths_reset();

	assert_int_equal(r, DP_EXIT_FAILURE);
	assert_int_equal(c.configure + c.prepare + c.start, 0);
	assert_int_equal(dpt_count(log.text, "level=error"), 1);
	snprintf(want, sizeof(want), "level=error msg=\"kubelet directory too long for the plugin sockets\" dir=/rrr");
	assert_non_null(strstr(log.text, want));
	snprintf(want, sizeof(want), "/device-plugins length=%d max=%d\n", DP_SOCKET_DIR_MAX + 1, DP_SOCKET_DIR_MAX);
	assert_non_null(strstr(log.text, want));
	assert_null(strstr(log.text, "msg=stopped"));

	assert_int_equal(hr, DP_EXIT_FAILURE);
	assert_int_equal(h.prefixes, 0);
	snprintf(want, sizeof(want), "/device-plugins too long: %d bytes, at most %d\n", DP_SOCKET_DIR_MAX + 1,
		 DP_SOCKET_DIR_MAX);
	assert_non_null(strstr(hlog.text, want));
}

/* The longest kubelet directory passes the check: configure runs. */
static void main_kubelet_dir_longest(void **state)
{
	struct calls c = { .configure_status = DP_EXIT_USAGE };
	struct dpt_capture log;
	root_for_dir_length(DP_SOCKET_DIR_MAX);
	int r = run_main(&c, &log, NULL);
	unsetenv(DP_TEST_ROOT_ENV);
	dp_paths_reset();
	assert_int_equal(r, DP_EXIT_USAGE);
	assert_int_equal(c.configure, 1);
	assert_null(strstr(log.text, "too long"));
}

/* No socket to ask: not healthy (1), the reason on stderr; the mask is back as it was. */
static void main_health_check(void **state)
{
	char root[] = "/tmp/test_daemon.XXXXXX", dir[256], cmd[300];
	struct calls c = { 0 };
	struct dpt_capture log;
	sigset_t before, after;
	assert_non_null(mkdtemp(root));
	snprintf(cmd, sizeof(cmd), "mkdir -p %s/var/lib/kubelet/device-plugins", root);
	assert_int_equal(system(cmd), 0);
	snprintf(dir, sizeof(dir), "%s/var/lib/kubelet/device-plugins", root);
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	sigprocmask(SIG_SETMASK, &saved_mask, NULL);
	sigprocmask(SIG_BLOCK, NULL, &before);
	int r = run_main(&c, &log, "--fake", "--health-check=readiness", NULL);
	sigprocmask(SIG_BLOCK, NULL, &after);
	unsetenv(DP_TEST_ROOT_ENV);
	dp_paths_reset();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	assert_int_equal(system(cmd), 0);

	assert_int_equal(r, DP_EXIT_FAILURE);
	assert_int_equal(c.prefixes, 1);
	assert_true(c.prefix_args.health_check && c.prefix_args.readiness && dp_daemon_flag_given(&c.prefix_args, 0));
	assert_int_equal(c.configure + c.stop, 0);
	assert_true(strncmp(log.text, "test-daemon: ", 13) == 0);
	assert_non_null(strstr(log.text, "test-daemon-sock"));
	assert_non_null(strstr(log.text, dir));
	assert_int_equal(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
	assert_false(sigismember(&after, SIGTERM));
}

static void echo_helper(int argc, char **argv)
{
	dp_helper_reply_ok(argc > 1 ? argv[1] : "");
}

/* "--dp-helper NAME" runs the entry before any parsing (which would refuse the argument). */
static void main_helper_dispatch(void **state)
{
	static const dp_helper_entry entries[] = { { "echo", echo_helper } };
	dp_daemon d = test_daemon;
	d.helpers = entries;
	d.n_helpers = 1;
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = { (char *)"test-daemon", (char *)DP_HELPER_ARG, (char *)"echo", (char *)"hi", NULL };
		dup2(fds[1], STDOUT_FILENO);
		_exit(dp_daemon_main(&d, NULL, 4, argv) + 100); /* never returns for a helper */
	}
	close(fds[1]);
	char buf[64] = "";
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(n > 0);
	assert_string_equal(buf, "ok hi\n");
}

int main(void)
{
	sigprocmask(SIG_BLOCK, NULL, &saved_mask);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_flags_and_health_check),
		cmocka_unit_test(parse_version),
		cmocka_unit_test(parse_help),
		cmocka_unit_test(usage_wraps_as_before),
		cmocka_unit_test(parse_unknown_argument),
		cmocka_unit_test_setup_teardown(main_bad_argument, setup, teardown),
		cmocka_unit_test_setup_teardown(main_version, setup, teardown),
		cmocka_unit_test_setup_teardown(main_configure_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(main_prepare_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(main_start_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(main_confine_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(main_daemon_exit_status, setup, teardown),
		cmocka_unit_test_setup_teardown(main_sigterm_exits_0, setup, teardown),
		cmocka_unit_test_setup_teardown(main_metrics_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(main_log_level_warned_once, setup, teardown),
		cmocka_unit_test_setup_teardown(main_health_check, setup, teardown),
		cmocka_unit_test_setup_teardown(main_kubelet_dir_too_long, setup, teardown),
		cmocka_unit_test_setup_teardown(main_kubelet_dir_longest, setup, teardown),
		cmocka_unit_test_setup_teardown(main_helper_dispatch, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
