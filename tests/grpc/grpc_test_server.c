/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_test_server: the libdp gRPC server and client, driven by the grpc-go conformance tests
 * (tests/kubelet/grpcpeer). Messages are raw bytes; numbers are 32-bit big-endian.
 *
 *   grpc_test_server [--handshake-ms N] [--idle-ms N] [--max-conns N] [--max-streams N]
 *                    [--max-header N] SOCKET
 *     (the options replace the dp_grpc_default_limits fields of the same meaning)
 *     /test.Test/Echo    unary: answers the request bytes
 *     /test.Test/Stream  stream: request N, SIZE: N messages of SIZE bytes (byte j of message i
 *                        is (i + j) & 0xff), then OK; N = 0: stays open until cancelled
 *     /test.Test/Slow    unary: request MS, rest: answers rest after MS milliseconds (loop timer)
 *     /test.Test/Live    unary: answers LIVE, CALLS, CONNS: calls handed to handlers and not
 *                        ended, calls the library holds, connections
 *     /test.Test/Big     unary: request SIZE: answers SIZE bytes (over 4 MiB the library refuses)
 *     /test.Test/Fail    unary: request STATUS, message: ends with that status and message
 *   SIGTERM/SIGINT: dp_grpc_server_free (GOAWAY), exit 0.
 *
 *   grpc_test_server --client SOCKET PATH HEXREQ TIMEOUT_MS
 *     one call with dp_grpc_client_call_new (authority "localhost"); prints
 *     status=N message="<C-escaped>" resp=<hex>
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/loop.h"
#include "grpc/grpc_internal.h"

static dp_grpc_server *server;
static unsigned live;

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A call that stays open (Slow, Stream with N = 0). */
typedef struct pending {
	dp_grpc_call *call;
	dp_source *timer;
	uint8_t *resp;
	size_t resp_len;
} pending;

static void pending_free(pending *p)
{
	live--;
	dp_source_free(p->timer);
	free(p->resp);
	free(p);
}

static void pending_cancelled(dp_grpc_call *call, int status, void *userdata)
{
	pending_free(userdata);
}

static pending *pending_new(dp_grpc_call *call)
{
	pending *p = calloc(1, sizeof(*p));

	if (!p) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	p->call = call;
	live++;
	dp_grpc_call_set_cancel(call, pending_cancelled, p);
	return p;
}

static void echo(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_grpc_call_send(call, msg, len);
}

static void stream(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	uint32_t n, size;
	uint8_t *buf;

	if (len != 8) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "want N and SIZE");
		return;
	}
	n = be32(msg);
	size = be32(msg + 4);
	if (n == 0) {
		pending_new(call);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = 0; j < size; j++)
			buf[j] = (uint8_t)(i + j);
		if (dp_grpc_call_send(call, buf, size) < 0) {
			free(buf);
			return; /* the library ended the call */
		}
	}
	free(buf);
	dp_grpc_call_finish(call, DP_GRPC_OK, NULL);
}

static int slow_fired(dp_source *s, void *userdata)
{
	pending *p = userdata;
	dp_grpc_call *call = p->call;
	uint8_t *resp = p->resp;
	size_t len = p->resp_len;

	p->resp = NULL;
	pending_free(p);
	dp_grpc_call_send(call, resp, len);
	free(resp);
	return 0;
}

static void slow(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	pending *p;

	if (len < 4) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "want MS");
		return;
	}
	p = pending_new(call);
	if (!p)
		return;
	p->resp_len = len - 4;
	p->resp = malloc(p->resp_len ? p->resp_len : 1);
	if (p->resp)
		memcpy(p->resp, msg + 4, p->resp_len);
	if (!p->resp || dp_timer_add(userdata, (uint64_t)be32(msg) * DP_USEC_PER_MSEC, 0, slow_fired, p,
				     &p->timer) < 0) {
		pending_free(p);
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	}
}

static void live_count(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	uint8_t out[12];

	put_be32(out, live);
	put_be32(out + 4, dp_grpc_server_calls(server));
	put_be32(out + 8, dp_grpc_server_connections(server));
	dp_grpc_call_send(call, out, sizeof(out));
}

static void big(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	uint32_t size;
	uint8_t *buf;

	if (len != 4) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "want SIZE");
		return;
	}
	size = be32(msg);
	buf = calloc(1, size ? size : 1);
	if (!buf) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	dp_grpc_call_send(call, buf, size); /* -EMSGSIZE above 4 MiB: ended by the library */
	free(buf);
}

static void fail(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	char *text;

	if (len < 4) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "want STATUS");
		return;
	}
	text = malloc(len - 4 + 1); /* msg is not NUL-terminated */
	if (!text) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	memcpy(text, msg + 4, len - 4);
	text[len - 4] = '\0';
	dp_grpc_call_finish(call, (int)be32(msg), text);
	free(text);
}

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	server = dp_grpc_server_free(server);
	dp_loop_exit(userdata, 0);
	return 0;
}

