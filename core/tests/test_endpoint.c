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
#include <sys/stat.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "api.pb-c.h"
#include "dp/endpoint.h"
#include "dp_test.h"
#include "endpoint/endpoint_encode.h"
#include "endpoint/endpoint_internal.h"

static char dir[64];
static int failures, accepted, stale_removed;
static char last_failure[512], last_stale[128];

static int setup(void **state)
{
	dpt_stub_reset();
	failures = accepted = stale_removed = 0;
	last_failure[0] = last_stale[0] = '\0';
	return dpt_tmpdir(dir, sizeof(dir), "test_endpoint");
}

static int teardown(void **state)
{
	return dpt_rmtree(dir);
}

static void rejects_bad_config(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	char longid[70];
	assert_int_equal(dp_loop_new(&loop), 0);

	dp_endpoint_config c = dpt_stub_config();
	c.resource_name = "noslash";
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c = dpt_stub_config();
	c.driver = NULL;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c = dpt_stub_config();
	c.socket_prefix = "a/b";
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c.socket_prefix = "kata-nvidia.com-gpu"; /* longer than DP_SOCKET_PREFIX_MAX */
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), -EINVAL);
	c.socket_prefix = "kata-pp49l5";
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	ep = dp_endpoint_free(ep);

	const dp_device dup[] = { { "x", -1 }, { "y", -1 }, { "x", -1 } };
	c = dpt_stub_config();
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

static bool checked(void) { return dpt_stub.checks > 0; }
static bool failed_twice(void) { return failures > 1; }

static void waits_for_kubelet(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	assert_false(dp_endpoint_healthy(ep)); /* Unhealthy until the first check */
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(dpt_run_until_cond(loop, checked, 2 * DP_USEC_PER_SEC));
	assert_true(dp_endpoint_healthy(ep));
	assert_false(dp_endpoint_registered(ep));
	assert_false(dp_endpoint_ready(ep));
	/* Served (for liveness probes) but not registered without kubelet. */
	assert_non_null(dp_endpoint_socket(ep));
	assert_int_equal(count_plugin_sockets(), 1);
	assert_non_null(strstr(dp_endpoint_reason(ep), "kubelet.sock"));

	dpt_stub.verdict = false;
	dp_endpoint_request_check(ep);
	int before = dpt_stub.checks;
	while (dpt_stub.checks == before)
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
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_register_failed = on_failed };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(dpt_run_until_cond(loop, checked, 2 * DP_USEC_PER_SEC));
	/* The wait for kubelet.sock is told, once. */
	assert_int_equal(failures, 1);
	assert_non_null(strstr(last_failure, "waiting for"));

	/* kubelet.sock appears: the endpoint notices (inotify), serves and registers. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/kubelet.sock", dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(dp_io_add(loop, fd, EPOLLIN, on_accept, NULL, &src), 0);

	assert_true(dpt_run_until_cond(loop, failed_twice, 5 * DP_USEC_PER_SEC));
	assert_true(accepted >= 1);
	assert_null(strstr(last_failure, "waiting for"));
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

/* A socket file at dir/name; listening or not (then nobody ever will: stale). */
static int make_socket(const char *name, bool listening)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (listening) {
		assert_int_equal(listen(fd, 8), 0);
		return fd;
	}
	close(fd);
	return -1;
}

static bool exists(const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

/* A kubelet.sock that accepts and holds every connection, unanswered, until the test closes it. */
static int held_fd = -1;

static int on_accept_hold(dp_source *s, int fd, uint32_t ev, void *ud)
{
	int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	if (c >= 0) {
		accepted++;
		if (held_fd >= 0)
			close(held_fd); /* the stale check's connect, or an earlier Register */
		held_fd = c;
	}
	return 0;
}

/* kubelet.sock listening at dir, served by fn on loop; returns its fd. */
static int kubelet_listening(dp_loop *loop, dp_io_fn fn, dp_source **src)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/kubelet.sock", dir);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(dp_io_add(loop, fd, EPOLLIN, fn, NULL, src), 0);
	return fd;
}

