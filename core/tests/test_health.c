/* SPDX-License-Identifier: Apache-2.0 */
/* health: the exec-probe client's verdicts when there is no plugin to ask. (The served side is
 * exercised through grpc-go in the scenario tests.) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/health.h"
#include "dp_test.h"

static char dir[64];

static int setup(void **state)
{
	return dpt_tmpdir(dir, sizeof(dir), "test_health");
}

static int teardown(void **state)
{
	return dpt_rmtree(dir);
}

static void touch(const char *name)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fclose(f);
}

/* A socket file nobody listens on: connect() is refused. */
static void stale_socket(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

static void no_socket_is_not_live(void **state)
{
	const char *prefixes[] = { "hl-9thpct" };
	char err[512] = "";
	/* Names that only look like ours do not count. */
	touch("hl-9thpct-000001.sock.bak");
	touch("hl-9thpct-00000x.sock");
	touch("hl-9thpct-1-1.sock");
	touch("hl-03km8c-000001.sock");
	int r = dp_health_probe(dir, prefixes, 1, false, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "not live"));
	assert_non_null(strstr(err, "hl-9thpct-*.sock"));
}

static void missing_directory(void **state)
{
	const char *prefixes[] = { "hl-9thpct" };
	char err[512] = "", p[128];
	snprintf(p, sizeof(p), "%s/nope", dir);
	int r = dp_health_probe(p, prefixes, 1, true, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "cannot read"));
}

static void stale_socket_times_out(void **state)
{
	const char *prefixes[] = { "hl-9thpct" };
	char err[512] = "";
	stale_socket("hl-9thpct-00v0a1.sock");
	int r = dp_health_probe(dir, prefixes, 1, true, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_true(r == -ETIMEDOUT || r == -EAGAIN);
	assert_non_null(strstr(err, "not ready"));
}

static void every_prefix_needs_a_socket(void **state)
{
	const char *prefixes[] = { "kata-pp49l5", "kata-ocpspg" };
	char err[512] = "";
	stale_socket("kata-pp49l5-000001.sock");
	int r = dp_health_probe(dir, prefixes, 2, false, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_true(r < 0);
	assert_non_null(strstr(err, "kata-"));
}

/* ---- dp_health_probe_present ---- */

static int child_status(const char *service, void *userdata)
{
	if (service[0] == '\0')
		return DP_HEALTH_SERVING;
	if (strcmp(service, DP_HEALTH_READINESS) == 0)
		return DP_HEALTH_NOT_SERVING;
	return -ENOENT;
}

/* A child process serving grpc.health.v1 on dir/name (liveness SERVING, readiness NOT_SERVING)
 * until killed. Returns once the socket listens (the child says so through a pipe). */
static pid_t serve_health(const char *name)
{
	int p[2];
	char c;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dp_loop *loop = NULL;
		dp_health *h = NULL;
		dp_grpc_server *srv = NULL;
		dp_grpc_method m[2];
		char path[256];
		snprintf(path, sizeof(path), "%s/%s", dir, name);
		if (dp_loop_new(&loop) < 0 || dp_health_new(child_status, NULL, &h) < 0)
			_exit(1);
		size_t n = dp_health_methods(h, m);
		if (dp_grpc_server_new(loop, path, m, n, NULL, &srv) < 0)
			_exit(1);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		dp_loop_run(loop);
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void stop_child(pid_t pid)
{
	int st;
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

static const char *const kata_prefixes[] = { "kata-pp49l5", "kata-ocpspg", "kata-1g3jsg" /* idle */ };

static void present_nothing_is_not_live(void **state)
{
	char err[512] = "";
	touch("kata-pp49l5-000001.sock.bak");
	int r = dp_health_probe_present(dir, kata_prefixes, 3, false, 2 * DP_USEC_PER_SEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "not live: no live plugin socket"));
	assert_non_null(strstr(err, "kata-1g3jsg-*.sock"));
}

/* A socket file nobody listens on is skipped at once, not waited for until the deadline. */
static void present_stale_only_is_not_live(void **state)
{
	char err[512] = "";
	stale_socket("kata-pp49l5-00v0a1.sock");
	uint64_t t0 = dp_now_usec();
	int r = dp_health_probe_present(dir, kata_prefixes, 3, false, 10 * DP_USEC_PER_SEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_true(dp_now_usec() - t0 < 5 * DP_USEC_PER_SEC); /* generous: well before the 10 s deadline */
}

/* Only the prefixes present are asked: one live idle socket and a stale GPU socket is live. */
static void present_one_live_prefix(void **state)
{
	char err[512] = "";
	stale_socket("kata-pp49l5-00v0a1.sock");
	pid_t pid = serve_health("kata-1g3jsg-00001a.sock");
	int live = dp_health_probe_present(dir, kata_prefixes, 3, false, 5 * DP_USEC_PER_SEC, err, sizeof(err));
	int ready = dp_health_probe_present(dir, kata_prefixes, 3, true, 5 * DP_USEC_PER_SEC, err, sizeof(err));
	/* The strict form still demands every prefix. */
	char err2[512] = "";
	int strict = dp_health_probe(dir, kata_prefixes, 3, false, 300 * DP_USEC_PER_MSEC, err2, sizeof(err2));
	stop_child(pid);
	assert_int_equal(live, 0);
	assert_int_equal(ready, -EAGAIN);
	assert_non_null(strstr(err, "not ready: kata-1g3jsg-*.sock"));
	assert_true(strict < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(no_socket_is_not_live, setup, teardown),
		cmocka_unit_test_setup_teardown(missing_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_socket_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(every_prefix_needs_a_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(present_nothing_is_not_live, setup, teardown),
		cmocka_unit_test_setup_teardown(present_stale_only_is_not_live, setup, teardown),
		cmocka_unit_test_setup_teardown(present_one_live_prefix, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
