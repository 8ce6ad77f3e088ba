/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node labels, the parent side: when labelling applies and when it does not (and what the log
 * says), and that an attempt never blocks the loop: a refused connection fails and is retried
 * after the back-off, a server that never answers leaves the loop dispatching, a child killed
 * by a signal or at its deadline and a CA file without a certificate are logged and retried
 * with the back-off, hl_labels_free mid-attempt or mid-retry kills the child and releases every
 * fd (memory: run under ASan). This binary is its own
 * helper executable: its "label-node" entry is the real one (label_patch.c) unless
 * TEST_LABEL_CHILD asks it to die or hang. The HTTPS exchange itself (method, headers, body,
 * retry after HTTP 500) is tested in tests/kubelet/labels_test.go against a stub API server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/helper.h"
#include "dp/log.h"
#include "dp/loop.h"
#include "dp/paths.h"
#include "dp_test.h"
#include "label_patch.h"
#include "labels.h"

#define BOUND_USEC (5 * DP_USEC_PER_SEC)
#define TICK_USEC (10 * DP_USEC_PER_MSEC)
#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define CHILD_ENV "TEST_LABEL_CHILD"
#define SHORT_DEADLINE_USEC (200 * DP_USEC_PER_MSEC)

/* A syntactically valid CA certificate (public part only): the child loads the CA file before
 * it connects, so the file must parse even though no handshake completes here. */
static const char test_ca[] =
	"-----BEGIN CERTIFICATE-----\n"
	"MIIBiTCCAS+gAwIBAgIUez1A7WFs0XU1ztI1eljh2aMQQU4wCgYIKoZIzj0EAwIw\n"
	"GTEXMBUGA1UEAwwObGFiZWxzLXRlc3QtY2EwIBcNMjYxMjAyMTIwNjQ3WhgPMjEy\n"
	"NjExMDgxMjA2NDdaMBkxFzAVBgNVBAMMDmxhYmVscy10ZXN0LWNhMFkwEwYHKoZI\n"
	"zj0CAQYIKoZIzj0DAQcDQgAEaiY+ktNuGXSMsf4hw3YjufjYQmEeDs7e0wfpOqkv\n"
	"j2LnJGpb4FqFeSYG8L+jqGtni4+MUWWBfUfyYkKfnC2EsaNTMFEwHQYDVR0OBBYE\n"
	"FK39sLVQZ+Kf6eN887Mv2hT/xD1iMB8GA1UdIwQYMBaAFK39sLVQZ+Kf6eN887Mv\n"
	"2hT/xD1iMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIhAOdZbwnJ\n"
	"lFTpnaQBAYq35SGNm8nd3+HJVucqnMs/e1c1AiAyKQzHjR4LNphyJVQlkPtG5/63\n"
	"tPnk1jnzFZW2Zch/fw==\n"
	"-----END CERTIFICATE-----\n";

struct fixture {
	char root[64];
	dp_loop *loop;
	int saved_stderr;
	int log_fd; /* memfd receiving stderr */
	char log[65536];
	const char *ca; /* the service account's ca.crt; NULL: test_ca */
};

/* ---------------------------------------------------------------- helpers */

static void write_file(const char *root, const char *rel, const char *content)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

static void remove_file(const char *root, const char *rel)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	assert_int_equal(unlink(path), 0);
}

/* <root>/var/run/secrets/kubernetes.io/serviceaccount with a token (ending in a newline, as
 * kubelet writes it) and the CA. */
static void mount_service_account(const struct fixture *f)
{
	char cmd[PATH_MAX];
	snprintf(cmd, sizeof(cmd), "%s" SA_DIR, f->root);
	for (char *p = cmd + strlen(f->root) + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			assert_true(mkdir(cmd, 0755) == 0 || errno == EEXIST);
			*p = '/';
		}
	assert_int_equal(mkdir(cmd, 0755), 0);
	write_file(f->root, SA_DIR "/token", "test-token\n");
	write_file(f->root, SA_DIR "/ca.crt", f->ca ? f->ca : test_ca);
}

