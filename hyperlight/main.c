/* SPDX-License-Identifier: Apache-2.0 */
/* hyperlight-device-plugin: advertises the host hypervisor (/dev/kvm or /dev/mshv) to kubelet. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <sys/sysmacros.h>

#include "access.h"
#include "config.h"
#include "confine.h"
#include "detect.h"
#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/helper.h"
#include "dp/metrics.h"
#include "dp/seccomp.h"
#include "dp/signals.h"
#include "dp/log.h"
#include "dp/usage.h"
#include "dp/paths.h"
#include "dp_version.h"
#include "label_patch.h"
#include "labels.h"
#include "plugin.h"
#include "probe.h"

#define PROG "hyperlight-device-plugin"
#define HEALTH_TIMEOUT_USEC (3 * DP_USEC_PER_SEC)

struct options {
	bool device_access;
	bool health_check;
	bool readiness;
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [--device-access] [--health-check[=readiness]] [--version] [-h|--help]\n"
		"Advertises the host hypervisor device as the kubelet resource " HL_RESOURCE ",\n"
		"owns the CDI spec /var/run/cdi/hyperlight.json and answers Allocate with its CDI name.\n"
		"\n"
		"  --device-access           bootstrap mode: advertise one " HL_ACCESS_RESOURCE "\n"
		"                            whose Allocate grants only the device node (stat only,\n"
		"                            no CDI, no probe)\n"
		"  --health-check            exit 0 if the plugin answers gRPC health (liveness)\n"
		"  --health-check=readiness  exit 0 if registered, streaming to kubelet and healthy\n"
		"                            (with --device-access: asks the bootstrap plugin)\n"
		"  --version                 print version and git commit\n"
		"  -h, --help                print this help\n"
		"\n"
		"Environment:\n"
		"  DEVICE_COUNT          devices advertised (default 2000; 1..%u)\n"
		"  DEVICE_UID, DEVICE_GID  owner of the device node in containers (default 65534)\n"
		"  HOST_DEVICE_DIR       the host's /dev mounted read-only, e.g. /host-dev\n"
		"  NODE_NAME             label this node through the in-cluster service account\n"
		DP_USAGE_ENV_COMMON
		"\n"
		"Exit status: 0 after SIGTERM or SIGINT; 1 for a startup error (invalid DEVICE_COUNT or\n"
		"HOST_DEVICE_DIR, no usable hypervisor device, the seccomp filter refused by the\n"
		"kernel); 2 for a bad argument or an invalid METRICS_ADDRESS. --health-check: 0 healthy,\n"
		"1 not.\n",
		hl_device_count_ceiling());
}

/* 0 to run, 1 for an error, -1 when done (version, help). */
static int parse_args(int argc, char **argv, struct options *o)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--version") == 0) {
			printf(PROG " %s (commit %s)\n", DP_VERSION, DP_GIT_COMMIT);
			return -1;
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return -1;
		} else if (strcmp(a, "--device-access") == 0) {
			o->device_access = true;
		} else if (strcmp(a, "--health-check") == 0) {
			o->health_check = true;
		} else if (strcmp(a, "--health-check=readiness") == 0) {
			o->health_check = o->readiness = true;
		} else {
			fprintf(stderr, PROG ": unknown argument '%s'\n", a);
			usage(stderr);
			return 1;
		}
	}
	return 0;
}

