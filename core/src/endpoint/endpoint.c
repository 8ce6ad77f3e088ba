/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint: one resource's socket, registration life cycle, streams and devices. */
#include "dp/endpoint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api.pb-c.h"
#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/log.h"
#include "endpoint_alloclog.h"
#include "endpoint_encode.h"
#include "endpoint_internal.h"

#define REGISTER_TIMEOUT_USEC (20 * DP_USEC_PER_SEC)
#define BACKOFF_MIN_USEC (100 * DP_USEC_PER_MSEC)
#define BACKOFF_MAX_USEC (5 * DP_USEC_PER_SEC)
#define DEFAULT_CHECK_USEC (30 * DP_USEC_PER_SEC)
#define FAIL_RETELL_USEC (300 * DP_USEC_PER_SEC)
#define LISTEN_WAIT_MIN_USEC (250)
#define LISTEN_WAIT_MAX_USEC (1 * DP_USEC_PER_MSEC)
#define LISTEN_WAIT_LIMIT_USEC (1 * DP_USEC_PER_SEC)

static void ep_stream_gone(dp_endpoint *ep, struct ep_stream *st);
static void ep_retry_cut(dp_endpoint *ep);

/* ---- the ListAndWatch response ---- */

/*
 * The response is encoded when sent (make bench's sdp-encode-bench times it) and not kept: the
 * gRPC layer copies it into its send queue, so a cached copy would only double the per-device
 * memory.
 */
void dp_ep_send_list(dp_endpoint *ep, struct ep_stream *only)
{
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len = 0;
	int r = dp_ep_encode_list(ep->ids, ep->n_devices, ep->numa, ep->healthy, ep->down, &buf, &len);
	if (r < 0) {
		dp_debug("cannot encode device list", "resource=%s error=%s", ep->resource, dp_errname(r));
		return;
	}
	struct ep_stream *next;
	for (struct ep_stream *st = only ? only : ep->streams; st; st = only ? NULL : next) {
		next = st->next;
		r = dp_grpc_call_send(st->call, buf, len);
		if (r < 0) {
			/* The gRPC layer ended the call (a size or buffer limit): it will not call
			 * ep_on_stream_cancel, and frees the call when its stream closes. */
			dp_debug("cannot send device list", "resource=%s error=%s", ep->resource, dp_errname(r));
			ep_stream_gone(ep, st);
		}
	}
}

/* ---- streams ---- */

static void ep_stream_remove(dp_endpoint *ep, struct ep_stream *st)
{
	for (struct ep_stream **p = &ep->streams; *p; p = &(*p)->next)
		if (*p == st) {
			*p = st->next;
			break;
		}
	ep->n_streams--;
	if (ep->kubelet_stream == st)
		ep->kubelet_stream = NULL;
	free(st);
}

/*
 * A stream is over (cancelled by the peer, or ended by the gRPC layer). kubelet never re-dials:
 * its stream ending means register again (once Register has returned, when it ends before).
 * kubelet's stream is the one marked at ListAndWatch; any other client's stream ending changes
 * nothing, so a stream held by another client cannot keep us from re-registering.
 */
static void ep_stream_gone(dp_endpoint *ep, struct ep_stream *st)
{
	bool kubelet = st == ep->kubelet_stream;
	if (kubelet)
		ep->kubelet_stream = NULL;
	ep_stream_remove(ep, st);
	if (ep->health)
		dp_health_changed(ep->health);
	if (!kubelet && ep->n_streams > 0)
		return;
	if (ep->state == EP_REGISTERING)
		ep->stream_ended_registering = true;
	if (ep->state == EP_REGISTERED && !ep->stopping)
		dp_ep_stream_ended(ep);
}

static void ep_on_stream_cancel(dp_grpc_call *call, int status, void *userdata)
{
	struct ep_stream *st = userdata;
	dp_endpoint *ep = st->ep;
	dp_debug("call cancelled", "path=%s status=%s resource=%s", dp_grpc_call_path(call),
		 dp_grpc_status_name(status), ep->resource);
	ep_stream_gone(ep, st);
}

