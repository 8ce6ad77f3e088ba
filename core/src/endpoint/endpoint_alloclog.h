/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_alloclog: one debug line per Allocate answered (msg="Allocate answered"), rate-bounded
 * per endpoint: at most DP_EP_ALLOCLOG_BURST lines per DP_EP_ALLOCLOG_WINDOW_USEC, then one
 * msg="Allocate lines suppressed" line with the count once the window is over (a timer on the
 * endpoint's loop). Nothing is formatted unless LOG_LEVEL=debug.
 *
 *   level=debug msg="Allocate answered" resource=nvidia.com/gpu containers=1 ids=1,3
 *     cdi="nvidia.com/gpu=1,nvidia.com/gpu=3" status=OK
 *
 * ids and cdi list each container request's IDs and CDI names, comma-separated, the container
 * requests separated by a space; each value is cut at DP_EP_ALLOCLOG_VALUE_MAX bytes with
 * ",...+<N>" (N the items left out). A refusal before the driver has no ids= nor cdi= (the
 * request was not decoded; message= names what was wrong); an error has message=.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/endpoint.h"

#define DP_EP_ALLOCLOG_BURST 10
#define DP_EP_ALLOCLOG_WINDOW_USEC (1000ull * 1000)
#define DP_EP_ALLOCLOG_VALUE_MAX 256

/* A bounded list value: items joined by ',', groups by ' '; at most size - 1 bytes, the tail
 * ",...+<N>" when items were left out. */
typedef struct dp_ep_loglist {
	char *buf;
	size_t size, len;
	size_t group;    /* groups opened */
	size_t items;    /* items of the open group, written or not */
	size_t left_out; /* items not written */
	bool full;       /* something did not fit: nothing more is written */
} dp_ep_loglist;

void dp_ep_loglist_init(dp_ep_loglist *l, char *buf, size_t size);
/* Append item to group g (groups in ascending order; an empty group shows as "-"). */
void dp_ep_loglist_add(dp_ep_loglist *l, size_t g, const char *item);
/* Close the list with n_groups groups; returns buf. */
const char *dp_ep_loglist_end(dp_ep_loglist *l, size_t n_groups);

struct dp_alloc;
/* The line of an Allocate the driver answered (before a is freed): status is the one sent
 * ("CANCELLED" when the requester went away). */
void dp_ep_alloclog_answered(dp_endpoint *ep, const struct dp_alloc *a, const char *status,
			     const char *message);
/* The line of an Allocate refused before the driver. */
void dp_ep_alloclog_refused(dp_endpoint *ep, const char *status, const char *message);
/* Frees the summary timer (dp_endpoint_free). */
void dp_ep_alloclog_done(dp_endpoint *ep);
