/* SPDX-License-Identifier: Apache-2.0 */
/*
 * health_probe: the exec-probe client (--health-check[=readiness]). Finds the daemon's plugin
 * sockets ("<prefix>-<pid>-<n>.sock") in the device-plugins directory and asks each for
 * grpc.health.v1 Check; every prefix needs one SERVING answer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "dp/health.h"
#include "endpoint/endpoint_internal.h"
#include "health.pb-c.h"

#define MAX_PROBES 64

struct probe {
	struct probe_run *run;
	size_t prefix;
	dp_grpc_client_call *call;
	bool done;
};

struct probe_run {
	dp_loop *loop;
	size_t n_prefixes;
	int *verdict; /* per prefix: 1 serving, 0 pending, -errno */
	struct probe probes[MAX_PROBES];
	size_t n_probes;
	size_t pending;
	char last_error[256];
};

static bool all_decided(const struct probe_run *run)
{
	for (size_t i = 0; i < run->n_prefixes; i++)
		if (run->verdict[i] != 1)
			return run->pending == 0;
	return true;
}

static void on_probe_done(void *userdata, int status, const char *message, const uint8_t *resp,
			  size_t len)
{
	struct probe *p = userdata;
	struct probe_run *run = p->run;
	p->call = NULL;
	p->done = true;
	run->pending--;
	if (status != DP_GRPC_OK) {
		snprintf(run->last_error, sizeof(run->last_error), "%s: %s", dp_grpc_status_name(status),
			 message ? message : "");
	} else {
		Grpc__Health__V1__HealthCheckResponse *r =
			grpc__health__v1__health_check_response__unpack(NULL, len, resp);
		if (r && r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
			run->verdict[p->prefix] = 1;
		else
			snprintf(run->last_error, sizeof(run->last_error), "not serving");
		if (r)
			grpc__health__v1__health_check_response__free_unpacked(r, NULL);
	}
	if (all_decided(run))
		dp_loop_exit(run->loop, 0);
}

/* True when nobody listens on the socket at path: connect() is refused at once (a stale file
 * left by a killed process). Any other outcome, including a full backlog, counts as alive. */
static bool socket_refused(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(path);
	if (len >= sizeof(sa.sun_path))
		return false;
	memcpy(sa.sun_path, path, len + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return false;
	bool refused = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
		       (errno == ECONNREFUSED || errno == ENOENT);
	close(fd);
	return refused;
}

static int start_probes(struct probe_run *run, const char *dir, const char *const *prefixes,
			const char *service, uint64_t timeout, bool skip_refused)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
	req.service = (char *)service;
	struct dirent *de;
	while ((de = readdir(d)) && run->n_probes < MAX_PROBES) {
		for (size_t i = 0; i < run->n_prefixes; i++) {
			if (!dp_ep_socket_ours(prefixes[i], de->d_name))
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (skip_refused && socket_refused(path))
				continue;
			struct probe *p = &run->probes[run->n_probes];
			p->run = run;
			p->prefix = i;
			if (dp_grpc_client_call_pb(run->loop, path, "localhost", DP_HEALTH_CHECK_PATH, &req.base,
						   timeout, on_probe_done, p, &p->call) == 0) {
				run->n_probes++;
				run->pending++;
			}
		}
	}
	closedir(d);
	return 0;
}

static int on_deadline(dp_source *s, void *userdata)
{
	dp_loop_exit(userdata, 0);
	return 0;
}

/* The verdict of a finished run (see dp_health_probe / dp_health_probe_present). */
static int verdict_of(const struct probe_run *run, const char *dir, const char *const *prefixes,
		      bool require_all, const char *what, char *err, size_t errlen)
{
	for (size_t i = 0; i < run->n_prefixes; i++) {
		if (run->verdict[i] == 1)
			continue;
		bool any = false;
		for (size_t j = 0; j < run->n_probes; j++)
			any |= run->probes[j].prefix == i;
		if (!any && !require_all)
			continue;
		if (!any) {
			snprintf(err, errlen, "not %s: no plugin socket %s-*.sock in %s", what, prefixes[i], dir);
			return -ENOENT;
		}
		snprintf(err, errlen, "not %s: %s-*.sock: %s", what, prefixes[i],
			 run->last_error[0] ? run->last_error : "no answer before the deadline");
		return run->pending ? -ETIMEDOUT : -EAGAIN;
	}
	if (!require_all && run->n_probes == 0) {
		size_t o = (size_t)snprintf(err, errlen, "not %s: no live plugin socket", what);
		for (size_t i = 0; i < run->n_prefixes && o < errlen; i++)
			o += (size_t)snprintf(err + o, errlen - o, "%s %s-*.sock", i ? "," : "", prefixes[i]);
		if (o < errlen)
			snprintf(err + o, errlen - o, " in %s", dir);
		return -ENOENT;
	}
	return 0;
}

static int probe(const char *dir, const char *const *prefixes, size_t n_prefixes, bool readiness,
		 uint64_t timeout_usec, bool present_only, char *err, size_t errlen)
{
	_cleanup_(dp_loop_freep) dp_loop *loop = NULL;
	_cleanup_free_ int *verdict = calloc(n_prefixes ? n_prefixes : 1, sizeof(int));
	struct probe_run run = { .n_prefixes = n_prefixes };
	const char *what = readiness ? "ready" : "live";
	int r;

	if (!verdict || dp_loop_new(&loop) < 0)
		/* verdict is freed by its _cleanup_ attribute, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	run.loop = loop;
	run.verdict = verdict;
	r = start_probes(&run, dir, prefixes, readiness ? DP_HEALTH_READINESS : "", timeout_usec,
			 present_only);
	if (r < 0) {
		/* verdict is freed by its _cleanup_ attribute, which the analyzer does not model */
		snprintf(err, errlen, "cannot read %s: %s", dir, strerror(-r)); // NOLINT(clang-analyzer-unix.Malloc)
		return r;
	}
	dp_source *t = NULL;
	if (run.pending > 0 && dp_timer_add(loop, timeout_usec, 0, on_deadline, loop, &t) == 0)
		(void)dp_loop_run(loop);
	dp_source_free(t);
	for (size_t i = 0; i < run.n_probes; i++)
		dp_grpc_client_call_cancel(run.probes[i].call);
	return verdict_of(&run, dir, prefixes, !present_only, what, err, errlen);
}

int dp_health_probe(const char *dir, const char *const *prefixes, size_t n_prefixes, bool readiness,
		    uint64_t timeout_usec, char *err, size_t errlen)
{
	return probe(dir, prefixes, n_prefixes, readiness, timeout_usec, false, err, errlen);
}

int dp_health_probe_present(const char *dir, const char *const *prefixes, size_t n_prefixes,
			    bool readiness, uint64_t timeout_usec, char *err, size_t errlen)
{
	return probe(dir, prefixes, n_prefixes, readiness, timeout_usec, true, err, errlen);
}
