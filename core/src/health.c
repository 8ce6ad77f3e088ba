/* SPDX-License-Identifier: Apache-2.0 */
/* health: grpc.health.v1 Check/Watch on a plugin socket, and the exec-probe client. */
#include "dp/health.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/log.h"
#include "health.pb-c.h"

struct watcher {
	struct watcher *next;
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
	for (struct watcher **p = &h->watchers; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
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
		dp_grpc_call_set_cancel(w->call, NULL, NULL);
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

static void rpc_check(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_health *h = userdata;
	Grpc__Health__V1__HealthCheckRequest *req = grpc__health__v1__health_check_request__unpack(NULL, len, msg);
	if (!req) {
		dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "cannot decode HealthCheckRequest");
		return;
	}
	int s = status_of(h, req->service, false);
	if (s < 0)
		dp_grpc_call_finish(call, DP_GRPC_NOT_FOUND, "unknown service");
	else
		(void)send_status(call, s);
	grpc__health__v1__health_check_request__free_unpacked(req, NULL);
}

static void on_watch_cancel(dp_grpc_call *call, int status, void *userdata)
{
	struct watcher *w = userdata;
	watcher_remove(w->h, w);
}

static void rpc_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_health *h = userdata;
	Grpc__Health__V1__HealthCheckRequest *req = grpc__health__v1__health_check_request__unpack(NULL, len, msg);
	struct watcher *w = req ? calloc(1, sizeof(*w)) : NULL;
	if (w)
		w->service = strdup(req->service);
	if (req)
		grpc__health__v1__health_check_request__free_unpacked(req, NULL);
	if (!w || !w->service) {
		free(w);
		dp_grpc_call_finish(call, req ? DP_GRPC_RESOURCE_EXHAUSTED : DP_GRPC_INVALID_ARGUMENT,
				    req ? "out of memory" : "cannot decode HealthCheckRequest");
		return;
	}
	w->h = h;
	w->call = call;
	w->next = h->watchers;
	h->watchers = w;
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
