/* SPDX-License-Identifier: Apache-2.0 */
/* signals: SIGTERM kept when it arrives during start-up, stray signals ignored (signals.h). */
#include "dp/signals.h"

#include <stdint.h>
#include <string.h>

#include "dp/log.h"
#include "dp/macro.h"

static const int ignored_signals[] = { SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR };

static int on_ignored_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	static uint64_t told; /* one bit per signal number */
	unsigned sig = si->ssi_signo;
	if (sig < 64 && !(told & (1ULL << sig))) {
		told |= 1ULL << sig;
		dp_info("ignoring signal", "signal=%s sender_pid=%u", sigabbrev_np((int)sig), si->ssi_pid);
	}
	return 0;
}

void dp_signals_block(sigset_t *old)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	for (size_t i = 0; i < DP_ELEMENTSOF(ignored_signals); i++)
		sigaddset(&set, ignored_signals[i]);
	(void)sigprocmask(SIG_BLOCK, &set, old);
}

int dp_signals_ignore(dp_loop *loop)
{
	dp_source *src = NULL; /* freed with the loop */
	int r = 0;
	for (size_t i = 0; r >= 0 && i < DP_ELEMENTSOF(ignored_signals); i++)
		r = dp_signal_add(loop, ignored_signals[i], on_ignored_signal, NULL, &src);
	return r;
}
