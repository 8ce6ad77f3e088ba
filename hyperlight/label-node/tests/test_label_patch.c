/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The "label-node" helper entry (the child side of node labels), run the way the daemon runs
 * it: through dp_helper, this binary being the helper executable. What the child answers when
 * its arguments are wrong, the token or the CA file is unusable, the URL is malformed or not
 * https (nothing is sent), the server refuses the connection, or the peer does not speak TLS.
 * The answers of a real API server (grpc-go's stub in tests/kubelet/labels_test.go: 200, 500
 * with a body, chunked, a hang, an untrusted certificate, a certificate for another address, a
 * host name) are tested there; the HTTP answer parser in test_http_response.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include "dp/helper.h"
#include "dp/loop.h"
#include "dp_test.h"
#include "label_patch.h"

#define BOUND_USEC (10 * DP_USEC_PER_SEC)
#define DEADLINE_USEC (8 * DP_USEC_PER_SEC)
#define GRACE_USEC (2 * DP_USEC_PER_SEC)

struct fixture {
	dp_loop *loop;
	char dir[64];
	char token[128];
	char ca[128];
};

/* A CA certificate made once (openssl req) for the tests that must get past loading it. */
static char valid_ca[] = "/tmp/test_label_patch-ca-XXXXXX";

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
	write_file(f->token, "test-token\n", 11);
	assert_int_equal(symlink(valid_ca, f->ca), 0);
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
	char *argv[16] = { HL_LABEL_HELPER };
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
	const char *args[] = { url, f->token, f->ca, "kvm", "true", NULL };
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

static int make_ca(void **state)
{
	char cmd[512];
	int fd = mkstemp(valid_ca);

	if (fd < 0)
		return -1;
	close(fd);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout /dev/null "
		 "-subj /CN=test_label_patch -days 1 -out %s 2>/dev/null", valid_ca);
	return system(cmd) == 0 ? 0 : -1;
}

static int remove_ca(void **state)
{
	return unlink(valid_ca);
}

/* ---------------------------------------------------------------- tests */

static void test_invalid_arguments(void **state)
{
	struct fixture *f = *state;
	const char *none[] = { NULL };
	const char *three[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, NULL };
	const char *yes[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, "kvm", "yes", NULL };
	dp_helper_result r = run_child(f, none);
	expect_fail(&r, "invalid label-node arguments: <url> <token path> <ca path> <hypervisor> <true|false>", NULL);
	r = run_child(f, three);
	expect_fail(&r, "invalid label-node arguments", NULL);
	r = run_child(f, yes); /* the enabled label is "true" or "false", nothing else */
	expect_fail(&r, "invalid label-node arguments", NULL);
	/* companions' labels: hyperlight.dev/<name>=<true|false>, at most three, none twice, never
	 * the hypervisor's two */
	const char *bad[] = { "hyperlight.dev/tun=yes", "hyperlight.dev/tun", "hyperlight.dev/=true",
			      "example.com/tun=true", "tun=true", "hyperlight.dev/enabled=true",
			      "hyperlight.dev/hypervisor=true", "hyperlight.dev/-tun=true", "hyperlight.dev/a/b=true",
			      "hyperlight.dev/t n=true", "hyperlight.dev/tun=true=false", "" };
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		const char *args[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, "kvm", "true", bad[i], NULL };
		r = run_child(f, args);
		expect_fail(&r, "invalid label-node arguments: <url> <token path> <ca path> <hypervisor> <true|false> "
				"[hyperlight.dev/<name>=<true|false>...]", NULL);
	}
	const char *twice[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, "kvm", "true",
				"hyperlight.dev/tun=true", "hyperlight.dev/tun=false", NULL };
	r = run_child(f, twice);
	expect_fail(&r, "invalid label-node arguments", NULL);
	const char *four[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, "kvm", "true", "hyperlight.dev/a=true",
			       "hyperlight.dev/b=true", "hyperlight.dev/c=true", "hyperlight.dev/d=true", NULL };
	r = run_child(f, four);
	expect_fail(&r, "invalid label-node arguments", NULL);
	/* three good ones pass the check: the attempt goes on to the connection */
	const char *three_ok[] = { "https://127.0.0.1:1/api/v1/nodes/n", f->token, f->ca, "kvm", "false",
				   "hyperlight.dev/tun=true", "hyperlight.dev/vhost-net=false", "hyperlight.dev/V_1.x=true",
				   NULL };
	r = run_child(f, three_ok);
	expect_fail(&r, "cannot connect to 127.0.0.1 port 1", NULL);
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

