/* SPDX-License-Identifier: Apache-2.0 */
/* ratelimit: a fixed-window limiter for log lines (dp/ratelimit.h). */
#include "dp/ratelimit.h"

static bool window_open(const dp_ratelimit *rl, uint64_t now)
{
	return rl->begin != 0 && now - rl->begin < rl->interval_usec;
}

bool dp_ratelimit_pass(dp_ratelimit *rl, uint64_t now)
{
	if (!window_open(rl, now)) {
		if (rl->suppressed)
			return false; /* its summary is owed first (dp_ratelimit_closed) */
		rl->begin = now ? now : 1;
		rl->passed = 0;
	}
	if (rl->passed < rl->burst) {
		rl->passed++;
		return true;
	}
	rl->suppressed++;
	return false;
}

unsigned long long dp_ratelimit_closed(dp_ratelimit *rl, uint64_t now)
{
	unsigned long long n = rl->suppressed;

	if (window_open(rl, now))
		return 0;
	rl->begin = 0;
	rl->passed = 0;
	rl->suppressed = 0;
	return n;
}

uint64_t dp_ratelimit_end(const dp_ratelimit *rl)
{
	return rl->begin ? rl->begin + rl->interval_usec : 0;
}