void dp_endpoint_list_and_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_endpoint *ep = userdata;
	struct ep_stream *st = calloc(1, sizeof(*st));
	if (!st) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	st->ep = ep;
	st->call = call;
	st->next = ep->streams;
	ep->streams = st;
	ep->n_streams++;
	dp_grpc_call_set_cancel(call, ep_on_stream_cancel, st);
	/* kubelet opens its stream right after our Register: the first one since is taken as
	 * kubelet's, and its connection is protected from the gRPC budget's evictions. */
	if (!ep->kubelet_stream && (ep->state == EP_REGISTERING || ep->state == EP_REGISTERED)) {
		ep->kubelet_stream = st;
		dp_grpc_call_protect(call);
	}
	if (ep->checked)
		dp_ep_send_list(ep, st);
	if (ep->health)
		dp_health_changed(ep->health);
}

static void ep_close_streams(dp_endpoint *ep, const char *why)
{
	while (ep->streams) {
		struct ep_stream *st = ep->streams;
		dp_grpc_call_finish(st->call, DP_GRPC_UNAVAILABLE, why);
		ep_stream_remove(ep, st);
	}
}

/* ---- server and socket ---- */

static void ep_stop_server(dp_endpoint *ep, const char *why)
{
	ep->stopping = true;
	ep_close_streams(ep, why);
	ep->server = dp_grpc_server_free(ep->server);
	ep->stopping = false;
	dp_ep_socket_remove(ep);
}

static int ep_start_server(dp_endpoint *ep)
{
	dp_grpc_method methods[8];
	size_t n = dp_endpoint_methods(ep, methods);
	return dp_ep_socket_serve(ep, methods, n);
}

/* ---- failures: each kind told once, again every 5 minutes while it lasts ---- */

static void ep_failed(dp_endpoint *ep, enum ep_fail kind)
{
	uint64_t now = dp_now_usec();
	ep->failures++;
	dp_ep_hold_release(ep);
	dp_ep_metrics_registration(ep, kind);
	dp_debug("registration attempt failed", "resource=%s kind=%d attempts=%u", ep->resource, (int)kind,
		 ep->failures);
	if (kind == ep->fail_kind && now - ep->fail_told < FAIL_RETELL_USEC)
		return;
	ep->fail_kind = kind;
	ep->fail_told = now;
	if (ep->events.on_register_failed)
		ep->events.on_register_failed(ep, ep->reason_register, ep->events.userdata);
}

static enum ep_fail ep_fail_kind(int status, const char *message)
{
	if (status == DP_GRPC_DEADLINE_EXCEEDED)
		return strstr(message, "while connecting") ? EP_FAIL_CONNECT : EP_FAIL_TIMEOUT;
	if (status == DP_GRPC_UNAVAILABLE && strncmp(message, "connect to ", 11) == 0)
		return EP_FAIL_CONNECT;
	/* the client's own word for a connection closed, reset or broken before the answer (or a
	 * stream the server kept refusing): no answer from kubelet, most often one stopping */
	if (status == DP_GRPC_UNAVAILABLE)
		return EP_FAIL_CUT;
	/* kubelet's errFailedToDialDevicePlugin */
	if (strstr(message, "failed to dial device plugin"))
		return EP_FAIL_DIAL_BACK;
	return EP_FAIL_REFUSED;
}

/* keep: go on serving meanwhile (nothing reached kubelet), so liveness probes reach the loop. */
static void ep_backoff(dp_endpoint *ep, bool keep)
{
	dp_debug("registration backing off", "resource=%s delay_us=%llu", ep->resource,
		 (unsigned long long)(ep->backoff ? ep->backoff : BACKOFF_MIN_USEC));
	ep->state = EP_BACKOFF;
	if (!keep)
		ep_stop_server(ep, "plugin re-registering");
	uint64_t b = ep->backoff ? ep->backoff : BACKOFF_MIN_USEC;
	ep->backoff = b * 2 > BACKOFF_MAX_USEC ? BACKOFF_MAX_USEC : b * 2;
	dp_ep_schedule_register(ep, b);
}

