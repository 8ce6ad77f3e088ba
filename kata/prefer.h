/* SPDX-License-Identifier: Apache-2.0 */
/* prefer: kata's GetPreferredAllocation over the IDs' topology (placeholder until the topology
 * ordering lands: must-include first, then the lowest PCI addresses). */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct kata_topo {
	int numa;            /* NUMA node, -1 unknown */
	uint64_t switch_key; /* the PCIe switch above the device, 0: none known */
	uint64_t pci_key;    /* lower: lower PCI address */
};

/* avail, must: indices < n as kubelet sent them; size capped at n_avail + n_must by the caller.
 * Writes out[0..r-1] and returns r (<= size), or -EINVAL (an index >= n), -ENOMEM. */
int kata_prefer(const struct kata_topo *topo, size_t n, const size_t *avail, size_t n_avail,
		const size_t *must, size_t n_must, size_t size, size_t *out);
