/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dra: kata's devices served through DRA (PLUGIN_API=dra; dp/draside.h does the kubelet and API
 * server sides). Driver "kata.nvidia.com" (the domain of the plugin's other names: the CDI files
 * kata.nvidia.com-*.yaml), one pool per node (the node's name), one device per IOMMU group (the
 * unit an ID is with the device-plugin API) of every table row, named kata_unit_name
 * ("gpu-0000-41-00-0": stable across restarts). Attributes (docs/dra.md has the table):
 *   resource.kubernetes.io/pcieRoot   "pci0000:40"   the root complex (absent if none is found)
 *   resource.kubernetes.io/pciBusID   "0000:41:00.0" the group's first device
 *   resource.kubernetes.io/numaNode   0              (absent for numa_node -1)
 *   resource    "nvidia.com/gpu"  the table row's resource (a DeviceClass per resource selects it)
 *   type        "gpu"             its class half
 *   vendorID    "0x10de"          deviceID "0x2330"
 *   model       "GH100_H100_SXM5_80GB"  the SKU name (sku.h)
 *   iommuGroup  12                functions  the group's matched functions (1 or more)
 *   pcieSwitch  "0000:40:01.0"    the switch's upstream port (or the host bridge: pcie_switch)
 *   vfioBackend "iommufd" or "legacy"
 * A unit's health is its plugin's checks (plugin.h: group viability, nodes, the spec): a unit that
 * turns unusable is published with the taint kata.nvidia.com/unhealthy:NoSchedule (timeAdded:
 * the episode's start) at once, so no new claim is allocated it, and its DRAResourceHealth turns
 * Unhealthy with the reason, which the kubelet shows in the status of the pods holding it. A
 * claim's device is prepared after a check of its unit, as the CDI device
 * "<resource>=<device name>" of the resource's spec kata-dra.<vendor>-<class>.yaml.
 * Nothing is published until every resource has had its first check.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/buf.h"
#include "dp/loop.h"
#include "dp/macro.h"
#include "plugin.h"

#define KATA_DRA_DRIVER "kata.nvidia.com"
#define KATA_DRA_TAINT KATA_DRA_DRIVER "/unhealthy"

typedef struct kata_dra kata_dra;

/* Start the DRA side (the API server's address and the service account from the pod: -ENOENT,
 * -EINVAL with why). The resources are the daemon's plugins (*plugins, *n_plugins, read at every
 * change): each is given kata_dra_units as its units_fn. */
int kata_dra_new(dp_loop *loop, kata_plugin *const *plugins, const size_t *n_plugins, kata_dra **ret, char *why,
		 size_t why_size);
/* Every plugin made: publish as soon as each has been checked (or now, with none). */
void kata_dra_go(kata_dra *d);
void kata_dra_units(kata_plugin *p, void *userdata);
kata_dra *kata_dra_free(kata_dra *d);
DP_DEFINE_CLEANUP(kata_dra, kata_dra_free)
/* The API helper's O_PATH fd (the seccomp exec rule); -1 for NULL. */
int kata_dra_exe_fd(const kata_dra *d);

/* The devices as the slices' JSON ({"devices":[...]}, dp/draside.h) into b (check b->oom). */
void kata_dra_render(kata_plugin *const *plugins, size_t n, dp_buf *b);
