/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_state: what others read of an endpoint (its accessors, the health service's status)
 * and what it publishes as metrics (dp/metrics.h): devices advertised and healthy, registered,
 * health transitions and registration attempts.
 */
#include <errno.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/health.h"
#include "dp/metrics.h"
#include "endpoint_internal.h"

void dp_ep_metrics_state(const dp_endpoint *ep)
{
	dp_metrics_devices(ep->resource, ep->n_devices, dp_endpoint_healthy(ep) ? ep->n_devices - ep->n_down : 0);
	dp_metrics_registered(ep->resource, dp_endpoint_registered(ep));
}

void dp_ep_metrics_health(const dp_endpoint *ep, bool first)
{
	dp_ep_metrics_state(ep);
	if (!first || ep->healthy) /* devices start Unhealthy: a first failed check changes nothing */
		dp_metrics_health_transition(ep->resource, ep->healthy, ep->reason);
}

void dp_ep_metrics_registration(const dp_endpoint *ep, enum ep_fail kind)
{
	static const char *const results[] = {
		[EP_FAIL_NONE] = "ok",
		[EP_FAIL_SOCKET] = "socket",
		[EP_FAIL_KUBELET] = "kubelet_missing",
		[EP_FAIL_CONNECT] = "connect_refused",
		[EP_FAIL_DIAL_BACK] = "dial_back_failed",
		[EP_FAIL_TIMEOUT] = "timeout",
		[EP_FAIL_REFUSED] = "refused",
		[EP_FAIL_CUT] = "cut_off",
	};
	dp_metrics_registration(ep->resource, results[kind]);
	dp_ep_metrics_state(ep);
}

int dp_endpoint_health_status(const char *service, void *userdata)
{
	dp_endpoint *ep = userdata;
	if (service[0] == '\0')
		return DP_HEALTH_SERVING;
	if (strcmp(service, DP_HEALTH_READINESS) == 0)
		return dp_endpoint_ready(ep) ? DP_HEALTH_SERVING : DP_HEALTH_NOT_SERVING;
	return -ENOENT;
}

bool dp_endpoint_healthy(const dp_endpoint *ep) { return ep->checked && ep->healthy; }
bool dp_endpoint_registered(const dp_endpoint *ep) { return ep->state == EP_REGISTERED; }
bool dp_endpoint_ready(const dp_endpoint *ep)
{
	return dp_endpoint_registered(ep) && ep->n_streams > 0 && dp_endpoint_healthy(ep);
}
const char *dp_endpoint_resource(const dp_endpoint *ep) { return ep->resource; }
const char *dp_endpoint_socket(const dp_endpoint *ep)
{
	return ep->socket_name[0] ? ep->socket_name : NULL;
}
const char *dp_endpoint_reason(const dp_endpoint *ep)
{
	return ep->healthy ? ep->reason_register : ep->reason;
}
size_t dp_endpoint_devices(const dp_endpoint *ep) { return ep->n_devices; }
unsigned dp_endpoint_failures(const dp_endpoint *ep) { return ep->failures; }
