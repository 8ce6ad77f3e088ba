/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scan_cache: what one VFIO rescan leaves to the next, so that a rescan of an unchanged node
 * costs a stat where it would open, read and close (kata/scan.c; the rescan runs every 30 s).
 *
 * - The root's fixed parts: /proc/self/fd kept open and the canonical path of <root>/sys, both
 *   for the root prefix they were computed under (a new prefix computes them again).
 * - Attribute values: an immutable attribute (a cdev's "dev", a PCI device's "vendor",
 *   "class" and "device") read and parsed by one scan is reused by the next when the file at that path has
 *   the same identity (device, inode, size, modification and change times, from a stat that
 *   does not follow symlinks). sysfs creates these files with the device and never changes
 *   them; a file written in place elsewhere (a test tree) gets new times. A value is kept only
 *   when the file was last modified at least KATA_CACHE_SETTLE_SEC before the scan began, as
 *   git does for "racily clean" entries: a write within the file system's timestamp
 *   granularity of the read (which would leave the times as they were) cannot go unseen. What
 *   it cannot see is a file replaced by one with the same inode number, size and both times
 *   (set back with utimensat within one clock tick of the old change time): sysfs files are
 *   never rewritten or set back, only a test tree could do that. "numa_node" is writable in sysfs without a change
 *   of its times, so it is never cached (the scan reads it every time).
 *
 * Only what the current scan met is kept: kata_cache_end() drops the previous scan's entries.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "dp/macro.h"

#define KATA_CACHE_SETTLE_SEC 2

typedef struct kata_cache kata_cache;

/* The attributes kept: each parsed value is read back with the kind it was stored under. */
enum kata_cache_kind { KATA_CACHE_DEV, KATA_CACHE_VENDOR, KATA_CACHE_CLASS, KATA_CACHE_DEVICE };

int kata_cache_new(kata_cache **ret);
kata_cache *kata_cache_free(kata_cache *c);
DP_DEFINE_CLEANUP(kata_cache, kata_cache_free)

/* The fixed parts for root (dp_root()): true with *procfd (owned by the cache, -1 when /proc is
 * missing) and sysroot ("" when unknown) when they were recorded under the same root. */
bool kata_cache_root(const kata_cache *c, const char *root, int *procfd, const char **sysroot);
/* Record them: procfd is taken over (closed by the cache; an earlier one is closed). 0, or
 * -ENAMETOOLONG (procfd stays the caller's). */
int kata_cache_set_root(kata_cache *c, const char *root, int procfd, const char *sysroot);

/* A scan begins: the settle time is measured from now (CLOCK_REALTIME, as file times are). */
void kata_cache_begin(kata_cache *c);
/* The value the previous scan recorded for the file st describes, if any (st from fstatat with
 * AT_SYMLINK_NOFOLLOW). A hit is kept for the next scan. */
bool kata_cache_get(kata_cache *c, const struct stat *st, enum kata_cache_kind kind, uint64_t *ret);
/* Record what this scan read from the file st describes (fstat of the opened file); ignored
 * when the file changed within the settle time, or when memory is short (a miss next time). */
void kata_cache_put(kata_cache *c, const struct stat *st, enum kata_cache_kind kind, uint64_t value);
/* The scan is over: its entries become the ones the next scan looks up. */
void kata_cache_end(kata_cache *c);
