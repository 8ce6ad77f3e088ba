/* SPDX-License-Identifier: Apache-2.0 */
/* daemon: the daemons' process life, from the signal mask to the exit status (daemon.h). */
#include "dp/daemon.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/fdreserve.h"
#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/log.h"
#include "dp/macro.h"
#include "dp/metrics.h"
#include "dp/paths.h"
#include "dp/signals.h"
#include "dp_version.h"

#define HEALTH_TIMEOUT_USEC (3 * DP_USEC_PER_SEC)
/* fds held back from clients (dp/fdreserve.h): a probe helper's start (its output pipe, the
 * exec-error pipe, /dev/null: 5 at once, then its pidfd) or a CDI sync (the directory, the file,
 * a temporary file), with room for a node-label child's pipe and pidfd in flight. */
#define DP_DAEMON_FD_RESERVE 8

/* Step 4: the exec probe's client. */
static int health_check(const dp_daemon *d, const dp_daemon_args *a)
{
	char dir[PATH_MAX], err[1024], own[PATH_MAX] = DP_KUBELET_DIR;
	char names[DP_DAEMON_MAX_PREFIXES][DP_DAEMON_PREFIX_MAX];
	const char *prefixes[DP_DAEMON_MAX_PREFIXES];
	size_t n = 0;
	int r = d->health_dir ? d->health_dir(a, own, sizeof(own)) : 0;

	if (r == 0)
		snprintf(own, sizeof(own), "%s", DP_KUBELET_DIR);
	if (r < 0) {
		fprintf(stderr, "%s: cannot name the plugin socket directory: %s\n", d->prog, strerror(-r));
		return DP_EXIT_FAILURE;
	}
	r = dp_path(dir, sizeof(dir), own);

	if (r < 0)
		snprintf(err, sizeof(err), "invalid %s", DP_TEST_ROOT_ENV);
	else if ((r = dp_socket_dir_check(dir)) < 0)
		snprintf(err, sizeof(err), "kubelet directory %.900s too long: %zu bytes, at most %d", dir, strlen(dir),
			 DP_SOCKET_DIR_MAX);
	else if ((r = d->health_prefixes(a, names, DP_ELEMENTSOF(names), &n)) < 0)
		snprintf(err, sizeof(err), "cannot name the plugin sockets: %s", strerror(-r));
	if (r >= 0) {
		n = n < DP_ELEMENTSOF(prefixes) ? n : DP_ELEMENTSOF(prefixes);
		for (size_t i = 0; i < n; i++)
			prefixes[i] = names[i];
		r = (d->health_present ? dp_health_probe_present : dp_health_probe)(
			dir, prefixes, n, a->readiness, HEALTH_TIMEOUT_USEC, err, sizeof(err));
	}
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", d->prog, err);
		return DP_EXIT_FAILURE;
	}
	return DP_EXIT_OK;
}

static int on_signal(dp_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	dp_info("shutting down", "signal=%s", sigabbrev_np((int)si->ssi_signo));
	dp_loop_exit(userdata, DP_EXIT_OK);
	return 0;
}

/* The mode= of the starting line: the last given flag's that has one, else the default. */
static const char *mode(const dp_daemon *d, const dp_daemon_args *a)
{
	const char *m = d->mode;
	for (size_t i = 0; i < d->n_flags; i++)
		if (dp_daemon_flag_given(a, i) && d->flags[i].mode)
			m = d->flags[i].mode;
	return m;
}

static bool metrics_wanted(const dp_daemon *d, const dp_daemon_args *a)
{
	for (size_t i = 0; i < d->n_flags; i++)
		if (dp_daemon_flag_given(a, i) && d->flags[i].no_metrics)
			return false;
	return true;
}

/* Step 7. */
static int setup_loop(const dp_daemon *d, void *userdata, dp_loop **ret)
{
	dp_source *sigterm = NULL, *sigint = NULL; /* freed with the loop */
	int r;
	(void)signal(SIGPIPE, SIG_IGN);
	if ((r = dp_loop_new(ret)) < 0 || (r = dp_signal_add(*ret, SIGTERM, on_signal, *ret, &sigterm)) < 0 ||
	    (r = dp_signal_add(*ret, SIGINT, on_signal, *ret, &sigint)) < 0 || (r = dp_signals_ignore(*ret)) < 0 ||
	    (d->prepare && (r = d->prepare(*ret, userdata)) < 0)) {
		dp_error("cannot set up the event loop", "error=%s", strerror(-r));
		return r;
	}
	return 0;
}

