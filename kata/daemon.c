/* SPDX-License-Identifier: Apache-2.0 */
/* daemon: kata-device-plugin's configure, watch, start and stop callbacks (daemon.h). */
#include "daemon.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "dp/buf.h"
#include "dp/draside.h"
#include "dp/endpoint.h"
#include "dp/env.h"
#include "dp/log.h"
#include "dp/paths.h"

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

void kata_daemon_usage_table(FILE *f)
{
	char cls[9];
	(void)fputs("Table:\n", f);
	for (size_t i = 0; i < kata_table_len; i++) {
		class_pattern(&kata_table[i], cls);
		fprintf(f, "  %-26s vendor 0x%04x, class %s\n", kata_table[i].resource, kata_table[i].vendor, cls);
	}
}

/* PLUGIN_API=dra in the environment (--health-check runs in the daemon's container); an invalid
 * value is the daemon's to refuse. */
static bool dra_mode(void)
{
	bool dra = false;
	return dp_env_plugin_api(&dra, NULL, 0) == 0 && dra;
}

/* PLUGIN_API=dra: the DRA socket in the driver's directory. */
int kata_daemon_health_dir(const dp_daemon_args *a, char *buf, size_t size)
{
	if (!dra_mode())
		return 0;
	snprintf(buf, size, "/var/lib/kubelet/plugins/%s", KATA_DRA_DRIVER);
	return 1;
}

/* Every socket prefix this daemon may serve: one per table row, the idle one and the SKU one;
 * with PLUGIN_API=dra the DRA socket's alone. */
int kata_daemon_health_prefixes(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max,
				size_t *ret_n)
{
	static const char *const more[] = { KATA_IDLE_SOCKET_KEY, KATA_SKU_SOCKET_KEY /* RESOURCE_NAMING=sku */ };
	size_t n = 0;
	if (dra_mode() && max >= 1) {
		snprintf(names[0], DP_DAEMON_PREFIX_MAX, "%s", DP_DRASIDE_SOCKET_PREFIX);
		*ret_n = 1;
		return 0;
	}
	if (kata_table_len + DP_ELEMENTSOF(more) > max)
		return -ENOSPC;
	for (size_t i = 0; i < kata_table_len; i++) {
		int r = kata_socket_prefix(kata_table[i].resource, names[n++], DP_DAEMON_PREFIX_MAX);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < DP_ELEMENTSOF(more); i++) {
		int r = dp_socket_prefix(names[n++], DP_DAEMON_PREFIX_MAX, KATA_SOCKET_TAG, more[i]);
		if (r < 0)
			return r;
	}
	*ret_n = n;
	return 0;
}

int kata_daemon_configure(const dp_daemon_args *a, void *userdata)
{
	struct kata_daemon *d = userdata;
	char err[1024], q[1100];
	if (kata_naming_from_env(&d->naming, err, sizeof(err)) < 0 ||
	    kata_backend_from_env(&d->backend, err, sizeof(err)) < 0 || dp_env_plugin_api(&d->dra, err, sizeof(err)) < 0) {
		dp_error("invalid configuration", "error=%s", dp_logq(q, sizeof(q), err));
		return DP_EXIT_USAGE;
	}
	if (d->dra && d->naming == KATA_NAMING_SKU) {
		/* each device's model is its attribute "model" */
		dp_warn("RESOURCE_NAMING=sku has no effect with PLUGIN_API=dra", "naming=table");
		d->naming = KATA_NAMING_TABLE;
	}
	/* the device ID: RESOURCE_NAMING=sku's names, DRA's deviceID and model attributes */
	d->opts = (struct kata_scan_opts){ .table = kata_table, .n_rows = kata_table_len, .verbose = true,
					   .read_device_id = d->naming == KATA_NAMING_SKU || d->dra };
	if (kata_table_validate(kata_table, kata_table_len, err, sizeof(err)) < 0) {
		dp_error("invalid PCI table", "error=%s", dp_logq(q, sizeof(q), err));
		return DP_EXIT_FAILURE;
	}
	return DP_EXIT_OK;
}

/* removed=vfio3 added=vfio12 changed=vfio5: only the non-empty lists. */
static void on_changed(const char *removed, const char *added, const char *changed, void *userdata)
{
	struct kata_daemon *d = userdata;
	const char *keys[] = { "removed", "added", "changed" }, *vals[] = { removed, added, changed };
	_cleanup_(dp_buf_done) dp_buf kv = { 0 };
	char q[1024];
	for (size_t i = 0; i < DP_ELEMENTSOF(keys); i++)
		if (vals[i][0])
			dp_buf_printf(&kv, "%s%s=%s", kv.len ? " " : "", keys[i], dp_logq(q, sizeof(q), vals[i]));
	dp_error("VFIO device set changed, exiting so the DaemonSet restarts the plugin", "%s",
		 kv.data && !kv.oom ? kv.data : "");
	dp_loop_exit(d->loop, KATA_EXIT_DEVICE_SET_CHANGED);
}

