/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_health: the driver's verdicts. The check timers (periodic, back-off while unhealthy),
 * the checks asked for (coalesced), the first check's hold for the first registration attempt,
 * and what a verdict changes: the health-change event (told once per change), the metrics, the
 * ListAndWatch streams and the health service.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/health.h"
#include "dp/log.h"
#include "endpoint_internal.h"

#define RECHECK_MIN_USEC (1 * DP_USEC_PER_SEC)

/*
 * Healthy: the next periodic check one interval after this verdict. Unhealthy: a retry after the
 * back-off (1 s doubling up to the interval), armed when health just went bad or when the retry
 * timer has fired; verdicts in between (Allocates, inotify) neither push the retry later nor
 * grow the back-off, so a burst of failed requests cannot delay recovery.
 */
static void ep_arm_check_timer(dp_endpoint *ep, bool changed)
{
	uint64_t usec = ep->check_interval;
	if (!ep->healthy) {
		if (changed)
			ep->recheck_backoff = 0;
		else if (ep->check_timer_armed)
			return;
		usec = ep->recheck_backoff ? ep->recheck_backoff : RECHECK_MIN_USEC;
		ep->recheck_backoff = usec * 2 > ep->check_interval ? ep->check_interval : usec * 2;
	} else {
		ep->recheck_backoff = 0;
	}
	/* Coarse: the periodic check shares the stat backstop's wake-up (loop.h). */
	if (ep->check_timer && dp_timer_set_coarse(ep->check_timer, usec, 0) == 0)
		ep->check_timer_armed = true;
}

/* Tell the verdict once per change of the verdict or its reason, not at every periodic check. */
static void ep_tell_health(dp_endpoint *ep, bool healthy, const char *reason)
{
	if (ep->told && healthy == ep->told_healthy && strcmp(reason, ep->told_reason) == 0)
		return;
	ep->told = true;
	ep->told_healthy = healthy;
	snprintf(ep->told_reason, sizeof(ep->told_reason), "%s", reason);
	if (ep->events.on_health_changed)
		ep->events.on_health_changed(ep, healthy, reason, ep->events.userdata);
}

void dp_endpoint_set_health(dp_endpoint *ep, bool healthy, const char *reason)
{
	bool first = !ep->checked;
	bool changed = first || ep->healthy != healthy;
	ep->checked = true;
	ep->healthy = healthy;
	snprintf(ep->reason, sizeof(ep->reason), "%s", healthy ? "" : (reason ? reason : "unhealthy"));
	ep_tell_health(ep, healthy, healthy ? (reason ? reason : "") : ep->reason);
	ep_arm_check_timer(ep, changed);
	if (!changed)
		return;
	dp_debug("health changed", "resource=%s healthy=%d", ep->resource, healthy);
	dp_ep_metrics_health(ep, first);
	if (ep->streams)
		dp_ep_send_list(ep, NULL);
	if (ep->health)
		dp_health_changed(ep->health);
}

int dp_endpoint_set_devices_down(dp_endpoint *ep, const bool *down, size_t n)
{
	if (n != ep->n_devices)
		return -EINVAL;
	if (!ep->down) {
		ep->down = calloc(n ? n : 1, sizeof(*ep->down));
		if (!ep->down)
			return -ENOMEM;
	}
	size_t n_down = 0;
	bool changed = false;
	for (size_t i = 0; i < n; i++) {
		changed = changed || ep->down[i] != down[i];
		ep->down[i] = down[i];
		n_down += down[i];
	}
	if (!changed)
		return 0;
	ep->n_down = n_down;
	dp_debug("devices down changed", "resource=%s down=%zu", ep->resource, n_down);
	dp_ep_metrics_state(ep);
	if (ep->checked && ep->streams) /* before the first check, the first list waits for it */
		dp_ep_send_list(ep, NULL);
	return 0;
}

bool dp_endpoint_device_down(const dp_endpoint *ep, size_t i)
{
	return ep->down && i < ep->n_devices && ep->down[i];
}

static void ep_do_check(void *userdata)
{
	dp_endpoint *ep = userdata;
	ep->check_deferred = false;
	if (ep->holding)
		ep->check_held = true;
	else
		ep->driver.check(ep, ep->userdata);
}

void dp_endpoint_request_check(dp_endpoint *ep)
{
	if (ep->check_deferred)
		return;
	if (dp_defer(ep->loop, ep_do_check, ep) == 0)
		ep->check_deferred = true;
}

static int ep_on_check_timer(dp_source *s, void *userdata)
{
	dp_endpoint *ep = userdata;
	ep->check_timer_armed = false;
	dp_endpoint_request_check(ep);
	return 0;
}

/* ---- the first check's hold (first_check_hold_usec) ---- */

/* The first registration attempt ended (or the hold's bound passed): checks run from now on. */
void dp_ep_hold_release(dp_endpoint *ep)
{
	if (!ep->holding)
		return;
	ep->holding = false;
	ep->hold = dp_source_free(ep->hold);
	if (ep->check_held)
		dp_endpoint_request_check(ep);
	ep->check_held = false;
}

static int ep_on_hold_timeout(dp_source *s, void *userdata)
{
	dp_endpoint *ep = userdata;
	dp_debug("first check no longer waits for registration", "resource=%s", ep->resource);
	dp_ep_hold_release(ep);
	return 0;
}

/* Armed before the first attempt, which releases it as it ends: at once without kubelet.sock. */
int dp_ep_hold_start(dp_endpoint *ep)
{
	if (!ep->hold_usec)
		return 0;
	int r = dp_timer_add(ep->loop, ep->hold_usec, 0, ep_on_hold_timeout, ep, &ep->hold);
	if (r < 0)
		return r;
	ep->holding = true;
	return 0;
}

int dp_ep_health_init(dp_endpoint *ep)
{
	return dp_timer_add_disarmed(ep->loop, ep_on_check_timer, ep, &ep->check_timer);
}

void dp_ep_health_done(dp_endpoint *ep)
{
	ep->check_timer = dp_source_free(ep->check_timer);
	ep->hold = dp_source_free(ep->hold);
}
