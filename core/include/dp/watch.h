/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: one directory watched on the loop, the way every watcher of the daemons needs it.
 * inotify on the directory reports its entries (optionally only one name); the watch re-arms
 * itself when the directory vanishes or is replaced (IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT,
 * IN_IGNORED), and while it does not exist (or is not a directory) the deepest existing ancestor
 * is watched for the next component on the way, so its creation is seen at once. With
 * watch_parent the parent is watched as well while the directory exists (a directory renamed
 * over it, or moved away, is seen from above too). A coarse backstop timer (on the loop's grid,
 * dp_timer_set_coarse) calls back for a stat comparison: every backstop_usec while inotify
 * watches, every unwatched_usec while no watch could be added (inotify unavailable, its limits
 * reached); before calling back it tries to re-arm.
 *
 * What reaches the callback:
 *   DP_WATCH_ENTRY     an entry (name) was created, deleted, moved in or out or changed; mask is
 *                      the inotify mask (only the bits asked for, plus IN_ISDIR)
 *   DP_WATCH_DIR       the directory (or an ancestor on its way) appeared, vanished or was
 *                      replaced; the watch is already re-armed: re-check everything
 *   DP_WATCH_OVERFLOW  the inotify queue overflowed, events were lost: re-check everything
 *   DP_WATCH_BACKSTOP  the backstop timer fired: compare by stat
 * The callback may free the watch (the event is its last use of it).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dp/loop.h"
#include "dp/macro.h"

typedef struct dp_watch dp_watch;

typedef enum dp_watch_kind {
	DP_WATCH_ENTRY,
	DP_WATCH_DIR,
	DP_WATCH_OVERFLOW,
	DP_WATCH_BACKSTOP,
} dp_watch_kind;

/* name: the entry (DP_WATCH_ENTRY), else NULL; mask: the inotify mask (DP_WATCH_ENTRY), else 0. */
typedef void (*dp_watch_fn)(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
			    void *userdata);

/* The entry events a watch may ask for. */
#define DP_WATCH_ENTRY_EVENTS                                                                      \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_MODIFY | IN_ATTRIB)

typedef struct dp_watch_config {
	const char *dir;         /* absolute path */
	const char *name;        /* report only this entry; NULL: every entry */
	uint32_t mask;           /* entry events reported, within DP_WATCH_ENTRY_EVENTS */
	bool watch_parent;       /* also watch the parent while dir exists */
	uint64_t backstop_usec;  /* the backstop while inotify watches (0: none) */
	uint64_t unwatched_usec; /* the backstop while no watch could be added (0: none) */
	dp_watch_fn fn;
	void *userdata;
} dp_watch_config;

/* Arms at once (a missing directory is not an error). -EINVAL (dir not absolute, mask outside
 * DP_WATCH_ENTRY_EVENTS, no fn), -ENOMEM, timer errors. */
int dp_watch_new(dp_loop *l, const dp_watch_config *cfg, dp_watch **ret);
/* Accepts NULL, returns NULL. */
dp_watch *dp_watch_free(dp_watch *w);
DP_DEFINE_CLEANUP(dp_watch, dp_watch_free)

/* Add the watches that are missing (the directory's, or its ancestor's); the backstop does this
 * too. True when the directory itself is watched afterwards. */
bool dp_watch_rearm(dp_watch *w);
/* True while the directory itself (not only an ancestor) has an inotify watch. */
bool dp_watch_dir_watched(const dp_watch *w);
/* Change the backstop intervals (0: none); the timer is re-armed only when its interval changes. */
void dp_watch_set_backstop(dp_watch *w, uint64_t backstop_usec, uint64_t unwatched_usec);