/* NODE_NAME, the API server address (port as a number) and the service account. */
static void cluster_env(const struct fixture *f, const char *host, int port)
{
	char p[16];
	snprintf(p, sizeof(p), "%d", port);
	setenv("NODE_NAME", "node-1", 1);
	setenv("KUBERNETES_SERVICE_HOST", host, 1);
	setenv("KUBERNETES_SERVICE_PORT", p, 1);
	mount_service_account(f);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* The captured log so far. */
static const char *log_text(struct fixture *f)
{
	ssize_t n = pread(f->log_fd, f->log, sizeof(f->log) - 1, 0);
	assert_true(n >= 0);
	f->log[n] = '\0';
	return f->log;
}

static bool logged(struct fixture *f, const char *needle)
{
	return strstr(log_text(f), needle) != NULL;
}

/* One log line containing every needle (NULL-terminated list). */
static bool logged_line(struct fixture *f, const char *first, ...)
{
	const char *text = log_text(f);
	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		char buf[4096];
		snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
		bool all = strstr(buf, first) != NULL;
		va_list ap;
		va_start(ap, first);
		for (const char *n; all && (n = va_arg(ap, const char *));)
			all = strstr(buf, n) != NULL;
		va_end(ap);
		if (all)
			return true;
		line += len + (end ? 1 : 0);
	}
	return false;
}