/* msg="advertising" resource=nvidia.com/gpu devices=4 ids="0:0000:41:00.0/vfio3 1:..." : the
 * IDs kubelet sees (one per IOMMU group), each device as ID:address/node (legacy: the group). */
static void log_resource(const char *resource, const struct kata_device *devs, size_t n)
{
	_cleanup_(dp_buf_done) dp_buf ids = { 0 };
	char q[4096];
	size_t id = 0;
	for (size_t i = 0; i < n; i++) {
		const char *node = strrchr(devs[i].path, '/');
		if (i > 0 && devs[i].group != devs[i - 1].group)
			id++;
		dp_buf_printf(&ids, "%s%zu:%s/%s", i ? " " : "", id, devs[i].pci, node ? node + 1 : devs[i].path);
	}
	dp_info("advertising", "resource=%s devices=%zu ids=%s", resource, n ? id + 1 : 0,
		dp_logq(q, sizeof(q), ids.oom ? "(out of memory)" : ids.data));
}

static int start_resource(struct kata_daemon *d, const struct kata_resource *res, const char *kdir,
			  const char *cdir)
{
	char spec[KATA_NAME_MAX];
	if (res->n == 0) {
		if (d->dra)
			dp_info("resource not present, no device to publish", "resource=%s", res->name);
		else
			dp_info("resource not present, not registering it", "resource=%s", res->name);
		return 0;
	}
	if (d->n_plugins == KATA_MAX_ROWS)
		return -ENOSPC;
	log_resource(res->name, res->devs, res->n);
	int r = d->dra ? kata_dra_spec_file(res->name, spec, sizeof(spec)) : 0;
	if (r < 0)
		return r;
	kata_plugin *p = NULL;
	r = kata_plugin_new_named(d->loop, &(struct kata_plugin_names){ res->name, res->socket_prefix, res->plugin_name,
			d->dra ? spec : res->spec_file, d->dra }, res->devs, res->n, kdir, cdir, &p);
	if (r < 0)
		return r;
	d->plugins[d->n_plugins++] = p;
	if (d->dra_side)
		kata_plugin_set_units_fn(p, kata_dra_units, d->dra_side);
	return kata_plugin_start(p);
}

static int start_plugins(struct kata_daemon *d, const char *kdir, const char *cdir)
{
	int r = kata_resources_build(&d->scan, d->opts.table, d->opts.n_rows, d->naming, &d->res);
	if (r < 0)
		return r;
	kata_resources_log(&d->res, d->naming);
	for (size_t i = 0; r >= 0 && i < d->res.n; i++)
		r = start_resource(d, &d->res.v[i], kdir, cdir);
	return r;
}

/* The kubelet and CDI directories under SDP_TEST_ROOT. */
static int dirs(char kdir[static PATH_MAX], char cdir[static PATH_MAX])
{
	int r = dp_path(kdir, PATH_MAX, DP_KUBELET_DIR);
	return r < 0 ? r : dp_path(cdir, PATH_MAX, DP_CDI_DIR);
}

/* RESOURCE_NAMING=sku: devices of models not served yet are served at once, beside the others
 * (watch.h); any other change ends the daemon (on_changed). */