static dp_endpoint *cond_ep;
static bool cond_failed_once(void) { return dp_endpoint_failures(cond_ep) >= 1; }
static bool cond_cut_retried(void) { return cond_ep->cut_retried; }
/* accepted: the stale check's connect, then the Register's */
static bool cond_registering(void) { return cond_ep->state == EP_REGISTERING && accepted >= 2; }
static int accepted_base;
static bool cond_accepted_again(void) { return accepted >= accepted_base + 2; }

/* A Register cut off (kubelet.sock accepts and hangs up: a kubelet going away) is retried at
 * once with a fresh server, not after a back-off, and is no failure yet (nothing told, nothing
 * counted: a kubelet restart may show the cut before kubelet.sock's creation); the second
 * cut-off in a row is a failure of kind cut-off and backs off (a kubelet that cuts off every
 * Register). */
static void cut_off_retried_once_then_backoff(void **state)
{
	dp_loop *loop = NULL;
	dp_source *src = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_register_failed = on_failed };

	assert_int_equal(dp_loop_new(&loop), 0);
	int fd = kubelet_listening(loop, on_accept, &src);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &cond_ep), 0);
	dp_endpoint_set_events(cond_ep, &ev);
	assert_int_equal(dp_endpoint_start(cond_ep), 0);
	assert_true(dpt_run_until_cond(loop, cond_cut_retried, 5 * DP_USEC_PER_SEC));
	assert_int_equal(cond_ep->state, EP_IDLE); /* again at once, no back-off */
	assert_int_equal(cond_ep->backoff, 0);
	assert_int_equal(dp_endpoint_failures(cond_ep), 0);
	assert_int_equal(failures, 0); /* nothing told */
	assert_null(dp_endpoint_socket(cond_ep)); /* that server stopped: kubelet may have seen it */
	assert_true(dpt_run_until_cond(loop, cond_failed_once, 5 * DP_USEC_PER_SEC));
	assert_int_equal(cond_ep->fail_kind, EP_FAIL_CUT);
	assert_int_equal(cond_ep->state, EP_BACKOFF);
	assert_int_equal(failures, 1);
	assert_non_null(strstr(last_failure, "UNAVAILABLE"));
	cond_ep = dp_endpoint_free(cond_ep);
	dp_source_free(src);
	close(fd);
	dp_loop_free(loop);
}

static int restarts_told;

static void on_restart_count(dp_endpoint *ep, const char *why, void *ud)
{
	restarts_told++;
}

/* A restart (kubelet.sock created, our socket deleted, the stream ended) cancels the Register in
 * flight: its late cut-off (the kubelet that created a new kubelet.sock closing the old
 * connection) is no failure and cannot replace the restart with a back-off. The restart is told
 * once until registered again, however many signs of it come. */
static void restart_cancels_register_in_flight(void **state)
{
	dp_loop *loop = NULL;
	dp_source *src = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_register_failed = on_failed, .on_restart = on_restart_count };

	held_fd = -1;
	restarts_told = 0;
	accepted = 0;
	assert_int_equal(dp_loop_new(&loop), 0);
	int fd = kubelet_listening(loop, on_accept_hold, &src);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &cond_ep), 0);
	dp_endpoint_set_events(cond_ep, &ev);
	assert_int_equal(dp_endpoint_start(cond_ep), 0);
	assert_true(dpt_run_until_cond(loop, cond_registering, 5 * DP_USEC_PER_SEC));
	assert_non_null(cond_ep->register_call);

	dp_endpoint_restart(cond_ep, "plugin socket deleted");
	assert_null(cond_ep->register_call);
	assert_int_equal(cond_ep->state, EP_IDLE);
	dp_endpoint_restart(cond_ep, "kubelet.sock created");
	assert_int_equal(restarts_told, 1);
	close(held_fd); /* the cut-off, after the restart */
	held_fd = -1;
	accepted_base = accepted;
	assert_true(dpt_run_until_cond(loop, cond_accepted_again, 5 * DP_USEC_PER_SEC));
	assert_int_equal(cond_ep->state, EP_REGISTERING);
	assert_int_equal(dp_endpoint_failures(cond_ep), 0);
	assert_int_equal(failures, 0);
	assert_int_equal(cond_ep->backoff, 0);
	cond_ep = dp_endpoint_free(cond_ep);
	if (held_fd >= 0)
		close(held_fd);
	held_fd = -1;
	dp_source_free(src);
	close(fd);
	dp_loop_free(loop);
}

