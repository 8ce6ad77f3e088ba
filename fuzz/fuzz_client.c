/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (b): raw bytes from a server into our gRPC client. A Register call (the real
 * RegisterRequest an endpoint sends) goes to a unix socket this target listens on; the target
 * accepts, reads what the client sends, writes the input as the server's byte stream, shuts
 * its write side and runs the loop until the done callback (bounded: not finishing within the
 * call's 1 s deadline + 2 s is a wedge = a finding). The response, when OK, is decoded as
 * v1beta1.Empty and as grpc.health.v1.HealthCheckResponse (what Register and health checks
 * decode). Checks: done runs exactly once, with a status >= 0, a message, and a response
 * only with OK.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api.pb-c.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/loop.h"
#include "fuzz.h"
#include "health.pb-c.h"

static dp_loop *loop;
static int listen_fd = -1;
static char sock_path[100];

struct result {
	unsigned done;
	int status;
};

static void on_done(void *userdata, int status, const char *message, const uint8_t *resp,
		    size_t resp_len)
{
	struct result *r = userdata;
	r->done++;
	r->status = status;
	/* A grpc-status beyond 16 from the server is passed through, as grpc-go does. */
	FUZZ_CHECK(status >= 0);
	FUZZ_CHECK(message != NULL);
	FUZZ_CHECK(status == DP_GRPC_OK ? resp != NULL : resp == NULL);
	if (resp) {
		V1beta1__Empty *e = v1beta1__empty__unpack(NULL, resp_len, resp);
		v1beta1__empty__free_unpacked(e, NULL);
		Grpc__Health__V1__HealthCheckResponse *h =
			grpc__health__v1__health_check_response__unpack(NULL, resp_len, resp);
		grpc__health__v1__health_check_response__free_unpacked(h, NULL);
	}
}

static void teardown(void)
{
	if (listen_fd >= 0)
		close(listen_fd);
	loop = dp_loop_free(loop);
}

static void setup(void)
{
	if (loop)
		return;
	if (!getenv("FUZZ_VERBOSE"))
		dp_log_set_level(DP_LOG_ERROR);
	FUZZ_CHECK(dp_loop_new(&loop) == 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sock_path, sizeof(sock_path), "%s/kubelet.sock", fuzz_tmpdir());
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	FUZZ_CHECK(listen_fd >= 0);
	FUZZ_CHECK(bind(listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	FUZZ_CHECK(listen(listen_fd, 16) == 0);
	atexit(teardown);
}

static void drain(int fd)
{
	char buf[16384];
	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup();
	V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
	V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	req.version = "v1beta1";
	req.endpoint = "fuzz-1-1.sock";
	req.resource_name = "fuzz.dev/dev";
	req.options = &opts;
	struct result res = { 0 };
	dp_grpc_client_call *call = NULL;
	FUZZ_CHECK(dp_grpc_client_call_pb(loop, sock_path, "localhost", "/v1beta1.Registration/Register",
					  &req.base, 1000000, on_done, &res, &call) == 0);
	int fd = -1;
	size_t off = 0;
	uint64_t end = dp_now_usec() + 3000000;
	while (!res.done && dp_now_usec() < end) {
		dp_loop_run_once(loop, fd >= 0 && off >= size ? 1 : 0);
		if (fd < 0) {
			fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			if (fd < 0)
				continue;
		}
		drain(fd);
		if (off < size) {
			ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (errno != EAGAIN)
				off = size;
			if (off >= size)
				shutdown(fd, SHUT_WR);
		} else if (off == 0) {
			shutdown(fd, SHUT_WR);
			off = 1;
		}
	}
	FUZZ_CHECK(res.done == 1);
	if (fd >= 0) {
		drain(fd);
		close(fd);
	}
	return 0;
}
