/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cdi_backoff: (internal to the cdi module) when to repair an owned file that keeps being
 * replaced by another writer (two releases on one node owning the same spec). A state machine
 * on times given by the caller (CLOCK_MONOTONIC microseconds): no clock, no loop, no log, so
 * it is tested with made-up times. core/src/cdi/cdi.c feeds it what dp_cdi_file_sync() finds, and
 * names the other writer's content with dp_cdi_backoff_describe().
 *
 * Our write is "overwritten" when a later sync finds other bytes (or no file). Each write of
 * ours overwritten less than stable_usec after we made it extends the streak; a write that
 * stayed stable_usec or longer ends it. The first free_repairs overwrites of a streak are
 * repaired at once (an operator's or a tool's edits); the next one starts an episode: the
 * repair waits min_usec, and twice as long each time our write is overwritten again, up to
 * max_usec. The episode ends when our bytes have stayed in place for stable_usec, or when an
 * overwrite finds that our last write had stayed that long. stable_usec must exceed max_usec
 * (with the defaults, two daemons that both back off stay in their episodes: each one's write
 * lasts about the other's delay, at most max_usec).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DP_CDI_BACKOFF_FREE 4U
#define DP_CDI_BACKOFF_MIN_USEC (1ULL * 1000000ULL)
#define DP_CDI_BACKOFF_MAX_USEC (60ULL * 1000000ULL)
#define DP_CDI_BACKOFF_STABLE_USEC (120ULL * 1000000ULL)

typedef enum dp_cdi_backoff_event {
	DP_CDI_BACKOFF_NONE,
	DP_CDI_BACKOFF_STARTED, /* this overwrite began an episode: the repair now waits */
	DP_CDI_BACKOFF_ENDED,   /* the episode is over: repairs are immediate again */
} dp_cdi_backoff_event;

typedef struct dp_cdi_backoff {
	unsigned free_repairs;
	uint64_t min_usec, max_usec, stable_usec;
	uint64_t written_at;     /* our last write; 0: none yet */
	bool judged;             /* that write was already found overwritten */
	unsigned streak;         /* our writes overwritten early, in a row */
	uint64_t delay;          /* the current wait; 0: no episode */
	uint64_t not_before;     /* episode: no repair before this time */
	uint64_t in_place_since; /* episode: our bytes seen in place since; 0: not in place */
} dp_cdi_backoff;

/* The defaults above, no episode. */
void dp_cdi_backoff_init(dp_cdi_backoff *b);
/* A sync found other bytes (or no file) at now. Returns the earliest time our repair may be
 * written (now: at once). *ret_event: STARTED when this overwrite began an episode, ENDED when
 * it found our last write had stayed stable_usec (the old episode is over; this overwrite is
 * the first of a new streak), NONE otherwise. Overwrites found while we wait (our write was
 * already judged) change nothing. */
uint64_t dp_cdi_backoff_foreign(dp_cdi_backoff *b, uint64_t now, dp_cdi_backoff_event *ret_event);
/* We wrote our bytes at now. */
void dp_cdi_backoff_written(dp_cdi_backoff *b, uint64_t now);
/* A sync found our bytes in place at now (after writing them or not). Returns 0 when there is
 * no episode (*ret_event ENDED when this call ended it: our bytes stayed stable_usec), else
 * the time at which the episode ends if nothing changes. */
uint64_t dp_cdi_backoff_in_place(dp_cdi_backoff *b, uint64_t now, dp_cdi_backoff_event *ret_event);
/* The current wait (0: no episode) and the streak. */
uint64_t dp_cdi_backoff_delay(const dp_cdi_backoff *b);
unsigned dp_cdi_backoff_streak(const dp_cdi_backoff *b);

/* How much of the other writer's file is read to describe it. */
#define DP_CDI_BACKOFF_READ_MAX 65536
/* A short printable description of the file name in dirfd as another writer left it, for a
 * log line (the caller quotes it): "412 bytes, fnv1a 9c0e3f21, line 9: \"uid\": 2000," (its
 * size, FNV-1a 32 of its first DP_CDI_BACKOFF_READ_MAX bytes, and the first line that differs
 * from ours, at most 48 characters, non-printable bytes as '?'); "..., ends early" when it is
 * a prefix of ours; "no file"; "not a regular file"; "unreadable: <strerror>". Never fails (out
 * is always a terminated string; size > 0). */
void dp_cdi_backoff_describe(int dirfd, const char *name, const void *ours, size_t len, char *out,
			     size_t size);
