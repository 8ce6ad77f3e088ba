/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kata-device-plugin: advertises the VFIO-bound PCI devices the compile-time table names
 * (/dev/vfio/devices/vfioN, classified through sysfs) to kubelet, one resource per table row,
 * with a CDI spec per resource for Kata's cold plug. The device set is fixed at start: a change
 * ends the daemon with status 3 so that the DaemonSet restarts it.
 *
 * Exit status: 0 after SIGTERM/SIGINT, 1 for a startup error, 2 for a bad argument (or an
 * invalid RESOURCE_NAMING or METRICS_ADDRESS), 3 when the VFIO device set changed;
 * --health-check: 0 healthy, 1 not.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/log.h"
#include "dp/usage.h"
#include "dp/paths.h"
#include "dp/metrics.h"
#include "dp/seccomp.h"
#include "dp/signals.h"
#include "dp_version.h"
#include "idle.h"
#include "naming.h"
#include "plugin.h"
#include "scan.h"
#include "sku.h"
#include "table.h"
#include "watch.h"

#define PROG "kata-device-plugin"
#define HEALTH_TIMEOUT_USEC (3 * DP_USEC_PER_SEC)
#define EXIT_DEVICE_SET_CHANGED 3

struct options {
	bool health_check;
	bool readiness;
};

/* "0x0302xx": the class prefix, x for the nibbles the mask leaves open. */
static void class_pattern(const struct kata_row *r, char out[static 9])
{
	static const char hex[] = "0123456789abcdef";
	out[0] = '0';
	out[1] = 'x';
	for (int i = 0; i < 6; i++) {
		int shift = 20 - 4 * i;
		bool fixed = ((r->class_mask >> shift) & 0xf) == 0xf;
		out[2 + i] = (char)(fixed ? hex[(r->class_prefix >> shift) & 0xf] : 'x');
	}
	out[8] = '\0';
}

static void usage(FILE *f)
{
	char cls[9];
	fprintf(f,
		"Usage: " PROG " [--health-check[=readiness]] [--version] [-h|--help]\n"
		"Advertises the VFIO-bound PCI devices in /dev/vfio/devices that its compile-time\n"
		"table names to kubelet, one resource per table row, IDs 0..n-1 in PCI address order,\n"
		"and owns one CDI spec per resource: /var/run/cdi/kata.<vendor>-<class>.yaml.\n"
		"The device set is fixed at start: when it changes the daemon exits with status 3.\n"
		"\n"
		"Table:\n");
	for (size_t i = 0; i < kata_table_len; i++) {
		class_pattern(&kata_table[i], cls);
		fprintf(f, "  %-26s vendor 0x%04x, class %s\n", kata_table[i].resource, kata_table[i].vendor, cls);
	}
	fprintf(f,
		"\n"
		"  --health-check            exit 0 if every plugin socket of this daemon answers\n"
		"                            gRPC health (liveness)\n"
		"  --health-check=readiness  exit 0 if every advertised resource is registered,\n"
		"                            streaming to kubelet and healthy\n"
		"  --version                 print version and git commit\n"
		"  -h, --help                print this help\n"
		"\n"
		"Environment:\n"
		"  RESOURCE_NAMING       table (default: one resource per table row, as above) or sku\n"
		"                        (one resource per GPU/NVSwitch model, named from its PCI\n"
		"                        device ID in pci.ids %s, e.g. nvidia.com/GH100_H100_SXM5_80GB;\n"
		"                        a model that appears later is served at once)\n"
		DP_USAGE_ENV_COMMON
		"\n"
		"Exit status: 0 after SIGTERM or SIGINT; 1 for a startup error (/dev/vfio/devices\n"
		"unreadable, the seccomp filter refused by the kernel); 2 for a bad argument or an\n"
		"invalid RESOURCE_NAMING or METRICS_ADDRESS; 3 when the VFIO device set changed (the\n"
		"DaemonSet restarts the daemon). --health-check: 0 healthy, 1 not.\n",
		kata_sku_ids_version);
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

/* Every socket prefix this daemon may serve: one per table row, and the idle one. */
static int health_check(const struct options *o)
{
	char dir[PATH_MAX], err[1024];
	char names[KATA_MAX_ROWS][KATA_NAME_MAX];
	const char *prefixes[KATA_MAX_ROWS + 2];
	size_t n = 0;
	int r = dp_path(dir, sizeof(dir), DP_KUBELET_DIR);

	for (size_t i = 0; r >= 0 && i < kata_table_len && i < KATA_MAX_ROWS; i++) {
		r = kata_socket_prefix(kata_table[i].resource, names[n], sizeof(names[n]));
		prefixes[n] = names[n];
		n++;
	}
	prefixes[n++] = KATA_IDLE_PREFIX;
	prefixes[n++] = KATA_SKU_SOCKET_PREFIX; /* RESOURCE_NAMING=sku */
	if (r >= 0)
		r = dp_health_probe_present(dir, prefixes, n, o->readiness, HEALTH_TIMEOUT_USEC, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "invalid %s or table", DP_TEST_ROOT_ENV);
	if (r < 0) {
		fprintf(stderr, PROG ": %s\n", err);
		return 1;
	}
	return 0;
}

struct daemon {
	dp_loop *loop;
	struct kata_scan_opts opts;
	struct kata_scan scan;
	enum kata_naming naming;
	struct kata_resources res;
	kata_plugin *plugins[KATA_MAX_ROWS];
	size_t n_plugins;
	kata_idle *idle;
	kata_watch *watch;
};

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	dp_info("shutting down", "signal=%s", sigabbrev_np((int)si->ssi_signo));
	dp_loop_exit(userdata, 0);
	return 0;
}

