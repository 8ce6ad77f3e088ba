/* SPDX-License-Identifier: Apache-2.0 */
/* prefer: kata's GetPreferredAllocation, the IDs that share the fewest NUMA nodes and switches. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct kata_topo {
	int numa;            /* NUMA node, -1 unknown (the unknown ones count as one node) */
	uint64_t switch_key; /* the PCIe switch above the device, 0: none known (its own) */
	uint64_t pci_key;    /* lower: lower PCI address */
};

/*
 * The answer to GetPreferredAllocation for size IDs (size capped at n_avail + n_must by the
 * caller), over IDs 0..n-1 described by topo (one ID is one IOMMU group: whole groups always):
 *   1. every must-include ID (in the order given), then, from avail,
 *   2. the fewest NUMA nodes beyond the must-include IDs' own,
 *   3. within those, the fewest PCIe switches beyond the must-include IDs' own,
 *   4. then the lowest PCI addresses.
 * Greedy, O(n log n): the NUMA node count is the minimum; each level takes the largest nodes
 * (switches) first and, for the last one, the node (switch) that covers the rest with the
 * fewest switches (the fewest devices), ties to the lowest address. Deterministic: the same
 * input gives the same answer whatever the order of avail.
 * Writes out[0..r-1] and returns r (<= size), or -EINVAL (an index >= n, out untouched), -ENOMEM.
 */
int kata_prefer(const struct kata_topo *topo, size_t n, const size_t *avail, size_t n_avail,
		const size_t *must, size_t n_must, size_t size, size_t *out);