/* kubelet.sock created while registering with that very file (the event read after the Register
 * was sent) is no news: the Register in flight goes on. Created anew (another file renamed in),
 * it restarts. The identity is device, inode and ctime, taken as the Register is sent. */
static void kubelet_created_same_file_ignored(void **state)
{
	dp_loop *loop = NULL;
	dp_source *src = NULL, *src2 = NULL;
	dp_endpoint_config c = dpt_stub_config();
	char from[256], to[256];

	held_fd = -1;
	accepted = 0;
	assert_int_equal(dp_loop_new(&loop), 0);
	int fd = kubelet_listening(loop, on_accept_hold, &src);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &cond_ep), 0);
	assert_int_equal(dp_endpoint_start(cond_ep), 0);
	assert_true(dpt_run_until_cond(loop, cond_registering, 5 * DP_USEC_PER_SEC));
	dp_grpc_client_call *call = cond_ep->register_call;
	assert_non_null(call);
	assert_true(dp_endpoint_watch_kubelet_same(cond_ep));
	dp_endpoint_watch_kubelet_created(cond_ep); /* its creation, read late */
	assert_int_equal(cond_ep->state, EP_REGISTERING);
	assert_ptr_equal(cond_ep->register_call, call);
	assert_false(cond_ep->kubelet_created);

	/* Another file renamed over kubelet.sock: a new kubelet, a restart (the watch's own event). */
	snprintf(from, sizeof(from), "%s/next.sock", dir);
	snprintf(to, sizeof(to), "%s/kubelet.sock", dir);
	int fd2 = make_socket("next.sock", true);
	assert_int_equal(dp_io_add(loop, fd2, EPOLLIN, on_accept_hold, NULL, &src2), 0);
	assert_int_equal(rename(from, to), 0);
	assert_false(dp_endpoint_watch_kubelet_same(cond_ep));
	int base = accepted;
	while (accepted < base + 2 && dp_loop_run_once(loop, 1000) > 0)
		;
	assert_true(accepted >= base + 2); /* a fresh Register (its stale check, then its call) */
	assert_true(dp_endpoint_watch_kubelet_same(cond_ep)); /* to the new file */
	cond_ep = dp_endpoint_free(cond_ep);
	if (held_fd >= 0)
		close(held_fd);
	held_fd = -1;
	dp_source_free(src);
	dp_source_free(src2);
	close(fd);
	close(fd2);
	dp_loop_free(loop);
}

static void on_stale(dp_endpoint *ep, const char *socket, void *ud)
{
	stale_removed++;
	snprintf(last_stale, sizeof(last_stale), "%s", socket);
}