static bool on_grow(struct kata_scan *now, void *userdata)
{
	struct kata_daemon *d = userdata;
	struct kata_resources res;
	char kdir[PATH_MAX], cdir[PATH_MAX];
	if (dirs(kdir, cdir) < 0 || kata_resources_build(now, d->opts.table, d->opts.n_rows, d->naming, &res) < 0)
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

/* Every plugin checks soon. */
static void check_all(struct kata_daemon *d)
{
	for (size_t i = 0; i < d->n_plugins; i++)
		kata_plugin_request_check(d->plugins[i]);
}

/* A rescan found the set as it was, or smaller: the plugins' checks say which IDs are usable. */
static void on_removed(const char *removed, void *userdata)
{
	char q[1024];
	if (removed[0])
		dp_debug("VFIO devices gone, checking", "removed=%s", dp_logq(q, sizeof(q), removed));
	check_all(userdata);
}

static void on_uevent(const char *action, const char *devpath, void *userdata)
{
	check_all(userdata);
}

/* The backend, then the watch before the scan: no change can fall between them (watch.h). */
int kata_daemon_prepare(dp_loop *loop, void *userdata)
{
	struct kata_daemon *d = userdata;
	char why[256], q[300];
	d->loop = loop;
	d->opts.backend = kata_backend_choose(d->backend, why, sizeof(why));
	dp_info("VFIO backend", "backend=%s reason=%s", kata_backend_name(d->opts.backend), dp_logq(q, sizeof(q), why));
	int r = kata_watch_new(loop, &d->opts, &d->scan, 0, on_changed, d, &d->watch);
	if (r >= 0 && d->naming == KATA_NAMING_SKU)
		kata_watch_set_grow(d->watch, on_grow, d);
	if (r >= 0)
		kata_watch_set_removed(d->watch, on_removed, d);
	if (r >= 0 && d->backend == KATA_BACKEND_AUTO && d->opts.backend == KATA_BACKEND_LEGACY)
		r = kata_watch_add_cdevs(d->watch);
	return r;
}

/* PCI bind and unbind events: a group member's driver changes without any file event. */
static void watch_uevents(struct kata_daemon *d)
{
	int r = kata_uevent_new(d->loop, on_uevent, d, &d->uevent);
	if (r < 0)
		dp_warn("cannot receive PCI uevents, driver changes are seen by the periodic check (30 s)",
			"error=%s", strerror(-r));
}

/* PLUGIN_API=dra: the DRA side, then the resources' plugins (checks only), published once each
 * has been checked; no devices: an empty pool (the DRA socket still answers health). */
static int start_dra(struct kata_daemon *d, const char *kdir, const char *cdir)
{
	char why[256] = "", q[300];
	int r = kata_dra_new(d->loop, d->plugins, &d->n_plugins, &d->dra_side, why, sizeof(why));
	if (r < 0) {
		dp_error("cannot start", "error=%s reason=%s", strerror(-r),
			 dp_logq(q, sizeof(q), why[0] ? why : "cannot serve through DRA"));
		return r;
	}
	if (d->scan.n_devices == 0)
		dp_warn("no VFIO device matches the table; publishing an empty pool", "dir=%s backend=%s",
			kata_backend_dir(d->opts.backend), kata_backend_name(d->opts.backend));
	r = d->scan.n_devices ? start_plugins(d, kdir, cdir) : 0;
	if (r < 0) {
		dp_error("cannot start", "error=%s", strerror(-r));
		return r;
	}
	dp_info("serving through DRA", "driver=" KATA_DRA_DRIVER " resources=%zu", d->n_plugins);
	kata_dra_go(d->dra_side);
	watch_uevents(d);
	return 0;
}

int kata_daemon_start(dp_loop *loop, void *userdata)
{
	struct kata_daemon *d = userdata;
	char err[1024], q[1100], kdir[PATH_MAX], cdir[PATH_MAX];
	int r = kata_scan_run(&d->opts, &d->scan, err, sizeof(err));
	if (r < 0) {
		dp_error("cannot scan VFIO devices", "error=%s", dp_logq(q, sizeof(q), err));
		return r;
	}
	r = dirs(kdir, cdir);
	if (r >= 0 && d->dra)
		return start_dra(d, kdir, cdir);
	if (r >= 0 && d->scan.n_devices == 0) {
		dp_warn("no VFIO device matches the table; nothing to advertise", "dir=%s backend=%s",
			kata_backend_dir(d->opts.backend), kata_backend_name(d->opts.backend));
		r = kata_idle_new(loop, kdir, &d->idle);
	} else if (r >= 0) {
		r = start_plugins(d, kdir, cdir);
	}
	if (r >= 0)
		watch_uevents(d); /* also while idle: a later RESOURCE_NAMING=sku model needs it */
	if (r < 0)
		dp_error("cannot start", "error=%s", strerror(-r));
	return r;
}

void kata_daemon_stop(void *userdata)
{
	struct kata_daemon *d = userdata;
	d->watch = kata_watch_free(d->watch);
	d->uevent = kata_uevent_free(d->uevent);
	d->idle = kata_idle_free(d->idle);
	for (size_t i = 0; i < d->n_plugins; i++)
		d->plugins[i] = kata_plugin_free(d->plugins[i]);
	d->n_plugins = 0;
	d->dra_side = kata_dra_free(d->dra_side);
	kata_resources_done(&d->res);
	kata_scan_done(&d->scan);
}

/* PLUGIN_API=dra: the API helper's exec and its network (dp/draside.h); else the core list. */
size_t kata_daemon_seccomp(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd)
{
	struct kata_daemon *d = userdata;
	*ret_exe_fd = -1;
	return d->dra_side ? dp_draside_seccomp_rules(kata_dra_exe_fd(d->dra_side), rules, max) : 0;
}
