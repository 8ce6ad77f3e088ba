/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: the shell every device-plugin daemon runs in. A daemon's main() is one
 * dp_daemon_main() call with a description of the daemon (dp_daemon: its name, flags, --help
 * text, socket prefixes) and its callbacks; everything around them is done here, in this order:
 *
 *  1. SIGTERM, SIGINT and the ignored set are blocked (dp_signals_block, signals.h), before
 *     anything else: a signal during start-up stays pending until the loop reads it.
 *  2. With helpers: "PROG --dp-helper NAME ..." runs that entry and exits (dp_helper_main,
 *     helper.h), before any argument is parsed.
 *  3. The arguments (dp_daemon_parse): --version ("PROG VERSION (commit C)") and --help/-h
 *     (dp_daemon_usage) on stdout, exit 0; --health-check[=readiness]; the daemon's own flags.
 *     Anything else: "PROG: unknown argument 'X'" and the usage on stderr, exit 2.
 *  4. --health-check: the signal mask is restored and the daemon's sockets in the kubelet
 *     directory (too long for them: "kubelet directory DIR too long: N bytes, at most M") are
 *     asked (dp_health_probe, or dp_health_probe_present when health_present:
 *     health.h); exit 0 when healthy, else 1 with "PROG: <reason>" on stderr.
 *  5. LOG_LEVEL is read once (dp_log_init), the gRPC limits are logged at warn, and
 *     msg=starting program=PROG version= commit= [mode=] is logged.
 *  6. The kubelet directory must hold every socket path we make (dp_socket_dir_check,
 *     endpoint.h: at most DP_SOCKET_DIR_MAX bytes), else msg="kubelet directory too long for
 *     the plugin sockets" dir= length= max=, exit 1. configure(): the daemon's configuration,
 *     before any loop exists.
 *  7. SIGPIPE is ignored; the loop is created with SIGTERM and SIGINT (msg="shutting down"
 *     signal=TERM, then exit 0) and the ignored signals (dp_signals_ignore); prepare() adds the
 *     daemon's first sources. A failure: msg="cannot set up the event loop" error=, exit 1.
 *  8. Metrics (dp_metrics_start, metrics.h) unless a given flag has no_metrics: before
 *     confinement, as the listener is a TCP socket. An invalid METRICS_ADDRESS exits 2; a
 *     listener that cannot bind (or be made) is logged by metrics and never ends the daemon.
 *  9. start(): the daemon's endpoints. A failure (logged by start) exits 1.
 * 10. Confinement: dp_seccomp_confine_daemon (seccomp.h) with the rules and exec fd seccomp()
 *     gives (without seccomp(): the core list, no exec). A failure exits 1.
 * 11. The loop runs until dp_loop_exit(): its status is the exit status (0 after SIGTERM or
 *     SIGINT; a daemon may end with its own, e.g. kata's 3).
 * 12. stop() runs exactly once on every path from step 6 on (also when a step failed: it must
 *     accept a half-started daemon), then the metrics listener is stopped and the loop freed;
 *     after a run (step 11), msg=stopped exit=N.
 *
 * Exit statuses: DP_EXIT_OK, DP_EXIT_FAILURE (start-up error; --health-check: not healthy),
 * DP_EXIT_USAGE (bad argument or configuration value), a daemon's own from dp_loop_exit().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "dp/helper.h"
#include "dp/loop.h"
#include "dp/seccomp.h"

enum {
	DP_EXIT_OK = 0,
	DP_EXIT_FAILURE = 1,
	DP_EXIT_USAGE = 2,
};

#define DP_DAEMON_MAX_FLAGS 8
#define DP_DAEMON_MAX_PREFIXES 72 /* health-check socket prefixes (kata: 64 rows and two more) */
#define DP_DAEMON_PREFIX_MAX 128  /* bytes of one prefix, NUL included */
#define DP_DAEMON_MAX_RULES 32    /* seccomp rules a daemon adds to the core list */

/* A boolean flag of the daemon's own, e.g. hyperlight's "--device-access". */
typedef struct dp_daemon_flag {
	const char *name; /* the exact argument */
	const char *mode; /* the starting line's mode= when given (NULL: the daemon's default) */
	bool no_metrics;  /* when given, no metrics listener */
} dp_daemon_flag;

/* What the arguments asked for. */
typedef struct dp_daemon_args {
	bool health_check;
	bool readiness; /* --health-check=readiness */
	unsigned flags; /* bit i: the daemon's flags[i] was given */
} dp_daemon_args;

static inline bool dp_daemon_flag_given(const dp_daemon_args *a, size_t i)
{
	return i < DP_DAEMON_MAX_FLAGS && (a->flags & (1u << i));
}

typedef enum dp_daemon_parse_result {
	DP_DAEMON_RUN,          /* run (or health-check): the arguments are in *ret */
	DP_DAEMON_DONE,         /* --version or --help printed: exit 0 */
	DP_DAEMON_BAD_ARGUMENT, /* said on err, with the usage: exit 2 */
} dp_daemon_parse_result;

typedef struct dp_daemon {
	const char *prog; /* "hyperlight-device-plugin": messages, --version, metrics */
	const dp_helper_entry *helpers; /* the --dp-helper entries (none: no helper mode) */
	size_t n_helpers;
	const dp_daemon_flag *flags; /* at most DP_DAEMON_MAX_FLAGS */
	size_t n_flags;
	const char *mode; /* mode= of the starting line without a mode flag (NULL: no mode=) */

	/* --help: "Usage: PROG [flags...] [--health-check[=readiness]] [--version] [-h|--help]",
	 * usage() (what the daemon does, then its option lines, the health check's included), the
	 * --version and --help lines, "Environment:", usage_env(), DP_USAGE_ENV_COMMON, and the
	 * exit statuses (one paragraph, word-wrapped): "0 after SIGTERM or SIGINT; 1 for a startup
	 * error (<exit_startup>); 2 for a bad argument or an invalid [<exit_invalid> or
	 * ]METRICS_ADDRESS[; <exit_more>]. --health-check: 0 healthy, 1 not." */
	void (*usage)(FILE *f);
	void (*usage_env)(FILE *f);
	const char *exit_startup; /* "/dev/vfio/devices unreadable, the seccomp filter ..." */
	const char *exit_invalid; /* NULL, or the daemon's own variables: "RESOURCE_NAMING" */
	const char *exit_more;    /* NULL, or "3 when the VFIO device set changed (...)" */

	/* --health-check (required): the socket prefixes to ask (dp_socket_prefix, endpoint.h),
	 * into names[0..*ret_n) (at most max); a negative errno when they cannot be named. */
	int (*health_prefixes)(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max,
			       size_t *ret_n);
	bool health_present; /* sockets exist only for present hardware (dp_health_probe_present) */
	/* Optional: where those sockets are, a host path (the root prefix is added) into buf; 1 when
	 * it is not the kubelet's device-plugins directory (DRA: the driver's plugin directory),
	 * 0 for that directory, a negative errno when it cannot be named. */
	int (*health_dir)(const dp_daemon_args *a, char *buf, size_t size);

	/* The run; userdata is dp_daemon_main's. Each may be NULL but start. */
	int (*configure)(const dp_daemon_args *a, void *userdata); /* 0, or an exit status (logged) */
	int (*prepare)(dp_loop *loop, void *userdata);             /* negative errno */
	int (*start)(dp_loop *loop, void *userdata);               /* negative errno, logged by start */
	/* The daemon's rules (at most max) into rules, its exec fd (-1: none) into *ret_exe_fd. */
	size_t (*seccomp)(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd);
	void (*stop)(void *userdata);
} dp_daemon;

/* The whole life of the process (steps above); returns its exit status. */
int dp_daemon_main(const dp_daemon *d, void *userdata, int argc, char **argv);

/* Step 3: --version and --help print on out; an unknown argument is said on err. *ret is
 * written only for DP_DAEMON_RUN. */
dp_daemon_parse_result dp_daemon_parse(const dp_daemon *d, int argc, char **argv, FILE *out, FILE *err,
				       dp_daemon_args *ret);
/* The --help text. */
void dp_daemon_usage(const dp_daemon *d, FILE *f);