/* Step 10. */
static int confine(const dp_daemon *d, void *userdata)
{
	dp_seccomp_rule rules[DP_DAEMON_MAX_RULES];
	int exe_fd = -1;
	size_t n = d->seccomp ? d->seccomp(userdata, rules, DP_ELEMENTSOF(rules), &exe_fd) : 0;
	return dp_seccomp_confine_daemon(rules, n, exe_fd);
}

/* Step 6: every socket path in the kubelet directory fits a sockaddr_un (dp_socket_dir_check),
 * or one error line and exit 1: a bind would fail on every attempt. */
static int check_kubelet_dir(void)
{
	char dir[PATH_MAX], q[PATH_MAX + 8];
	if (dp_path(dir, sizeof(dir), DP_KUBELET_DIR) < 0 || dp_socket_dir_check(dir) == 0)
		return DP_EXIT_OK; /* an invalid root prefix is the daemon's to report */
	dp_error("kubelet directory too long for the plugin sockets", "dir=%s length=%zu max=%d",
		 dp_logq(q, sizeof(q), dir), strlen(dir), DP_SOCKET_DIR_MAX);
	return DP_EXIT_FAILURE;
}

/* Steps 6 to 11 (the loop goes to *loop, for the caller to free after stop); *ran tells that
 * the loop ran. */
static int serve(const dp_daemon *d, const dp_daemon_args *a, void *userdata, dp_loop **loop, bool *ran)
{
	int r = check_kubelet_dir();
	if (r != DP_EXIT_OK)
		return r;
	r = d->configure ? d->configure(a, userdata) : DP_EXIT_OK;
	if (r != DP_EXIT_OK)
		return r;
	if (setup_loop(d, userdata, loop) < 0)
		return DP_EXIT_FAILURE;
	if ((r = dp_fd_reserve(DP_DAEMON_FD_RESERVE)) < 0) {
		dp_error("cannot start", "error=\"cannot reserve file descriptors: %s\"", strerror(-r));
		return DP_EXIT_FAILURE;
	}
	if (metrics_wanted(d, a) && (r = dp_metrics_start(*loop, d->prog)) < 0)
		return r == -EINVAL ? DP_EXIT_USAGE : DP_EXIT_FAILURE;
	if (d->start(*loop, userdata) < 0 || confine(d, userdata) < 0)
		return DP_EXIT_FAILURE;
	*ran = true;
	return dp_loop_run(*loop);
}

/* Step 12: stop before the loop is freed (the daemon's sources live on it). */
static int run(const dp_daemon *d, const dp_daemon_args *a, void *userdata, bool *ran)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	int status = serve(d, a, userdata, &loop, ran);
	if (d->stop)
		d->stop(userdata);
	dp_metrics_stop();
	return status;
}

int dp_daemon_main(const dp_daemon *d, void *userdata, int argc, char **argv)
{
	sigset_t old;
	dp_daemon_args a;
	bool ran = false;

	dp_signals_block(&old);
	if (d->n_helpers)
		dp_helper_main(argc, argv, d->helpers, d->n_helpers);
	switch (dp_daemon_parse(d, argc, argv, stdout, stderr, &a)) {
	case DP_DAEMON_RUN:
		break;
	case DP_DAEMON_DONE:
		return DP_EXIT_OK;
	case DP_DAEMON_BAD_ARGUMENT:
	default:
		return DP_EXIT_USAGE;
	}
	if (a.health_check) {
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
		return health_check(d, &a);
	}
	(void)dp_log_init(); /* an invalid LOG_LEVEL keeps info and is logged there, once */
	dp_grpc_set_limit_hook(dp_grpc_log_limit, NULL); /* the plugin sockets' limits, at warn */
	dp_grpc_set_unimplemented_hook(dp_grpc_log_unimplemented, NULL); /* unknown methods, at warn */
	const char *m = mode(d, &a);
	dp_info("starting", "program=%s version=%s commit=%s%s%s", d->prog, DP_VERSION, DP_GIT_COMMIT,
		m ? " mode=" : "", m ? m : "");
	int status = run(d, &a, userdata, &ran);
	if (ran)
		dp_info("stopped", "exit=%d", status);
	return status;
}
