/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_restart: when the registration starts over (a fresh server, Register again): a
 * restart scheduled absorbs the causes that come before it runs; kubelet.sock created again and
 * again without a registration in between is spaced; streams that keep ending soon after
 * registering (another plugin registers the same resource) back off.
 */
#include <stdio.h>

#include "dp/log.h"
#include "endpoint_internal.h"

#define CONTEND_MIN_USEC (100 * DP_USEC_PER_MSEC)
#define CONTEND_MAX_USEC (60 * DP_USEC_PER_SEC)
#define STABLE_USEC (30 * DP_USEC_PER_SEC)
#define CHURN_MIN_USEC (100 * DP_USEC_PER_MSEC)
#define CHURN_MAX_USEC (5 * DP_USEC_PER_SEC)

/* Any new schedule replaces the restart scheduled before. */
void dp_ep_schedule_register(dp_endpoint *ep, uint64_t usec)
{
	ep->restart_pending = false;
	if (usec == 0)
		(void)dp_timer_set_asap(ep->register_timer);
	else
		(void)dp_timer_set(ep->register_timer, usec, 0);
}

/*
 * Restart in usec: stop serving and register a fresh server then. A restart already scheduled
 * no later than that does the same work: this one joins it (not told again), so the causes
 * one kubelet restart raises together (its stream ends, our socket and kubelet.sock are
 * deleted, kubelet.sock is created) and a burst of events make one restart (the first cause
 * that joins is said at debug). True when this call scheduled one.
 */
static bool ep_restart_after(dp_endpoint *ep, const char *why, uint64_t usec)
{
	uint64_t at = dp_now_usec() + usec;
	if (ep->stopping)
		return false;
	if (ep->restart_pending && ep->restart_at <= at) {
		if (!ep->restart_joined) /* once per restart: a flood makes one per event */
			dp_debug("re-registering already scheduled", "resource=%s reason=%s", ep->resource,
				 why);
		ep->restart_joined = true;
		return false;
	}
	dp_debug("re-registering", "resource=%s reason=%s delay_us=%llu", ep->resource, why,
		 (unsigned long long)usec);
	/* A Register in flight is moot from here: cancelled, so neither its answer nor its cut-off
	 * (kubelet going away) counts as a failure or replaces this restart with a back-off. */
	ep->register_call = dp_grpc_client_call_cancel(ep->register_call);
	/* One kubelet restart shows as several signs, some after this restart ran (its stream
	 * ended, our socket deleted, kubelet.sock created): told once until registered again. */
	if (!ep->restart_told && ep->events.on_restart)
		ep->events.on_restart(ep, why, ep->events.userdata);
	ep->restart_told = true;
	ep->state = EP_IDLE;
	ep->backoff = 0;
	dp_ep_metrics_state(ep);
	dp_ep_schedule_register(ep, usec);
	ep->restart_pending = true;
	ep->restart_joined = false;
	ep->restart_at = at;
	if (ep->health)
		dp_health_changed(ep->health);
	return true;
}

/* kubelet restarted (or our socket went): at once, and not counted as contention. */
void dp_endpoint_restart(dp_endpoint *ep, const char *why)
{
	ep->quick_ends = 0;
	(void)ep_restart_after(ep, why, 0);
}

/*
 * kubelet.sock created: a kubelet started, register with it at once. A kubelet takes seconds
 * to start, so kubelet.sock created again before the registration that followed succeeded is
 * something recreating it in a loop: those restarts are spaced, CHURN_MIN_USEC after the one
 * before, doubling to CHURN_MAX_USEC while it goes on, until a registration succeeds. A flood of
 * creations then costs a few restarts (and "re-registering" lines) per second at most, instead
 * of one per turn of the loop, and the plugin keeps serving (liveness probes, RPCs) between them.
 */
void dp_endpoint_kubelet_created(dp_endpoint *ep)
{
	uint64_t now = dp_now_usec(), next = ep->churn_at + ep->churn_gap;
	uint64_t wait = ep->churn_gap && now < next ? next - now : 0;

	ep->kubelet_created = true; /* bound: it may not listen yet */
	ep->quick_ends = 0;
	if (!ep_restart_after(ep, "kubelet.sock created", wait))
		return;
	uint64_t gap = ep->churn_gap ? 2 * ep->churn_gap : CHURN_MIN_USEC;
	ep->churn_at = now + wait;
	ep->churn_gap = gap > CHURN_MAX_USEC ? CHURN_MAX_USEC : gap;
}

/* ---- two plugins registering one resource: each Register ends the other's stream ---- */

void dp_ep_stream_ended(dp_endpoint *ep)
{
	const char *why = "ListAndWatch stream ended";
	if (dp_now_usec() - ep->registered_at >= STABLE_USEC) {
		ep->quick_ends = 0;
		ep->contend_backoff = 0;
	}
	/* One quick end is kubelet restarting or a replaced registration: register at once. */
	if (++ep->quick_ends < 2) {
		ep_restart_after(ep, why, 0);
		return;
	}
	uint64_t d = ep->contend_backoff ? ep->contend_backoff : CONTEND_MIN_USEC;
	ep->contend_backoff = d * 2 > CONTEND_MAX_USEC ? CONTEND_MAX_USEC : d * 2;
	snprintf(ep->reason_register, sizeof(ep->reason_register),
		 "another plugin is registering %s: re-registering in %llu ms", ep->resource,
		 (unsigned long long)(d / DP_USEC_PER_MSEC));
	if (ep->quick_ends == 2 && ep->events.on_contended)
		ep->events.on_contended(ep, d, ep->events.userdata);
	ep_restart_after(ep, why, d);
}
