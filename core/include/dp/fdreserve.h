/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fdreserve: file descriptors held in reserve for the daemon's own work (the probe helper's
 * start, the CDI sync), so that clients holding connections up to RLIMIT_NOFILE cannot take
 * them. The reserve is a few duplicates of one /dev/null fd. Whoever needs fds releases the
 * reserve, opens what it needs, and refills it before returning to the loop: the loop is
 * single-threaded, so no accept can take the released fds in between. Process-wide state.
 */
#pragma once

/* Hold n fds (at most DP_FD_RESERVE_MAX; 0 drops the reserve). -EINVAL over the maximum,
 * else the negative errno when not even one could be taken (the reserve then stays empty and
 * the refills try again). */
int dp_fd_reserve(unsigned n);
/* Close every held fd: the caller's next opens can use them. No-op without a reserve. */
void dp_fd_reserve_release(void);
/* Take back the fds released or missing, as many as can be had now; returns how many are held. */
unsigned dp_fd_reserve_refill(void);
/* How many are held now, and how many are wanted. */
unsigned dp_fd_reserve_held(void);
unsigned dp_fd_reserve_wanted(void);

#define DP_FD_RESERVE_MAX 32
