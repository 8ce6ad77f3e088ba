/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_log: the life-cycle log lines a daemon's main path wants (info and warn). Library
 * code logs only at debug; this table is the daemons' own, shared here so both log the same
 * lines, and a daemon opts in with dp_endpoint_set_events(ep, &dp_endpoint_log_events).
 */
#include "dp/endpoint.h"
#include "dp/log.h"

/* After failed attempts the line says so: the failure told before is cleared. */
static void on_registered(dp_endpoint *ep, void *userdata)
{
	unsigned failed = dp_endpoint_failures(ep);
	if (failed)
		dp_info("registered with kubelet", "resource=%s socket=%s devices=%zu recovered_after_failures=%u",
			dp_endpoint_resource(ep), dp_endpoint_socket(ep), dp_endpoint_devices(ep), failed);
	else
		dp_info("registered with kubelet", "resource=%s socket=%s devices=%zu", dp_endpoint_resource(ep),
			dp_endpoint_socket(ep), dp_endpoint_devices(ep));
}

/* Once per kind of reason, again every 5 minutes with the count while it lasts (endpoint.h). */
static void on_register_failed(dp_endpoint *ep, const char *reason, void *userdata)
{
	char q[600];
	dp_warn("registration failed, retrying", "resource=%s error=%s attempts=%u", dp_endpoint_resource(ep),
		dp_logq(q, sizeof(q), reason), dp_endpoint_failures(ep));
}

static void on_restart(dp_endpoint *ep, const char *why, void *userdata)
{
	char q[300];
	dp_info("re-registering", "resource=%s reason=%s", dp_endpoint_resource(ep), dp_logq(q, sizeof(q), why));
}

static void on_stale_removed(dp_endpoint *ep, const char *socket, void *userdata)
{
	char q[300];
	dp_info("removed stale socket", "resource=%s socket=%s", dp_endpoint_resource(ep),
		dp_logq(q, sizeof(q), socket));
}

static void on_contended(dp_endpoint *ep, uint64_t delay_usec, void *userdata)
{
	dp_warn("another plugin is registering this resource; backing off",
		"resource=%s first_delay_ms=%llu max_delay_s=60", dp_endpoint_resource(ep),
		(unsigned long long)(delay_usec / 1000));
}

const dp_endpoint_events dp_endpoint_log_events = {
	.on_registered = on_registered,
	.on_register_failed = on_register_failed,
	.on_restart = on_restart,
	.on_stale_removed = on_stale_removed,
	.on_contended = on_contended,
};