static int count_lines(struct fixture *f, const char *needle)
{
	int n = 0;
	for (const char *p = log_text(f); (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static int on_tick(dp_source *s, void *userdata)
{
	(*(unsigned *)userdata)++;
	return 0;
}

/* Run the loop until cond holds or the bound passes; returns cond. */
static bool run_until(struct fixture *f, bool (*cond)(struct fixture *, const void *), const void *arg)
{
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!cond(f, arg) && dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
	return cond(f, arg);
}

/* Run the loop for usec. */
static void run_for(struct fixture *f, uint64_t usec)
{
	uint64_t end = dp_now_usec() + usec;
	while (dp_now_usec() < end)
		assert_true(dp_loop_run_once(f->loop, 10) >= 0);
}

static bool cond_logged(struct fixture *f, const void *needle)
{
	return logged(f, needle);
}

/* Exactly *want fds are open: a killed child was reaped and its pipe and pidfd closed. */
static bool cond_fds(struct fixture *f, const void *want)
{
	return dpt_count_fds() == *(const int *)want;
}

/* ---------------------------------------------------------------- fixture */

static int setup(void **state)
{
	static const char *vars[] = { "NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT",
				      CHILD_ENV, "LD_LIBRARY_PATH", "NODE_LABELS_HOLD" };
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->root, sizeof(f->root), "/tmp/test_labels-XXXXXX");
	assert_non_null(mkdtemp(f->root));
	setenv(DP_TEST_ROOT_ENV, f->root, 1);
	dp_paths_reset();
	for (size_t i = 0; i < DP_ELEMENTSOF(vars); i++)
		unsetenv(vars[i]);
	assert_int_equal(dp_loop_new(&f->loop), 0);
	dp_log_set_level(DP_LOG_DEBUG);
	f->log_fd = memfd_create("log", MFD_CLOEXEC);
	assert_true(f->log_fd >= 0);
	f->saved_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	assert_true(f->saved_stderr >= 0);
	assert_int_equal(dup2(f->log_fd, STDERR_FILENO), STDERR_FILENO);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	dup2(f->saved_stderr, STDERR_FILENO);
	close(f->saved_stderr);
	/* cmocka's failure messages went to the capture too: pass them on (and the whole log when
	 * TEST_LABELS_VERBOSE is set). */
	bool all = getenv("TEST_LABELS_VERBOSE") != NULL;
	for (const char *line = log_text(f); *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line + 1) : strlen(line);
		if (all || strncmp(line, "time=", 5) != 0)
			fwrite(line, 1, len, stderr);
		line += len;
	}
	close(f->log_fd);
	dp_loop_free(f->loop);
	nftw(f->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* ---------------------------------------------------------------- inactive */

/* Start with the current environment; expect "disabled" with *ret NULL and one log line at
 * level that contains reason. */
static void expect_disabled(struct fixture *f, const char *level, const char *reason)
{
	hl_labels *l = (hl_labels *)0x1;
	int before = count_lines(f, "node labelling disabled");
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_null(l);
	assert_int_equal(count_lines(f, "node labelling disabled"), before + 1);
	assert_true(logged_line(f, "msg=\"node labelling disabled\"", level, reason, NULL));
	assert_false(logged(f, "node labelling enabled"));
}

/* Each of the n values of the variable var disables labelling (at warn) with the reason. */
static void expect_each_disabled(struct fixture *f, const char *var, const char *const *values,
				 size_t n, const char *reason)
{
	for (size_t i = 0; i < n; i++) {
		setenv(var, values[i], 1);
		expect_disabled(f, "level=warn", reason);
	}
}

static void test_no_node_name(void **state)
{
	struct fixture *f = *state;
	cluster_env(f, "127.0.0.1", 6443);
	unsetenv("NODE_NAME");
	expect_disabled(f, "level=info", "NODE_NAME is not set");
	setenv("NODE_NAME", "", 1);
	expect_disabled(f, "level=info", "NODE_NAME is not set");
}

static void test_no_service_account(void **state)
{
	struct fixture *f = *state;
	setenv("NODE_NAME", "node-1", 1);
	setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
	expect_disabled(f, "level=info", "no service account mounted (" SA_DIR "/token missing)");
	mount_service_account(f);
	remove_file(f->root, SA_DIR "/token");
	expect_disabled(f, "level=info", SA_DIR "/token missing");
	write_file(f->root, SA_DIR "/token", "t\n");
	remove_file(f->root, SA_DIR "/ca.crt");
	expect_disabled(f, "level=info", SA_DIR "/ca.crt missing");
}

static void test_invalid_node_name(void **state)
{
	struct fixture *f = *state;
	char long_name[300];
	const char *bad[] = { "Node-1", "node_1", "-node", "node-", "a..b", ".a", "a.", "a/b", "a b",
			      "a.-b", "a-.b", "nöde", long_name };
	memset(long_name, 'a', 254);
	long_name[254] = '\0';
	cluster_env(f, "127.0.0.1", 6443);
	expect_each_disabled(f, "NODE_NAME", bad, DP_ELEMENTSOF(bad), "NODE_NAME is not a valid node name");
	/* The longest valid name (253 bytes) and dotted names are accepted. */
	const char *good[] = { long_name + 1, "a", "node-1.example.com", "0-9.x" };
	for (size_t i = 0; i < DP_ELEMENTSOF(good); i++) {
		hl_labels *l = NULL;
		setenv("NODE_NAME", good[i], 1);
		assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
		assert_non_null(l);
		assert_false(hl_labels_done(l));
		hl_labels_free(l);
	}
}

static void test_no_api_server(void **state)
{
	struct fixture *f = *state;
	cluster_env(f, "127.0.0.1", 6443);
	unsetenv("KUBERNETES_SERVICE_HOST");
	expect_disabled(f, "level=info", "KUBERNETES_SERVICE_HOST is not set");
	setenv("KUBERNETES_SERVICE_HOST", "", 1);
	expect_disabled(f, "level=info", "KUBERNETES_SERVICE_HOST is not set");
	setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
	unsetenv("KUBERNETES_SERVICE_PORT");
	expect_disabled(f, "level=info", "KUBERNETES_SERVICE_PORT is not set");

	const char *bad_hosts[] = { "127.0.0.1/x", "a b", "host:1", "[::1]", "-x", "a?b", "fe80::1%eth0" };
	setenv("KUBERNETES_SERVICE_PORT", "443", 1);
	expect_each_disabled(f, "KUBERNETES_SERVICE_HOST", bad_hosts, DP_ELEMENTSOF(bad_hosts),
			     "KUBERNETES_SERVICE_HOST is not an IP address or host name");
	const char *bad_ports[] = { "0", "65536", "abc", "443x", "-1", "0443", " 443", "999999" };
	setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
	expect_each_disabled(f, "KUBERNETES_SERVICE_PORT", bad_ports, DP_ELEMENTSOF(bad_ports),
			     "KUBERNETES_SERVICE_PORT is not a port number");
}

static void test_invalid_arguments(void **state)
{
	struct fixture *f = *state;
	hl_labels *l = (hl_labels *)0x1;
	cluster_env(f, "127.0.0.1", 6443);
	assert_int_equal(hl_labels_start(NULL, "kvm", NULL, 0, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, NULL, NULL, 0, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "", NULL, 0, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "k v", NULL, 0, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "kvm\"", NULL, 0, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, NULL), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, &(hl_labels_params){ .exe = "" }, &l), -EINVAL);
	assert_ptr_equal(l, (hl_labels *)0x1); /* untouched on error */
	assert_null(hl_labels_free(NULL));
	assert_false(hl_labels_done(NULL));
}

/* ---------------------------------------------------------------- active */

/* The API server URL in the start line: an IPv6 literal is bracketed, the node name is the path. */
/* NODE_LABELS_HOLD: the hold in the "enabled" line; an invalid value is said once and the
 * default (10 s) taken. */
static void test_hold_setting(void **state)
{
	struct fixture *f = *state;
	hl_labels *l = NULL;
	cluster_env(f, "127.0.0.1", dpt_closed_port());
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_true(logged_line(f, "node labelling enabled", "hold=10s", NULL));
	hl_labels_free(l);
	setenv("NODE_LABELS_HOLD", "0", 1);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_true(logged_line(f, "node labelling enabled", "hold=0s", NULL));
	hl_labels_free(l);
	setenv("NODE_LABELS_HOLD", "3601", 1);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_true(logged_line(f, "level=warn", "invalid NODE_LABELS_HOLD, using the default",
				"NODE_LABELS_HOLD=3601 is out of range 0..3600", "default=10s", NULL));
	assert_int_equal(count_lines(f, "invalid NODE_LABELS_HOLD"), 1);
	assert_true(logged_line(f, "node labelling enabled", "hold=10s", NULL));
	hl_labels_free(l);
	unsetenv("NODE_LABELS_HOLD");
}

static void test_url(void **state)
{
	struct fixture *f = *state;
	hl_labels *l = NULL;
	cluster_env(f, "fd00:10:96::1", 443);
	assert_int_equal(hl_labels_start(f->loop, "mshv", NULL, 0, NULL, &l), 0);
	assert_non_null(l);
	assert_true(logged_line(f, "level=info", "node labelling enabled", "node=node-1",
				"api=https://[fd00:10:96::1]:443/api/v1/nodes/node-1", "hyperlight.dev/hypervisor=mshv",
				NULL));
	/* Freed before the first attempt ran: nothing was sent. */
	hl_labels_free(l);
	assert_false(logged(f, "attempt started"));

	setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
	setenv("NODE_NAME", "worker.example.com", 1);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_true(logged_line(f, "node labelling enabled",
				"api=https://10.96.0.1:443/api/v1/nodes/worker.example.com", NULL));
	hl_labels_free(l);
}

/* Connection refused: hl_labels_start returns at once, the attempt fails from the loop with a
 * warning naming the error, and the next attempt follows after the 1 s back-off; a timer keeps
 * firing meanwhile. Freed while the retry is pending: every fd is released. */
static void test_refused_retry(void **state)
{
	struct fixture *f = *state;
	hl_labels *l = NULL;
	dp_source *tick = NULL;
	unsigned ticks = 0;
	int fds;

	cluster_env(f, "127.0.0.1", dpt_closed_port());
	fds = dpt_count_fds();
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_non_null(l);
	assert_false(logged(f, "attempt started")); /* no I/O inside start */
	assert_int_equal(dp_timer_add(f->loop, TICK_USEC, TICK_USEC, on_tick, &ticks, &tick), 0);
	/* no attempt before the first verdict: nothing to say yet */
	run_for(f, 20 * TICK_USEC);
	assert_false(logged(f, "attempt started"));
	hl_labels_verdict(l, HL_LABELS_HYPERVISOR, true, "probe ok");

	assert_true(run_until(f, cond_logged, "attempt=1 error="));
	assert_true(logged_line(f, "level=warn", "msg=\"node labelling failed\"", "node=node-1", "attempt=1",
				"retry_in=1s", NULL));
	assert_false(hl_labels_done(l));
	unsigned ticks_at_failure = ticks;
	assert_true(run_until(f, cond_logged, "attempt=2 error="));
	assert_true(logged_line(f, "node labelling failed", "attempt=2", "retry_in=2s", NULL));
	assert_true(ticks > ticks_at_failure); /* the loop ran timers while waiting for the retry */
	assert_false(hl_labels_done(l));

	assert_true(logged_line(f, "node labelling failed", "attempt=1", "cannot connect to 127.0.0.1 port ",
				"Connection refused", NULL));

	hl_labels_free(l);
	dp_source_free(tick);
	assert_true(run_until(f, cond_fds, &fds));
	assert_false(logged(f, "node labelled"));
}

struct hang {
	int listener;
	int conn;
	unsigned char hello[8];
	size_t len;
};

/* The request was accepted by the kernel and its first bytes read: a TLS handshake record. */
static bool cond_hello(struct fixture *f, const void *arg)
{
	struct hang *h = (struct hang *)arg;
	if (h->conn < 0)
		h->conn = accept4(h->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (h->conn >= 0 && h->len < 3) {
		ssize_t n = recv(h->conn, h->hello + h->len, 3 - h->len, MSG_DONTWAIT);
		if (n > 0)
			h->len += (size_t)n;
	}
	return h->len >= 3;
}

static bool cond_ticks(struct fixture *f, const void *arg)
{
	return *(const unsigned *)arg >= 50;
}

/* A server that accepts and never answers: the child's transfer stays pending while the loop
 * keeps dispatching timers; hl_labels_free mid-transfer kills the child (its connection closes)
 * and every fd of the attempt is released once the loop reaped it. */
static void test_hang_free_mid_transfer(void **state)
{
	struct fixture *f = *state;
	struct hang h = { .conn = -1 };
	hl_labels *l = NULL;
	dp_source *tick = NULL;
	unsigned ticks = 0;
	int port, fds;

	h.listener = dpt_listener(SOCK_NONBLOCK, &port);
	cluster_env(f, "127.0.0.1", port);
	fds = dpt_count_fds();
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_non_null(l);
	hl_labels_verdict(l, HL_LABELS_HYPERVISOR, true, "probe ok");
	assert_true(run_until(f, cond_hello, &h));
	assert_int_equal(h.hello[0], 0x16); /* TLS handshake record: https only */
	assert_int_equal(h.hello[1], 0x03);

	assert_int_equal(dp_timer_add(f->loop, TICK_USEC, TICK_USEC, on_tick, &ticks, &tick), 0);
	assert_true(run_until(f, cond_ticks, &ticks));
	assert_false(logged(f, "node labelling failed")); /* still waiting for the server */
	assert_false(hl_labels_done(l));
	assert_true(logged_line(f, "attempt started", "attempt=1",
				"url=https://127.0.0.1:", "/api/v1/nodes/node-1", NULL));

	hl_labels_free(l);
	dp_source_free(tick);
	/* The child is killed: the server reads EOF (or a reset) after the ClientHello. */
	char buf[4096];
	ssize_t n;
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while ((n = recv(h.conn, buf, sizeof(buf), MSG_DONTWAIT)) > 0 ||
	       (n < 0 && errno == EAGAIN && dp_now_usec() < end))
		;
	assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
	close(h.conn);
	close(h.listener);
	fds--; /* the listener was counted */
	assert_true(run_until(f, cond_fds, &fds));
}

/* The token is read at each attempt: one that vanished or is empty fails that attempt with a
 * reason, and the attempt after the back-off reads the file again. */
static void test_token_reread(void **state)
{
	struct fixture *f = *state;
	hl_labels *l = NULL;

	cluster_env(f, "127.0.0.1", dpt_closed_port());
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, NULL, &l), 0);
	assert_non_null(l);
	hl_labels_verdict(l, HL_LABELS_HYPERVISOR, true, "probe ok");
	remove_file(f->root, SA_DIR "/token");
	assert_true(run_until(f, cond_logged, "attempt=1 error="));
	assert_true(logged_line(f, "node labelling failed", "attempt=1",
				"cannot read the service account token", "No such file or directory", NULL));
	write_file(f->root, SA_DIR "/token", " \n\n");
	assert_true(run_until(f, cond_logged, "attempt=2 error="));
	assert_true(logged_line(f, "node labelling failed", "attempt=2", "empty or not printable", NULL));
	write_file(f->root, SA_DIR "/token", "tok\r\nen\n");
	assert_true(run_until(f, cond_logged, "attempt=3 error="));
	assert_true(logged_line(f, "node labelling failed", "attempt=3", "empty or not printable", NULL));
	hl_labels_free(l);
}

/* ---------------------------------------------------------------- the child fails */

/* Start with a child that the test entry makes misbehave (CHILD_ENV=how) and the deadline
 * given (0: the default); two attempts fail, each logged with reason and back-off, while a
 * timer keeps firing; freed, every fd is released. */
static void expect_retried(struct fixture *f, const char *how, uint64_t deadline_usec, const char *reason)
{
	hl_labels_params p = { .deadline_usec = deadline_usec };
	hl_labels *l = NULL;
	dp_source *tick = NULL;
	unsigned ticks = 0, ticks_at_failure;
	int fds;

	cluster_env(f, "127.0.0.1", dpt_closed_port());
	if (how)
		setenv(CHILD_ENV, how, 1);
	fds = dpt_count_fds();
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 0, &p, &l), 0);
	assert_non_null(l);
	hl_labels_verdict(l, HL_LABELS_HYPERVISOR, true, "probe ok");
	assert_int_equal(dp_timer_add(f->loop, TICK_USEC, TICK_USEC, on_tick, &ticks, &tick), 0);
	assert_true(run_until(f, cond_logged, "attempt=1 error="));
	assert_true(logged_line(f, "level=warn", "msg=\"node labelling failed\"", "node=node-1", "attempt=1",
				reason, "retry_in=1s", NULL));
	ticks_at_failure = ticks;
	assert_true(run_until(f, cond_logged, "attempt=2 error="));
	assert_true(logged_line(f, "node labelling failed", "attempt=2", reason, "retry_in=2s", NULL));
	assert_true(ticks > ticks_at_failure); /* the loop ran timers while waiting for the retry */
	assert_false(hl_labels_done(l));
	assert_false(logged(f, "node labelled"));
	hl_labels_free(l);
	dp_source_free(tick);
	assert_true(run_until(f, cond_fds, &fds));
}

