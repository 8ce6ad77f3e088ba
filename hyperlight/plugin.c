/* SPDX-License-Identifier: Apache-2.0 */
#include "plugin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "dp/paths.h"
#include "probe.h"
#include "spec.h"

/* The probe's deadline; a killed helper gets as long again to be reaped before probes block. */
#define PROBE_DEADLINE_USEC (2 * DP_USEC_PER_SEC)



/* Log the verdict once per change, not at every periodic check. Healthy: reason is the probe's
 * own result ("KVM API version 12, VM created"), proof that its ioctls ran. */
static void report(struct hl_plugin *p, bool healthy, const char *reason)
{
	char q[600];
	if (p->reported && healthy == p->last_healthy && strcmp(reason, p->last_reason) == 0)
		return;
	if (healthy)
		dp_info("device usable", "resource=%s device=%s probe=%s", HL_RESOURCE, p->dev.path,
			dp_logq(q, sizeof(q), reason));
	else
		dp_warn("device unusable, advertising every device Unhealthy", "resource=%s reason=%s",
			HL_RESOURCE, dp_logq(q, sizeof(q), reason));
	p->reported = true;
	p->last_healthy = healthy;
	snprintf(p->last_reason, sizeof(p->last_reason), "%s", reason);
}

/* The checks done in the daemon itself: the injected node, then the CDI spec. */
static int precheck(struct hl_plugin *p, char *reason, size_t size)
{
	bool repaired = false;
	int r;

	hl_node_watch_ensure(&p->watch);
	hl_node_watch_ensure(&p->host_watch);
	r = hl_device_verify(&p->dev, reason, size);
	if (r < 0)
		return r;
	r = dp_cdi_file_sync(p->cdi, &repaired);
	if (r < 0) {
		snprintf(reason, size, "%s", dp_cdi_file_error(p->cdi));
		return r;
	}
	if (repaired)
		dp_info("CDI spec written", "path=%s", dp_cdi_file_path(p->cdi));
	return 0;
}

