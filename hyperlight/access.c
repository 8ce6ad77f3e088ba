/* SPDX-License-Identifier: Apache-2.0 */
/* access: the --device-access bootstrap plugin, one device granting the node (access.h). */
#include "access.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"

struct hl_access {
	dp_loop *loop;
	struct hl_device dev;
	char health_fields[PATH_MAX + 16]; /* "device=/dev/kvm" on the "device present" line */
	dp_endpoint *ep;
	struct hl_node_watch watch;
	struct hl_device companions[HL_COMPANION_TYPES]; /* found where dev was */
	size_t n_companions;
};

/* The verdict, logged once per change by the endpoint ("device present" / "device gone"). */
static bool node_present(struct hl_access *a)
{
	char reason[512];
	hl_node_watch_ensure(&a->watch);
	bool ok = hl_device_verify(&a->dev, reason, sizeof(reason)) == 0;
	dp_endpoint_set_health(a->ep, ok, ok ? NULL : reason);
	return ok;
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	(void)node_present(userdata);
}

/* Each companion whose node is there now, to every container; false on out of memory. */
static bool add_companions(struct hl_access *a, dp_alloc *al)
{
	char reason[512], q[600];

	for (size_t i = 0; i < a->n_companions; i++) {
		const struct hl_device *d = &a->companions[i];
		if (hl_device_verify(d, reason, sizeof(reason)) < 0) {
			dp_warn("companion not granted", "device=%s reason=%s", d->path, dp_logq(q, sizeof(q), reason));
			continue;
		}
		for (size_t c = 0; c < dp_alloc_containers(al); c++)
			if (dp_alloc_add_device(al, c, d->path, d->path, "rw") < 0)
				return false;
	}
	return true;
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
	if (!add_companions(a, al)) {
		dp_alloc_finish(al, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	dp_alloc_finish(al, DP_GRPC_OK, NULL);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };

hl_access *hl_access_free(hl_access *a)
{
	if (!a)
		return NULL;
	hl_node_watch_stop(&a->watch);
	a->ep = dp_endpoint_free(a->ep);
	return (free(a), NULL);
}

static int setup_endpoint(struct hl_access *a)
{
	char kdir[PATH_MAX], prefix[DP_SOCKET_PREFIX_MAX + 1];
	const dp_device devices[] = { { HL_ACCESS_DEVICE_ID, -1 } };
	int r = dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR);
	if (r >= 0)
		r = dp_socket_prefix(prefix, sizeof(prefix), HL_SOCKET_TAG, HL_ACCESS_RESOURCE);
	if (r < 0)
		return r;
	snprintf(a->health_fields, sizeof(a->health_fields), "device=%s", a->dev.path);
	dp_endpoint_config ec = {
		.resource_name = HL_ACCESS_RESOURCE,
		.socket_prefix = prefix,
		.devices = devices,
		.n_devices = 1,
		.healthy_message = "device present",
		.unhealthy_message = "device gone",
		.healthy_fields = a->health_fields,
		.events = &dp_endpoint_log_events,
		.driver = &driver,
		.userdata = a,
	};
	return dp_endpoint_new(a->loop, kdir, &ec, &a->ep);
}

/* The companions' nodes under dir (HOST_DEVICE_DIR or /dev: where the hypervisor's was found). */
static int find_companions(struct hl_access *a, const char *dir, const struct hl_companion *c, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int r = hl_companion_device(c[i].type, dir, &a->companions[i]);
		if (r < 0)
			return r;
	}
	a->n_companions = n;
	return 0;
}

int hl_access_new(dp_loop *loop, const struct hl_device *dev, const char *dir,
		  const struct hl_companion *companions, size_t n_companions, hl_access **ret)
{
	_cleanup_(hl_access_freep) hl_access *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->loop = loop;
	a->dev = *dev;
	int r = find_companions(a, dir, companions, n_companions);
	if (r >= 0)
		r = setup_endpoint(a);
	if (r >= 0) {
		a->watch = (struct hl_node_watch){ .loop = loop, .ep = a->ep, .dir = a->dev.host_dir,
						   .name = a->dev.node };
		hl_node_watch_ensure(&a->watch);
		r = dp_endpoint_start(a->ep);
	}
	if (r < 0)
		// cppcheck-suppress memleak ; a is freed by its _cleanup_ attribute, which cppcheck does not model
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	*ret = TAKE_PTR(a);
	return 0;
}