/* The child dies of a signal: the attempt failed, the next one follows the back-off. */
static void test_child_killed(void **state)
{
	expect_retried(*state, "kill", 0, "error=\"helper killed by signal 9 (SIGKILL)\"");
}

/* The child hangs: killed at its deadline, logged as a timeout, retried after the back-off. */
static void test_child_timeout(void **state)
{
	expect_retried(*state, "hang", SHORT_DEADLINE_USEC, "error=\"timeout after 200 ms\"");
}

/* The service account's ca.crt holds no certificate: the child says so before connecting, the
 * log names the file, and the attempt is retried (a rotated CA is read by the next one). */
static void test_ca_not_a_certificate(void **state)
{
	struct fixture *f = *state;

	f->ca = "not a certificate\n";
	expect_retried(f, NULL, 0, "error=\"no CA certificate in ");
	assert_true(logged_line(f, "attempt=2", SA_DIR "/ca.crt", NULL));
}


/* ---------------------------------------------------------------- companions */

/* The companions' label keys: each under hyperlight.dev/ with a label name part, neither of the
 * hypervisor's two, none twice, at most three; a bad one refuses the start (-EINVAL) and touches
 * nothing. The good ones are named in the start line. */
static void test_companion_keys(void **state)
{
	struct fixture *f = *state;
	char long_name[100];
	const char *bad[] = { HL_LABEL_ENABLED, HL_LABEL_HYPERVISOR, "hyperlight.dev/", "example.com/tun", "tun",
			      "hyperlight.dev/-tun", "hyperlight.dev/tun-", "hyperlight.dev/t n", "hyperlight.dev/a/b",
			      "hyperlight.dev/tün", long_name, "" };
	hl_labels *l = (hl_labels *)0x1;

	snprintf(long_name, sizeof(long_name), "hyperlight.dev/%064d", 0); /* a name part of 64 */
	cluster_env(f, "127.0.0.1", 6443);
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		const char *keys[] = { "hyperlight.dev/tun", bad[i] };
		if (hl_labels_start(f->loop, "kvm", keys, 2, NULL, &l) != -EINVAL)
			fail_msg("companion key \"%s\" accepted", bad[i]);
		assert_false(hl_labels_companion_key(bad[i]));
	}
	const char *twice[] = { "hyperlight.dev/tun", "hyperlight.dev/tun" };
	assert_int_equal(hl_labels_start(f->loop, "kvm", twice, 2, NULL, &l), -EINVAL);
	const char *four[] = { "hyperlight.dev/a", "hyperlight.dev/b", "hyperlight.dev/c", "hyperlight.dev/d" };
	assert_int_equal(hl_labels_start(f->loop, "kvm", four, 4, NULL, &l), -EINVAL);
	assert_int_equal(hl_labels_start(f->loop, "kvm", NULL, 1, NULL, &l), -EINVAL);
	assert_ptr_equal(l, (hl_labels *)0x1);
	assert_false(logged(f, "node labelling enabled"));

	long_name[strlen(long_name) - 1] = '\0'; /* 63: the longest */
	const char *good[] = { "hyperlight.dev/tun", "hyperlight.dev/Net_1.x", long_name };
	assert_int_equal(hl_labels_start(f->loop, "kvm", good, 3, NULL, &l), 0);
	assert_non_null(l);
	char want[200];
	snprintf(want, sizeof(want), "companions=hyperlight.dev/tun,hyperlight.dev/Net_1.x,%s", long_name);
	assert_true(logged_line(f, "level=info", "node labelling enabled", "hyperlight.dev/hypervisor=kvm", want, NULL));
	hl_labels_free(l);
}

