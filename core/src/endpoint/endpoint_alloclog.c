/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_alloclog: one rate-bounded debug line per Allocate (endpoint_alloclog.h). */
#include "endpoint_alloclog.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dp/log.h"
#include "dp/loop.h"
#include "dp/ratelimit.h"
#include "endpoint_internal.h"
#include "requests/endpoint_decode.h"

/* Room kept for ",...+<N>": the list stops before it would not fit. */
#define MARKER_ROOM (sizeof(",...+") + 20)

void dp_ep_loglist_init(dp_ep_loglist *l, char *buf, size_t size)
{
	*l = (dp_ep_loglist){ .buf = buf, .size = size };
	if (size)
		buf[0] = '\0';
}

/* Append a then b when both fit with the marker's room; once something did not, nothing more is. */
static bool put2(dp_ep_loglist *l, const char *a, const char *b)
{
	size_t na = strlen(a), nb = strlen(b);

	if (l->full || l->len + na + nb + MARKER_ROOM >= l->size) {
		l->full = true;
		return false;
	}
	memcpy(l->buf + l->len, a, na);
	memcpy(l->buf + l->len + na, b, nb);
	l->len += na + nb;
	l->buf[l->len] = '\0';
	return true;
}

/* Close the open group ("-" when it is empty) and open the next one. */
static void open_group(dp_ep_loglist *l)
{
	if (l->group != 0) {
		(void)put2(l, l->items ? "" : "-", " ");
	}
	l->group++;
	l->items = 0;
}

void dp_ep_loglist_add(dp_ep_loglist *l, size_t g, const char *item)
{
	while (l->group <= g)
		open_group(l);
	if (!put2(l, l->items ? "," : "", item))
		l->left_out++;
	l->items++;
}

const char *dp_ep_loglist_end(dp_ep_loglist *l, size_t n_groups)
{
	while (l->group < n_groups)
		open_group(l);
	if (l->group != 0 && !l->items)
		(void)put2(l, "-", "");
	if (l->left_out && l->size > l->len)
		snprintf(l->buf + l->len, l->size - l->len, "%s...+%zu",
			 l->len && l->buf[l->len - 1] != ' ' ? "," : "", l->left_out);
	return l->buf;
}

/* ---- the limiter and its summary line ---- */

static void summary(dp_endpoint *ep, uint64_t now)
{
	unsigned long long n = dp_ratelimit_closed(&ep->alloclog_rl, now);

	if (n)
		dp_debug("Allocate lines suppressed", "resource=%s suppressed=%llu window_ms=%llu burst=%u",
			 ep->resource, n, DP_EP_ALLOCLOG_WINDOW_USEC / 1000, DP_EP_ALLOCLOG_BURST);
}

static int on_window_end(dp_source *s, void *userdata)
{
	dp_endpoint *ep = userdata;
	uint64_t now = dp_now_usec(), end = dp_ratelimit_end(&ep->alloclog_rl);

	summary(ep, now);
	if (ep->alloclog_rl.suppressed && end > now) /* woken early: the window is still open */
		return dp_timer_set(s, end - now, 0);
	return 0;
}

/* Arm the summary for the end of the window (once per window: at its first suppression). A
 * timer that cannot be made leaves the summary to the next Allocate after the window. */
static void arm_summary(dp_endpoint *ep, uint64_t now)
{
	uint64_t end = dp_ratelimit_end(&ep->alloclog_rl);

	if (ep->alloclog_rl.suppressed != 1)
		return;
	if (!ep->alloclog_timer &&
	    dp_timer_add_disarmed(ep->loop, on_window_end, ep, &ep->alloclog_timer) < 0)
		return;
	(void)dp_timer_set(ep->alloclog_timer, end > now ? end - now : 1, 0);
}

