/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (a): raw bytes from a client into a server connection of a real dp_endpoint
 * (nghttp2 session, our gRPC layer, the device plugin handlers GetDevicePluginOptions,
 * ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer and the grpc.health.v1
 * service) with a dummy driver (every check healthy; Allocate answers a CDI name, an env and an
 * annotation). The endpoint registers once per process with a fake kubelet in the same loop: a
 * dp_grpc_server on kubelet.sock that answers Register and then, as kubelet does, holds its
 * own ListAndWatch stream on the socket the endpoint registered (a libdp client call with a
 * 24 h deadline; the dummy driver never changes health, so the endpoint sends that stream
 * exactly one response).
 * Per input: connect to the endpoint's socket, write the input, shut down our write side, run
 * the loop until the server closed the connection (bounded: 2 s is a wedge = a finding). Then
 * kubelet's stream must still be open and no new Register must have come: no client's input
 * may end kubelet's stream or make the endpoint re-register.
 * The input is the byte stream a client sends, e.g. a captured grpc-go request.
 *
 * Why the fake kubelet holds a stream (issue 21): the endpoint takes the end of kubelet's
 * ListAndWatch stream (the first one opened since Register) for a kubelet restart and
 * re-registers, and a second such end within 30 s of a registration backs off 100 ms doubling
 * to 60 s (docs/architecture.md, "Registration life cycle"). With a fake kubelet that opened no
 * stream, the first input calling ListAndWatch took kubelet's place; every such input then
 * re-registered the endpoint, from the second on after the doubling back-off, and after eight
 * in a row the wait for the next registration passed the harness's 5 s bound (an abort that
 * was no finding). A kubelet always holds its stream, so the inputs now meet the endpoint as
 * any other client does, and the check after each input holds the endpoint to that.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api.pb-c.h"
#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/loop.h"
#include "fuzz.h"

#define KUBELET_STREAM_USEC (24 * 3600 * DP_USEC_PER_SEC)

static dp_loop *loop;
static dp_grpc_server *kubelet;
static dp_endpoint *ep;
static dp_grpc_client_call *kubelet_stream; /* the fake kubelet's ListAndWatch, while open */
static unsigned registrations;		    /* Register calls the fake kubelet answered */

static void on_kubelet_stream_end(void *userdata, int status, const char *message,
				  const uint8_t *resp, size_t resp_len)
{
	kubelet_stream = NULL;
	if (getenv("FUZZ_VERBOSE"))
		fprintf(stderr, "fuzz: kubelet's ListAndWatch ended: %s: %s\n",
			dp_grpc_status_name(status), message);
}

/* As kubelet does after answering Register: ListAndWatch on the registered socket (the old
 * registration's stream, if any, is dropped, as kubelet drops a replaced endpoint). */
static void kubelet_open_stream(const char *endpoint)
{
	V1beta1__Empty e = V1BETA1__EMPTY__INIT;
	char path[256];
	int n = snprintf(path, sizeof(path), "%s/%s", fuzz_tmpdir(), endpoint);
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(path));
	kubelet_stream = dp_grpc_client_call_cancel(kubelet_stream);
	FUZZ_CHECK(dp_grpc_client_call_pb(loop, path, "localhost", "/v1beta1.DevicePlugin/ListAndWatch",
					  &e.base, KUBELET_STREAM_USEC, on_kubelet_stream_end, NULL,
					  &kubelet_stream) == 0);
}

static void on_register(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	V1beta1__Empty e = V1BETA1__EMPTY__INIT;
	V1beta1__RegisterRequest *req = v1beta1__register_request__unpack(NULL, len, msg);
	FUZZ_CHECK(req && req->endpoint && *req->endpoint);
	registrations++;
	(void)dp_grpc_call_send_pb(call, &e.base);
	kubelet_open_stream(req->endpoint);
	v1beta1__register_request__free_unpacked(req, NULL);
}

static void drv_check(dp_endpoint *e, void *userdata)
{
	dp_endpoint_set_health(e, true, NULL);
}