/* removed=vfio3 added=vfio12 changed=vfio5: only the non-empty lists. */
static void on_changed(const char *removed, const char *added, const char *changed, void *userdata)
{
	struct daemon *d = userdata;
	const char *keys[] = { "removed", "added", "changed" }, *vals[] = { removed, added, changed };
	_cleanup_(dp_buf_done) dp_buf kv = { 0 };
	char q[1024];
	for (size_t i = 0; i < DP_ELEMENTSOF(keys); i++)
		if (vals[i][0])
			dp_buf_printf(&kv, "%s%s=%s", kv.len ? " " : "", keys[i], dp_logq(q, sizeof(q), vals[i]));
	dp_error("VFIO device set changed, exiting so the DaemonSet restarts the plugin", "%s",
		 kv.data && !kv.oom ? kv.data : "");
	dp_loop_exit(d->loop, EXIT_DEVICE_SET_CHANGED);
}

/* msg="advertising" resource=nvidia.com/gpu devices=4 ids="0:0000:41:00.0/vfio3 1:..." */
static void log_resource(const char *resource, const struct kata_device *devs, size_t n)
{
	_cleanup_(dp_buf_done) dp_buf ids = { 0 };
	char q[4096];
	for (size_t i = 0; i < n; i++)
		dp_buf_printf(&ids, "%s%zu:%s/%s", i ? " " : "", i, devs[i].pci, devs[i].name);
	dp_info("advertising", "resource=%s devices=%zu ids=%s", resource, n,
		dp_logq(q, sizeof(q), ids.oom ? "(out of memory)" : ids.data));
}

static int start_resource(struct daemon *d, const struct kata_resource *res, const char *kdir, const char *cdir)
{
	if (res->n == 0) {
		dp_info("resource not present, not registering it", "resource=%s", res->name);
		return 0;
	}
	if (d->n_plugins == KATA_MAX_ROWS)
		return -ENOSPC;
	log_resource(res->name, res->devs, res->n);
	kata_plugin *p = NULL;
	int r = kata_plugin_new_named(d->loop, &(struct kata_plugin_names){ res->name, res->socket_prefix,
			res->plugin_name, res->spec_file }, res->devs, res->n, kdir, cdir, &p);
	if (r < 0)
		return r;
	d->plugins[d->n_plugins++] = p;
	return kata_plugin_start(p);
}

static int start_plugins(struct daemon *d, const char *kdir, const char *cdir)
{
	int r = kata_resources_build(&d->scan, d->opts.table, d->opts.n_rows, d->naming, &d->res);
	if (r < 0)
		return r;
	kata_resources_log(&d->res, d->naming);
	for (size_t i = 0; r >= 0 && i < d->res.n; i++)
		r = start_resource(d, &d->res.v[i], kdir, cdir);
	return r;
}

/* RESOURCE_NAMING=sku: devices of models not served yet are served at once, beside the others
 * (watch.h); any other change ends the daemon (on_changed). */
static bool on_grow(struct kata_scan *now, void *userdata)
{
	struct daemon *d = userdata;
	struct kata_resources res;
	char kdir[PATH_MAX], cdir[PATH_MAX];
	if (dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR) < 0 || dp_path(cdir, sizeof(cdir), DP_CDI_DIR) < 0 ||
	    kata_resources_build(now, d->opts.table, d->opts.n_rows, d->naming, &res) < 0)
		return false;
	bool ok = kata_resources_only_added(&d->res, &res);
	for (size_t i = 0; ok && i < res.n; i++) {
		if (kata_resources_find(&d->res, res.v[i].name) || res.v[i].n == 0)
			continue;
		dp_info("new PCI model, advertising it beside the others", "resource=%s devices=%zu", res.v[i].name,
			res.v[i].n);
		int r = start_resource(d, &res.v[i], kdir, cdir);
		if (r < 0)
			dp_error("cannot start", "resource=%s error=%s", res.v[i].name, strerror(-r));
		ok = r >= 0;
	}
	if (!ok) {
		kata_resources_done(&res);
		return false;
	}
	kata_resources_log(&res, d->naming);
	kata_resources_done(&d->res);
	d->res = res;
	kata_scan_done(&d->scan);
	d->scan = *now;
	d->idle = kata_idle_free(d->idle);
	return true;
}