/*
 * Register cut off (the connection closed or reset before kubelet's answer): kubelet was going
 * away, most often. The first cut-off is no failure (not told, not in dp_endpoint_failures): in
 * a kubelet restart the cut and kubelet.sock's creation can come in one batch of events, in
 * either order, and both orders must look the same to the operator. The next sign of a live
 * kubelet is awaited rather than a back-off: a fresh server at once, which registers if
 * kubelet.sock is connectable now, waits for it to be created if it is gone, and if it refuses
 * takes the refused path (its creation cuts that short). Once: a kubelet that cuts off every
 * Register gets a failure and the back-off from the second on (until a registration or a new
 * kubelet.sock).
 */
static void ep_retry_cut(dp_endpoint *ep)
{
	ep->cut_retried = true;
	ep_stop_server(ep, "plugin re-registering");
	ep->state = EP_IDLE;
	dp_debug("register cut off: again at once", "resource=%s", ep->resource);
	dp_ep_schedule_register(ep, 0);
}

/* ---- registration ---- */

static void ep_on_registered(void *userdata, int status, const char *message, const uint8_t *resp,
			     size_t resp_len)
{
	dp_endpoint *ep = userdata;
	ep->register_call = NULL;
	if (status != DP_GRPC_OK) {
		const char *m = message ? message : "";
		snprintf(ep->reason_register, sizeof(ep->reason_register), "%s: %s",
			 dp_grpc_status_name(status), m);
		dp_debug("register failed", "resource=%s status=%s", ep->resource,
			 dp_grpc_status_name(status));
		enum ep_fail kind = ep_fail_kind(status, m);
		if (kind == EP_FAIL_CUT && !ep->cut_retried) {
			/* no failure yet: counted by outcome, said at debug, told only if it recurs */
			dp_ep_hold_release(ep);
			dp_ep_metrics_registration(ep, kind);
			ep_retry_cut(ep);
			return;
		}
		ep_backoff(ep, false);
		ep_failed(ep, kind);
		return;
	}
	ep->state = EP_REGISTERED;
	ep->backoff = 0;
	ep->churn_gap = 0;
	ep->registered_at = dp_now_usec();
	ep->reason_register[0] = '\0';
	ep->restart_told = false;
	ep->cut_retried = false;
	dp_debug("registered", "resource=%s socket=%s", ep->resource, ep->socket_name);
	dp_ep_metrics_registration(ep, EP_FAIL_NONE);
	if (ep->health)
		dp_health_changed(ep->health);
	if (ep->events.on_registered)
		ep->events.on_registered(ep, ep->events.userdata);
	dp_ep_hold_release(ep);
	ep->failures = 0;
	ep->fail_kind = EP_FAIL_NONE;
	if (ep->stream_ended_registering && !ep->kubelet_stream && ep->state == EP_REGISTERED &&
	    !ep->stopping)
		dp_ep_stream_ended(ep);
}

static int ep_send_register(dp_endpoint *ep)
{
	char kubelet_sock[PATH_MAX];
	V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;

	opts.pre_start_required = ep->pre_start_required;
	opts.get_preferred_allocation_available = ep->preferred_allocation;
	req.version = (char *)"v1beta1";
	req.endpoint = ep->socket_name;
	req.resource_name = ep->resource;
	req.options = &opts;
	snprintf(kubelet_sock, sizeof(kubelet_sock), "%s/kubelet.sock", ep->dir);
	dp_endpoint_watch_remember(ep);
	/* A kubelet.sock nobody listens on would only show as a timeout 20 s later. */
	if (dp_socket_stale(kubelet_sock) == 1) {
		snprintf(ep->reason_register, sizeof(ep->reason_register), "connect to %s: %s", kubelet_sock,
			 strerror(ECONNREFUSED));
		return -ECONNREFUSED;
	}
	return dp_grpc_client_call_pb(ep->loop, kubelet_sock, "localhost", "/v1beta1.Registration/Register",
				      &req.base, REGISTER_TIMEOUT_USEC, ep_on_registered, ep,
				      &ep->register_call);
}

/*
 * kubelet.sock refused, and it was created since our last Register: a starting kubelet has bound
 * it (inotify saw the creation) and not yet listened, which no event reports. Not a failure: the
 * same server connects again soon (250 µs doubling to 1 ms: a kubelet preempted between its bind
 * and its listen on a busy node is seen within a millisecond of its listen; a connect is a few
 * microseconds) until kubelet listens; after 1 s it is a refused connect like any other (false:
 * the caller backs off).
 */
