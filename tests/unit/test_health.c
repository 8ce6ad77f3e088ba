/* SPDX-License-Identifier: Apache-2.0 */
/* health: the exec-probe client's verdicts when there is no plugin to ask. (The served side is
 * exercised through grpc-go in the scenario tests.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/health.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/test_health.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
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
	const char *prefixes[] = { "hyperlight" };
	char err[512] = "";
	/* Names that only look like ours do not count. */
	touch("hyperlight-1-1.sock.bak");
	touch("hyperlight-x-1.sock");
	touch("hyperlight-device-access-1-1.sock");
	int r = dp_health_probe(dir, prefixes, 1, false, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "not live"));
	assert_non_null(strstr(err, "hyperlight-*.sock"));
}

static void missing_directory(void **state)
{
	const char *prefixes[] = { "hyperlight" };
	char err[512] = "", p[128];
	snprintf(p, sizeof(p), "%s/nope", dir);
	int r = dp_health_probe(p, prefixes, 1, true, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_int_equal(r, -ENOENT);
	assert_non_null(strstr(err, "cannot read"));
}

static void stale_socket_times_out(void **state)
{
	const char *prefixes[] = { "hyperlight" };
	char err[512] = "";
	stale_socket("hyperlight-99999-1.sock");
	int r = dp_health_probe(dir, prefixes, 1, true, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_true(r == -ETIMEDOUT || r == -EAGAIN);
	assert_non_null(strstr(err, "not ready"));
}

static void every_prefix_needs_a_socket(void **state)
{
	const char *prefixes[] = { "kata-nvidia.com-gpu", "kata-nvidia.com-nvswitch" };
	char err[512] = "";
	stale_socket("kata-nvidia.com-gpu-1-1.sock");
	int r = dp_health_probe(dir, prefixes, 2, false, 200 * DP_USEC_PER_MSEC, err, sizeof(err));
	assert_true(r < 0);
	assert_non_null(strstr(err, "kata-nvidia.com-"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(no_socket_is_not_live, setup, teardown),
		cmocka_unit_test_setup_teardown(missing_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_socket_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(every_prefix_needs_a_socket, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
