/* SPDX-License-Identifier: Apache-2.0 */
/* daemon: hyperlight-device-plugin's configure, start, confine and stop callbacks (daemon.h). */
#include "daemon.h"

#include "dp/draside.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "confine.h"
#include "dp/endpoint.h"
#include "dp/helper.h"
#include "dp/log.h"
#include "label-node/label_node.h"

static_assert(HL_LABELS_COMPANIONS_MAX == HL_COMPANION_TYPES, "a node label per companion");

/* ---- the callbacks ---- */

/* PLUGIN_API=dra in the environment (the probe runs in the daemon's container). */
static bool dra_mode(const dp_daemon_args *a)
{
	const char *v = getenv("PLUGIN_API");
	return !dp_daemon_flag_given(a, HL_FLAG_DEVICE_ACCESS) && v && strcmp(v, "dra") == 0;
}

int hl_daemon_health_dir(const dp_daemon_args *a, char *buf, size_t size)
{
	if (!dra_mode(a))
		return 0;
	snprintf(buf, size, "/var/lib/kubelet/plugins/%s", HL_DRA_DRIVER);
	return 1;
}

/* The main plugin's readiness asks every resource it serves: the hypervisor's (names[0]) and each
 * companion's, from the environment as configure will read it (an invalid one: only names[0];
 * the daemon refuses to start anyway). */
static int companion_prefixes(char (*names)[DP_DAEMON_PREFIX_MAX], size_t max, size_t *ret_n)
{
	struct hl_companion c[HL_COMPANION_TYPES];
	size_t n = 0, k = 1;
	char err[256];

	if (hl_companions_load(c, &n, err, sizeof(err)) < 0)
		n = 0;
	for (size_t i = 0; i < n; i++) {
		if (k >= max)
			return -ENOSPC;
		int r = dp_socket_prefix(names[k++], DP_DAEMON_PREFIX_MAX, HL_SOCKET_TAG, c[i].resource);
		if (r < 0)
			return r;
	}
	*ret_n = k;
	return 0;
}

int hl_daemon_health_prefixes(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max,
			      size_t *ret_n)
{
	bool access = dp_daemon_flag_given(a, HL_FLAG_DEVICE_ACCESS);
	if (max < 1)
		return -ENOSPC;
	if (dra_mode(a)) {
		snprintf(names[0], DP_DAEMON_PREFIX_MAX, "%s", DP_DRASIDE_SOCKET_PREFIX);
		*ret_n = 1;
		return 0;
	}
	int r = dp_socket_prefix(names[0], DP_DAEMON_PREFIX_MAX, HL_SOCKET_TAG,
				 access ? HL_ACCESS_RESOURCE : HL_RESOURCE);
	if (r < 0 || access)
		return r < 0 ? r : (*ret_n = 1, 0);
	return companion_prefixes(names, max, ret_n);
}

/* The bootstrap pod has no device grant: it sees the host's nodes through HOST_DEVICE_DIR. */
static const char *device_dir(const struct hl_daemon *d)
{
	return d->device_access && d->cfg.host_device_dir[0] ? d->cfg.host_device_dir : "/dev";
}

static int find_device(struct hl_daemon *d)
{
	char err[512], q[600];
	const char *dir = device_dir(d);
	int r = hl_detect(dir, &d->dev, err, sizeof(err));
	if (r < 0) {
		dp_error("no usable hypervisor device", "error=%s", dp_logq(q, sizeof(q), err));
		return r;
	}
	dp_info("hypervisor device found", "hypervisor=%s path=%s node=%s major=%u minor=%u", d->dev.name,
		d->dev.path, d->dev.host_path, major(d->dev.rdev), minor(d->dev.rdev));
	return 0;
}

int hl_daemon_configure(const dp_daemon_args *a, void *userdata)
{
	struct hl_daemon *d = userdata;
	char err[512], q[600];
	d->device_access = dp_daemon_flag_given(a, HL_FLAG_DEVICE_ACCESS);
	if (hl_config_load(&d->cfg, err, sizeof(err)) < 0) {
		dp_error("invalid configuration", "error=%s", dp_logq(q, sizeof(q), err));
		return DP_EXIT_FAILURE;
	}
	return find_device(d) < 0 ? DP_EXIT_FAILURE : DP_EXIT_OK;
}

/* HL_LABEL_EXE in the directory of our own binary (dp_helper_sibling), else at the root. */
static const char *label_exe(char *buf, size_t size)
{
	return dp_helper_sibling(HL_LABEL_EXE, buf, size) == 0 ? buf : "/" HL_LABEL_EXE;
}

/* Every check's verdict: to the DRA side (its taint) and to the node labels. */
static void on_verdict(bool healthy, const char *reason, void *userdata)
{
	struct hl_daemon *d = userdata;
	if (d->dra)
		hl_dra_verdict(healthy, reason, d->dra);
	hl_labels_verdict(d->labels, HL_LABELS_HYPERVISOR, healthy, reason);
}

