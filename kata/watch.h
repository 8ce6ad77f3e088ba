/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: the device set is fixed at start; this notices when the node's set differs from it.
 * A watch (dp_watch) on the backend's directory (kata_backend_dir: /dev/vfio/devices for
 * iommufd, /dev/vfio for legacy; while it does not exist, on its deepest existing
 * ancestor for it to appear; re-armed after the directory goes or is replaced) asks for a
 * rescan at once, or KATA_RESCAN_GAP_USEC after the end of the last one when that is later (a
 * flood of events, one node recreated in a loop, costs one rescan per gap; every event is
 * followed by a rescan that starts after it); a periodic rescan (30 s, coarse) is the backstop
 * for everything inotify cannot see (sysfs).
 * A rescan runs the scan quietly (skip lines at debug) and compares its matched devices with
 * the initial ones (kata_scan_diff). On the first difference (that grow(), below, does not
 * take) changed() is called once, with the
 * comma-separated cdev names removed, added and changed ("" for none); the watch then stops.
 * A rescan that fails (e.g. /dev/vfio/devices unreadable) is logged at debug and ignored.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dp/loop.h"
#include "scan.h"

typedef struct kata_watch kata_watch;
typedef void (*kata_changed_fn)(const char *removed, const char *added, const char *changed,
				void *userdata);

#define KATA_RESCAN_USEC (30 * DP_USEC_PER_SEC)
/* The least time between the end of a rescan and one that events ask for. */
#define KATA_RESCAN_GAP_USEC (50 * DP_USEC_PER_MSEC)

/* opts is copied (the table must outlive the watch); initial is borrowed and must outlive it.
 * Create the watch before the initial scan fills initial (kata/main.c does): a change after the
 * watch is armed asks for a rescan (which runs from the loop, after the scan), one before it is
 * in the initial scan, so no rescan is needed at start (it would delay registration).
 * period_usec 0: KATA_RESCAN_USEC. -EINVAL, -ENOMEM, timer errors. */
int kata_watch_new(dp_loop *loop, const struct kata_scan_opts *opts, const struct kata_scan *initial,
		   uint64_t period_usec, kata_changed_fn changed, void *userdata, kata_watch **ret);
/* A difference that only adds devices is first offered to grow() when set (RESOURCE_NAMING=sku:
 * a new model can be served without touching the IDs already handed out). grow returns true
 * when it took the new set: it owns now's devices, and the initial scan the watch was given
 * (the same pointer) describes the new set from then on; the watch goes on watching. false:
 * changed() is called as for any other difference. */
typedef bool (*kata_grow_fn)(struct kata_scan *now, void *userdata);
void kata_watch_set_grow(kata_watch *w, kata_grow_fn grow, void *userdata);
/* A rescan whose set differs from the initial one only by removals (unbound from vfio-pci,
 * node deleted), or not at all, calls removed() when set, with the comma-separated names
 * removed ("" for none), instead of changed(): the IDs stay advertised and their checks turn
 * them Unhealthy, or Healthy again (plugin.h): a device back as it was, a node directory the
 * kernel made again, the legacy container node gone or back are no difference of the set, but
 * each needs a check. The watch goes on watching. */
typedef void (*kata_removed_fn)(const char *removed, void *userdata);
void kata_watch_set_removed(kata_watch *w, kata_removed_fn removed, void *userdata);
/* VFIO_BACKEND=auto chose legacy (no cdevs at start): /dev/vfio/devices is watched too, and an
 * character device there is a change: changed("", "<their names>", "") (at restart auto picks
 * iommufd; a kernel with cdevs creates them when a device binds to vfio-pci, maybe with no group
 * node). A stray file or directory there is no cdev. */
int kata_watch_add_cdevs(kata_watch *w);
kata_watch *kata_watch_free(kata_watch *w);
DP_DEFINE_CLEANUP(kata_watch, kata_watch_free)
/* Rescan now (also what the events and the timer do). Returns the number of differences,
 * 0 when none, negative errno when the scan failed. */
int kata_watch_rescan(kata_watch *w);