/* The CA file missing, or holding no certificate: said before any connection is made. */
static void test_ca_unusable(void **state)
{
	struct fixture *f = *state;
	dp_helper_result r;

	assert_int_equal(unlink(f->ca), 0);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "cannot read the CA certificates ", f->ca, ": No such file or directory", NULL);
	write_file(f->ca, "", 0);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "no CA certificate in ", f->ca, NULL);
	write_file(f->ca, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", 60);
	r = run_url(f, "https://127.0.0.1:1/api/v1/nodes/n");
	expect_fail(&r, "no CA certificate in ", f->ca, NULL);
}

/* Refused connection: host, port and the system's reason. */
static void test_refused(void **state)
{
	struct fixture *f = *state;
	char url[128], where[64];
	int port = dpt_closed_port();

	snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/nodes/node-1", port);
	snprintf(where, sizeof(where), "cannot connect to 127.0.0.1 port %d: Connection refused", port);
	dp_helper_result r = run_url(f, url);
	expect_fail(&r, where, NULL);
	snprintf(url, sizeof(url), "https://[::1]:%d/api/v1/nodes/node-1", port);
	r = run_url(f, url);
	expect_fail(&r, "cannot connect to ::1 port ", NULL);
}

/* Malformed URLs: said, nothing sent. */
static void test_malformed_url(void **state)
{
	struct fixture *f = *state;
	const char *bad[] = { "https://", "https:///api", "https://127.0.0.1:0/x", "https://127.0.0.1:65536/x",
			      "https://127.0.0.1:44a/x", "https://[::1/x", "https://[not-v6]/x", "https://a_b/x",
			      "https://127.0.0.1:1/a b", "https://127.0.0.1:1x" };

	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		dp_helper_result r = run_url(f, bad[i]);
		expect_fail(&r, "malformed URL ", bad[i], NULL);
	}
}

/* A peer that answers plain HTTP to the ClientHello: the handshake fails, the answer says
 * where; the peer (a forked process) saw a TLS record (0x16, handshake), not HTTP. */
static void test_not_tls(void **state)
{
	struct fixture *f = *state;
	int port, lfd = dpt_listener(0, &port), status;
	char url[128];
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		unsigned char first = 0;
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		static const char answer[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
		if (c < 0 || read(c, &first, 1) != 1 || write(c, answer, sizeof(answer) - 1) < 0)
			_exit(2);
		_exit(first == 0x16 ? 0 : 1);
	}
	close(lfd);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/api/v1/nodes/node-1", port);
	dp_helper_result r = run_url(f, url);
	char where[64];
	snprintf(where, sizeof(where), "TLS handshake with 127.0.0.1 port %d failed: ", port);
	expect_fail(&r, where, NULL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
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
	expect_fail(&r, "scheme http not supported: https only", NULL);
	assert_true(accept4(fd, NULL, NULL, SOCK_CLOEXEC) < 0 && errno == EAGAIN); /* nobody connected */
	close(fd);
}

int main(int argc, char **argv)
{
	dp_helper_main(argc, argv, &hl_label_helper, 1);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_invalid_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_unreadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ca_unusable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_url, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_tls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_https_only, setup, teardown),
	};
	return cmocka_run_group_tests(tests, make_ca, remove_ca);
}