static int start(struct daemon *d)
{
	char kdir[PATH_MAX], cdir[PATH_MAX];
	int r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r >= 0)
		r = dp_path(cdir, sizeof(cdir), DP_CDI_DIR);
	if (r < 0)
		return r;
	if (d->scan.n_devices == 0) {
		dp_warn("no VFIO device matches the table; nothing to advertise", "dir=%s", KATA_DEV_DIR);
		return kata_idle_new(d->loop, kdir, &d->idle);
	}
	return start_plugins(d, kdir, cdir);
}

static void stop(struct daemon *d)
{
	d->watch = kata_watch_free(d->watch);
	dp_metrics_stop();
	d->idle = kata_idle_free(d->idle);
	for (size_t i = 0; i < d->n_plugins; i++)
		d->plugins[i] = kata_plugin_free(d->plugins[i]);
	d->n_plugins = 0;
	kata_resources_done(&d->res);
	kata_scan_done(&d->scan);
}

static int setup_loop(struct daemon *d)
{
	dp_source *sigterm = NULL, *sigint = NULL; /* freed with the loop */
	int r;
	(void)signal(SIGPIPE, SIG_IGN);
	if ((r = dp_loop_new(&d->loop)) < 0 || (r = dp_signal_add(d->loop, SIGTERM, on_signal, d->loop, &sigterm)) < 0 ||
	    (r = dp_signal_add(d->loop, SIGINT, on_signal, d->loop, &sigint)) < 0 ||
	    (r = dp_signals_ignore(d->loop)) < 0)
		return r;
	return 0;
}

static int run(void)
{
	struct daemon d = {
		.opts = { .table = kata_table, .n_rows = kata_table_len, .verbose = true },
	};
	char err[1024], q[1100];
	int r;

	if (kata_naming_from_env(&d.naming, err, sizeof(err)) < 0) {
		dp_error("invalid configuration", "error=%s", dp_logq(q, sizeof(q), err));
		return 2;
	}
	d.opts.read_device_id = d.naming == KATA_NAMING_SKU;
	if (kata_table_validate(kata_table, kata_table_len, err, sizeof(err)) < 0) {
		dp_error("invalid PCI table", "error=%s", dp_logq(q, sizeof(q), err));
		return 1;
	}
	/* The watch before the scan: no change can fall between them (watch.h). */
	r = setup_loop(&d);
	if (r >= 0)
		r = kata_watch_new(d.loop, &d.opts, &d.scan, 0, on_changed, &d, &d.watch);
	if (r >= 0 && d.naming == KATA_NAMING_SKU)
		kata_watch_set_grow(d.watch, on_grow, &d);
	if (r < 0) {
		dp_error("cannot set up the event loop", "error=%s", strerror(-r));
		stop(&d);
		dp_loop_free(d.loop);
		return 1;
	}
	if ((r = dp_metrics_start(d.loop, PROG)) < 0) { /* before seccomp: a TCP socket */
		stop(&d);
		dp_loop_free(d.loop);
		return r == -EINVAL ? 2 : 1;
	}
	r = kata_scan_run(&d.opts, &d.scan, err, sizeof(err));
	if (r < 0) {
		dp_error("cannot scan VFIO devices", "error=%s", dp_logq(q, sizeof(q), err));
		stop(&d);
		dp_loop_free(d.loop);
		return 1;
	}
	r = start(&d);
	if (r < 0)
		dp_error("cannot start", "error=%s", strerror(-r));
	else
		r = dp_seccomp_confine_daemon(NULL, 0, -1); /* the core list; no exec */
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
	int r = parse_args(argc, argv, &o);
	if (r != 0)
		return r < 0 ? 0 : 2;
	if (o.health_check) {
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
		return health_check(&o);
	}
	(void)dp_log_init(); /* an invalid LOG_LEVEL keeps info and is logged there */
	dp_grpc_set_limit_hook(dp_grpc_log_limit, NULL); /* the plugin socket's limits, at warn */
	dp_info("starting", "program=" PROG " version=%s commit=%s", DP_VERSION, DP_GIT_COMMIT);
	return run();
}
