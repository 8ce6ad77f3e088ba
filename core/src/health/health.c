/* SPDX-License-Identifier: Apache-2.0 */
/* health: grpc.health.v1 Check/Watch on a plugin socket, and the exec-probe client. */
#include "dp/health.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/list.h"
#include "dp/log.h"
#include "health.pb-c.h"
#include "requests/pbwire.h"

/* Longest service name accepted: the known ones are "" and "readiness"; a Watch keeps its name. */
#define SERVICE_MAX 256

struct watcher {
	DP_LIST_FIELDS(struct watcher);
	dp_health *h;
	dp_grpc_call *call;
	char *service;
	int last; /* last status sent */
};

struct dp_health {
	dp_health_status_fn fn;
	void *userdata;
	struct watcher *watchers;
	unsigned n_watchers;
};

int dp_health_new(dp_health_status_fn fn, void *userdata, dp_health **ret)
{
	dp_health *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fn = fn;
	h->userdata = userdata;
	*ret = h;
	return 0;
}

static void watcher_remove(dp_health *h, struct watcher *w)
{
	DP_LIST_REMOVE(h->watchers, w);
	h->n_watchers--;
	free(w->service);
	free(w);
}

dp_health *dp_health_free(dp_health *h)
{
	if (!h)
		return NULL;
	while (h->watchers) {
		struct watcher *w = h->watchers;
		/* the head's prev is NULL: watcher_remove moves h->watchers on before the free */
		dp_grpc_call_set_cancel(w->call, NULL, NULL); // NOLINT(clang-analyzer-unix.Malloc)
		dp_grpc_call_finish(w->call, DP_GRPC_UNAVAILABLE, "health service stopping");
		watcher_remove(h, w);
	}
	free(h);
	return NULL;
}

unsigned dp_health_watchers(const dp_health *h) { return h->n_watchers; }

static int status_of(dp_health *h, const char *service, bool watch)
{
	int s = h->fn(service, h->userdata);
	if (s < 0)
		return watch ? DP_HEALTH_SERVICE_UNKNOWN : -ENOENT;
	return s;
}

static int send_status(dp_grpc_call *call, int status)
{
	Grpc__Health__V1__HealthCheckResponse resp = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
	resp.status = (Grpc__Health__V1__HealthCheckResponse__ServingStatus)status;
	return dp_grpc_call_send_pb(call, &resp.base);
}

/*
 * The service a HealthCheckRequest names (field 1; the last one wins) into out, SERVICE_MAX + 1
 * bytes, read from the wire without unpacking (unknown fields skipped, never stored). NULL, or
 * why the request is refused (INVALID_ARGUMENT).
 */
static const char *decode_service(const uint8_t *msg, size_t len, char *out)
{
	dp_pbreader r;
	dp_pbfield f;
	int k;
	out[0] = '\0';
	dp_pb_reader_init(&r, msg, len);
	while ((k = dp_pb_next(&r, &f)) > 0) {
		if (f.number != 1)
			continue;
		if (f.wire != DP_PB_LEN)
			return "cannot decode HealthCheckRequest";
		if (f.len > SERVICE_MAX)
			return "service name longer than 256 bytes";
		if (memchr(f.data, '\0', f.len))
			return "service name holds a NUL byte";
		memcpy(out, f.data, f.len);
		out[f.len] = '\0';
	}
	return k < 0 ? "cannot decode HealthCheckRequest" : NULL;
}

/* The service the request names into service (SERVICE_MAX + 1 bytes); false when the call was
 * refused (INVALID_ARGUMENT, with why). */
static bool request_service(dp_grpc_call *call, const uint8_t *msg, size_t len, char *service)
{
	const char *why = decode_service(msg, len, service);

	if (why)
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, why);
	return !why;
}

static void rpc_check(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_health *h = userdata;
	char service[SERVICE_MAX + 1];

	if (!request_service(call, msg, len, service))
		return;
	int s = status_of(h, service, false);
	if (s < 0)
		dp_grpc_call_finish(call, DP_GRPC_NOT_FOUND, "unknown service");
	else
		(void)send_status(call, s);
}

static void on_watch_cancel(dp_grpc_call *call, int status, void *userdata)
{
	struct watcher *w = userdata;
	watcher_remove(w->h, w);
}

static void rpc_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_health *h = userdata;
	char service[SERVICE_MAX + 1];

	if (!request_service(call, msg, len, service))
		return;
	struct watcher *w = calloc(1, sizeof(*w));
	if (w)
		w->service = strdup(service);
	if (!w || !w->service) {
		free(w);
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	w->h = h;
	w->call = call;
	DP_LIST_PREPEND(h->watchers, w);
	h->n_watchers++;
	dp_grpc_call_set_cancel(call, on_watch_cancel, w);
	w->last = status_of(h, w->service, true);
	(void)send_status(call, w->last);
}

void dp_health_changed(dp_health *h)
{
	for (struct watcher *w = h->watchers; w; w = w->next) {
		int s = status_of(h, w->service, true);
		if (s == w->last)
			continue;
		w->last = s;
		(void)send_status(w->call, s);
	}
}

size_t dp_health_methods(dp_health *h, dp_grpc_method out[static 2])
{
	out[0] = (dp_grpc_method){ DP_HEALTH_CHECK_PATH, DP_GRPC_METHOD_UNARY, rpc_check, h };
	out[1] = (dp_grpc_method){ DP_HEALTH_WATCH_PATH, DP_GRPC_METHOD_SERVER_STREAM, rpc_watch, h };
	return 2;
}
