/* SPDX-License-Identifier: Apache-2.0 */
/* plugin: the hyperlight.dev/hypervisor driver: checks, probe runs and Allocate (plugin.h). */
#include "plugin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "dp/cdi.h"
#include "dp/endpoint.h"
#include "dp/fdreserve.h"
#include "dp/grpc.h"
#include "dp/helper.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "dp/paths.h"
#include "probe.h"
#include "spec.h"

/* The probe's deadline; a killed helper gets as long again to be reaped before probes block. */
#define PROBE_DEADLINE_USEC (2 * DP_USEC_PER_SEC)
/* The first check's wait for the first registration attempt (plugin.h). */
#define FIRST_CHECK_HOLD_USEC (1 * DP_USEC_PER_SEC)
/* How long the last verdict stands while checks cannot run (the daemon out of fds, memory or
 * processes): two periodic checks. After it, a check that cannot run marks the devices
 * Unhealthy with "the check could not run: ...". */
#define NOT_RUN_GRACE_USEC (60 * DP_USEC_PER_SEC)
/* The longest ID prefix: "vhost-vsock-" (companion.h), "hyperlight-". */
#define ID_PREFIX_MAX 16

/* What differs between the hypervisor's endpoint and a companion's. */
struct hl_resource {
	char name[HL_COMPANION_RESOURCE_SIZE];	/* "hyperlight.dev/hypervisor", "hyperlight.dev/tun" */
	char plugin_name[HL_COMPANION_RESOURCE_SIZE]; /* its annotation part: "hyperlight.dev-tun" */
	char id_prefix[ID_PREFIX_MAX];		/* "hyperlight-", "tun-" */
	uint32_t count;
	const struct hl_companion *companion;	/* NULL: the hypervisor */
};

struct hl_plugin {
	dp_loop *loop;
	struct hl_config cfg;
	struct hl_device dev;
	struct hl_resource res;
	struct hl_companion companion; /* a companion's (res.companion points here) */
	char health_fields[PATH_MAX + 16]; /* "device=/dev/kvm" on the "device usable" line */
	dp_endpoint *ep;
	dp_cdi_file *cdi;
	struct hl_node_watch watch;      /* the node in the daemon's own /dev */
	char host_dir[PATH_MAX];         /* HOST_DEVICE_DIR resolved, "" without it */
	char host_node[PATH_MAX];        /* the host's node there, "" without it */
	struct hl_node_watch host_watch; /* the host's node there (with HOST_DEVICE_DIR) */
	dp_helper *probe;
	struct hl_waiter *waiters; /* requesters of the probe in flight */
	struct hl_waiter *queued;  /* requesters of the next probe (stale: a node changed) */
	bool stale;                /* a node changed while the probe in flight ran */
	unsigned probe_counted;    /* the last probe run counted in the metrics */
	/* The last verdict (a check that ran) and the episode of checks that could not run. */
	bool has_verdict, verdict_ok;
	char verdict_reason[DP_HELPER_REASON_MAX + 64];
	uint64_t not_run_since;  /* the episode's first check that could not run; 0: none */
	unsigned not_run_count;  /* checks that could not run in the episode */
	hl_plugin_verdict_fn on_verdict;
	void *verdict_userdata;
};

/* A companion's node missing in this container while the host has it (its number, not a
 * symlink): the pod's device grant lacks it, which only a new pod mends. reason says so. */
static void grant_hint(const struct hl_plugin *p, int r, char *reason, size_t size)
{
	struct hl_device host = p->dev;
	char ignored[PATH_MAX + 64];

	if (!p->dev.fixed || r != -ENOENT || !p->host_node[0])
		return;
	snprintf(host.host_path, sizeof(host.host_path), "%s", p->host_node);
	if (hl_device_verify(&host, ignored, sizeof(ignored)) == 0)
		snprintf(reason, size,
			 "%s is not in this container but the host has it: the pod's device grant lacks it "
			 "(the pod was made before the node was there, or granted by a bootstrap plugin without "
			 "COMPANIONS): recreate the pod",
			 p->dev.path);
}

/* The checks done in the daemon itself: the injected node, then the CDI spec. */
static int precheck(struct hl_plugin *p, char *reason, size_t size)
{
	bool repaired = false;
	int r;

	hl_node_watch_ensure(&p->watch);
	hl_node_watch_ensure(&p->host_watch);
	r = hl_device_verify(&p->dev, reason, size);
	if (r < 0) {
		grant_hint(p, r, reason, size);
		return r;
	}
	r = dp_cdi_file_sync(p->cdi, &repaired);
	if (r < 0) {
		snprintf(reason, size, "%s", dp_cdi_file_error(p->cdi));
		return r;
	}
	if (repaired)
		dp_info("CDI spec written", "path=%s", dp_cdi_file_path(p->cdi));
	return 0;
}