static bool ep_wait_listen(dp_endpoint *ep)
{
	uint64_t now = dp_now_usec();
	if (!ep->kubelet_created)
		return false;
	if (ep->state != EP_WAIT_LISTEN) {
		ep->listen_since = now;
		ep->listen_wait = 0;
		dp_debug("kubelet.sock created, not listening yet", "resource=%s", ep->resource);
	} else if (now - ep->listen_since >= LISTEN_WAIT_LIMIT_USEC) {
		ep->kubelet_created = false;
		return false;
	}
	uint64_t d = ep->listen_wait ? ep->listen_wait : LISTEN_WAIT_MIN_USEC;
	ep->listen_wait = d * 2 > LISTEN_WAIT_MAX_USEC ? LISTEN_WAIT_MAX_USEC : d * 2;
	ep->state = EP_WAIT_LISTEN;
	dp_ep_schedule_register(ep, d);
	return true;
}

/* Register from the server just started (kept while kubelet.sock does not listen yet). */
static void ep_try_register(dp_endpoint *ep)
{
	int r = ep_send_register(ep);
	if (r == -ECONNREFUSED && ep_wait_listen(ep))
		return;
	if (r < 0) {
		if (r != -ECONNREFUSED)
			snprintf(ep->reason_register, sizeof(ep->reason_register), "cannot call %s/kubelet.sock: %s",
				 ep->dir, strerror(-r));
		ep_backoff(ep, r == -ECONNREFUSED);
		ep_failed(ep, r == -ECONNREFUSED ? EP_FAIL_CONNECT : EP_FAIL_SOCKET);
		return;
	}
	ep->kubelet_created = false;
	ep->state = EP_REGISTERING;
}

static void ep_serve_failed(dp_endpoint *ep, int r)
{
	snprintf(ep->reason_register, sizeof(ep->reason_register), "cannot serve %s/%s: %s", ep->dir,
		 ep->socket_name, strerror(-r));
}

