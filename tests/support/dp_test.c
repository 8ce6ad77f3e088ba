/* SPDX-License-Identifier: Apache-2.0 */
/* dp_test: the shared test support of the C unit tests (see dp_test.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp_test.h"

struct dpt_stub dpt_stub = { .verdict = true };

static void stub_check(dp_endpoint *ep, void *ud)
{
	dpt_stub.checks++;
	dp_endpoint_set_health(ep, dpt_stub.verdict, dpt_stub.verdict ? NULL : "test says no");
}

static void stub_allocate(dp_endpoint *ep, dp_alloc *a, void *ud)
{
	dp_alloc_finish(a, 0, NULL);
}

void dpt_stub_reset(void)
{
	dpt_stub = (struct dpt_stub){ .verdict = true };
}

dp_endpoint_config dpt_stub_config(void)
{
	static const dp_driver driver = { .check = stub_check, .allocate = stub_allocate };
	static const dp_device two[] = { { "a", -1 }, { "b", 0 } };

	return (dp_endpoint_config){ .resource_name = "example.com/thing",
				     .socket_prefix = "thing",
				     .devices = two,
				     .n_devices = 2,
				     .driver = &driver };
}

void dpt_capture_start(struct dpt_capture *c, int target)
{
	fflush(NULL);
	c->target = target;
	c->fd = memfd_create("capture", MFD_CLOEXEC);
	assert_true(c->fd >= 0);
	c->saved = fcntl(target, F_DUPFD_CLOEXEC, 3);
	assert_true(c->saved >= 0);
	assert_int_equal(dup2(c->fd, target), target);
}

const char *dpt_capture_end(struct dpt_capture *c)
{
	fflush(NULL);
	assert_int_equal(dup2(c->saved, c->target), c->target);
	close(c->saved);
	ssize_t n = pread(c->fd, c->text, sizeof(c->text) - 1, 0);
	close(c->fd);
	assert_true(n >= 0);
	c->text[n] = '\0';
	return c->text;
}

size_t dpt_count(const char *text, const char *needle)
{
	size_t n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

int dpt_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own fd */
}

bool dpt_run_until(dp_loop *l, const bool *flag, uint64_t bound_usec)
{
	uint64_t end = dp_now_usec() + bound_usec;

	while (!*flag && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	return *flag;
}

bool dpt_run_until_cond(dp_loop *l, bool (*cond)(void), uint64_t bound_usec)
{
	uint64_t end = dp_now_usec() + bound_usec;

	while (!cond() && dp_now_usec() < end)
		dp_loop_run_once(l, 10);
	return cond();
}

int dpt_tmpdir(char *buf, size_t size, const char *name)
{
	int n = snprintf(buf, size, "/tmp/%s.XXXXXX", name);

	if (n < 0 || (size_t)n >= size)
		return -1;
	return mkdtemp(buf) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path);
}

int dpt_rmtree(const char *dir)
{
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int dpt_listener(int type_flags, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

int dpt_closed_port(void)
{
	int port, fd = dpt_listener(0, &port);

	close(fd);
	return port;
}

bool dpt_seccomp_unavailable(void)
{
	const char *why = getenv("SDP_SECCOMP_UNAVAILABLE");

	if (!why || !*why || prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 || errno != EINVAL)
		return false;
	print_message("skipped: no seccomp filter can be loaded here (SDP_SECCOMP_UNAVAILABLE=%s, "
		      "prctl(PR_GET_SECCOMP) fails with EINVAL)\n", why);
	return true;
}
