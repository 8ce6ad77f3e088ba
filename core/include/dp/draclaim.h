/* SPDX-License-Identifier: Apache-2.0 */
/*
 * draclaim: a ResourceClaim (resource.k8s.io/v1), as the API server's JSON, read for one DRA
 * driver on one node: the claim is the one the kubelet named (its UID), it is allocated, and its
 * allocation's results for this driver are devices of this node's pool. What a driver's
 * NodePrepareResources needs of it: each result's request, device and share ID.
 *
 * JSON through jansson (Debian's libjansson, linked statically): strict RFC 8259, UTF-8
 * checked, duplicate keys refused (JSON_REJECT_DUPLICATES: a claim whose "uid" or "driver"
 * appears twice is not read one way here and another way elsewhere), no NUL inside strings, its
 * error naming line and column. The input is bounded (DP_DRACLAIM_INPUT_MAX) before parsing.
 * Fields are checked for their type and length where read; unknown fields are ignored, as the
 * API's clients do. Nothing is written on an error, which says the field's path and what is
 * wrong with it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The API server refuses objects over about 1.5 MiB (etcd's request limit). */
#define DP_DRACLAIM_INPUT_MAX (2u << 20)
/* AllocationResultsMaxSize in resource.k8s.io/v1. */
#define DP_DRACLAIM_RESULTS_MAX 32
/* A request name ("<request>" or "<request>/<subrequest>": two DNS labels), a device name (a
 * DNS label) and a share ID (a UID) fit here with their NUL. */
#define DP_DRACLAIM_REQUEST_MAX 127
#define DP_DRACLAIM_DEVICE_MAX 63
#define DP_DRACLAIM_SHARE_MAX 64

typedef struct dp_draclaim_result {
	char request[DP_DRACLAIM_REQUEST_MAX + 1];
	char device[DP_DRACLAIM_DEVICE_MAX + 1];
	char share_id[DP_DRACLAIM_SHARE_MAX + 1]; /* "" when the result has none */
	bool admin_access;
} dp_draclaim_result;

typedef struct dp_draclaim {
	size_t n; /* this driver's results, in the allocation's order */
	dp_draclaim_result results[DP_DRACLAIM_RESULTS_MAX];
} dp_draclaim;

/*
 * Read json (len bytes) as the ResourceClaim whose metadata.uid is uid, for driver and pool.
 * 0 with *ret filled; else a negative errno and why (a message, why_size bytes; not NULL):
 * -EFBIG input over DP_DRACLAIM_INPUT_MAX; -EBADMSG not JSON, or not a ResourceClaim of
 * resource.k8s.io/v1, or a field of the wrong type or length; -ESTALE another UID (the claim
 * was deleted and made again under the same name); -ENODATA not allocated, or no result for
 * this driver; -EXDEV a result of this driver in another pool (another node's device).
 */
int dp_draclaim_read(const char *json, size_t len, const char *uid, const char *driver, const char *pool,
		     dp_draclaim *ret, char *why, size_t why_size);
