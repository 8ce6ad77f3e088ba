/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop: one single-threaded epoll loop. Every event source is a dp_source dispatched through
 * epoll_event.data.ptr: file descriptors, timers (timerfd), signals (signalfd), child exits
 * (pidfd) and inotify watches. A source freed while a batch of events is being dispatched is
 * disabled at once and released only after the batch (deferred free), so a callback may free
 * any source, including its own, and any other source's pending event is then skipped.
 *
 * All fds are O_CLOEXEC. Times are CLOCK_MONOTONIC microseconds. Errors are negative errno.
 * A callback's return value is ignored except that a negative value is logged at debug level.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "dp/macro.h"

typedef struct dp_loop dp_loop;
typedef struct dp_source dp_source;

#define DP_USEC_PER_SEC 1000000ULL
#define DP_USEC_PER_MSEC 1000ULL

typedef int (*dp_io_fn)(dp_source *s, int fd, uint32_t revents, void *userdata);
typedef int (*dp_timer_fn)(dp_source *s, void *userdata);
typedef int (*dp_signal_fn)(dp_source *s, const struct signalfd_siginfo *si, void *userdata);
/* si is the waitid() result for the reaped child (si_code CLD_EXITED/KILLED/DUMPED, si_status). */
typedef int (*dp_child_fn)(dp_source *s, const siginfo_t *si, void *userdata);
/* Called once per inotify event; ev->name is relative to the watched path (len may be 0). */
typedef int (*dp_inotify_fn)(dp_source *s, const struct inotify_event *ev, void *userdata);
typedef void (*dp_defer_fn)(void *userdata);

/* Current CLOCK_MONOTONIC time in microseconds. */
uint64_t dp_now_usec(void);

int dp_loop_new(dp_loop **ret);
/* Frees every remaining source (closing the fds the loop owns) and drops deferred calls without
 * running them. Not from inside a callback; free the sources' owners first. Accepts NULL,
 * returns NULL. */
dp_loop *dp_loop_free(dp_loop *l);
DP_DEFINE_CLEANUP(dp_loop, dp_loop_free)

/* Dispatch until dp_loop_exit(); returns the exit code given there. */
int dp_loop_run(dp_loop *l);
/* Wait at most timeout_ms (-1 = forever) for one batch of events and dispatch it; then run
 * deferred calls and frees. Returns the number of events dispatched, or negative errno. */
int dp_loop_run_once(dp_loop *l, int timeout_ms);
void dp_loop_exit(dp_loop *l, int code);
bool dp_loop_exiting(const dp_loop *l);

/* Watch fd (not owned, not closed by the loop) for EPOLLIN/EPOLLOUT/... (level-triggered).
 * Free the source before closing fd. -EEXIST when fd is already watched by this loop. */
int dp_io_add(dp_loop *l, int fd, uint32_t events, dp_io_fn fn, void *userdata, dp_source **ret);
int dp_io_set_events(dp_source *s, uint32_t events);

/* A timer firing first after usec (relative; 0 = as soon as possible) and then every
 * interval_usec (0 = one-shot; a one-shot timer stays allocated and can be re-armed). */
int dp_timer_add(dp_loop *l, uint64_t usec, uint64_t interval_usec, dp_timer_fn fn, void *userdata,
		 dp_source **ret);
/* A timer that does not fire until dp_timer_set*() arms it. */
int dp_timer_add_disarmed(dp_loop *l, dp_timer_fn fn, void *userdata, dp_source **ret);
/* Re-arm (usec > 0 or interval > 0) or disarm (both 0; use dp_timer_set_asap for "now").
 * usec 0 with interval > 0 fires as soon as possible, then every interval. An expiry pending
 * in the current batch is dropped by a re-arm or disarm (fn is not called for it). */
int dp_timer_set(dp_source *s, uint64_t usec, uint64_t interval_usec);
/* Fire once as soon as possible (fn runs after this call, in this batch or the next). A timer
 * already requested this way and not fired since (nor re-armed or disarmed by the calls above)
 * is left as it is, without a system call: a burst of requests (one per event of a flood) makes
 * one callback, and the request is never pushed back. The first request after fn began arms
 * it again, so fn may request itself. */
int dp_timer_set_asap(dp_source *s);

/* Backstop and periodic timers share wake-ups: with usec >= DP_TIMER_GRID_USEC the timer fires
 * first at the earliest multiple of DP_TIMER_GRID_USEC on CLOCK_MONOTONIC at or after usec minus
 * DP_TIMER_SLACK_USEC from now (so up to the slack early, up to one grid step late), then every
 * interval_usec (0: one-shot; a multiple of the grid stays on it). Every coarse timer of the
 * process (and of other processes using the same grid) expires at the same instants, so a 5 s
 * backstop and a 30 s check wake the process once, not twice; the slack keeps a one-shot timer
 * re-armed from a grid expiry's callback on the same instants as the periodic ones. Below the
 * grid it is dp_timer_set. */
#define DP_TIMER_GRID_USEC (5 * DP_USEC_PER_SEC)
#define DP_TIMER_SLACK_USEC (1 * DP_USEC_PER_SEC)
int dp_timer_set_coarse(dp_source *s, uint64_t usec, uint64_t interval_usec);

/* Block sig in this thread and receive it through a signalfd. The signal stays blocked after
 * the source is freed. -EINVAL for SIGKILL, SIGSTOP or an invalid number. */
int dp_signal_add(dp_loop *l, int sig, dp_signal_fn fn, void *userdata, dp_source **ret);

/* Track child pid through a pidfd (pidfd_open); fn runs once after the loop reaped it with
 * waitid(WEXITED). The source must still be freed by its owner. If the child was reaped by
 * someone else (waitid ECHILD), fn gets si_code 0 and si_pid = pid. A child whose source is
 * freed before it was reaped is not reaped by the loop. -ESRCH when pid does not exist.
 * Where pidfd_open does not exist (ENOSYS: kernels before 5.3, valgrind 3.19) the child is
 * polled with waitid(WNOHANG) every 10 ms instead, and dp_child_kill uses kill(2). */
int dp_child_add(dp_loop *l, pid_t pid, dp_child_fn fn, void *userdata, dp_source **ret);
/* Send a signal through the pidfd (pidfd_send_signal): never hits a recycled pid.
 * -ESRCH once reaped. */
int dp_child_kill(dp_source *s, int sig);
/* True once the child was reaped. */
bool dp_child_reaped(const dp_source *s);

/* Watch path with its own inotify instance; mask as for inotify_add_watch (IN_IGNORED always
 * reaches fn: the watch is gone then; free the source and add a new one to re-arm). Each turn
 * of the loop reads at most one 4 KiB buffer of the queued events (at least one event, up to
 * 256) and leaves the rest for the next turns, after the other ready sources: a flood of events
 * delays them, it does not stop the loop. A queue that overflows meanwhile reports
 * IN_Q_OVERFLOW (events were lost: rescan). */
int dp_inotify_add(dp_loop *l, const char *path, uint32_t mask, dp_inotify_fn fn, void *userdata,
		   dp_source **ret);

/* Disable the source now, release it after the current batch. Accepts NULL, returns NULL. */
dp_source *dp_source_free(dp_source *s);
DP_DEFINE_CLEANUP(dp_source, dp_source_free)
dp_loop *dp_source_loop(const dp_source *s);

/* Run fn(userdata) after the current batch (or at the next dp_loop_run_once), in FIFO order.
 * A call deferred from a deferred call runs at the next dp_loop_run_once, which then does not
 * block. -ENOMEM. */
int dp_defer(dp_loop *l, dp_defer_fn fn, void *userdata);
