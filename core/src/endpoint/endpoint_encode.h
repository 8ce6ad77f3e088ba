/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_encode: the ListAndWatchResponse wire bytes written straight into one buffer, byte for
 * byte what protobuf-c's v1beta1__list_and_watch_response__pack() writes for the same list, without
 * building a protobuf-c struct per device first.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Encode n devices. ids holds the n IDs one after the other, each NUL-terminated (an arena);
 * numa is NULL (no device has a NUMA node) or n entries, a negative one sending no TopologyInfo;
 * every device gets health "Healthy" or "Unhealthy" (Unhealthy when !healthy, or down is not NULL
 * and down[i] is true). On success *ret (malloc'ed, free() it; never
 * NULL, also for n == 0) and *ret_len are written.
 * Returns 0, -ENOMEM, or -EINVAL (an empty ID or one longer than 63 characters).
 */
int dp_ep_encode_list(const char *ids, size_t n, const int64_t *numa, bool healthy, const bool *down,
		      uint8_t **ret, size_t *ret_len);