/* Whether this Allocate gets its line: only at debug, within the window's burst. */
static bool gate(dp_endpoint *ep)
{
	uint64_t now;

	if (!dp_log_enabled(DP_LOG_DEBUG))
		return false;
	if (!ep->alloclog_rl.interval_usec)
		ep->alloclog_rl = (dp_ratelimit)DP_RATELIMIT_INIT(DP_EP_ALLOCLOG_WINDOW_USEC, DP_EP_ALLOCLOG_BURST);
	now = dp_now_usec();
	summary(ep, now); /* the previous window's, if its timer has not run yet */
	if (dp_ratelimit_pass(&ep->alloclog_rl, now))
		return true;
	arm_summary(ep, now);
	return false;
}

void dp_ep_alloclog_done(dp_endpoint *ep)
{
	ep->alloclog_timer = dp_source_free(ep->alloclog_timer);
}

/* ---- the lines ---- */

typedef char quoted_value[2 * DP_EP_ALLOCLOG_VALUE_MAX + 3];

static const char *ids_value(const dp_alloc *a, quoted_value q)
{
	char buf[DP_EP_ALLOCLOG_VALUE_MAX + 1];
	dp_ep_loglist l;

	dp_ep_loglist_init(&l, buf, sizeof(buf));
	for (size_t c = 0; c < a->n; c++)
		for (size_t i = 0; i < a->req->c[c].ids.n; i++)
			dp_ep_loglist_add(&l, c, a->req->c[c].ids.ids[i]);
	return dp_logq(q, sizeof(quoted_value), dp_ep_loglist_end(&l, a->n));
}

static const char *cdi_value(const dp_alloc *a, quoted_value q)
{
	char buf[DP_EP_ALLOCLOG_VALUE_MAX + 1];
	dp_ep_loglist l;

	dp_ep_loglist_init(&l, buf, sizeof(buf));
	for (size_t c = 0; c < a->n; c++)
		for (size_t i = 0; i < a->resp[c].n_cdi_devices; i++)
			dp_ep_loglist_add(&l, c, a->resp[c].cdi_devices[i]->name);
	return dp_logq(q, sizeof(quoted_value), dp_ep_loglist_end(&l, a->n));
}

/* " devices=<host paths>" when a container got device nodes (hyperlight's device-access), else "". */
static const char *devices_field(const dp_alloc *a, char *out, size_t size)
{
	char buf[DP_EP_ALLOCLOG_VALUE_MAX + 1];
	quoted_value q;
	dp_ep_loglist l;
	bool any = false;

	dp_ep_loglist_init(&l, buf, sizeof(buf));
	for (size_t c = 0; c < a->n; c++)
		for (size_t i = 0; i < a->resp[c].n_devices; i++, any = true)
			dp_ep_loglist_add(&l, c, a->resp[c].devices[i]->host_path);
	out[0] = '\0';
	if (any)
		snprintf(out, size, " devices=%s", dp_logq(q, sizeof(q), dp_ep_loglist_end(&l, a->n)));
	return out;
}

void dp_ep_alloclog_answered(dp_endpoint *ep, const dp_alloc *a, const char *status, const char *message)
{
	quoted_value qi, qc;
	char qm[300], devs[sizeof(quoted_value) + 16];

	if (!gate(ep))
		return;
	if (strcmp(status, "OK") == 0)
		dp_debug("Allocate answered", "resource=%s containers=%zu ids=%s cdi=%s%s status=OK",
			 ep->resource, a->n, ids_value(a, qi), cdi_value(a, qc),
			 devices_field(a, devs, sizeof(devs)));
	else
		dp_debug("Allocate answered", "resource=%s containers=%zu ids=%s status=%s message=%s",
			 ep->resource, a->n, ids_value(a, qi), status, dp_logq(qm, sizeof(qm), message ? message : ""));
}

void dp_ep_alloclog_refused(dp_endpoint *ep, const char *status, const char *message)
{
	char qm[300];

	if (gate(ep))
		dp_debug("Allocate answered", "resource=%s status=%s message=%s", ep->resource, status,
			 dp_logq(qm, sizeof(qm), message));
}