/* kubelet.sock exists but nobody listens: the reason is said at once, and once. */
static void refused_kubelet_told_once(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_register_failed = on_failed };

	make_socket("kubelet.sock", false);
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_int_equal(failures, 1);
	assert_non_null(strstr(last_failure, "kubelet.sock: Connection refused"));
	assert_int_equal(dp_endpoint_failures(ep), 1);
	/* The retries (100 ms doubling) fail for the same reason: counted, not told again. */
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;
	while (dp_endpoint_failures(ep) < 3 && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
	assert_true(dp_endpoint_failures(ep) >= 3);
	assert_int_equal(failures, 1);
	assert_false(dp_endpoint_registered(ep));
	/* Served meanwhile for liveness probes (kubelet never saw it): one socket, not one per try. */
	assert_non_null(dp_endpoint_socket(ep));
	assert_int_equal(count_plugin_sockets(), 1);
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* kubelet.sock created again and again (a child recreates it, a socket node nobody listens
 * on, in a loop for 500 ms): the re-registrations are spaced (100 ms after the first, doubling),
 * not one per event, nor one per turn of the loop; the endpoint serves its socket meanwhile.
 * A restart serves a fresh socket: the restarts are the socket names seen (on_restart is told
 * once until registered again, and no kubelet listens here). */
static void kubelet_sock_flood_spaced(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	char path[128], last[DP_SOCKET_NAME_MAX + 1] = "";
	int status, restarts = -1; /* the first name is the start's */

	snprintf(path, sizeof(path), "%s/kubelet.sock", dir);
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(dpt_run_until_cond(loop, checked, 2 * DP_USEC_PER_SEC));
	uint64_t start = dp_now_usec();
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (uint64_t end = start + 500 * DP_USEC_PER_MSEC; dp_now_usec() < end;)
			if (mknod(path, S_IFSOCK | 0600, 0) < 0 || unlink(path) < 0)
				_exit(1);
		_exit(0);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		assert_true(dp_loop_run_once(loop, 10) >= 0);
		assert_int_equal(count_plugin_sockets(), 1);
		const char *name = dp_endpoint_socket(ep);
		if (name && strcmp(name, last) != 0) {
			restarts++;
			snprintf(last, sizeof(last), "%s", name);
		}
	}
	uint64_t took = dp_now_usec() - start;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* the first at once, the next told when scheduled (100 ms later), then one per 100 ms at most */
	assert_in_range(restarts, 1, took / (100 * DP_USEC_PER_MSEC) + 2);
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* At start: stale sockets of our prefix go, nothing else does. */
static void sweeps_only_own_stale_sockets(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_stale_removed = on_stale };
	char path[256];

	make_socket("thing-0007aa.sock", false);               /* ours, stale: removed */
	int live = make_socket("thing-0007ab.sock", true);     /* same prefix, live: kept */
	make_socket("other-0007aa.sock", false);               /* another plugin: kept */
	make_socket("thingx-0007aa.sock", false);              /* a longer prefix: kept */
	make_socket("thing-extra-0007aa.sock", false);         /* another pattern: kept */
	make_socket("thing-0007a.sock", false);                /* 5 digits: kept */
	make_socket("thing-0007aaa.sock", false);              /* 7 digits: kept */
	make_socket("thing-0007aw.sock", false);               /* 'w' is not base32hex: kept */
	make_socket("thing-1-7.sock", false);                  /* the old "<pid>-<n>" form: kept */
	make_socket("thing-0007aa.sock.old", false);           /* not our name: kept */
	snprintf(path, sizeof(path), "%s/thing-0000ff.sock", dir); /* not a socket: kept */
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);

	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_int_equal(stale_removed, 1);
	assert_string_equal(last_stale, "thing-0007aa.sock");
	assert_false(exists("thing-0007aa.sock"));
	static const char *const kept[] = { "thing-0007ab.sock", "other-0007aa.sock", "thingx-0007aa.sock",
					    "thing-extra-0007aa.sock", "thing-0007a.sock", "thing-0007aaa.sock",
					    "thing-0007aw.sock", "thing-1-7.sock", "thing-0007aa.sock.old",
					    "thing-0000ff.sock" };
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		assert_true(exists(kept[i]));
	assert_true(dp_ep_socket_ours("thing", dp_endpoint_socket(ep)));
	dp_endpoint_free(ep);
	assert_true(exists("thing-0007ab.sock")); /* free removes only our own socket */
	close(live);
	dp_loop_free(loop);
}

/* The counter of "<prefix>-<n>.sock" (6 base32hex digits), and the name of another count. */
static unsigned name_n(const char *name, const char *prefix)
{
	unsigned n = 0;
	const char *p = name + strlen(prefix) + 1;
	for (int i = 0; i < 6; i++, p++)
		n = n << 5 | (unsigned)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
	return n;
}

static void name_of(char *buf, size_t size, const char *prefix, unsigned n)
{
	static const char digits[] = "0123456789abcdefghijklmnopqrstuv";
	char d[7];
	n &= 0x3fffffffu;
	for (int i = 5; i >= 0; i--, n >>= 5)
		d[i] = digits[n & 31];
	d[6] = '\0';
	snprintf(buf, size, "%s-%s.sock", prefix, d);
}