/* Every requested ID is the one CDI device "hyperlight.dev/hypervisor=<kvm|mshv>" (a
 * companion's: "hyperlight.dev/tun=tun"). */
static void answer_allocate(struct hl_plugin *p, dp_alloc *a, bool healthy, const char *reason)
{
	char msg[600];

	if (!healthy) {
		snprintf(msg, sizeof(msg), "%s is not usable: %s", p->dev.path, reason);
		dp_alloc_finish(a, DP_GRPC_UNAVAILABLE, msg);
	} else if (dp_alloc_add_cdi_answer(a, p->res.plugin_name, p->res.name, p->dev.name) < 0) {
		dp_alloc_finish(a, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	} else {
		dp_alloc_finish(a, DP_GRPC_OK, NULL);
	}
}

/* A check ended: every stream learns the verdict (logged once per change by the endpoint;
 * healthy, reason is the probe's own result, proof that its ioctls ran), the Allocate (if any)
 * gets its answer. */
static void check_done(struct hl_plugin *p, dp_alloc *a, bool healthy, const char *reason)
{
	dp_endpoint_set_health(p->ep, healthy, reason);
	if (p->on_verdict)
		p->on_verdict(healthy, reason, p->verdict_userdata);
	if (a)
		answer_allocate(p, a, healthy, reason);
}

/* A check ran to its verdict: an episode of checks that could not run is over. */
static void verdict(struct hl_plugin *p, dp_alloc *a, bool healthy, const char *reason)
{
	if (p->not_run_since)
		dp_info("device check runs again", "resource=%s not_run=%u after_ms=%llu", p->res.name,
			p->not_run_count, (unsigned long long)((dp_now_usec() - p->not_run_since) / DP_USEC_PER_MSEC));
	p->not_run_since = 0;
	p->not_run_count = 0;
	p->has_verdict = true;
	p->verdict_ok = healthy;
	snprintf(p->verdict_reason, sizeof(p->verdict_reason), "%s", reason);
	check_done(p, a, healthy, reason);
}

/* Errors of the daemon itself (out of fds, memory, processes), not of the device. */
static bool daemon_failure(int r)
{
	return r == -EMFILE || r == -ENFILE || r == -ENOMEM || r == -EAGAIN || r == -ENOBUFS;
}

/* The check could not run (why): no verdict on the device. Logged at error once per episode;
 * the last verdict stands for NOT_RUN_GRACE_USEC, then (or without any verdict yet) the devices
 * are Unhealthy with "the check could not run: <why>". */
static void not_run(struct hl_plugin *p, dp_alloc *a, const char *why)
{
	char reason[DP_HELPER_REASON_MAX + 64], q[DP_HELPER_REASON_MAX + 64];
	uint64_t now = dp_now_usec();

	if (!p->not_run_since) {
		p->not_run_since = now;
		dp_error("device check could not run", "resource=%s error=%s verdict=%s", p->res.name,
			 dp_logq(q, sizeof(q), why),
			 !p->has_verdict ? "none" : p->verdict_ok ? "healthy" : "unhealthy");
	}
	p->not_run_count++;
	snprintf(reason, sizeof(reason), "the check could not run: %s", why);
	if (!p->has_verdict || now - p->not_run_since >= NOT_RUN_GRACE_USEC)
		check_done(p, a, false, reason);
	else /* the verdict told again: no change, no line; the endpoint arms its next check */
		check_done(p, a, p->verdict_ok, p->verdict_reason);
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
	/* each requester of a run gets its result; the probe metrics are the hypervisor's (a
	 * companion's runs show in its resource's health series) */
	if (res->run && res->run != p->probe_counted && !p->res.companion) {
		p->probe_counted = res->run;
		dp_metrics_probe(res->ok, res->reason, res->run_usec);
	}
	/* A check that failed on the CDI spec while this probe ran (another writer took it over)
	 * wins over the probe's verdict: the spec's last sync failed. */
	if (res->start_error)
		not_run(p, w->a, res->reason);
	else if (res->ok && cdi[0])
		verdict(p, w->a, false, cdi);
	else
		verdict(p, w->a, res->ok, res->reason);
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
		not_run(p, w->a, reason);
		free(w);
		return;
	}
	w->next = p->waiters;
	p->waiters = w;
}

