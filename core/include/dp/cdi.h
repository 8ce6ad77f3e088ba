/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cdi: the owned CDI spec file (design decision 5). The driver renders the exact bytes; this
 * module compares the file on disk with them byte for byte and atomically replaces it when it
 * differs in any way. Replacement: temp file in the same directory through a directory fd,
 * named ".<name>.tmp-XXXXXX" (no .json/.yaml ending, so CDI readers ignore it), opened
 * O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0644, fully written, fsync'ed, renameat()
 * over the target, then fsync of the directory. A symlink or a non-regular file at our path is
 * refused (-ELOOP / -EEXIST... see below), never followed or removed. No other file in the
 * directory is ever touched (a temp file of ours left by a failed write is removed).
 * The file is never deleted by this module.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/buf.h" /* dp_buf and the JSON/YAML string emitters used by renderers */
#include "dp/loop.h"
#include "dp/macro.h"

/* ---- cdiVersion ---- */

typedef struct dp_cdi_features {
	bool device_name_starts_with_digit; /* 0.5.0 */
	bool device_node_host_path;         /* 0.5.0 */
	bool mount_type;                    /* 0.4.0 */
	bool annotations;                   /* 0.6.0 */
	bool class_has_dot;                 /* 0.6.0 */
	bool additional_gids;               /* 0.7.0 */
	bool intel_rdt;                     /* 0.7.0 */
	bool net_devices;                   /* 1.1.0 */
	bool intel_rdt_schemata;            /* 1.1.0: intelRdt.schemata or enableMonitoring */
} dp_cdi_features;

/* The minimum cdiVersion the content requires: the newest version any used feature needs,
 * "0.3.0" when nothing newer is used (also for f == NULL). A static string. */
const char *dp_cdi_min_version(const dp_cdi_features *f);
/* Validation helpers for CDI names, as the CDI library checks them. kind: "<vendor>/<class>"
 * with exactly one '/', vendor and class each non-empty, first char a letter, last alnum,
 * middle [A-Za-z0-9_.-]. Device name: non-empty, first/last alnum, middle [A-Za-z0-9_.:-].
 * NULL is invalid. (No length limit: the library enforces none.) */
bool dp_cdi_kind_valid(const char *kind);
bool dp_cdi_device_name_valid(const char *name);

/* ---- compare and replace (directory fd based, no loop needed) ---- */

/* 0: the file holds exactly these bytes. 1: it differs in any way or is missing.
 * -ELOOP: a symlink at name. -EEXIST: not a regular file (directory, FIFO, socket, device; a
 * FIFO never blocks: opened O_NONBLOCK, and only after lstat said regular). -EINVAL: name is
 * empty, ".", ".." or holds a '/'. Other negative errno: could not read (e.g. -EACCES, -EIO).
 * Reads at most len + 1 bytes. */
int dp_cdi_compare(int dirfd, const char *name, const void *data, size_t len);
/* Atomically replace name with data as described above. 0 on success (a failing fsync of the
 * directory after the rename is only logged: the new bytes are in place). -ELOOP / -EEXIST
 * refuse as above (the path is left untouched); -EINVAL for a bad name; -ENAMETOOLONG when the
 * temp name would not fit; other negative errno from the failed step (-ENOSPC, -EDQUOT, -EROFS,
 * -EACCES, -EIO...); on any failure the old file is left intact and the temp file removed. */
int dp_cdi_replace(int dirfd, const char *name, const void *data, size_t len);

/* ---- the owned file, watched ---- */

typedef struct dp_cdi_file dp_cdi_file;
/* Called (from the loop) when something in the directory that concerns our file happened:
 * created, written, removed, renamed, attributes; or the directory itself was created, removed
 * or replaced (the watches are re-armed by this module before the call). A burst of events
 * becomes one call (a one-shot timer source coalesces them). Events of other names are
 * ignored, and so are our own temp files and the rename of our own replace (a repair causes no
 * further call). The receiver normally calls dp_cdi_file_sync(); it may free f. Watches: the
 * directory (symlinks followed: /var/run is often one) and its parent (to see the directory
 * appear, go or be replaced); both are armed by dp_cdi_file_sync(), best effort. */
typedef void (*dp_cdi_changed_fn)(dp_cdi_file *f, void *userdata);

