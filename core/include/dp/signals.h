/* SPDX-License-Identifier: Apache-2.0 */
/*
 * signals: the daemons' signal set-up, done for both by dp_daemon_main (daemon.h).
 *
 * dp_signals_block() is the first thing dp_daemon_main does: it blocks SIGTERM, SIGINT and the
 * ignored set below. As PID 1 of its PID namespace (as the images run it) the kernel drops a
 * signal from an ancestor namespace while its disposition is SIG_DFL and it is not blocked: a
 * SIGTERM before the loop's signalfd took it would be lost, and the pod would wait its whole
 * grace period. Blocked, it stays pending until the loop reads it. Helper children get an empty
 * mask before their exec (helper_spawn.c). old (may be NULL) receives the previous mask, for a
 * mode that wants it back (the health-check client).
 *
 * dp_signals_ignore() adds the signals whose default would end the daemon silently and leave its
 * socket behind (SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR) to the
 * loop: none means anything to a daemon, so each is ignored and said at info the first time it
 * arrives ("ignoring signal"; the daemons' own line, as in endpoint_log.c). SIGQUIT keeps its
 * core dump (the next start removes the stale socket).
 */
#pragma once

#include <signal.h>

#include "dp/loop.h"

void dp_signals_block(sigset_t *old);
int dp_signals_ignore(dp_loop *loop);