/* The next name is taken by a stale socket of ours (a predecessor that drew the same names):
 * removed and bound at once; taken by a live one: left alone, the name after it is used. */
static void bind_collision(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_stale_removed = on_stale, .on_register_failed = on_failed };
	char next[128], after[128];

	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);
	assert_int_equal(dp_endpoint_start(ep), 0); /* no kubelet: serves for liveness */
	assert_non_null(dp_endpoint_socket(ep));
	assert_true(dp_ep_socket_ours("thing", dp_endpoint_socket(ep)));
	unsigned n = name_n(dp_endpoint_socket(ep), "thing");

	name_of(next, sizeof(next), "thing", n + 1);
	make_socket(next, false);
	dp_endpoint_restart(ep, "test");
	dp_loop_run_once(loop, 100);
	assert_int_equal(stale_removed, 1);
	assert_string_equal(last_stale, next);
	assert_string_equal(dp_endpoint_socket(ep), next); /* the same name, bound again */

	name_of(next, sizeof(next), "thing", n + 2);
	name_of(after, sizeof(after), "thing", n + 3);
	int live = make_socket(next, true);
	dp_endpoint_restart(ep, "test");
	dp_loop_run_once(loop, 100);
	assert_int_equal(stale_removed, 1);
	assert_true(exists(next));
	assert_string_equal(dp_endpoint_socket(ep), after);
	assert_non_null(strstr(last_failure, "waiting for")); /* no bind failure was told */
	dp_endpoint_free(ep);
	assert_true(exists(next));
	close(live);
	dp_loop_free(loop);
}

static void on_swept(const char *name, void *ud)
{
	on_stale(NULL, name, ud);
}

/* The public naming and sweep, as kata's idle socket can use them. */
static void socket_names_and_sweep(void **state)
{
	char a[64], b[64], tiny[17] = "unchanged";
	assert_int_equal(dp_socket_name(a, sizeof(a), "idle"), 0);
	assert_int_equal(dp_socket_name(b, sizeof(b), "idle"), 0);
	assert_int_equal(strlen(a), strlen("idle-") + 6 + strlen(".sock"));
	assert_int_equal(name_n(b, "idle"), (name_n(a, "idle") + 1) & 0x3fffffffu);
	assert_true(dp_ep_socket_ours("idle", a));
	assert_false(dp_ep_socket_ours("idl", a));
	assert_false(dp_ep_socket_ours("idle-", a));
	/* "idle-xxxxxx.sock" and its NUL need 17 bytes */
	assert_int_equal(dp_socket_name(tiny, 16, "idle"), -ENAMETOOLONG);
	assert_string_equal(tiny, "unchanged");
	assert_int_equal(dp_socket_name(tiny, 17, "idle"), 0);
	/* a prefix longer than DP_SOCKET_PREFIX_MAX makes no name, whatever the buffer */
	assert_int_equal(dp_socket_name(a, sizeof(a), "kata-nvidia.com-nvswitch"), -ENAMETOOLONG);

	make_socket(b, false);
	name_of(a, sizeof(a), "idle", name_n(b, "idle") - 1);
	make_socket(a, false);
	assert_int_equal(dp_socket_sweep(dir, "idle", b, on_swept, NULL), 1); /* b kept */
	assert_string_equal(last_stale, a);
	assert_false(exists(a));
	assert_true(exists(b));
	assert_int_equal(dp_socket_sweep(dir, "idle", NULL, NULL, NULL), 1);
	assert_false(exists(b));
	assert_int_equal(dp_socket_sweep("/nonexistent", "idle", NULL, NULL, NULL), 0);
}

