/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_decode: the device-plugin requests (AllocateRequest, PreferredAllocationRequest,
 * PreStartContainerRequest) decoded from the wire and checked against the endpoint's devices in
 * one step, in time O(bytes + IDs x log devices) and memory bounded by the device count, whatever
 * the request holds:
 *
 * - a first pass walks the bytes (pbwire.c) without allocating: malformed bytes, a known field
 *   with the wrong wire type, a device ID holding a NUL byte, more than DP_EP_MAX_CONTAINERS
 *   container requests, or more device IDs than the limit (Allocate and PreStartContainer: the
 *   device count; GetPreferredAllocation: twice the device count, available plus must-include)
 *   end it; unknown fields are skipped, never stored;
 * - a second pass looks every ID up in the device index (binary search): unknown IDs and
 *   duplicates are refused, naming the first DP_EP_NAMED_IDS of them;
 * - the result is one block: per container request, pointers into the index's own IDs (no
 *   string copied), so a valid request holds at most 8 bytes per device plus its containers.
 *
 * Duplicates: in an Allocate, an ID named twice anywhere in the request (one device cannot go
 * to two containers, nor twice to one); in GetPreferredAllocation and PreStartContainer, an ID
 * named twice in one list (an ID both available and must-include is what kubelet sends).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dp/buf.h"

/* Container requests per call: kubelet sends one; more than this many is refused. */
#define DP_EP_MAX_CONTAINERS 16
/* Unknown or duplicate IDs named in an error message, at most; each shown up to 64 bytes. */
#define DP_EP_NAMED_IDS 10

/* The devices: n NUL-terminated IDs at ids + sorted[i], in strcmp order (the endpoint's index). */
struct dp_ep_index {
	char *ids;
	const uint32_t *sorted;
	size_t n;
	const char *resource; /* named in error messages */
};

struct dp_ep_ids {
	char **ids; /* pointers into the index's ids */
	size_t n;
};

struct dp_ep_container {
	struct dp_ep_ids ids;          /* devices_ids; GetPreferredAllocation: available_deviceIDs */
	struct dp_ep_ids must_include; /* GetPreferredAllocation only */
	int32_t allocation_size;       /* GetPreferredAllocation only */
};

/* One block: free() it. */
struct dp_ep_request {
	size_t n; /* container requests (PreStartContainer: always 1) */
	struct dp_ep_container *c;
	size_t size; /* bytes of the block */
};

enum dp_ep_kind { DP_EP_ALLOCATE, DP_EP_PREFERRED, DP_EP_PRESTART };

/* Decode and check msg. Returns DP_GRPC_OK with *ret written, or DP_GRPC_INVALID_ARGUMENT with
 * the reason appended to why (or DP_GRPC_RESOURCE_EXHAUSTED: out of memory). Allocate: at
 * least one container request, each naming at least one ID. */
int dp_ep_decode(enum dp_ep_kind kind, const struct dp_ep_index *x, const uint8_t *msg, size_t len,
		 struct dp_ep_request **ret, dp_buf *why);

/* GetPreferredAllocation's answer for one container request: the must-include IDs first, then
 * the available ones not among them, in the order given, up to allocation_size (<= 0: none;
 * capped at what the lists hold). The IDs are the request's pointers (one per device, so an ID
 * in both lists is found by its pointer): O((a + m) log m). *ret (free() the array, not the
 * IDs) and *ret_n written on success; -ENOMEM. */
int dp_ep_prefer(const struct dp_ep_container *c, char ***ret, size_t *ret_n);