static int health_check(const struct options *o)
{
	char dir[4096], err[512];
	const char *prefixes[] = { o->device_access ? HL_ACCESS_SOCKET_PREFIX : HL_SOCKET_PREFIX };
	int r = dp_path(dir, sizeof(dir), DP_KUBELET_DIR);
	if (r >= 0)
		r = dp_health_probe(dir, prefixes, 1, o->readiness, HEALTH_TIMEOUT_USEC, err, sizeof(err));
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

static int find_device(const struct options *o, const struct hl_config *cfg, struct hl_device *dev)
{
	char err[512], q[600];
	/* The bootstrap pod has no device grant: it sees the host's nodes through HOST_DEVICE_DIR. */
	const char *dir = o->device_access && cfg->host_device_dir[0] ? cfg->host_device_dir : "/dev";
	int r = hl_detect(dir, dev, err, sizeof(err));
	if (r < 0) {
		dp_error("no usable hypervisor device", "error=%s", dp_logq(q, sizeof(q), err));
		return r;
	}
	dp_info("hypervisor device found", "hypervisor=%s path=%s node=%s major=%u minor=%u", dev->name,
		dev->path, dev->host_path, major(dev->rdev), minor(dev->rdev));
	return 0;
}

struct daemon {
	dp_loop *loop;
	hl_plugin *plugin;
	hl_access *access;
	hl_labels *labels;
};

/* HL_LABEL_EXE in the directory of our own binary (dp_helper_sibling), else at the root. */
static const char *label_exe(char *buf, size_t size)
{
	return dp_helper_sibling(HL_LABEL_EXE, buf, size) == 0 ? buf : "/" HL_LABEL_EXE;
}

static int start(struct daemon *d, const struct options *o, const struct hl_config *cfg,
		 const struct hl_device *dev)
{
	int r;
	if (o->device_access)
		return hl_access_new(d->loop, dev, &d->access);
	dp_info("advertising", "resource=%s devices=%u host_device_dir=%s", HL_RESOURCE, cfg->device_count,
		cfg->host_device_dir[0] ? cfg->host_device_dir : "none");
	r = hl_plugin_new(d->loop, cfg, dev, &d->plugin);
	if (r < 0)
		return r;
	char exe[PATH_MAX];
	hl_labels_params lp = { .exe = label_exe(exe, sizeof(exe)) };
	r = hl_labels_start(d->loop, dev->name, &lp, &d->labels);
	if (r < 0)
		dp_warn("node labels disabled", "error=%s", strerror(-r));
	return 0;
}

/* After start-up: the seccomp allow-list (dp/seccomp.h, confine.c); exec only of our own
 * binary, through the probe helper's fd and, with labelling on, the label helper's (device-access
 * mode has no helper: no exec at all). */
static int confine(struct daemon *d, const struct options *o)
{
	int exe_fd = o->device_access ? -1 : hl_plugin_exe_fd(d->plugin);
	dp_seccomp_rule rules[HL_SECCOMP_RULES_MAX];
	size_t n = hl_seccomp_rules(!o->device_access, hl_labels_exe_fd(d->labels), rules, DP_ELEMENTSOF(rules));
	return dp_seccomp_confine_daemon(rules, n, exe_fd);
}

static void stop(struct daemon *d)
{
	d->labels = hl_labels_free(d->labels);
	dp_metrics_stop();
	d->plugin = hl_plugin_free(d->plugin);
	d->access = hl_access_free(d->access);
}

static int run(const struct options *o)
{
	struct daemon d = { 0 };
	struct hl_config cfg;
	struct hl_device dev;
	dp_source *sigterm = NULL, *sigint = NULL; /* freed with the loop */
	char err[512], q[600];
	int r;

	if (hl_config_load(&cfg, err, sizeof(err)) < 0) {
		dp_error("invalid configuration", "error=%s", dp_logq(q, sizeof(q), err));
		return 1;
	}
	if (find_device(o, &cfg, &dev) < 0)
		return 1;
	(void)signal(SIGPIPE, SIG_IGN);
	if ((r = dp_loop_new(&d.loop)) < 0 || (r = dp_signal_add(d.loop, SIGTERM, on_signal, d.loop, &sigterm)) < 0 ||
	    (r = dp_signal_add(d.loop, SIGINT, on_signal, d.loop, &sigint)) < 0 ||
	    (r = dp_signals_ignore(d.loop)) < 0) {
		dp_error("cannot set up the event loop", "error=%s", strerror(-r));
		dp_loop_free(d.loop);
		return 1;
	}
	if (!o->device_access && (r = dp_metrics_start(d.loop, PROG)) < 0) { /* before confine */
		dp_loop_free(d.loop);
		return r == -EINVAL ? 2 : 1;
	}
	r = start(&d, o, &cfg, &dev);
	if (r < 0)
		dp_error("cannot start", "error=%s", strerror(-r));
	else
		r = confine(&d, o);
	if (r < 0) {
		stop(&d);
		dp_loop_free(d.loop);
		return 1;
	}
	r = dp_loop_run(d.loop);
	stop(&d);
	dp_loop_free(d.loop);
	dp_info("stopped", "exit=%d", r);
	return r;
}

int main(int argc, char **argv)
{
	sigset_t old;
	dp_signals_block(&old);
	struct options o = { 0 };

	/* The probe helper children: this binary re-executed with --dp-helper (the node-label
	 * helper is its own program, HL_LABEL_EXE). */
	dp_helper_main(argc, argv, hl_probe_helpers, hl_probe_n_helpers);
	int r = parse_args(argc, argv, &o);
	if (r != 0)
		return r < 0 ? 0 : 2;
	if (o.health_check) {
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
		return health_check(&o);
	}
	(void)dp_log_init(); /* an invalid LOG_LEVEL keeps info and is logged there, once */
	dp_grpc_set_limit_hook(dp_grpc_log_limit, NULL); /* the plugin socket's limits, at warn */
	dp_info("starting", "program=" PROG " version=%s commit=%s mode=%s", DP_VERSION, DP_GIT_COMMIT,
		o.device_access ? "device-access" : "hypervisor");
	return run(&o);
}
