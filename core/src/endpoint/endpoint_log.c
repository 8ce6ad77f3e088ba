/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_log: the life-cycle log lines a daemon's main path wants (info and warn). Library
 * code logs only at debug; this table is the daemons' own, shared here so both log the same
 * lines, and a daemon opts in with dp_endpoint_set_events(ep, &dp_endpoint_log_events); the
 * health lines' wording is each endpoint's (dp_endpoint_config).
 */
#include <stdio.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/loop.h"
#include "endpoint_internal.h"

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

/* In the endpoint's configured wording (dp_endpoint_config): healthy at info, with the verdict's
 * reason under the detail's name (hyperlight's probe="KVM API version 12, VM created", proof
 * that the probe's ioctls ran); unhealthy at warn with the reason. */
static void on_health_changed(dp_endpoint *ep, bool healthy, const char *reason, void *userdata)
{
	char q[600], fields[300], n[32];
	const char *f = ep->healthy_fields, *d = ep->healthy_detail;

	if (!healthy) {
		dp_warn(ep->unhealthy_message, "resource=%s reason=%s", ep->resource,
			dp_logq(q, sizeof(q), reason));
		return;
	}
	if (!f) {
		snprintf(n, sizeof(n), "devices=%zu", ep->n_devices);
		f = n;
	}
	snprintf(fields, sizeof(fields), " %s%s%s%s", f, d ? " " : "", d ? d : "", d ? "=" : "");
	dp_info(ep->healthy_message, "resource=%s%s%s", ep->resource, fields,
		d ? dp_logq(q, sizeof(q), reason) : "");
}

/*
 * "request refused", rate-limited per kind (resource, method, status and the message's text up
 * to its first ':', e.g. "unknown device IDs for <resource>", which names no ID): the first of a
 * kind is logged at once, later ones at most once per REFUSED_PERIOD, on the next refusal after
 * it, with suppressed= the refusals of that kind not logged since the previous line. A client
 * sending bad requests in a loop costs one line a minute per kind. At most REFUSED_KINDS kinds
 * are told apart; any further ones share one more (logged as method=other).
 */
#define REFUSED_PERIOD (60ull * 1000000)
#define REFUSED_KINDS 64

struct refused_kind {
	char key[256]; /* "<resource> <method> <message up to ':'>" */
	int status;
	uint64_t last; /* when the last line was logged; 0: never */
	unsigned long long suppressed;
};

static struct refused_kind refused[REFUSED_KINDS], refused_other;

static struct refused_kind *refused_kind(const char *resource, const char *method, int status,
					 const char *message)
{
	char key[sizeof(refused[0].key)];
	snprintf(key, sizeof(key), "%s %s %.*s", resource, method, (int)strcspn(message, ":"), message);
	for (size_t i = 0; i < REFUSED_KINDS; i++) {
		struct refused_kind *k = &refused[i];
		if (k->key[0] == '\0') {
			memcpy(k->key, key, sizeof(key));
			k->status = status;
			return k;
		}
		if (k->status == status && strcmp(k->key, key) == 0)
			return k;
	}
	return NULL;
}

static void on_request_refused(dp_endpoint *ep, const char *method, int status, const char *message,
			       void *userdata)
{
	char qm[200], q[600];
	struct refused_kind *k = refused_kind(dp_endpoint_resource(ep), method, status, message);
	const char *shown = k ? dp_logq(qm, sizeof(qm), method) : "other";
	if (!k)
		k = &refused_other;
	uint64_t now = dp_now_usec();
	if (k->last != 0 && now - k->last < REFUSED_PERIOD) {
		k->suppressed++;
		return;
	}
	dp_warn("request refused", "resource=%s method=%s status=%s message=%s suppressed=%llu",
		dp_endpoint_resource(ep), shown,
		dp_grpc_status_name(status), dp_logq(q, sizeof(q), message), k->suppressed);
	k->last = now ? now : 1;
	k->suppressed = 0;
}

const dp_endpoint_events dp_endpoint_log_events = {
	.on_registered = on_registered,
	.on_register_failed = on_register_failed,
	.on_restart = on_restart,
	.on_stale_removed = on_stale_removed,
	.on_contended = on_contended,
	.on_request_refused = on_request_refused,
	.on_health_changed = on_health_changed,
};