static void answer_allocate(struct hl_plugin *p, dp_alloc *a, bool healthy, const char *reason)
{
	char key[256], msg[600];

	if (!healthy) {
		snprintf(msg, sizeof(msg), "%s is not usable: %s", p->dev.path, reason);
		dp_alloc_finish(a, DP_GRPC_UNAVAILABLE, msg);
		return;
	}
	for (size_t c = 0; c < dp_alloc_containers(a); c++) {
		size_t n;
		char **ids = dp_alloc_ids(a, c, &n);
		/* cdi.k8s.io/<plugin>_<device>: unique per container, a valid annotation name. */
		snprintf(key, sizeof(key), "cdi.k8s.io/hyperlight.dev-hypervisor_%s", ids[0]);
		if (dp_alloc_add_cdi(a, c, p->cdi_name) < 0 ||
		    dp_alloc_add_annotation(a, c, key, p->cdi_name) < 0) {
			dp_alloc_finish(a, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	dp_alloc_finish(a, DP_GRPC_OK, NULL);
}

/* A check ended: every stream learns the verdict, the Allocate (if any) gets its answer. */
static void check_done(struct hl_plugin *p, dp_alloc *a, bool healthy, const char *reason)
{
	report(p, healthy, reason);
	dp_endpoint_set_health(p->ep, healthy, reason);
	if (a)
		answer_allocate(p, a, healthy, reason);
}

/* One requester of a check (the period, inotify, or an Allocate), listed until answered. */
struct hl_waiter {
	struct hl_waiter *next;
	struct hl_plugin *p;
	dp_alloc *a; /* NULL for checks nobody waits on */
};

static void waiter_unlink(struct hl_plugin *p, struct hl_waiter *w)
{
	for (struct hl_waiter **q = &p->waiters; *q; q = &(*q)->next)
		if (*q == w) {
			*q = w->next;
			return;
		}
}

static void submit(struct hl_plugin *p, struct hl_waiter *w);

static void on_probe_done(const dp_helper_result *res, void *userdata)
{
	struct hl_waiter *w = userdata;
	struct hl_plugin *p = w->p;
	const char *cdi = dp_cdi_file_error(p->cdi);
	waiter_unlink(p, w);
	if (res->run && res->run != p->probe_counted) { /* each requester of a run gets its result */
		p->probe_counted = res->run;
		dp_metrics_probe(res->ok, res->reason, res->run_usec);
	}
	/* A check that failed on the CDI spec while this probe ran (another writer took it over)
	 * wins over the probe's verdict: the spec's last sync failed. */
	if (res->ok && cdi[0])
		check_done(p, w->a, false, cdi);
	else
		check_done(p, w->a, res->ok, res->reason);
	free(w);
	if (p->waiters)
		return;
	/* the run is over: the requests that came after a node changed get a fresh probe */
	p->stale = false;
	while (p->queued) {
		w = p->queued;
		p->queued = w->next;
		submit(p, w);
	}
}

/* Join the probe in flight or start one; a failure answers w at once. */
static void submit(struct hl_plugin *p, struct hl_waiter *w)
{
	char reason[512];
	int r = dp_helper_request(p->probe, on_probe_done, w, NULL);

	if (r < 0) {
		snprintf(reason, sizeof(reason), "cannot start the probe helper: %s", strerror(-r));
		check_done(p, w->a, false, reason);
		free(w);
		return;
	}
	w->next = p->waiters;
	p->waiters = w;
}

/* Run one check; a probe already in flight is joined, not duplicated, unless a node changed
 * since it started (it may have seen the old node): then the check waits for the next probe. */
static void start_check(struct hl_plugin *p, dp_alloc *a)
{
	char reason[512];
	struct hl_waiter *w;
	int r = precheck(p, reason, sizeof(reason));

	if (r < 0) {
		check_done(p, a, false, reason);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		check_done(p, a, false, "cannot start the probe helper: out of memory");
		return;
	}
	w->p = p;
	w->a = a;
	if (p->stale && p->waiters) {
		w->next = p->queued;
		p->queued = w;
		return;
	}
	submit(p, w);
}

/* A watched node (the daemon's own or the host's) changed: a check at once, and a probe in
 * flight no longer answers the requests that follow. */
static void on_node_changed(void *userdata)
{
	struct hl_plugin *p = userdata;

	if (p->waiters)
		p->stale = true;
	dp_endpoint_request_check(p->ep);
}

/* Shutdown with a probe in flight: the helper drops its waiters silently; answer ours (and
 * the queued ones). */
static void finish_waiters(struct hl_plugin *p)
{
	struct hl_waiter **lists[] = { &p->waiters, &p->queued };

	for (size_t i = 0; i < DP_ELEMENTSOF(lists); i++)
		while (*lists[i]) {
			struct hl_waiter *w = *lists[i];
			*lists[i] = w->next;
			if (w->a)
				dp_alloc_finish(w->a, DP_GRPC_UNAVAILABLE, "plugin shutting down");
			free(w);
		}
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	struct hl_plugin *p = userdata;

	if (p->holding) {
		p->check_held = true;
		return;
	}
	start_check(p, NULL);
}

static void drv_allocate(dp_endpoint *ep, dp_alloc *a, void *userdata)
{
	start_check(userdata, a);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };

static void on_cdi_changed(dp_cdi_file *f, void *userdata)
{
	struct hl_plugin *p = userdata;
	dp_endpoint_request_check(p->ep);
}

/* ---------------------------------------------------------------- the first check's hold */

/* The first registration attempt ended (or the hold's bound passed): checks run from now on. */
static void release_hold(struct hl_plugin *p)
{
	if (!p->holding)
		return;
	p->holding = false;
	p->hold = dp_source_free(p->hold);
	if (p->check_held)
		dp_endpoint_request_check(p->ep);
	p->check_held = false;
}

static int on_hold_timeout(dp_source *s, void *userdata)
{
	dp_debug("first check no longer waits for registration", "resource=%s", HL_RESOURCE);
	release_hold(userdata);
	return 0;
}

static void on_registered(dp_endpoint *ep, void *userdata)
{
	dp_endpoint_log_events.on_registered(ep, NULL);
	release_hold(userdata);
}

static void on_register_failed(dp_endpoint *ep, const char *reason, void *userdata)
{
	dp_endpoint_log_events.on_register_failed(ep, reason, NULL);
	release_hold(userdata);
}

/* Hold the first check when a Register call is about to go out (kubelet.sock exists). */
static int start_hold(struct hl_plugin *p, const char *kubelet_dir)
{
	char sock[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(sock, sizeof(sock), "%s/%s", kubelet_dir, DP_KUBELET_SOCKET) >= sizeof(sock) ||
	    stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	p->holding = true;
	return dp_timer_add(p->loop, HL_FIRST_CHECK_HOLD_USEC, 0, on_hold_timeout, p, &p->hold);
}

static int make_devices(const struct hl_config *cfg, dp_device **ret, char **ret_ids)
{
	size_t n = cfg->device_count;
	dp_device *devs = calloc(n, sizeof(*devs));
	char *ids = calloc(n, 24);
	if (!devs || !ids) {
		free(devs);
		free(ids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		hl_device_id((uint32_t)i, ids + i * 24, 24);
		devs[i].id = ids + i * 24;
		devs[i].numa_node = -1;
	}
	*ret = devs;
	*ret_ids = ids;
	return 0;
}

static int setup_cdi(struct hl_plugin *p)
{
	char dir[PATH_MAX];
	_cleanup_(dp_buf_done) dp_buf spec = { 0 };
	int r = dp_path(dir, sizeof(dir), DP_CDI_DIR);
	if (r < 0)
		return r;
	hl_spec_render(&p->dev, p->cfg.uid, p->cfg.gid, &spec);
	if (spec.oom)
		return -ENOMEM;
	r = dp_cdi_file_new(p->loop, dir, HL_CDI_FILE, on_cdi_changed, p, &p->cdi);
	if (r < 0)
		return r;
	dp_cdi_file_set_fight_fn(p->cdi, dp_cdi_log_fight);
	return dp_cdi_file_set_content(p->cdi, spec.data, spec.len);
}

/* The helper child runs: probe <kind> <device> [<host node> <major> <minor>]. */
static int setup_probe(struct hl_plugin *p)
{
	char host[PATH_MAX], abs[PATH_MAX], maj[16], min[16];
	char *argv[8] = { (char *)HL_PROBE_HELPER, (char *)p->dev.name, p->dev.host_path, NULL };
	int r;

	if (p->cfg.host_device_dir[0]) {
		if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", p->cfg.host_device_dir, p->dev.name) >= sizeof(abs))
			return -ENAMETOOLONG;
		r = dp_path(host, sizeof(host), abs);
		if (r < 0)
			return r;
		r = dp_path(p->host_dir, sizeof(p->host_dir), p->cfg.host_device_dir);
		if (r < 0)
			return r;
		snprintf(maj, sizeof(maj), "%u", major(p->dev.rdev));
		snprintf(min, sizeof(min), "%u", minor(p->dev.rdev));
		argv[3] = host;
		argv[4] = maj;
		argv[5] = min;
		argv[6] = NULL;
	}
	return dp_helper_new(p->loop, NULL, argv, PROBE_DEADLINE_USEC, PROBE_DEADLINE_USEC, &p->probe);
}

int hl_plugin_start(struct hl_plugin *p, dp_loop *loop, const struct hl_config *cfg,
		    const struct hl_device *dev)
{
	char kdir[PATH_MAX];
	_cleanup_free_ dp_device *devs = NULL;
	_cleanup_free_ char *ids = NULL;
	int r;

	p->loop = loop;
	p->cfg = *cfg;
	p->dev = *dev;
	snprintf(p->cdi_name, sizeof(p->cdi_name), "%s=%s", HL_RESOURCE, dev->name);
	r = setup_cdi(p);
	if (r < 0)
		return r;
	r = setup_probe(p);
	if (r < 0)
		return r;
	r = make_devices(cfg, &devs, &ids);
	if (r < 0)
		return r;
	r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r < 0)
		/* devs is freed by its _cleanup_ attribute, which the analyzer does not model */
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	dp_endpoint_config ec = {
		.resource_name = HL_RESOURCE,
		.socket_prefix = HL_SOCKET_PREFIX,
		.devices = devs,
		.n_devices = cfg->device_count,
		.driver = &driver,
		.userdata = p,
	};
	r = dp_endpoint_new(loop, kdir, &ec, &p->ep);
	if (r < 0)
		return r;
	p->events = dp_endpoint_log_events;
	p->events.on_registered = on_registered;
	p->events.on_register_failed = on_register_failed;
	p->events.userdata = p;
	dp_endpoint_set_events(p->ep, &p->events);
	p->watch = (struct hl_node_watch){ .loop = loop, .ep = p->ep, .dir = p->dev.host_dir,
					   .name = p->dev.name, .changed = on_node_changed,
					   .userdata = p };
	hl_node_watch_ensure(&p->watch);
	if (p->host_dir[0]) { /* the host's node, checked by the probe: its changes are seen at once */
		p->host_watch = (struct hl_node_watch){ .loop = loop, .ep = p->ep, .dir = p->host_dir,
							.name = p->dev.name, .changed = on_node_changed,
							.userdata = p };
		hl_node_watch_ensure(&p->host_watch);
	}
	r = start_hold(p, kdir);
	if (r < 0)
		return r;
	return dp_endpoint_start(p->ep);
}

void hl_plugin_stop(struct hl_plugin *p)
{
	p->holding = false;
	p->hold = dp_source_free(p->hold);
	finish_waiters(p);
	p->probe = dp_helper_free(p->probe);
	p->ep = dp_endpoint_free(p->ep);
	p->cdi = dp_cdi_file_free(p->cdi);
	hl_node_watch_stop(&p->watch);
	hl_node_watch_stop(&p->host_watch);
}