/* Run one check; a probe already in flight is joined, not duplicated, unless a node changed
 * since it started (it may have seen the old node): then the check waits for the next probe. */
static void start_check_fds(struct hl_plugin *p, dp_alloc *a)
{
	char reason[512];
	struct hl_waiter *w;
	int r = precheck(p, reason, sizeof(reason));

	if (r < 0) {
		if (daemon_failure(r))
			not_run(p, a, reason);
		else
			verdict(p, a, false, reason);
		return;
	}
	w = calloc(1, sizeof(*w));
	if (!w) {
		not_run(p, a, "cannot start the probe helper: out of memory");
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

/* start_check_fds with the fd reserve released: the CDI sync and the probe's start get the fds
 * that clients holding connections cannot take (dp/fdreserve.h). */
static void start_check(struct hl_plugin *p, dp_alloc *a)
{
	dp_fd_reserve_release();
	start_check_fds(p, a);
	(void)dp_fd_reserve_refill();
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
	start_check(userdata, NULL);
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

#define ID_SIZE (ID_PREFIX_MAX + 12)

static int make_devices(const struct hl_resource *res, dp_device **ret, char **ret_ids)
{
	size_t n = res->count;
	dp_device *devs = calloc(n, sizeof(*devs));
	char *ids = calloc(n, ID_SIZE);
	if (!devs || !ids) {
		free(devs);
		free(ids);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		snprintf(ids + i * ID_SIZE, ID_SIZE, "%s%zu", res->id_prefix, i);
		devs[i].id = ids + i * ID_SIZE;
		devs[i].numa_node = -1;
	}
	*ret = devs;
	*ret_ids = ids;
	return 0;
}

static int setup_cdi(struct hl_plugin *p)
{
	char dir[PATH_MAX], file[NAME_MAX + 1];
	_cleanup_(dp_buf_done) dp_buf spec = { 0 };
	int r = dp_path(dir, sizeof(dir), DP_CDI_DIR);
	if (r < 0)
		return r;
	if (p->res.companion) {
		hl_spec_render_companion(p->res.companion, p->cfg.uid, p->cfg.gid, p->cfg.mode, &spec);
		hl_companion_cdi_file(p->res.companion, file, sizeof(file));
	} else {
		hl_spec_render(&p->dev, p->cfg.uid, p->cfg.gid, p->cfg.mode, &spec);
		snprintf(file, sizeof(file), "%s", HL_CDI_FILE);
	}
	return dp_cdi_file_new_owned(p->loop, dir, file, &spec, on_cdi_changed, p, &p->cdi);
}

/* The helper child runs: probe <kind> <device> [<host node> <major> <minor>]. The host node is
 * the device's path under HOST_DEVICE_DIR ("/dev/net/tun": <dir>/net/tun). */
static int setup_probe(struct hl_plugin *p)
{
	char host[PATH_MAX], abs[PATH_MAX], maj[16], min[16];
	char *argv[8] = { (char *)HL_PROBE_HELPER, (char *)p->dev.name, p->dev.host_path, NULL };
	const char *rel = p->dev.path + strlen("/dev/");
	int r;

	if (p->cfg.host_device_dir[0]) {
		if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", p->cfg.host_device_dir, rel) >= sizeof(abs))
			return -ENAMETOOLONG;
		r = dp_path(host, sizeof(host), abs);
		if (r < 0)
			return r;
		snprintf(p->host_node, sizeof(p->host_node), "%s", host);
		/* the host node's directory: the resolved path up to its last '/' */
		snprintf(p->host_dir, sizeof(p->host_dir), "%.*s", (int)(strrchr(host, '/') - host), host);
		snprintf(maj, sizeof(maj), "%u", major(p->dev.rdev));
		snprintf(min, sizeof(min), "%u", minor(p->dev.rdev));
		argv[3] = host;
		argv[4] = maj;
		argv[5] = min;
		argv[6] = NULL;
	}
	return dp_helper_new(p->loop, NULL, argv, PROBE_DEADLINE_USEC, PROBE_DEADLINE_USEC, &p->probe);
}

static int setup_endpoint(struct hl_plugin *p)
{
	char kdir[PATH_MAX], prefix[DP_SOCKET_PREFIX_MAX + 1];
	_cleanup_free_ dp_device *devs = NULL;
	_cleanup_free_ char *ids = NULL;
	int r = make_devices(&p->res, &devs, &ids);
	if (r < 0)
		return r;
	r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r >= 0)
		r = dp_socket_prefix(prefix, sizeof(prefix), HL_SOCKET_TAG, p->res.name);
	if (r < 0)
		/* devs is freed by its _cleanup_ attribute, which the analyzer does not model */
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	snprintf(p->health_fields, sizeof(p->health_fields), "device=%s", p->dev.path);
	dp_endpoint_config ec = {
		.resource_name = p->res.name,
		.socket_prefix = prefix,
		.devices = devs,
		.n_devices = p->res.count,
		.first_check_hold_usec = FIRST_CHECK_HOLD_USEC,
		.no_kubelet = p->cfg.dra && !p->res.companion,
		.healthy_message = "device usable",
		.unhealthy_message = "device unusable, advertising every device Unhealthy",
		.healthy_fields = p->health_fields,
		.healthy_detail = "probe",
		.events = &dp_endpoint_log_events,
		.driver = &driver,
		.userdata = p,
	};
	return dp_endpoint_new(p->loop, kdir, &ec, &p->ep);
}

/* The node in the daemon's own /dev, and with HOST_DEVICE_DIR the host's (checked by the probe):
 * their changes are seen at once. */
static void setup_watches(struct hl_plugin *p)
{
	struct hl_node_watch w = { .loop = p->loop, .ep = p->ep, .dir = p->dev.host_dir,
				   .name = p->dev.node, .changed = on_node_changed, .userdata = p };
	p->watch = w;
	hl_node_watch_ensure(&p->watch);
	if (!p->host_dir[0])
		return;
	w.dir = p->host_dir;
	p->host_watch = w;
	hl_node_watch_ensure(&p->host_watch);
}

static void stop_watches(struct hl_plugin *p)
{
	hl_node_watch_stop(&p->watch);
	hl_node_watch_stop(&p->host_watch);
}

static int plugin_new(dp_loop *loop, const struct hl_config *cfg, const struct hl_device *dev,
		      const struct hl_companion *c, hl_plugin **ret)
{
	_cleanup_(hl_plugin_freep) hl_plugin *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->cfg = *cfg;
	p->dev = *dev;
	if (c) {
		p->companion = *c;
		p->res.companion = &p->companion;
		snprintf(p->res.name, sizeof(p->res.name), "%s", c->resource);
		snprintf(p->res.id_prefix, sizeof(p->res.id_prefix), "%s", c->type->id_prefix);
		p->res.count = c->count;
	} else {
		snprintf(p->res.name, sizeof(p->res.name), "%s", HL_RESOURCE);
		snprintf(p->res.id_prefix, sizeof(p->res.id_prefix), "%s", HL_ID_PREFIX);
		p->res.count = cfg->device_count;
	}
	/* "hyperlight.dev/hypervisor" as an annotation name's part: cdi.k8s.io/<this>_<device> */
	snprintf(p->res.plugin_name, sizeof(p->res.plugin_name), "%s", p->res.name);
	*strchr(p->res.plugin_name, '/') = '-';
	int r = setup_cdi(p);
	if (r >= 0)
		r = setup_probe(p);
	if (r >= 0)
		r = setup_endpoint(p);
	if (r < 0)
		// cppcheck-suppress memleak ; p is freed by its _cleanup_ attribute, which cppcheck does not model
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	setup_watches(p);
	r = dp_endpoint_start(p->ep);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(p);
	return 0;
}

int hl_plugin_new(dp_loop *loop, const struct hl_config *cfg, const struct hl_device *dev, hl_plugin **ret)
{
	return plugin_new(loop, cfg, dev, NULL, ret);
}

int hl_plugin_new_companion(dp_loop *loop, const struct hl_config *cfg, const struct hl_companion *c,
			    hl_plugin **ret)
{
	struct hl_device dev;
	int r = hl_companion_device(c->type, "/dev", &dev);
	if (r < 0)
		return r;
	return plugin_new(loop, cfg, &dev, c, ret);
}

hl_plugin *hl_plugin_free(hl_plugin *p)
{
	if (!p)
		return NULL;
	finish_waiters(p);
	stop_watches(p);
	p->probe = dp_helper_free(p->probe);
	p->ep = dp_endpoint_free(p->ep);
	p->cdi = dp_cdi_file_free(p->cdi);
	return (free(p), NULL);
}

void hl_plugin_set_verdict_fn(hl_plugin *p, hl_plugin_verdict_fn fn, void *userdata)
{
	p->on_verdict = fn;
	p->verdict_userdata = userdata;
}

int hl_plugin_exe_fd(const hl_plugin *p)
{
	return dp_helper_exe_fd(p->probe);
}
