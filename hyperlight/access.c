/* SPDX-License-Identifier: Apache-2.0 */
#include "access.h"

#include <stdio.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "plugin.h"

static bool node_present(struct hl_access *a)
{
	char reason[512], q[600];
	hl_node_watch_ensure(&a->watch);
	bool ok = hl_device_verify(&a->dev, reason, sizeof(reason)) == 0;
	if (!a->reported || ok != a->last_healthy) {
		if (ok)
			dp_info("device present", "resource=%s device=%s", HL_ACCESS_RESOURCE, a->dev.path);
		else
			dp_warn("device gone", "resource=%s reason=%s", HL_ACCESS_RESOURCE,
				dp_logq(q, sizeof(q), reason));
	}
	a->reported = true;
	a->last_healthy = ok;
	dp_endpoint_set_health(a->ep, ok, ok ? NULL : reason);
	return ok;
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	(void)node_present(userdata);
}

/* Only the device grant: the runtime adds the node and its cgroup permission, nothing else. */
static void drv_allocate(dp_endpoint *ep, dp_alloc *al, void *userdata)
{
	struct hl_access *a = userdata;
	char msg[600];

	if (!node_present(a)) {
		snprintf(msg, sizeof(msg), "%s is not present: %s", a->dev.path, dp_endpoint_reason(a->ep));
		dp_alloc_finish(al, DP_GRPC_UNAVAILABLE, msg);
		return;
	}
	for (size_t c = 0; c < dp_alloc_containers(al); c++) {
		if (dp_alloc_add_device(al, c, a->dev.path, a->dev.path, "rw") < 0) {
			dp_alloc_finish(al, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
	}
	dp_alloc_finish(al, DP_GRPC_OK, NULL);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };

int hl_access_start(struct hl_access *a, dp_loop *loop, const struct hl_device *dev)
{
	char kdir[PATH_MAX];
	const dp_device devices[] = { { HL_ACCESS_DEVICE_ID, -1 } };
	int r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r < 0)
		return r;
	a->loop = loop;
	a->dev = *dev;
	dp_endpoint_config ec = {
		.resource_name = HL_ACCESS_RESOURCE,
		.socket_prefix = HL_ACCESS_SOCKET_PREFIX,
		.devices = devices,
		.n_devices = 1,
		.driver = &driver,
		.userdata = a,
	};
	r = dp_endpoint_new(loop, kdir, &ec, &a->ep);
	if (r < 0)
		return r;
	dp_endpoint_set_events(a->ep, &dp_endpoint_log_events);
	a->watch = (struct hl_node_watch){ .loop = loop, .ep = a->ep, .dir = a->dev.host_dir,
					   .name = a->dev.name };
	hl_node_watch_ensure(&a->watch);
	return dp_endpoint_start(a->ep);
}

void hl_access_stop(struct hl_access *a)
{
	hl_node_watch_stop(&a->watch);
	a->ep = dp_endpoint_free(a->ep);
}