/* "<tag>-<hash>": pinned (the Go tests and docs compute the same), fixed length, checked. */
static void socket_prefixes(void **state)
{
	char p[DP_SOCKET_PREFIX_MAX + 1], big[64];
	static const struct {
		const char *tag, *key, *want;
	} pinned[] = {
		{ "kata", "nvidia.com/gpu", "kata-pp49l5" },
		{ "kata", "nvidia.com/nvswitch", "kata-ocpspg" },
		{ "kata", "sku", "kata-cin8gp" },
		{ "kata", "idle", "kata-1g3jsg" },
		{ "hl", "hyperlight.dev/hypervisor", "hl-9thpct" },
		{ "hl", "hyperlight.dev/device-access", "hl-03km8c" },
	};
	for (size_t i = 0; i < sizeof(pinned) / sizeof(pinned[0]); i++) {
		assert_int_equal(dp_socket_prefix(p, sizeof(p), pinned[i].tag, pinned[i].key), 0);
		assert_string_equal(p, pinned[i].want);
	}
	/* A long resource name makes a prefix as short as any. */
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "kata",
					  "a-very-long-vendor-domain.example.com/GH100_H100_SXM5_80GB_and_more"), 0);
	assert_int_equal(strlen(big), DP_SOCKET_PREFIX_MAX);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "kata", "nvidia.com/gpu"), 0);
	char name[DP_SOCKET_NAME_MAX + 1];
	assert_int_equal(dp_socket_name(name, sizeof(name), big), 0);
	assert_int_equal(strlen(name), DP_SOCKET_NAME_MAX);
	assert_true(dp_ep_socket_ours(big, name));

	strcpy(big, "unchanged");
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "", "k"), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), NULL, "k"), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "katax", "k"), -EINVAL); /* > 4 bytes */
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "Kata", "k"), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "k-a", "k"), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "kata", ""), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, sizeof(big), "kata", NULL), -EINVAL);
	assert_int_equal(dp_socket_prefix(big, DP_SOCKET_PREFIX_MAX, "kata", "k"), -ENAMETOOLONG);
	assert_string_equal(big, "unchanged");
}

/* A directory of dirlen bytes under dir ("<dir>/x/xxxx...") that exists; its path into buf. */
static void dir_of_length(char *buf, size_t size, size_t dirlen)
{
	size_t base = strlen(dir) + 1;
	assert_true(dirlen > base && dirlen < size);
	snprintf(buf, size, "%s/", dir);
	memset(buf + base, 'd', dirlen - base);
	buf[dirlen] = '\0';
	assert_int_equal(mkdir(buf, 0755), 0);
}

/* The longest directory: our longest name and kubelet.sock bind there; one byte more is
 * refused before anything is served. */
static void longest_dir(void **state)
{
	char d[128], longer[128], name[DP_SOCKET_NAME_MAX + 1], path[256];
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();

	assert_int_equal(DP_SOCKET_NAME_MAX, 23);
	assert_int_equal(DP_SOCKET_DIR_MAX, 83);
	dir_of_length(d, sizeof(d), DP_SOCKET_DIR_MAX);
	dir_of_length(longer, sizeof(longer), DP_SOCKET_DIR_MAX + 1);
	assert_int_equal(dp_socket_dir_check(d), 0);
	assert_int_equal(dp_socket_dir_check(longer), -ENAMETOOLONG);

	/* The longest name a 4-byte tag makes binds in the longest directory. */
	assert_int_equal(dp_socket_prefix(path, sizeof(path), "kata", "nvidia.com/nvswitch"), 0);
	assert_int_equal(dp_socket_name(name, sizeof(name), path), 0);
	snprintf(path, sizeof(path), "%s/%s", d, name);
	assert_int_equal(strlen(path), DP_SOCKET_SUN_PATH - 1);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_int_equal(unlink(path), 0);

	c.socket_prefix = "kata-ocpspg";
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, longer, &c, &ep), -ENAMETOOLONG);
	assert_null(ep);
	assert_int_equal(dp_endpoint_new(loop, d, &c, &ep), 0);
	assert_int_equal(dp_endpoint_start(ep), 0); /* no kubelet: serves for liveness */
	assert_non_null(dp_endpoint_socket(ep));
	assert_int_equal(strlen(dp_endpoint_socket(ep)), DP_SOCKET_NAME_MAX);
	snprintf(path, sizeof(path), "%s/%s", d, dp_endpoint_socket(ep));
	struct stat st;
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	dp_endpoint_free(ep);
	dp_loop_free(loop);
	assert_int_equal(rmdir(d), 0);
	assert_int_equal(rmdir(longer), 0);
}

