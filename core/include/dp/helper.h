/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helper: run one named function in a child process (the daemon's own binary re-executed in
 * helper mode) with a deadline. At most one child exists at a time; requests that arrive while
 * it runs join it and get the same result. A requester that goes away (dp_helper_wait_cancel)
 * never cancels the shared run nor changes its result. At the deadline the child is sent
 * SIGKILL (through its pidfd); a child that is still not reaped after a grace period keeps the
 * helper "blocked": every request fails at once with that reason until the child is reaped.
 *
 * Child protocol: the binary is started (clone + execveat of the fd dp_helper_new opened, default
 * signal dispositions, empty signal mask; helper_spawn.c) as
 * <exe> --dp-helper <name> [args...]  with stdin /dev/null, stdout a
 * pipe and stderr inherited; it writes exactly one line: "ok[ detail]\n" or "fail <reason>\n"
 * and exits 0. Anything else is a failure with a precise reason:
 *   "<reason>"                                   exit 0 and "fail <reason>"
 *   "helper killed by signal 6 (SIGABRT)"        killed by a signal
 *   "helper exited with status 3"                other exit status (": <reason>" appended when
 *                                                the output was a valid "fail <reason>" line)
 *   "helper exited without a result"             exit 0, nothing printed
 *   "helper printed an invalid result: <text>"   not exactly one valid line; <text> is the first
 *                                                64 bytes, non-printable bytes shown as '?'
 *   "helper printed more than 4096 bytes"        (the rest is read and discarded)
 *   "timeout after 2 s" / "timeout after 150 ms" the deadline passed (child sent SIGKILL)
 *   "previous helper (pid N) not reaped after SIGKILL; probes blocked"
 *   "cannot start helper <exe>: <strerror>"      pipe/spawn failed (e.g. exe missing, out of
 *                                                fds or memory); start_error holds the errno
 * The start uses the process's fd reserve (dp/fdreserve.h): released just before, refilled
 * right after, and refilled again when a run's fds are closed.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dp/loop.h"

#define DP_HELPER_ARG "--dp-helper"
#define DP_HELPER_REASON_MAX 256

typedef struct dp_helper dp_helper;
typedef struct dp_helper_wait dp_helper_wait;

typedef struct dp_helper_result {
	bool ok;
	char reason[DP_HELPER_REASON_MAX]; /* failure reason, or the "ok" detail (may be empty) */
	unsigned run;      /* the run this result ends (1, 2, ...: every requester of it gets the
			    * same), 0 when it ends none (a start failure, "probes blocked") */
	uint64_t run_usec; /* that run's duration, start to result */
	int start_error;   /* the negative errno when no child could be started (pipe, clone,
			    * exec: -EMFILE, -ENOMEM, -EAGAIN, -ENOENT...): nothing ran, so the
			    * result says nothing about what the helper checks; else 0 */
} dp_helper_result;

typedef void (*dp_helper_done_fn)(const dp_helper_result *r, void *userdata);

/* ---- child side ---- */

/* A helper function: writes its result with dp_helper_reply_ok/fail and returns (then the
 * process _exit(0)s). argv[0] is the entry name, argv[1..argc-1] the arguments after it. */
typedef void (*dp_helper_fn)(int argc, char **argv);
typedef struct dp_helper_entry {
	const char *name;
	dp_helper_fn fn;
} dp_helper_entry;

/* Call first in main(): when argv[1] is DP_HELPER_ARG, run the named entry and _exit(0)
 * (unknown name: "fail unknown helper X", exit 2). Returns normally otherwise. */
void dp_helper_main(int argc, char **argv, const dp_helper_entry *entries, size_t n);
/* Write the result line (one write; control chars in the text become spaces; the text is cut
 * to DP_HELPER_REASON_MAX - 1 bytes). detail may be NULL. */
void dp_helper_reply_ok(const char *detail);
void dp_helper_reply_fail(const char *fmt, ...) _printf_(1, 2);

/* ---- parent side ---- */

/* The program name (no '/') in our own binary's directory (where /proc/self/exe links) into
 * buf: a helper shipped beside the daemon. -EINVAL, -ENOENT (/proc/self/exe unreadable),
 * -ENAMETOOLONG; buf is written only on success. */
int dp_helper_sibling(const char *name, char *buf, size_t size);

/* exe: path to execute (NULL: our own binary, where /proc/self/exe links); argv: name and arguments after DP_HELPER_ARG
 * (copied, NULL-terminated); deadline_usec: from the start of each run; kill_grace_usec: time
 * after SIGKILL before the helper counts as blocked (it stays blocked until reaped).
 * -EINVAL (NULL loop/argv/ret, empty name or exe, deadline 0), -ENOMEM, timerfd errors. */
int dp_helper_new(dp_loop *loop, const char *exe, char *const argv[], uint64_t deadline_usec,
		  uint64_t kill_grace_usec, dp_helper **ret);
/* The name and arguments of the next runs (copied; the executable and its fd stay): one helper
 * running different calls one at a time. -EBUSY while a run is in progress, -EINVAL, -ENOMEM
 * (the old ones kept). */
int dp_helper_set_argv(dp_helper *h, char *const argv[]);
/* Kills a running child (SIGKILL; the loop still reaps it) and frees; pending waiters get no
 * callback and their dp_helper_wait handles become invalid. May be called from a done
 * callback. Accepts NULL, returns NULL. */
dp_helper *dp_helper_free(dp_helper *h);
DP_DEFINE_CLEANUP(dp_helper, dp_helper_free)

/* Ask for a result: joins the run in flight or starts one. done runs once, from the loop,
 * never inside this call. While a killed child is not reaped, the request waits for the reap
 * (then a new run starts) until kill_grace_usec after the SIGKILL; later it fails at once
 * (delivered from the loop) with the "probes blocked" reason. ret_wait (may be NULL) lets the
 * requester go away; the handle is valid until done has been called or it is cancelled.
 * -EINVAL (NULL h or done), -ENOMEM. */
int dp_helper_request(dp_helper *h, dp_helper_done_fn done, void *userdata, dp_helper_wait **ret_wait);
/* The requester goes away: no callback; the run goes on and its result still reaches the
 * others and dp_helper_last(). Accepts NULL. */
void dp_helper_wait_cancel(dp_helper_wait *w);

/* A run is in progress (started, result not delivered yet). */
bool dp_helper_running(const dp_helper *h);
/* The child killed at its deadline is still not reaped kill_grace_usec after the SIGKILL. */
bool dp_helper_blocked(const dp_helper *h);
/* Result of the last finished run, or of the last failure to start one (NULL before the first).
 * A "probes blocked" failure is not a run and does not replace it. */
const dp_helper_result *dp_helper_last(const dp_helper *h);
/* The O_PATH fd of the helper binary, opened by dp_helper_new and kept open (a daemon's seccomp
 * filter allows exec through this fd only: dp_seccomp_exec_rule). -EBADF when it could not be
 * opened (every run then reports why), -EINVAL for NULL. */
int dp_helper_exe_fd(const dp_helper *h);
/* Number of children started so far (for tests and metrics). */
unsigned dp_helper_runs(const dp_helper *h);