static void drv_allocate(dp_endpoint *e, dp_alloc *a, void *userdata)
{
	for (size_t c = 0; c < dp_alloc_containers(a); c++) {
		size_t n;
		char **ids = dp_alloc_ids(a, c, &n);
		FUZZ_CHECK(ids != NULL || n == 0);
		(void)dp_alloc_add_cdi(a, c, "fuzz.dev/dev=all");
		(void)dp_alloc_add_env(a, c, "FUZZ", n ? ids[0] : "none");
		(void)dp_alloc_add_annotation(a, c, "fuzz.dev/n", "1");
	}
	dp_alloc_finish(a, DP_GRPC_OK, NULL);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };
static const dp_device devices[] = { { "0", -1 }, { "1", 0 }, { "dev-2", 1 } };

static void teardown(void)
{
	kubelet_stream = dp_grpc_client_call_cancel(kubelet_stream);
	ep = dp_endpoint_free(ep);
	kubelet = dp_grpc_server_free(kubelet);
	loop = dp_loop_free(loop);
}

/* Registered, and kubelet's stream open on the endpoint (ready: no other client has one yet). */
static bool kubelet_ready(void)
{
	return dp_endpoint_ready(ep) && dp_endpoint_socket(ep) && kubelet_stream;
}

/* The first registration of the process: at most 5 s (nothing backs off on the way). */
static void pump_until_ready(void)
{
	uint64_t end = dp_now_usec() + 5000000;
	while (!kubelet_ready() && dp_now_usec() < end)
		dp_loop_run_once(loop, 5);
	FUZZ_CHECK(kubelet_ready());
}

static void setup(void)
{
	if (loop)
		return;
	bool verbose = getenv("FUZZ_VERBOSE");
	if (verbose)
		(void)dp_log_init(); /* LOG_LEVEL */
	else
		dp_log_set_level(DP_LOG_ERROR);
	const char *dir = fuzz_tmpdir();
	char path[256];
	snprintf(path, sizeof(path), "%s/kubelet.sock", dir);
	FUZZ_CHECK(dp_loop_new(&loop) == 0);
	static const dp_grpc_method m[] = {
		{ "/v1beta1.Registration/Register", DP_GRPC_METHOD_UNARY, on_register, NULL },
	};
	FUZZ_CHECK(dp_grpc_server_new(loop, path, m, 1, NULL, &kubelet) == 0);
	dp_endpoint_config cfg = {
		.resource_name = "fuzz.dev/dev",
		.socket_prefix = "fuzz",
		.devices = devices,
		.n_devices = sizeof(devices) / sizeof(devices[0]),
		.preferred_allocation = true,
		.pre_start_required = true,
		.driver = &driver,
	};
	FUZZ_CHECK(dp_endpoint_new(loop, dir, &cfg, &ep) == 0);
	if (verbose)
		dp_endpoint_set_events(ep, &dp_endpoint_log_events);
	FUZZ_CHECK(dp_endpoint_start(ep) == 0);
	atexit(teardown);
	pump_until_ready();
}

static int connect_endpoint(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", fuzz_tmpdir(),
			 dp_endpoint_socket(ep));
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(sa.sun_path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	FUZZ_CHECK(fd >= 0);
	FUZZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	return fd;
}

/* Read what the server sent; true at EOF (or a reset). */
static bool drain(int fd)
{
	char buf[16384];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n > 0)
			continue;
		if (n == 0)
			return true;
		return errno != EAGAIN && errno != EINTR;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	unsigned registered = registrations;
	int fd = connect_endpoint();
	size_t off = 0;
	bool eof = false;
	uint64_t end = dp_now_usec() + 2000000;
	while (!eof && dp_now_usec() < end) {
		if (off < size) {
			ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (errno != EAGAIN)
				off = size; /* the server closed already */
			if (off == size)
				shutdown(fd, SHUT_WR);
		} else if (size == 0 && off == 0) {
			shutdown(fd, SHUT_WR);
			off = 1;
		}
		dp_loop_run_once(loop, off >= size ? 1 : 0);
		eof = drain(fd);
	}
	close(fd);
	FUZZ_CHECK(eof); /* the server must not wedge on any input */
	/* let the endpoint finish what the closed connection started (stream ends, restart) */
	for (int i = 0; i < 4; i++)
		dp_loop_run_once(loop, 0);
	/* another client cannot end kubelet's stream nor make the endpoint register again */
	FUZZ_CHECK(kubelet_stream && registrations == registered);
	FUZZ_CHECK(dp_endpoint_ready(ep));
	return 0;
}
