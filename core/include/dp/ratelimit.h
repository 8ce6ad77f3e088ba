/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ratelimit: a fixed-window limiter for log lines. A window opens at the first event after the
 * previous one closed and lasts interval_usec; its first burst events pass, later ones are
 * counted as suppressed. The owner says so once the window closed (dp_ratelimit_closed), with
 * one summary line: a flood costs at most burst + 1 lines per window.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct dp_ratelimit {
	uint64_t interval_usec;
	unsigned burst;
	uint64_t begin;                /* when the current window opened; 0: none open */
	unsigned passed;               /* events passed in it */
	unsigned long long suppressed; /* events suppressed in it */
} dp_ratelimit;

#define DP_RATELIMIT_INIT(interval, n) { .interval_usec = (interval), .burst = (n) }

/* Whether the event at now (dp_now_usec()) may be logged. A window that closed by now with
 * suppressed events is kept (for dp_ratelimit_closed) and nothing passes until it is taken. */
bool dp_ratelimit_pass(dp_ratelimit *rl, uint64_t now);
/* The suppressed count of the window once it closed by now, resetting the limiter; 0 while it
 * is open or when it suppressed nothing. */
unsigned long long dp_ratelimit_closed(dp_ratelimit *rl, uint64_t now);
/* When the open window closes (0: none open). */
uint64_t dp_ratelimit_end(const dp_ratelimit *rl);
