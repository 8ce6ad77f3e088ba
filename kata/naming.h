/* SPDX-License-Identifier: Apache-2.0 */
/*
 * naming: RESOURCE_NAMING, and the resources the scanned devices are advertised as.
 *
 *   table (default): one resource per table row, as the row names it ("nvidia.com/gpu"); every
 *     row is listed, those without devices with n = 0 (not registered).
 *   sku: one resource per PCI model (vendor, device ID) among the devices a row matched:
 *     "<the row's domain>/<kata_sku_name()>", e.g. "nvidia.com/GH100_H100_SXM5_80GB"; only
 *     models present, ordered by vendor then device ID. The domain is the one of the first
 *     row (in table order) that matched a device of the model. At most KATA_MAX_ROWS models
 *     (the first by vendor and device ID; one warn line "too many PCI models" for the rest).
 *
 * Derived names, per resource:
 *   table: socket prefix "kata-<hash of the resource name>" (kata_socket_prefix), plugin name
 *          "kata.nvidia.com-gpu"
 *   sku:   socket prefix "kata-<hash of "sku">" (shared: each endpoint's socket "<prefix>-<n>.sock"
 *          is its own; one prefix for all lets --health-check find sockets of models it cannot
 *          list), plugin name
 *          "kata.sku-<vendor>-<device>" (the Allocate annotation "cdi.k8s.io/<plugin>_<first
 *          ID>" must stay within 63 characters)
 *   both:  CDI spec "kata.<resource with '/' as '-'>.yaml", CDI kind = the resource name.
 * Devices keep the scan's order within a resource (PCI address): IDs "0".."n-1".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scan.h"
#include "table.h"

#define KATA_NAMING_ENV "RESOURCE_NAMING"
#define KATA_SKU_SOCKET_KEY "sku" /* dp_socket_prefix(KATA_SOCKET_TAG, this) */

enum kata_naming { KATA_NAMING_TABLE, KATA_NAMING_SKU };

/* RESOURCE_NAMING: unset or "table" -> table, "sku" -> sku. Anything else (also "") is -EINVAL
 * with err: RESOURCE_NAMING="x" is not table or sku. ret written only on success. */
int kata_naming_from_env(enum kata_naming *ret, char *err, size_t errlen);

struct kata_resource {
	char name[KATA_NAME_MAX];          /* resource name and CDI kind */
	char socket_prefix[KATA_NAME_MAX];
	char plugin_name[KATA_NAME_MAX];
	char spec_file[KATA_NAME_MAX];
	const struct kata_device *devs; /* into the set's own copy, n of them in ID order */
	size_t n;
};

struct kata_resources {
	struct kata_resource *v;
	size_t n;
	struct kata_device *devs; /* owned */
};

/* Group the scan's devices. 0, -ENOMEM, -ENAMETOOLONG (a row's name too long for the derived
 * names; never for a table that validates). ret written only on success. */
int kata_resources_build(const struct kata_scan *s, const struct kata_row *t, size_t n_rows, enum kata_naming m,
			 struct kata_resources *ret);
void kata_resources_done(struct kata_resources *r);

/* The resource of that name, or NULL. */
const struct kata_resource *kata_resources_find(const struct kata_resources *r, const char *name);
/* new holds every present resource of old with the same devices in the same order (IDs, cdevs,
 * NUMA nodes) and at least one present resource more: the new ones can be served beside the
 * old without remapping an ID. */
bool kata_resources_only_added(const struct kata_resources *old, const struct kata_resources *new);

/* sku only: one info line msg="resource naming" naming=sku pci_ids=<version>
 * resources="nvidia.com/GH100_H100_SXM5_80GB=4 nvidia.com/GA100_A100_NVSwitch=2". */
void kata_resources_log(const struct kata_resources *r, enum kata_naming m);
