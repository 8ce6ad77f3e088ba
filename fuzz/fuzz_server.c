/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (a): raw bytes from a client into a server connection of a real dp_endpoint
 * (nghttp2 session, our gRPC layer, the device plugin handlers GetDevicePluginOptions,
 * ListAndWatch, GetPreferredAllocation, Allocate, PreStartContainer and the grpc.health.v1
 * service) with a dummy driver (every check healthy; Allocate answers a CDI name, an env and an
 * annotation). The endpoint registers with a fake kubelet (a dp_grpc_server on kubelet.sock in
 * the same loop), once per process (and again after a restart the fuzz input caused).
 * Per input: connect to the endpoint's socket, write the input, shut down our write side, run
 * the loop until the server closed the connection (bounded: 2 s is a wedge = a finding).
 * The input is the byte stream a client sends, e.g. a captured grpc-go request.
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

static dp_loop *loop;
static dp_grpc_server *kubelet;
static dp_endpoint *ep;

static void on_register(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	V1beta1__Empty e = V1BETA1__EMPTY__INIT;
	(void)dp_grpc_call_send_pb(call, &e.base);
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
	ep = dp_endpoint_free(ep);
	kubelet = dp_grpc_server_free(kubelet);
	loop = dp_loop_free(loop);
}

static void pump_until_registered(void)
{
	uint64_t end = dp_now_usec() + 5000000;
	while (!(dp_endpoint_registered(ep) && dp_endpoint_socket(ep)) && dp_now_usec() < end)
		dp_loop_run_once(loop, 5);
	FUZZ_CHECK(dp_endpoint_registered(ep) && dp_endpoint_socket(ep));
}

static void setup(void)
{
	if (loop)
		return;
	if (!getenv("FUZZ_VERBOSE"))
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
	FUZZ_CHECK(dp_endpoint_start(ep) == 0);
	atexit(teardown);
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
	pump_until_registered();
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
	return 0;
}
