/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_devices: the device list copied in one block: the IDs, sorted for lookups, NUMA nodes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint_internal.h"

static int cmp_offset(const void *a, const void *b, void *ud)
{
	const char *ids = ud;
	return strcmp(ids + *(const uint32_t *)a, ids + *(const uint32_t *)b);
}

/* The arena size for devs, or -EINVAL (a bad ID) / -E2BIG (offsets would not fit 32 bits). */
static ssize_t ep_ids_size(const dp_device *devs, size_t n, bool *ret_numa)
{
	size_t total = 0;
	bool numa = false;
	for (size_t i = 0; i < n; i++) {
		size_t len = devs[i].id ? strlen(devs[i].id) : 0;
		if (len == 0 || len > 63)
			return -EINVAL;
		total += len + 1;
		numa = numa || devs[i].numa_node >= 0;
	}
	if (total > UINT32_MAX)
		return -E2BIG;
	*ret_numa = numa;
	return (ssize_t)total;
}

/* One block (freed through ep->sorted): the sorted offsets, the NUMA nodes when one is known (at
 * an 8-byte boundary), the ID arena. */
int dp_ep_copy_devices(dp_endpoint *ep, const dp_device *devs, size_t n)
{
	bool numa = false;
	ssize_t size = ep_ids_size(devs, n, &numa);
	if (size < 0)
		return (int)size;
	size_t numa_at = (n * sizeof(*ep->sorted) + 7) & ~(size_t)7;
	size_t ids_at = numa_at + (numa ? n * sizeof(*ep->numa) : 0);
	char *b = malloc(ids_at + (size_t)size + 1);
	if (!b)
		return -ENOMEM;
	ep->sorted = (uint32_t *)b;
	ep->numa = numa ? (int64_t *)(b + numa_at) : NULL;
	ep->ids = b + ids_at;
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(devs[i].id) + 1;
		memcpy(ep->ids + off, devs[i].id, len);
		ep->sorted[i] = (uint32_t)off;
		if (ep->numa)
			ep->numa[i] = devs[i].numa_node;
		off += len;
	}
	ep->n_devices = n;
	if (ep->driver.prefer) { /* GetPreferredAllocation's answers name devices by index */
		ep->offs = malloc((n ? n : 1) * sizeof(*ep->offs));
		if (!ep->offs)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			ep->offs[i] = ep->sorted[i];
	}
	qsort_r(ep->sorted, n, sizeof(*ep->sorted), cmp_offset, ep->ids);
	for (size_t i = 1; i < n; i++)
		if (strcmp(ep->ids + ep->sorted[i - 1], ep->ids + ep->sorted[i]) == 0)
			return -EINVAL;
	return 0;
}
