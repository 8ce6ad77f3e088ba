/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spec: the CDI spec of one resource, rendered to canonical bytes (YAML, double-quoted scalars,
 * trailing newline):
 *   cdiVersion: "0.5.0"
 *   kind: "nvidia.com/gpu"
 *   devices:
 *     - name: "0"
 *       containerEdits:
 *         deviceNodes:
 *           - path: "/dev/vfio/devices/vfio3"
 *             type: "c"
 * kind = the resource name, one CDI device per ID ("0".."n-1"): per IOMMU group, the devices
 * given consecutively with the same group (kata_units). Its edits are device nodes at the same
 * path in the container (the runtime stats the host node for the numbers):
 *   iommufd: each device's cdev "/dev/vfio/devices/vfioN";
 *   legacy:  the group node "/dev/vfio/<group>" once, then the container node "/dev/vfio/vfio".
 * cdiVersion is the minimum the content requires: 0.5.0 (names start with a digit),
 * 0.6.0 if the resource's class half holds a '.'.
 */
#pragma once

#include <stddef.h>

#include "dp/buf.h"
#include "scan.h"

/* Appends to out (check out->oom). n >= 1; devs ordered by unit (as the scan orders them). */
void kata_spec_render(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out);

/*
 * PLUGIN_API=dra (dra.h): the same spec with each unit named by its DRA device name instead of
 * its ID, stable across restarts and device changes: kata_unit_name of the unit's first device,
 * "gpu-0000-41-00-0" (cdiVersion 0.3.0 unless the class holds a '.'). Its file is
 * "kata-dra.<vendor>-<class>.yaml" (kata_dra_spec_file), so that a node switched from one API to
 * the other keeps the other's spec for the pods that were started with it.
 */
void kata_spec_render_dra(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out);

/* A unit's DRA device name: the resource's class half and the first device's PCI address, every
 * character outside [a-z0-9] as '-': "nvidia.com/gpu" and 0000:41:00.0 -> "gpu-0000-41-00-0". A
 * DNS label of at most KATA_UNIT_NAME_MAX characters (the class half cut to fit; unique per node
 * as the PCI address is). */
#define KATA_UNIT_NAME_MAX 63
void kata_unit_name(const char *resource, const struct kata_device *first, char *buf, size_t size);

/* The advertised units of devs (n, ordered by unit): each a run of devices with the same IOMMU
 * group. Writes the first index of each into first (room for n) and returns how many. */
size_t kata_units(const struct kata_device *devs, size_t n, size_t *first);
