/* SPDX-License-Identifier: Apache-2.0 */
/* loop_timer: timer sources (timerfd): one-shot, periodic, as soon as possible, and on the coarse grid. */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "dp/log.h"
#include "loop_internal.h"

void loop_dispatch_timer(dp_source *s)
{
	uint64_t expirations;

	/* EAGAIN: re-armed or disarmed earlier in this batch; the event is stale. */
	if (read(s->fd, &expirations, sizeof(expirations)) != (ssize_t)sizeof(expirations))
		return;
	s->asap = false; /* fired: the next request arms it again (also from fn) */
	int r = s->fn.timer(s, s->userdata);
	if (r < 0)
		dp_debug("timer callback failed", "error=%s", dp_errname(r));
}

static void usec_to_timespec(uint64_t usec, struct timespec *ts)
{
	ts->tv_sec = (time_t)(usec / DP_USEC_PER_SEC);
	ts->tv_nsec = (long)(usec % DP_USEC_PER_SEC) * 1000L;
}

static int timer_arm(int fd, uint64_t usec, uint64_t interval_usec)
{
	struct itimerspec its = {0};

	usec_to_timespec(interval_usec, &its.it_interval);
	if (usec > 0 || interval_usec > 0) {
		usec_to_timespec(usec, &its.it_value);
		if (usec == 0)
			its.it_value.tv_nsec = 1; /* 0 would disarm: "as soon as possible" */
	}
	if (timerfd_settime(fd, 0, &its, NULL) < 0)
		return -errno;
	return 0;
}

int dp_timer_add_disarmed(dp_loop *l, dp_timer_fn fn, void *userdata, dp_source **ret)
{
	int fd;

	if (!l || !fn || !ret)
		return -EINVAL;
	fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	return loop_source_add_owned(l, SOURCE_TIMER, fd, (source_fn){ .timer = fn }, userdata, ret);
}

int dp_timer_add(dp_loop *l, uint64_t usec, uint64_t interval_usec, dp_timer_fn fn, void *userdata,
		 dp_source **ret)
{
	dp_source *s = NULL;
	int r = dp_timer_add_disarmed(l, fn, userdata, &s);

	if (r < 0)
		return r;
	if (usec == 0 && interval_usec == 0) /* one-shot "now" */
		r = dp_timer_set_asap(s);
	else
		r = timer_arm(s->fd, usec, interval_usec);
	if (r < 0) {
		dp_source_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

int dp_timer_set(dp_source *s, uint64_t usec, uint64_t interval_usec)
{
	if (!s || s->dead || s->type != SOURCE_TIMER)
		return -EINVAL;
	s->asap = false;
	return timer_arm(s->fd, usec, interval_usec);
}

/* Armed as soon as possible and not fired since: nothing to do (a burst of requests, one per
 * event of a flood, costs one system call, not one each). */
int dp_timer_set_asap(dp_source *s)
{
	struct itimerspec its = {.it_value.tv_nsec = 1};

	if (!s || s->dead || s->type != SOURCE_TIMER)
		return -EINVAL;
	if (s->asap)
		return 0;
	if (timerfd_settime(s->fd, 0, &its, NULL) < 0)
		return -errno;
	s->asap = true;
	return 0;
}

int dp_timer_set_coarse(dp_source *s, uint64_t usec, uint64_t interval_usec)
{
	struct itimerspec its = {0};
	uint64_t at;

	if (!s || s->dead || s->type != SOURCE_TIMER)
		return -EINVAL;
	s->asap = false;
	if (usec < DP_TIMER_GRID_USEC)
		return timer_arm(s->fd, usec, interval_usec);
	/* the slack: re-armed from a grid expiry's callback (a few ms after it), a timer lands
	 * usec later on the grid, not one step more (a 30 s check re-armed that way ran every 35 s,
	 * each time a wake-up of its own) */
	at = (dp_now_usec() + usec - DP_TIMER_SLACK_USEC + DP_TIMER_GRID_USEC - 1) / DP_TIMER_GRID_USEC *
	     DP_TIMER_GRID_USEC;
	usec_to_timespec(at, &its.it_value);
	usec_to_timespec(interval_usec, &its.it_interval);
	if (timerfd_settime(s->fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
		return -errno;
	return 0;
}
