/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint: configuration checks and the registration life cycle against a kubelet.sock that is
 * missing or that refuses to speak gRPC. (Registration against a real grpc-go kubelet is in the
 * scenario tests.) */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/endpoint.h"

static char dir[64];
static int checks;
static bool verdict = true;
static int failures, accepted;
static char last_failure[512];

static void drv_check(dp_endpoint *ep, void *ud)
{
	checks++;
	dp_endpoint_set_health(ep, verdict, verdict ? NULL : "test says no");
}

static void drv_allocate(dp_endpoint *ep, dp_alloc *a, void *ud)
{
	dp_alloc_finish(a, 0, NULL);
}

static const dp_driver driver = { drv_check, drv_allocate };
static const dp_device two[] = { { "a", -1 }, { "b", 0 } };

static dp_endpoint_config config(void)
{
	return (dp_endpoint_config){ .resource_name = "example.com/thing",
				     .socket_prefix = "thing",
				     .devices = two,
				     .n_devices = 2,
				     .driver = &driver };
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/test_endpoint.XXXXXX");
	checks = failures = accepted = 0;
	verdict = true;
	last_failure[0] = '\0';
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void rejects_bad_config(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	char longid[70];
	assert_int_equal(dp_loop_new(&loop), 0);

	dp_endpoint_config c = config();
	c.resource_name = "noslash";
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c = config();
	c.driver = NULL;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c = config();
	c.socket_prefix = "a/b";
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);

	const dp_device dup[] = { { "x", -1 }, { "y", -1 }, { "x", -1 } };
	c = config();
	c.devices = dup;
	c.n_devices = 3;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);

	memset(longid, 'i', 64);
	longid[64] = '\0';
	const dp_device toolong[] = { { longid, -1 } };
	c.devices = toolong;
	c.n_devices = 1;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	const dp_device empty[] = { { "", -1 } };
	c.devices = empty;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	assert_null(ep);
	dp_loop_free(loop);
}

static size_t count_plugin_sockets(void)
{
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	assert_non_null(d);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, "thing-", 6) == 0;
	closedir(d);
	return n;
}

static bool run_until(dp_loop *loop, bool (*cond)(void), int ms)
{
	uint64_t end = dp_now_usec() + (uint64_t)ms * 1000;
	while (!cond() && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
	return cond();
}

static bool checked(void) { return checks > 0; }
static bool failed_once(void) { return failures > 0; }

static void waits_for_kubelet(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = config();
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	assert_false(dp_endpoint_healthy(ep)); /* Unhealthy until the first check */
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(run_until(loop, checked, 2000));
	assert_true(dp_endpoint_healthy(ep));
	assert_false(dp_endpoint_registered(ep));
	assert_false(dp_endpoint_ready(ep));
	/* Served (for liveness probes) but not registered without kubelet. */
	assert_non_null(dp_endpoint_socket(ep));
	assert_int_equal(count_plugin_sockets(), 1);
	assert_non_null(strstr(dp_endpoint_reason(ep), "kubelet.sock"));

	verdict = false;
	dp_endpoint_request_check(ep);
	int before = checks;
	while (checks == before)
		dp_loop_run_once(loop, 10);
	assert_false(dp_endpoint_healthy(ep));
	assert_string_equal(dp_endpoint_reason(ep), "test says no");
	dp_endpoint_free(ep);
	assert_int_equal(count_plugin_sockets(), 0); /* our socket is removed on free */
	dp_loop_free(loop);
}

static void on_failed(dp_endpoint *ep, const char *reason, void *ud)
{
	failures++;
	snprintf(last_failure, sizeof(last_failure), "%s", reason);
}

/* A kubelet.sock that accepts and hangs up at once. */
static int on_accept(dp_source *s, int fd, uint32_t ev, void *ud)
{
	int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	if (c >= 0) {
		accepted++;
		close(c);
	}
	return 0;
}

static void failed_register_removes_socket(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_source *src = NULL;
	dp_endpoint_config c = config();
	dp_endpoint_events ev = { .on_register_failed = on_failed };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(run_until(loop, checked, 2000));

	/* kubelet.sock appears: the endpoint notices (inotify), serves and registers. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/kubelet.sock", dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(dp_io_add(loop, fd, EPOLLIN, on_accept, NULL, &src), 0);

	assert_true(run_until(loop, failed_once, 5000));
	assert_true(accepted >= 1);
	assert_true(strlen(last_failure) > 0);
	assert_false(dp_endpoint_registered(ep));
	/* The failed server was stopped and its socket removed before the back-off. */
	assert_null(dp_endpoint_socket(ep));
	assert_int_equal(count_plugin_sockets(), 0);
	dp_source_free(src);
	close(fd);
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(rejects_bad_config, setup, teardown),
		cmocka_unit_test_setup_teardown(waits_for_kubelet, setup, teardown),
		cmocka_unit_test_setup_teardown(failed_register_removes_socket, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