/* A companion's verdict: to its node label. */
static void on_companion_verdict(bool healthy, const char *reason, void *userdata)
{
	struct hl_companion_track *t = userdata;
	hl_labels_verdict(t->d->labels, t->which, healthy, reason);
}

/* Node labels: the hypervisor's, and one per companion named as its resource. */
static void start_labels(struct hl_daemon *d, dp_loop *loop)
{
	const char *keys[HL_COMPANION_TYPES];
	char exe[PATH_MAX];
	hl_labels_params lp = { .exe = label_exe(exe, sizeof(exe)) };
	int r;

	for (size_t i = 0; i < d->cfg.n_companions; i++)
		keys[i] = d->cfg.companions[i].resource;
	r = hl_labels_start(loop, d->dev.name, keys, d->cfg.n_companions, &lp, &d->labels);
	if (r < 0)
		dp_warn("node labels disabled", "error=%s", strerror(-r));
	hl_plugin_set_verdict_fn(d->plugin, on_verdict, d);
	for (size_t i = 0; i < d->cfg.n_companions; i++) {
		d->tracks[i] = (struct hl_companion_track){ .d = d, .which = HL_LABELS_HYPERVISOR + 1 + i };
		hl_plugin_set_verdict_fn(d->companions[i], on_companion_verdict, &d->tracks[i]);
	}
}

static int start_plugin(struct hl_daemon *d, dp_loop *loop)
{
	char exe[PATH_MAX];
	/* The spec's owner and mode too: what a workload's process needs to open the device. */
	dp_info("advertising",
		"resource=%s devices=%u host_device_dir=%s device_uid=%u device_gid=%u device_mode=%04o",
		HL_RESOURCE, d->cfg.device_count, d->cfg.host_device_dir[0] ? d->cfg.host_device_dir : "none",
		d->cfg.uid, d->cfg.gid, d->cfg.mode);
	int r = hl_plugin_new(loop, &d->cfg, &d->dev, &d->plugin);
	if (r < 0)
		return r;
	if (d->cfg.dra) {
		char why[256] = "";
		if ((r = hl_dra_new(loop, &d->cfg, &d->dev, label_exe(exe, sizeof(exe)), &d->dra, why, sizeof(why))) < 0) {
			snprintf(d->start_why, sizeof(d->start_why), "cannot serve through DRA as %s: %s", HL_DRA_DRIVER,
				 why[0] ? why : strerror(-r));
			return r;
		}
		dp_info("serving through DRA", "driver=" HL_DRA_DRIVER " device=%s " HL_DRA_CAPACITY "=%u",
			d->dev.name, d->cfg.device_count);
	}
	for (size_t i = 0; i < d->cfg.n_companions; i++) {
		const struct hl_companion *c = &d->cfg.companions[i];
		dp_info("advertising", "resource=%s devices=%u device=%s number=%u:%u", c->resource, c->count,
			c->type->path, c->type->major, c->type->minor);
		r = hl_plugin_new_companion(loop, &d->cfg, c, &d->companions[i]);
		if (r < 0) {
			snprintf(d->start_why, sizeof(d->start_why), "cannot serve %s: %s", c->resource, strerror(-r));
			return r;
		}
	}
	start_labels(d, loop);
	return 0;
}

int hl_daemon_start(dp_loop *loop, void *userdata)
{
	struct hl_daemon *d = userdata;
	int r = d->device_access ? hl_access_new(loop, &d->dev, device_dir(d), d->cfg.companions, d->cfg.n_companions, &d->access) : start_plugin(d, loop);
	if (r < 0 && d->start_why[0]) {
		char q[sizeof(d->start_why) + 16];
		dp_error("cannot start", "error=%s reason=%s", strerror(-r), dp_logq(q, sizeof(q), d->start_why));
	} else if (r < 0) {
		dp_error("cannot start", "error=%s", strerror(-r));
	}
	return r;
}

/* The allow-list (confine.c) and the exec of our own binary through the probe helper's fd
 * (device-access mode has no helper: no exec at all); with labelling on, the label helper's. */
size_t hl_daemon_seccomp(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd)
{
	struct hl_daemon *d = userdata;
	int fds[HL_COMPANION_TYPES];
	size_t n = d->device_access ? 0 : d->cfg.n_companions;
	for (size_t i = 0; i < n; i++)
		fds[i] = hl_plugin_exe_fd(d->companions[i]);
	*ret_exe_fd = d->device_access ? -1 : hl_plugin_exe_fd(d->plugin);
	return hl_seccomp_rules(!d->device_access, fds, n, hl_labels_exe_fd(d->labels), hl_dra_exe_fd(d->dra), rules, max);
}

void hl_daemon_stop(void *userdata)
{
	struct hl_daemon *d = userdata;
	d->labels = hl_labels_free(d->labels);
	d->dra = hl_dra_free(d->dra);
	d->plugin = hl_plugin_free(d->plugin);
	for (size_t i = 0; i < HL_COMPANION_TYPES; i++)
		d->companions[i] = hl_plugin_free(d->companions[i]);
	d->access = hl_access_free(d->access);
}
