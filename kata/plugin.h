/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin: one present resource (a table row, or with RESOURCE_NAMING=sku a PCI model, with >= 1
 * device; names in naming.h). An endpoint ("kata-<hash>-<n>.sock": table.h) advertising
 * one ID per IOMMU group ("0".."n-1", in the order of the groups' lowest PCI addresses; spec.h,
 * kata_units) with its NUMA node, and the owned CDI spec /var/run/cdi/kata.<vendor>-<class>.yaml.
 * The backend (iommufd or legacy) is the devices' own (kata_device_backend).
 *
 * Check (at start, every 30 s, on a CDI directory change, on a PCI uevent or a change of the
 * VFIO directory (the daemon asks: kata_plugin_request_check), before every Allocate):
 *  - per ID: its node(s) are still the character devices the scan saw, each of its devices is
 *    still a member of its group bound to a VFIO driver, and no member of the group is bound to
 *    a driver VFIO refuses (group.h). A failing ID alone is advertised Unhealthy, told once at
 *    warn ("IOMMU group not viable, advertising the device Unhealthy" with member= and driver=,
 *    or "device unusable, advertising it Unhealthy" with reason=), and Healthy again when the
 *    next check passes ("device usable again", info);
 *  - for all: the spec file holds exactly the rendered bytes (repaired when it differs) and, for
 *    legacy, /dev/vfio/vfio is a character device. A failure marks every ID Unhealthy.
 * Allocate (after a passing check of the requested IDs; else UNAVAILABLE with the reason): per
 * container request, cdi_devices "<resource>=<id>" for each ID and the annotation
 * "cdi.k8s.io/kata.<vendor>-<class>_<first id>" = the comma-separated CDI names.
 * GetPreferredAllocation: kata_prefer (prefer.h) over the IDs' NUMA nodes, switches and PCI
 * addresses.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "dp/cdi.h"
#include "dp/endpoint.h"
#include "dp/loop.h"
#include "scan.h"
#include "spec.h"
#include "table.h"

typedef struct kata_plugin kata_plugin;

/* devs: the row's devices in ID order (copied). kubelet_dir and cdi_dir: host paths (already
 * under the root prefix). -EINVAL (n == 0, invalid resource name), -ENAMETOOLONG, -ENOMEM.
 * The derived names are the table's (table.h). */
int kata_plugin_new(dp_loop *loop, const char *resource, const struct kata_device *devs, size_t n,
		    const char *kubelet_dir, const char *cdi_dir, kata_plugin **ret);

/* The same with every name given (kata/naming.h: RESOURCE_NAMING=sku), each shorter than
 * KATA_NAME_MAX. */
struct kata_plugin_names {
	const char *resource;      /* "nvidia.com/GH100_H100_SXM5_80GB": resource and CDI kind */
	const char *socket_prefix; /* kata_socket_prefix(), or the shared RESOURCE_NAMING=sku one */
	const char *plugin_name;   /* "kata.sku-10de-2330": annotation "cdi.k8s.io/<this>_<ID>" */
	const char *spec_file;     /* "kata.nvidia.com-GH100_H100_SXM5_80GB.yaml" */
	bool dra; /* PLUGIN_API=dra (dra.h): the endpoint checks but neither serves nor registers
		   * (no_kubelet); units are named kata_unit_name and the spec is kata_spec_render_dra */
};
int kata_plugin_new_named(dp_loop *loop, const struct kata_plugin_names *names, const struct kata_device *devs,
			  size_t n, const char *kubelet_dir, const char *cdi_dir, kata_plugin **ret);
/* Serve, register, first check. */
int kata_plugin_start(kata_plugin *p);
/* Removes our socket; the CDI spec is kept. Accepts NULL, returns NULL. */
kata_plugin *kata_plugin_free(kata_plugin *p);
DP_DEFINE_CLEANUP(kata_plugin, kata_plugin_free)

/* Check soon (a PCI uevent, a change of the VFIO directory). */
void kata_plugin_request_check(kata_plugin *p);
dp_endpoint *kata_plugin_endpoint(const kata_plugin *p);
const char *kata_plugin_resource(const kata_plugin *p);

/* ---- for DRA (dra.h) ---- */
/* A unit as the last checks left it: down when its own check failed, or the resource's full
 * check (CDI spec, legacy container node) did; why and since (the episode's start) then. */
struct kata_unit_state {
	const char *name; /* its ID: with names->dra its DRA device name */
	size_t n_devs;
	bool down;
	const char *why;
	time_t since;
};
size_t kata_plugin_n_units(const kata_plugin *p);
/* The first full check has run (before it, every unit's state is unknown). */
bool kata_plugin_checked(const kata_plugin *p);
/* Unit i's devices (st->n_devs of them) and state; valid until the next call into p. */
const struct kata_device *kata_plugin_unit(const kata_plugin *p, size_t i, struct kata_unit_state *st);
/* The unit of that name (ID), or SIZE_MAX. */
size_t kata_plugin_find_unit(const kata_plugin *p, const char *name);
/* Unit i checked now, as an Allocate checks its IDs (the full check too when its last verdict
 * is not current): 0, or -EIO with why ("device gpu-0000-41-00-0 is unusable: <reason>"). A
 * changed state is logged and told as after a check. */
int kata_plugin_prepare_unit(kata_plugin *p, size_t i, char *why, size_t size);
/* Called after every check and every change of a unit's state (NULL: none). */
typedef void (*kata_plugin_units_fn)(kata_plugin *p, void *userdata);
void kata_plugin_set_units_fn(kata_plugin *p, kata_plugin_units_fn fn, void *userdata);
const char *kata_plugin_spec_path(const kata_plugin *p);

