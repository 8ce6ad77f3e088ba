/* SPDX-License-Identifier: Apache-2.0 */
/* hyperlight-device-plugin: advertises the host hypervisor (/dev/kvm or /dev/mshv) to kubelet. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "config.h"
#include "detect.h"
#include "dp/health.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "dp_version.h"
#include "plugin.h"

#define PROG "hyperlight-device-plugin"
#define HEALTH_TIMEOUT_USEC (3 * DP_USEC_PER_SEC)

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [--health-check[=readiness]] [--version] [--help]\n"
		"Advertises the host hypervisor device as the kubelet resource " HL_RESOURCE ",\n"
		"owns the CDI spec /var/run/cdi/" "hyperlight.json and answers Allocate with its CDI name.\n"
		"\n"
		"  --health-check            exit 0 if the plugin answers gRPC health (liveness)\n"
		"  --health-check=readiness  exit 0 if registered, streaming to kubelet and healthy\n"
		"  --version                 print version and git commit\n"
		"\n"
		"Environment: DEVICE_COUNT (default 2000), DEVICE_UID, DEVICE_GID (default 65534),\n"
		"LOG_LEVEL (debug, info, warn, error).\n");
}

static int health_check(bool readiness)
{
	char dir[4096], err[512];
	const char *prefixes[] = { HL_SOCKET_PREFIX };
	int r = dp_path(dir, sizeof(dir), DP_KUBELET_DIR);
	if (r >= 0)
		r = dp_health_probe(dir, prefixes, 1, readiness, HEALTH_TIMEOUT_USEC, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "invalid SDP_TEST_ROOT");
	if (r < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return 1;
	}
	return 0;
}

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	dp_info("shutting down", "signal=%s", sigabbrev_np((int)si->ssi_signo));
	dp_loop_exit(userdata, 0);
	return 0;
}

static int run(void)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	struct hl_plugin plugin = { 0 };
	struct hl_config cfg;
	struct hl_device dev;
	dp_source *sigterm = NULL, *sigint = NULL; /* freed with the loop */
	char err[512], q[600];
	int r;

	if (hl_config_load(&cfg, err, sizeof(err)) < 0) {
		dp_error("invalid configuration", "error=%s", dp_logq(q, sizeof(q), err));
		return 1;
	}
	r = hl_detect(&dev, err, sizeof(err));
	if (r < 0) {
		dp_error("no usable hypervisor device", "error=%s", dp_logq(q, sizeof(q), err));
		return 1;
	}
	dp_info("hypervisor device found", "hypervisor=%s path=%s major=%u minor=%u devices=%u",
		dev.name, dev.path, major(dev.rdev), minor(dev.rdev), cfg.device_count);
	signal(SIGPIPE, SIG_IGN);
	if ((r = dp_loop_new(&loop)) < 0 || (r = dp_signal_add(loop, SIGTERM, on_signal, loop, &sigterm)) < 0 ||
	    (r = dp_signal_add(loop, SIGINT, on_signal, loop, &sigint)) < 0) {
		dp_error("cannot set up the event loop", "error=%s", strerror(-r));
		return 1;
	}
	r = hl_plugin_start(&plugin, loop, &cfg, &dev);
	if (r < 0) {
		dp_error("cannot start", "error=%s", strerror(-r));
		hl_plugin_stop(&plugin);
		return 1;
	}
	r = dp_loop_run(loop);
	hl_plugin_stop(&plugin);
	dp_info("stopped", "exit=%d", r);
	return r;
}

int main(int argc, char **argv)
{
	if (argc > 2) {
		usage(stderr);
		return 2;
	}
	if (argc == 2) {
		if (strcmp(argv[1], "--version") == 0) {
			printf(PROG " %s (commit %s)\n", DP_VERSION, DP_GIT_COMMIT);
			return 0;
		}
		if (strcmp(argv[1], "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(argv[1], "--health-check") == 0)
			return health_check(false);
		if (strcmp(argv[1], "--health-check=readiness") == 0)
			return health_check(true);
		fprintf(stderr, PROG ": unknown argument '%s'\n", argv[1]);
		usage(stderr);
		return 2;
	}
	int lr = dp_log_init();
	dp_info("starting", "program=" PROG " version=%s commit=%s", DP_VERSION, DP_GIT_COMMIT);
	if (lr < 0)
		dp_warn("invalid LOG_LEVEL ignored, using info", NULL);
	return run();
}
