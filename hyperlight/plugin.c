/* SPDX-License-Identifier: Apache-2.0 */
#include "plugin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "spec.h"

#define DEV_MASK (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)

static void watch_device(struct hl_plugin *p);

/* Log the verdict once per change, not at every periodic check. */
static void report(struct hl_plugin *p, bool healthy, const char *reason)
{
	char q[600];
	if (p->reported && healthy == p->last_healthy && strcmp(reason, p->last_reason) == 0)
		return;
	if (healthy)
		dp_info("device usable", "resource=%s device=%s", HL_RESOURCE, p->dev.path);
	else
		dp_warn("device unusable, advertising every device Unhealthy", "resource=%s reason=%s",
			HL_RESOURCE, dp_logq(q, sizeof(q), reason));
	p->reported = true;
	p->last_healthy = healthy;
	snprintf(p->last_reason, sizeof(p->last_reason), "%s", reason);
}

/* 0 when usable; else -errno and the reason. */
static int run_check(struct hl_plugin *p, char *reason, size_t size)
{
	bool repaired = false;
	int r;

	watch_device(p);
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
	reason[0] = '\0';
	return 0;
}

static int check_and_report(struct hl_plugin *p, char *reason, size_t size)
{
	int r = run_check(p, reason, size);
	report(p, r == 0, reason);
	dp_endpoint_set_health(p->ep, r == 0, reason);
	return r;
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	char reason[512];
	(void)check_and_report(userdata, reason, sizeof(reason));
}

static void drv_allocate(dp_endpoint *ep, dp_alloc *a, void *userdata)
{
	struct hl_plugin *p = userdata;
	char reason[512], key[256], msg[600];

	if (check_and_report(p, reason, sizeof(reason)) < 0) {
		snprintf(msg, sizeof(msg), "%s is not usable: %s", p->dev.path, reason);
		dp_alloc_finish(a, DP_GRPC_UNAVAILABLE, msg);
		return;
	}
	for (size_t c = 0; c < dp_alloc_containers(a); c++) {
		size_t n;
		char **ids = dp_alloc_ids(a, c, &n);
		/* cdi.k8s.io/<plugin>_<device>: unique per container, valid annotation name. */
		snprintf(key, sizeof(key), "cdi.k8s.io/hyperlight.dev-hypervisor_%s", ids[0]);
		if (dp_alloc_add_cdi(a, c, p->cdi_name) < 0 ||
		    dp_alloc_add_annotation(a, c, key, p->cdi_name) < 0) {
			dp_alloc_finish(a, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	dp_alloc_finish(a, DP_GRPC_OK, NULL);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };

static int on_dev_event(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	struct hl_plugin *p = userdata;
	const char *base = strrchr(p->dev.path, '/') + 1;
	if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
		p->dev_watch = dp_source_free(p->dev_watch);
		dp_endpoint_request_check(p->ep);
	} else if (ev->len && strcmp(ev->name, base) == 0) {
		dp_endpoint_request_check(p->ep);
	}
	return 0;
}

static void watch_device(struct hl_plugin *p)
{
	if (p->dev_watch)
		return;
	int r = dp_inotify_add(p->loop, p->dev.host_dir, DEV_MASK | IN_ONLYDIR, on_dev_event, p, &p->dev_watch);
	if (r < 0)
		dp_debug("cannot watch device directory", "dir=%s error=%d", p->dev.host_dir, r);
}

static void on_cdi_changed(dp_cdi_file *f, void *userdata)
{
	struct hl_plugin *p = userdata;
	dp_endpoint_request_check(p->ep);
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

static void on_registered(dp_endpoint *ep, void *userdata)
{
	dp_info("registered with kubelet", "resource=%s socket=%s devices=%zu", dp_endpoint_resource(ep),
		dp_endpoint_socket(ep), dp_endpoint_devices(ep));
}

static void on_register_failed(dp_endpoint *ep, const char *reason, void *userdata)
{
	char q[600];
	dp_warn("registration failed, retrying", "resource=%s error=%s", dp_endpoint_resource(ep),
		dp_logq(q, sizeof(q), reason));
}

static void on_restart(dp_endpoint *ep, const char *why, void *userdata)
{
	char q[300];
	dp_info("re-registering", "resource=%s reason=%s", dp_endpoint_resource(ep), dp_logq(q, sizeof(q), why));
}

static const dp_endpoint_events events = {
	.on_registered = on_registered,
	.on_register_failed = on_register_failed,
	.on_restart = on_restart,
};

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
	return dp_cdi_file_set_content(p->cdi, spec.data, spec.len);
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
	r = make_devices(cfg, &devs, &ids);
	if (r < 0)
		return r;
	r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r < 0)
		return r;
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
	dp_endpoint_set_events(p->ep, &events);
	watch_device(p);
	return dp_endpoint_start(p->ep);
}

void hl_plugin_stop(struct hl_plugin *p)
{
	p->ep = dp_endpoint_free(p->ep);
	p->cdi = dp_cdi_file_free(p->cdi);
	p->dev_watch = dp_source_free(p->dev_watch);
}