/* ---- the direct ListAndWatchResponse encoder against protobuf-c's pack ---- */

/* protobuf-c's bytes for the same list: the reference the direct encoder must equal. */
static uint8_t *pack_reference(const char *ids, size_t n, const int64_t *numa, bool healthy, const bool *down,
			       size_t *ret_len)
{
	V1beta1__Device *devs = calloc(n ? n : 1, sizeof(*devs));
	V1beta1__Device **ptrs = calloc(n ? n : 1, sizeof(V1beta1__Device *));
	V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
	V1beta1__NUMANode *nodes = calloc(n ? n : 1, sizeof(*nodes));
	V1beta1__NUMANode **node_ptrs = calloc(n ? n : 1, sizeof(V1beta1__NUMANode *));
	assert_true(devs && ptrs && topo && nodes && node_ptrs);
	const char *id = ids;
	for (size_t i = 0; i < n; i++) {
		v1beta1__device__init(&devs[i]);
		devs[i].id = (char *)id;
		devs[i].health = (char *)(healthy && !(down && down[i]) ? "Healthy" : "Unhealthy");
		if (numa && numa[i] >= 0) {
			v1beta1__topology_info__init(&topo[i]);
			v1beta1__numanode__init(&nodes[i]);
			nodes[i].id = numa[i];
			node_ptrs[i] = &nodes[i];
			topo[i].n_nodes = 1;
			topo[i].nodes = &node_ptrs[i];
			devs[i].topology = &topo[i];
		}
		ptrs[i] = &devs[i];
		id += strlen(id) + 1;
	}
	V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
	resp.n_devices = n;
	resp.devices = ptrs;
	size_t len = v1beta1__list_and_watch_response__get_packed_size(&resp);
	uint8_t *buf = malloc(len ? len : 1);
	assert_non_null(buf);
	assert_int_equal(v1beta1__list_and_watch_response__pack(&resp, buf), len);
	free(devs);
	free(ptrs);
	free(topo);
	free(nodes);
	free(node_ptrs);
	*ret_len = len;
	return buf;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void check_same_bytes_down(const char *ids, size_t n, const int64_t *numa, bool healthy, const bool *down,
				  const char *what)
{
	size_t want_len = 0, got_len = 0;
	double r0 = now_ms();
	uint8_t *want = pack_reference(ids, n, numa, healthy, down, &want_len);
	double r1 = now_ms();
	uint8_t *got = NULL;
	double t0 = now_ms();
	assert_int_equal(dp_ep_encode_list(ids, n, numa, healthy, down, &got, &got_len), 0);
	double t1 = now_ms();
	if (n >= 100000)
		printf("# %zu devices (%s): direct encode %zu bytes in %.2f ms; protobuf-c structs + pack %.2f ms\n",
		       n, what, got_len, t1 - t0, r1 - r0);
	assert_non_null(got);
	assert_int_equal(got_len, want_len);
	if (want_len > 0) /* an empty list is zero bytes: nothing to compare */
		assert_memory_equal(got, want, want_len);
	/* protobuf-c reads the bytes back as the same list */
	V1beta1__ListAndWatchResponse *back = v1beta1__list_and_watch_response__unpack(NULL, got_len, got);
	assert_non_null(back);
	assert_int_equal(back->n_devices, n);
	for (size_t i = 0; i < back->n_devices && n < 100; i++)
		assert_string_equal(back->devices[i]->health, healthy && !(down && down[i]) ? "Healthy" : "Unhealthy");
	v1beta1__list_and_watch_response__free_unpacked(back, NULL);
	free(want);
	free(got);
}

static void check_same_bytes(const char *ids, size_t n, const int64_t *numa, bool healthy, const char *what)
{
	check_same_bytes_down(ids, n, numa, healthy, NULL, what);
}

/* n IDs "<prefix><i>" into a fresh arena */
static char *make_ids(const char *prefix, size_t n)
{
	size_t cap = n * (strlen(prefix) + 21) + 1, off = 0;
	char *ids = malloc(cap);
	assert_non_null(ids);
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(ids + off, cap - off, "%s%zu", prefix, i) + 1;
	return ids;
}

static void encoder_matches_protobuf_c(void **state)
{
	/* empty list: zero bytes */
	check_same_bytes("", 0, NULL, true, "empty");
	/* one device, both health strings, with and without topology */
	check_same_bytes("a\0", 1, NULL, true, "one");
	check_same_bytes("a\0", 1, NULL, false, "one unhealthy");
	/* NUMA node 0 (an empty NUMANode: proto3 omits the zero ID), small, multi-byte and huge IDs,
	 * and -1 (no TopologyInfo) mixed in one list; a 63-character ID */
	char long_id[64];
	memset(long_id, 'x', 63);
	long_id[63] = '\0';
	char mixed[256];
	size_t off = 0;
	const char *names[] = { "gpu0", "gpu1", "gpu2", "gpu3", "gpu4", long_id, "z" };
	for (size_t i = 0; i < 7; i++)
		off += (size_t)snprintf(mixed + off, sizeof(mixed) - off, "%s", names[i]) + 1;
	const int64_t numa[] = { 0, 1, 127, 128, -1, 300000, INT64_MAX };
	check_same_bytes(mixed, 7, numa, true, "topology");
	check_same_bytes(mixed, 7, numa, false, "topology unhealthy");
	/* per device: some down while the verdict is healthy; the verdict wins when unhealthy */
	const bool down[] = { false, true, false, true, true, false, true };
	check_same_bytes_down(mixed, 7, numa, true, down, "some devices down");
	check_same_bytes_down(mixed, 7, numa, false, down, "down and unhealthy");
	/* large counts, as hyperlight advertises them: 20,000 and the 4 MiB ceiling's order */
	char *ids = make_ids("hyperlight-", 134544);
	check_same_bytes(ids, 20000, NULL, true, "20000");
	check_same_bytes(ids, 134544, NULL, false, "ceiling, no topology");
	int64_t *nodes = malloc(134544 * sizeof(*nodes));
	assert_non_null(nodes);
	for (size_t i = 0; i < 134544; i++)
		nodes[i] = (int64_t)(i % 4) - 1;
	check_same_bytes(ids, 134544, nodes, true, "ceiling, with topology");
	free(nodes);
	free(ids);
}

static void encoder_rejects_bad_ids(void **state)
{
	uint8_t *buf = (uint8_t *)"untouched";
	size_t len = 42;
	char too_long[70];
	memset(too_long, 'y', 64);
	too_long[64] = '\0';
	assert_int_equal(dp_ep_encode_list("ok\0\0", 2, NULL, true, NULL, &buf, &len), -EINVAL);
	assert_int_equal(dp_ep_encode_list(too_long, 1, NULL, true, NULL, &buf, &len), -EINVAL);
	assert_string_equal((const char *)buf, "untouched");
	assert_int_equal(len, 42);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(rejects_bad_config, setup, teardown),
		cmocka_unit_test_setup_teardown(waits_for_kubelet, setup, teardown),
		cmocka_unit_test_setup_teardown(failed_register_removes_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(refused_kubelet_told_once, setup, teardown),
		cmocka_unit_test_setup_teardown(kubelet_sock_flood_spaced, setup, teardown),
		cmocka_unit_test_setup_teardown(cut_off_retried_once_then_backoff, setup, teardown),
		cmocka_unit_test_setup_teardown(restart_cancels_register_in_flight, setup, teardown),
		cmocka_unit_test_setup_teardown(kubelet_created_same_file_ignored, setup, teardown),
		cmocka_unit_test_setup_teardown(sweeps_only_own_stale_sockets, setup, teardown),
		cmocka_unit_test_setup_teardown(bind_collision, setup, teardown),
		cmocka_unit_test_setup_teardown(socket_names_and_sweep, setup, teardown),
		cmocka_unit_test(socket_prefixes),
		cmocka_unit_test_setup_teardown(longest_dir, setup, teardown),
		cmocka_unit_test(encoder_matches_protobuf_c),
		cmocka_unit_test(encoder_rejects_bad_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