static int serve(const char *path, const dp_grpc_limits *limits)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	dp_source *sigs[2] = { NULL, NULL };
	int r;

	r = dp_loop_new(&loop);
	if (r < 0)
		return r;
	const dp_grpc_method methods[] = {
		{ "/test.Test/Echo", DP_GRPC_METHOD_UNARY, echo, loop },
		{ "/test.Test/Stream", DP_GRPC_METHOD_SERVER_STREAM, stream, loop },
		{ "/test.Test/Slow", DP_GRPC_METHOD_UNARY, slow, loop },
		{ "/test.Test/Live", DP_GRPC_METHOD_UNARY, live_count, loop },
		{ "/test.Test/Big", DP_GRPC_METHOD_UNARY, big, loop },
		{ "/test.Test/Fail", DP_GRPC_METHOD_UNARY, fail, loop },
	};
	if ((r = dp_signal_add(loop, SIGTERM, on_signal, loop, &sigs[0])) < 0 ||
	    (r = dp_signal_add(loop, SIGINT, on_signal, loop, &sigs[1])) < 0)
		goto out;
	r = dp_grpc_server_new(loop, path, methods, DP_ELEMENTSOF(methods), limits, &server);
	if (r < 0) {
		fprintf(stderr, "grpc_test_server: serve %s: %s\n", path, strerror(-r));
		goto out;
	}
	r = dp_loop_run(loop);
out:
	server = dp_grpc_server_free(server);
	dp_source_free(sigs[0]);
	dp_source_free(sigs[1]);
	return r;
}

/* ---- client mode ---- */

static void print_escaped(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p >= 0x20 && *p < 0x7f)
			putchar(*p);
		else
			printf("\\x%02x", *p);
	}
	putchar('"');
}

static void client_done(void *userdata, int status, const char *message, const uint8_t *resp,
			size_t resp_len)
{
	dp_loop *loop = userdata;

	printf("status=%d message=", status);
	print_escaped(message);
	printf(" resp=");
	for (size_t i = 0; i < resp_len; i++)
		printf("%02x", resp[i]);
	printf("\n");
	fflush(stdout);
	dp_loop_exit(loop, 0);
}

static int unhex(const char *s, uint8_t **ret, size_t *ret_len)
{
	size_t n = strlen(s);
	uint8_t *out;

	if (n % 2)
		return -EINVAL;
	out = malloc(n / 2 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1) {
			free(out);
			return -EINVAL;
		}
		out[i] = (uint8_t)v;
	}
	*ret = out;
	*ret_len = n / 2;
	return 0;
}

static int client(const char *sock, const char *path, const char *hexreq, const char *timeout_ms)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	_cleanup_free_ uint8_t *req = NULL;
	dp_grpc_client_call *call;
	size_t len;
	char *end;
	unsigned long ms = strtoul(timeout_ms, &end, 10);
	int r;

	if (*end || ms == 0 || unhex(hexreq, &req, &len) < 0)
		return -EINVAL;
	r = dp_loop_new(&loop);
	if (r < 0)
		return r;
	r = dp_grpc_client_call_new(loop, sock, "localhost", path, req, len, ms * DP_USEC_PER_MSEC,
				    client_done, loop, &call);
	if (r < 0)
		return r;
	return dp_loop_run(loop);
}

/* --name N options before SOCKET: 0 when argv[i..] parsed into lim, -EINVAL otherwise. */
static int parse_limits(int argc, char **argv, int *i, dp_grpc_limits *lim)
{
	for (; *i + 1 < argc && strncmp(argv[*i], "--", 2) == 0; *i += 2) {
		char *end;
		unsigned long long v = strtoull(argv[*i + 1], &end, 10);

		if (*end || end == argv[*i + 1] || v == 0 || v > UINT32_MAX)
			return -EINVAL;
		if (strcmp(argv[*i], "--handshake-ms") == 0)
			lim->handshake_usec = v * DP_USEC_PER_MSEC;
		else if (strcmp(argv[*i], "--idle-ms") == 0)
			lim->idle_usec = v * DP_USEC_PER_MSEC;
		else if (strcmp(argv[*i], "--max-conns") == 0)
			lim->max_connections = (unsigned)v;
		else if (strcmp(argv[*i], "--max-streams") == 0)
			lim->max_concurrent_streams = (unsigned)v;
		else if (strcmp(argv[*i], "--max-header") == 0)
			lim->max_header_list = (unsigned)v;
		else
			return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	dp_grpc_limits lim = dp_grpc_default_limits;
	int r, i = 1;

	dp_log_init();
	dp_grpc_set_limit_hook(dp_grpc_log_limit, NULL); /* as the daemons do */
	dp_grpc_set_unimplemented_hook(dp_grpc_log_unimplemented, NULL);
	if (argc >= 2 && strcmp(argv[1], "--client") != 0 && parse_limits(argc, argv, &i, &lim) == 0 &&
	    i == argc - 1 && argv[i][0] != '-') {
		r = serve(argv[i], &lim);
	} else if (argc == 6 && strcmp(argv[1], "--client") == 0) {
		r = client(argv[2], argv[3], argv[4], argv[5]);
	} else {
		fprintf(stderr, "usage: grpc_test_server [--handshake-ms N] [--idle-ms N] [--max-conns N]\n"
				"                        [--max-streams N] [--max-header N] SOCKET\n"
				"       grpc_test_server --client SOCKET PATH HEXREQ TIMEOUT_MS\n");
		return 2;
	}
	if (r < 0) {
		fprintf(stderr, "grpc_test_server: %s\n", strerror(-r));
		return 1;
	}
	return r;
}