/* Another writer keeps replacing the file (see dp_cdi_file_sync: the repairs back off). */
typedef struct dp_cdi_fight {
	bool started;        /* true: an episode began; false: it ended (our bytes stayed) */
	const char *other;   /* started: the other writer's content, short and printable:
			      * "412 bytes, fnv1a 9c0e3f21, line 9: \"uid\": 2000," or "no file" */
	uint64_t delay_usec; /* started: the wait before the next repair */
	unsigned overwrites; /* started: our writes replaced early, in a row */
} dp_cdi_fight;
/* Called from inside dp_cdi_file_sync() once when an episode starts and once when it ends: the
 * daemon logs it (library code logs only at debug). It must not free f nor call sync. */
typedef void (*dp_cdi_fight_fn)(dp_cdi_file *f, const dp_cdi_fight *ev, void *userdata);

/* dir: absolute host path (already resolved under the test root; trailing '/' dropped), name:
 * e.g. "hyperlight.json". The directory need not exist yet. Nothing is watched before the
 * first sync. -EINVAL: NULL loop/changed/ret, relative dir, bad name; -ENAMETOOLONG; -ENOMEM. */
int dp_cdi_file_new(dp_loop *loop, const char *dir, const char *name, dp_cdi_changed_fn changed,
		    void *userdata, dp_cdi_file **ret);
dp_cdi_file *dp_cdi_file_free(dp_cdi_file *f);
DP_DEFINE_CLEANUP(dp_cdi_file, dp_cdi_file_free)
/* Be told of the episodes (fn NULL: not told); userdata is the one given to new. */
void dp_cdi_file_set_fight_fn(dp_cdi_file *f, dp_cdi_fight_fn fn);
/* The daemons' log lines for an episode (warn when it starts, naming the other content; info
 * when it ends), one copy for both daemons: dp_cdi_file_set_fight_fn(f, dp_cdi_log_fight). */
void dp_cdi_log_fight(dp_cdi_file *f, const dp_cdi_fight *ev, void *userdata);
/* A daemon's owned spec in one step: dp_cdi_file_new, the fight lines (dp_cdi_log_fight) and
 * the content (spec's bytes, copied; nothing is written before the first sync). -ENOMEM when
 * spec->oom (its rendering ran out of memory); the errors of new and set_content. */
int dp_cdi_file_new_owned(dp_loop *loop, const char *dir, const char *name, const dp_buf *spec,
			  dp_cdi_changed_fn changed, void *userdata, dp_cdi_file **ret);
/* Set the exact bytes the file must hold (copied). */
int dp_cdi_file_set_content(dp_cdi_file *f, const void *data, size_t len);
/* Make the file match: compare, replace when it differs (creating the directory 0755 when
 * missing, not its parents). 0 when the file now holds exactly our bytes (*ret_repaired, if
 * given, says whether it was written); negative errno otherwise, with a human reason in
 * dp_cdi_file_error(): -EINVAL "no content set for P", -ELOOP "refusing symlink at P",
 * -EEXIST "refusing non-regular file at P", "cannot read P: <strerror>", "cannot write P:
 * <strerror>", "cannot create directory D: <strerror>", "cannot open directory D: <strerror>",
 * -EBUSY "another writer keeps replacing P; repairs backed off (its content: ...)".
 * The watches are (re)armed as a side effect.
 *
 * Writers that disagree back off (core/src/cdi/cdi_backoff.h has the rule): a write of ours that
 * another writer replaces within 120 s extends a streak; the first 4 replacements in a row are
 * repaired at once (an operator's or a tool's edits); from the 5th on the file is fought over
 * (an episode, told once to the fight callback): the repair waits 1 s, then twice as long each
 * time our write is replaced again, up to 60 s, and every sync returns -EBUSY, also right
 * after our own write, until our bytes have stayed in place for 120 s. A one-shot timer calls
 * `changed` when the wait or the episode is over, so the receiver's usual sync repairs or
 * recovers. Every write is logged at debug ("cdi: spec written"). */
int dp_cdi_file_sync(dp_cdi_file *f, bool *ret_repaired);
/* Reason of the last failed sync ("refusing symlink at /var/run/cdi/hyperlight.json", ...);
 * "" after a successful one. */
const char *dp_cdi_file_error(const dp_cdi_file *f);
const char *dp_cdi_file_path(const dp_cdi_file *f);
/* The current wait between repairs: 0 outside an episode, else 1 s doubling up to 60 s. */
uint64_t dp_cdi_file_backoff_usec(const dp_cdi_file *f);