static bool cond_attempts(struct fixture *f, const void *n)
{
	char needle[64];
	snprintf(needle, sizeof(needle), "attempt=%d error=", *(const int *)n);
	return logged(f, needle);
}

/* A companion's verdict before the hypervisor's sends nothing; the first attempt carries every
 * label that has a verdict (a companion without one is left out); a verdict for an index out
 * of range is ignored. Each companion's label keeps its own hold: a flap within it is not
 * sent. */
static void test_companion_verdicts(void **state)
{
	struct fixture *f = *state;
	const char *keys[] = { "hyperlight.dev/tun", "hyperlight.dev/vhost-net" };
	hl_labels *l = NULL;
	int one = 1, two = 2;

	cluster_env(f, "127.0.0.1", dpt_closed_port());
	setenv("NODE_LABELS_HOLD", "3600", 1);
	assert_int_equal(hl_labels_start(f->loop, "kvm", keys, 2, NULL, &l), 0);
	hl_labels_verdict(l, 1, false, "/dev/net/tun missing");
	hl_labels_verdict(l, 3, true, "out of range");
	run_for(f, 20 * TICK_USEC);
	assert_false(logged(f, "attempt started")); /* not before the hypervisor's */
	hl_labels_verdict(l, HL_LABELS_HYPERVISOR, true, "probe ok");
	assert_true(run_until(f, cond_attempts, &one));
	assert_true(logged_line(f, "attempt started", "attempt=1", "hyperlight.dev/enabled=true",
				"hyperlight.dev/tun=false", NULL));
	assert_false(logged(f, "hyperlight.dev/vhost-net=")); /* no verdict yet */
	hl_labels_verdict(l, 2, true, "vhost features 0x33d008000");
	/* a flap of tun within the hold: its label stays false in every attempt */
	hl_labels_verdict(l, 1, true, "tun features 0x7173");
	hl_labels_verdict(l, 1, false, "/dev/net/tun missing");
	assert_true(run_until(f, cond_attempts, &two));
	assert_true(logged_line(f, "attempt started", "attempt=2", "hyperlight.dev/enabled=true",
				"hyperlight.dev/tun=false", "hyperlight.dev/vhost-net=true", NULL));
	assert_false(logged(f, "node label follows the device"));
	assert_false(logged(f, "hyperlight.dev/tun=true"));
	hl_labels_free(l);
	unsetenv("NODE_LABELS_HOLD");
}

/* The test binary's helper entries: the real "label-node", unless CHILD_ENV says "kill" (die of
 * SIGKILL before answering) or "hang" (never answer). */
static void entry_label_node(int argc, char **argv)
{
	const char *how = getenv(CHILD_ENV);

	if (how && strcmp(how, "kill") == 0)
		raise(SIGKILL);
	while (how && strcmp(how, "hang") == 0)
		pause();
	hl_label_helper.fn(argc, argv);
}

int main(int argc, char **argv)
{
	const dp_helper_entry entries[] = { { HL_LABEL_HELPER, entry_label_node } };
	dp_helper_main(argc, argv, entries, DP_ELEMENTSOF(entries));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_no_node_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_service_account, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_node_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_api_server, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_url, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_setting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hang_free_mid_transfer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_reread, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_killed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_child_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ca_not_a_certificate, setup, teardown),
		cmocka_unit_test_setup_teardown(test_companion_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_companion_verdicts, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
