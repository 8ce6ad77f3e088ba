/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The "label-node" helper entry (the child side of node labels), run the way the daemon runs
 * it: through dp_helper, this binary being the helper executable. What the child answers when
 * its arguments are wrong, the token is unreadable, libcurl cannot be loaded or lacks a
 * function, the server refuses the connection, and that it sends nothing but HTTPS. The
 * answers of a real API server (200, 500 with a body, a hang, an untrusted certificate) are
 * tested in tests/kubelet/labels_test.go.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/helper.h"
#include "dp/loop.h"
#include "label_patch.h"

#define BOUND_USEC (10 * DP_USEC_PER_SEC)
#define DEADLINE_USEC (8 * DP_USEC_PER_SEC)
#define GRACE_USEC (2 * DP_USEC_PER_SEC)

struct fixture {
	dp_loop *loop;
	char dir[64];
	char token[128];
	char ca[128];
	char lib[128]; /* a directory for LD_LIBRARY_PATH */
};

static void write_file(const char *path, const char *content, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, len), (ssize_t)len);
	close(fd);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_label_patch-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->token, sizeof(f->token), "%s/token", f->dir);
	snprintf(f->ca, sizeof(f->ca), "%s/ca.crt", f->dir);
	snprintf(f->lib, sizeof(f->lib), "%s/lib", f->dir);
	write_file(f->token, "test-token\n", 11);
	write_file(f->ca, "", 0);
	assert_int_equal(mkdir(f->lib, 0755), 0);
	unsetenv("LD_LIBRARY_PATH");
	assert_int_equal(dp_loop_new(&f->loop), 0);
	*state = f;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	unsetenv("LD_LIBRARY_PATH");
	dp_loop_free(f->loop);
	nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

struct outcome {
	bool done;
	dp_helper_result r;
};

static void on_done(const dp_helper_result *r, void *userdata)
{
	struct outcome *o = userdata;
	o->r = *r;
	o->done = true;
}

/* Run "label-node" with argv (NULL-terminated, after the entry name) in a child; its result. */
static dp_helper_result run_child(struct fixture *f, const char *const *args)
{
	char *argv[8] = { HL_LABEL_HELPER };
	struct outcome o = { 0 };
	dp_helper *h = NULL;
	size_t n = 1;

	for (; args[n - 1]; n++)
		argv[n] = (char *)args[n - 1];
	argv[n] = NULL;
	assert_int_equal(dp_helper_new(f->loop, NULL, argv, DEADLINE_USEC, GRACE_USEC, &h), 0);
	assert_int_equal(dp_helper_request(h, on_done, &o, NULL), 0);
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!o.done && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	assert_true(o.done);
	dp_helper_free(h);
	return o.r;
}

/* run_child with the usual arguments and the URL given. */
static dp_helper_result run_url(struct fixture *f, const char *url)
{
	const char *args[] = { url, f->token, f->ca, "kvm", NULL };
	return run_child(f, args);
}

static void expect_fail(const dp_helper_result *r, const char *first, ...)
{
	va_list ap;
	assert_false(r->ok);
	va_start(ap, first);
	for (const char *s = first; s; s = va_arg(ap, const char *))
		if (!strstr(r->reason, s))
			fail_msg("reason \"%s\" lacks \"%s\"", r->reason, s);
	va_end(ap);
}

/* A TCP port on 127.0.0.1 where nothing listens (bound once, then closed). */
static int closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* ---------------------------------------------------------------- tests */

static void test_invalid_arguments(void **state)
{
	struct fixture *f = *state;
	const char *none[] = { NULL };
	const char *three[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, NULL };
	dp_helper_result r = run_child(f, none);
	expect_fail(&r, "invalid label-node arguments: <url> <token path> <ca path> <hypervisor>", NULL);
	r = run_child(f, three);
	expect_fail(&r, "invalid label-node arguments", NULL);
}

/* The token is checked before anything is loaded or sent. */
static void test_token_unreadable(void **state)
{
	struct fixture *f = *state;
	char big[20000];
	dp_helper_result r;

	assert_int_equal(unlink(f->token), 0);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "cannot read the service account token ", f->token, ": No such file or directory", NULL);
	write_file(f->token, " \n", 2);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "cannot read the service account token ", "empty or not printable", NULL);
	write_file(f->token, "a b", 3);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "empty or not printable", NULL);
	memset(big, 'x', sizeof(big));
	write_file(f->token, big, sizeof(big));
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "cannot read the service account token ", "File too large", NULL);
}

/* libcurl.so.4 not loadable (an empty file found first through LD_LIBRARY_PATH) or not libcurl
 * (another library under that name): the child says which and why. (Missing altogether, in an
 * image without it: tests/deploy/check.sh.) */
static void test_libcurl_unloadable(void **state)
{
	struct fixture *f = *state;
	char path[PATH_MAX];
	dp_helper_result r;

	snprintf(path, sizeof(path), "%s/" HL_CURL_SONAME, f->lib);
	write_file(path, "", 0);
	setenv("LD_LIBRARY_PATH", f->lib, 1);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "cannot load " HL_CURL_SONAME ": ", "file too short", NULL);

	/* A real shared object without libcurl's functions: the cmocka library this test uses. */
	Dl_info info;
	assert_true(dladdr((void *)_cmocka_run_group_tests, &info) != 0 && info.dli_fname);
	assert_non_null(strstr(info.dli_fname, "cmocka"));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(symlink(info.dli_fname, path), 0);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, HL_CURL_SONAME " lacks curl_global_init: ", "undefined symbol", NULL);
}

/* Refused connection: libcurl's own words, naming host and port. */
static void test_refused(void **state)
{
	struct fixture *f = *state;
	char url[128], where[64];
	int port = closed_port();

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/nodes/node-1", port);
	snprintf(where, sizeof(where), "127.0.0.1 port %d", port);
	dp_helper_result r = run_url(f, url);
	expect_fail(&r, "Failed to connect to ", where, NULL);
}

/* Plain HTTP is refused before any connection is made: https only. */
static void test_https_only(void **state)
{
	struct fixture *f = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	char url[128];

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/api/v1/nodes/node-1", ntohs(a.sin_port));
	dp_helper_result r = run_url(f, url);
	expect_fail(&r, "http", "not supported", NULL);
	assert_true(accept4(fd, NULL, NULL, SOCK_CLOEXEC) < 0 && errno == EAGAIN); /* nobody connected */
	close(fd);
}

int main(int argc, char **argv)
{
	dp_helper_main(argc, argv, &hl_label_helper, 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_invalid_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_unreadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_libcurl_unloadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_https_only, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