static void ep_register_now(dp_endpoint *ep)
{
	char kubelet_sock[PATH_MAX];
	struct stat st;
	int r;

	ep->register_call = dp_grpc_client_call_cancel(ep->register_call);
	ep_stop_server(ep, "plugin re-registering");
	dp_ep_metrics_state(ep);
	dp_endpoint_watch_ensure(ep);
	snprintf(kubelet_sock, sizeof(kubelet_sock), "%s/kubelet.sock", ep->dir);
	if (stat(kubelet_sock, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		/* Wait for kubelet.sock to appear (inotify; the stat fallback as a backstop). */
		ep->state = EP_WAIT_KUBELET;
		ep->kubelet_created = false;
		snprintf(ep->reason_register, sizeof(ep->reason_register), "waiting for %s",
			 kubelet_sock);
		/* Keep serving meanwhile so liveness probes still reach the loop. */
		r = ep_start_server(ep);
		if (r < 0) {
			ep_serve_failed(ep, r);
			ep_stop_server(ep, "plugin re-registering");
		}
		ep_failed(ep, r < 0 ? EP_FAIL_SOCKET : EP_FAIL_KUBELET);
		return;
	}
	ep->stream_ended_registering = false;
	r = ep_start_server(ep);
	if (r < 0) {
		ep_serve_failed(ep, r);
		ep_backoff(ep, false);
		ep_failed(ep, EP_FAIL_SOCKET);
		return;
	}
	ep_try_register(ep);
}

static int ep_on_register_timer(dp_source *s, void *userdata)
{
	dp_endpoint *ep = userdata;
	ep->restart_pending = false;
	if (ep->state == EP_WAIT_LISTEN)
		ep_try_register(ep);
	else
		ep_register_now(ep);
	return 0;
}

/* ---- public ---- */

static int ep_validate(const dp_endpoint_config *cfg)
{
	if (!cfg->resource_name || !strchr(cfg->resource_name, '/') || !cfg->socket_prefix ||
	    !cfg->socket_prefix[0] || strlen(cfg->socket_prefix) > DP_SOCKET_PREFIX_MAX ||
	    strchr(cfg->socket_prefix, '/') || !cfg->driver ||
	    !cfg->driver->check || !cfg->driver->allocate)
		return -EINVAL;
	return 0;
}

/* resource, prefix and dir in one block (freed through ep->resource). */
static int ep_copy_names(dp_endpoint *ep, const char *resource, const char *prefix, const char *dir)
{
	size_t lr = strlen(resource) + 1, lp = strlen(prefix) + 1, ld = strlen(dir) + 1;
	char *b = malloc(lr + lp + ld);
	if (!b)
		return -ENOMEM;
	memcpy(b, resource, lr);
	memcpy(b + lr, prefix, lp);
	memcpy(b + lr + lp, dir, ld);
	ep->resource = b;
	ep->prefix = b + lr;
	ep->dir = b + lr + lp;
	return 0;
}

int dp_endpoint_new(dp_loop *loop, const char *kubelet_dir, const dp_endpoint_config *cfg,
		    dp_endpoint **ret)
{
	int r = ep_validate(cfg);
	if (r >= 0)
		r = dp_socket_dir_check(kubelet_dir);
	if (r < 0)
		return r;
	_cleanup_(dp_endpoint_freep) dp_endpoint *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -ENOMEM;
	ep->loop = loop;
	ep->driver = *cfg->driver;
	ep->userdata = cfg->userdata;
	ep->preferred_allocation = cfg->preferred_allocation;
	ep->pre_start_required = cfg->pre_start_required;
	ep->check_interval = cfg->check_interval_usec ? cfg->check_interval_usec : DEFAULT_CHECK_USEC;
	ep->hold_usec = cfg->first_check_hold_usec;
	ep->no_kubelet = cfg->no_kubelet;
	ep->healthy_message = cfg->healthy_message ? cfg->healthy_message : "devices usable";
	ep->unhealthy_message = cfg->unhealthy_message ? cfg->unhealthy_message :
			        "devices unusable, advertising every device Unhealthy";
	ep->healthy_fields = cfg->healthy_fields;
	ep->healthy_detail = cfg->healthy_detail;
	if (cfg->events)
		ep->events = *cfg->events;
	r = ep_copy_names(ep, cfg->resource_name, cfg->socket_prefix, kubelet_dir);
	if (r >= 0)
		r = dp_ep_copy_devices(ep, cfg->devices, cfg->n_devices);
	if (r < 0)
		/* ep is freed by its _cleanup_ attribute, which the analyzers do not model */
		// cppcheck-suppress memleak
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	dp_ep_metrics_state(ep);
	r = dp_health_new(dp_endpoint_health_status, ep, &ep->health);
	if (r < 0)
		return r;
	r = dp_timer_add_disarmed(loop, ep_on_register_timer, ep, &ep->register_timer);
	if (r < 0)
		return r;
	r = dp_ep_health_init(ep);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(ep);
	return 0;
}

void dp_endpoint_set_events(dp_endpoint *ep, const dp_endpoint_events *ev)
{
	ep->events = *ev;
}

dp_endpoint *dp_endpoint_free(dp_endpoint *ep)
{
	if (!ep)
		return NULL;
	ep->register_call = dp_grpc_client_call_cancel(ep->register_call);
	ep_stop_server(ep, "plugin shutting down");
	ep->health = dp_health_free(ep->health);
	dp_endpoint_watch_stop(ep);
	dp_ep_health_done(ep);
	dp_source_free(ep->register_timer);
	dp_ep_alloclog_done(ep);
	free(ep->sorted); /* and the IDs, the NUMA nodes */
	free(ep->offs);
	free(ep->down);
	free(ep->resource); /* and the prefix, the directory */
	return (free(ep), NULL);
}

int dp_endpoint_start(dp_endpoint *ep)
{
	if (ep->no_kubelet) {
		snprintf(ep->reason_register, sizeof(ep->reason_register), "served through DRA, not registered");
		dp_endpoint_request_check(ep);
		return 0;
	}
	int r = dp_endpoint_watch_start(ep);
	if (r >= 0)
		r = dp_ep_hold_start(ep);
	if (r < 0)
		return r;
	(void)dp_ep_socket_sweep(ep);
	ep_register_now(ep);
	dp_endpoint_request_check(ep);
	return 0;
}
