/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pluginreg_server: the core's plugin registration socket (dp/pluginreg.h) alone, for the
 * grpc-go tests in tests/kubelet/grpcpeer (found there through
 * SDP_BUILD_DIR/tests/grpc/pluginreg_server).
 *
 *   pluginreg_server DIR TYPE NAME ENDPOINT VERSION...
 *
 * Serves DIR/NAME-reg.sock; prints "serving <path>" once it does, then one line per
 * NotifyRegistrationStatus: "status registered=<0|1> error=\"<C-escaped>\"" (stdout, flushed).
 * dp_pluginreg_new's error: "error <errno name>" on stderr, exit 1. SIGTERM/SIGINT:
 * dp_pluginreg_free, exit 0.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "dp/loop.h"
#include "dp/pluginreg.h"

static void on_status(bool registered, const char *error, void *userdata)
{
	printf("status registered=%d error=\"", registered);
	for (const char *p = error; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	printf("\"\n");
	fflush(stdout);
}

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	dp_loop_exit(userdata, 0);
	return 0;
}

int main(int argc, char **argv)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	_cleanup_(dp_pluginreg_freep) dp_pluginreg *reg = NULL;
	dp_source *sigs[2] = { NULL, NULL };
	int r;

	if (argc < 6) {
		fprintf(stderr, "usage: pluginreg_server DIR TYPE NAME ENDPOINT VERSION...\n");
		return 2;
	}
	dp_log_init();
	dp_pluginreg_config c = {
		.type = argv[2], .name = argv[3], .endpoint = argv[4],
		.versions = (const char *const *)argv + 5, .n_versions = (size_t)(argc - 5),
		.on_status = on_status,
	};
	if ((r = dp_loop_new(&loop)) < 0 || (r = dp_signal_add(loop, SIGTERM, on_signal, loop, &sigs[0])) < 0 ||
	    (r = dp_signal_add(loop, SIGINT, on_signal, loop, &sigs[1])) < 0)
		goto out;
	r = dp_pluginreg_new(loop, argv[1], &c, &reg);
	if (r < 0)
		goto out;
	printf("serving %s\n", dp_pluginreg_socket(reg));
	fflush(stdout);
	r = dp_loop_run(loop);
out:
	reg = dp_pluginreg_free(reg);
	dp_source_free(sigs[0]);
	dp_source_free(sigs[1]);
	if (r < 0) {
		fprintf(stderr, "error %s\n", dp_errname(-r));
		return 1;
	}
	return 0;
}
