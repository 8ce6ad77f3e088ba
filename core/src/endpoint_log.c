/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_log: the life-cycle log lines a daemon's main path wants (info and warn). Library
 * code logs only at debug; this table is the daemons' own, shared here so both log the same
 * lines, and a daemon opts in with dp_endpoint_set_events(ep, &dp_endpoint_log_events).
 */
#include "dp/endpoint.h"
#include "dp/log.h"

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

const dp_endpoint_events dp_endpoint_log_events = {
	.on_registered = on_registered,
	.on_register_failed = on_register_failed,
	.on_restart = on_restart,
};
