/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_internal: what the endpoint*.c files (and the white-box tests) share. */
#pragma once

#include <limits.h>
#include <sys/types.h>
#include <time.h>

#include "api.pb-c.h"
#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/ratelimit.h"
#include "dp/watch.h"

/* EP_WAIT_LISTEN: kubelet.sock was just created and refuses: kubelet has bound it and not yet
 * listened (endpoint.c ep_wait_listen). */
enum ep_state { EP_IDLE, EP_WAIT_KUBELET, EP_WAIT_LISTEN, EP_REGISTERING, EP_REGISTERED, EP_BACKOFF };

/* Why a registration attempt failed: each kind is told once (endpoint.c ep_failed). */
enum ep_fail {
	EP_FAIL_NONE,
	EP_FAIL_SOCKET,    /* cannot create or bind our socket */
	EP_FAIL_KUBELET,   /* kubelet.sock missing: waiting for it */
	EP_FAIL_CONNECT,   /* kubelet.sock refuses connections */
	EP_FAIL_DIAL_BACK, /* kubelet could not dial our socket back */
	EP_FAIL_TIMEOUT,   /* no answer to Register in time */
	EP_FAIL_REFUSED,   /* kubelet answered Register with an error */
	EP_FAIL_CUT,       /* the connection closed or was reset before kubelet's answer */
};

/* One Allocate call (endpoint_rpc.c): the decoded request and the response being built. */
struct dp_alloc {
	dp_endpoint *ep;
	dp_grpc_call *call; /* NULL once the requester went away */
	uint64_t deadline;
	struct dp_ep_request *req;
	V1beta1__ContainerAllocateResponse *resp; /* one per container request */
	size_t n;
};

struct ep_stream {
	struct ep_stream *next;
	dp_endpoint *ep;
	dp_grpc_call *call;
};

struct dp_endpoint {
	dp_loop *loop;
	bool no_kubelet; /* checks and health only: dp_endpoint_config */
	void *userdata;
	char *resource; /* one block with prefix and dir */
	char *prefix;
	char *dir;

	/* devices, compact and in one block (sorted is its start): one arena of NUL-terminated IDs
	 * in the configured order, the arena offsets of the IDs in sorted order (lookups), NUMA
	 * nodes only when one is known */
	char *ids;
	uint32_t *sorted;
	int64_t *numa;
	size_t n_devices;
	uint32_t *offs; /* arena offset of each device, in the configured order: only with driver.prefer */
	bool *down;     /* dp_endpoint_set_devices_down; NULL until the driver first calls it */
	size_t n_down;  /* how many down[] are true */

	/* health */
	uint64_t check_interval;
	uint64_t recheck_backoff;
	dp_source *check_timer;
	uint64_t hold_usec; /* first_check_hold_usec */
	dp_source *hold;    /* bounds the first check's wait for the first registration attempt */
	/* the health lines' wording (dp_endpoint_config, kept; NULL fields: devices=<n>, detail: none) */
	const char *healthy_message;
	const char *unhealthy_message;
	const char *healthy_fields;
	const char *healthy_detail;

	/* serving and registration */
	dp_grpc_server *server;
	dp_health *health;
	ino_t socket_ino;
	dev_t socket_dev;
	dp_grpc_client_call *register_call;
	dp_source *register_timer;
	uint64_t backoff;
	uint64_t fail_told;     /* when fail_kind was last told */
	uint64_t registered_at; /* when Register last succeeded */
	uint64_t contend_backoff;
	uint64_t listen_since; /* when kubelet.sock, just created, first refused */
	uint64_t listen_wait;  /* the next wait for it to listen */
	uint64_t restart_at;   /* when the restart scheduled (restart_pending) runs */
	uint64_t churn_at;     /* when the last restart for kubelet.sock created ran or runs */
	uint64_t churn_gap;    /* the least time from it to the next one (0: none) */
	struct ep_stream *streams;
	struct ep_stream *kubelet_stream; /* the first stream opened since Register was sent */

	/* kubelet directory watch */
	dp_watch *watch; /* with the stat backstop (endpoint_watch.c) */
	/* kubelet.sock as the last Register was sent to it (dp_endpoint_watch_remember) */
	ino_t kubelet_ino;
	dev_t kubelet_dev;
	struct timespec kubelet_ctime;

	dp_driver driver;
	dp_endpoint_events events;

	/* endpoint_alloclog.c: the Allocate lines' limiter, its summary timer (NULL until needed) */
	dp_ratelimit alloclog_rl;
	dp_source *alloclog_timer;

	enum ep_state state;
	enum ep_fail fail_kind; /* the failure last told through on_register_failed */
	unsigned failures;      /* failed attempts since the last registration */
	unsigned quick_ends;    /* streams in a row that ended soon after registering */
	unsigned n_streams;

	bool preferred_allocation;
	bool pre_start_required;
	bool checked;
	bool healthy;
	bool check_deferred;
	bool check_timer_armed; /* a periodic check or retry is pending */
	bool holding;           /* the first check waits for the first registration attempt */
	bool check_held;        /* a check was asked for meanwhile */
	bool told;              /* on_health_changed was told a verdict: told_healthy, told_reason */
	bool told_healthy;
	bool stopping;
	bool stream_ended_registering; /* a stream ended before Register returned */
	bool kubelet_created;          /* kubelet.sock created since the last Register was sent */
	bool restart_pending;          /* the register timer runs a restart (ep_restart_after) */
	bool restart_joined;           /* a cause joined it (said once) */
	bool restart_told;             /* on_restart told since the last registration */
	bool cut_retried;              /* a cut-off Register retried at once since the last
					* registration or kubelet.sock creation */

	char socket_name[DP_SOCKET_NAME_MAX + 1];
	char reason[512];
	char told_reason[512];
	char reason_register[2 * PATH_MAX + 256];
};

/* endpoint.c */
/* endpoint_devices.c: devs copied into ep (ids, sorted, numa, n_devices; offs with a prefer
 * hook): -EINVAL for an empty, over-long or duplicate ID, -E2BIG, -ENOMEM. */
int dp_ep_copy_devices(dp_endpoint *ep, const dp_device *devs, size_t n);
int dp_endpoint_health_status(const char *service, void *userdata);
/* endpoint_restart.c: arm the register timer (usec 0: as soon as possible), replacing a restart
 * scheduled; start over now (kubelet restarted, our socket went: not counted as contention); for
 * kubelet.sock created (spaced while it is created again and again without a registration in
 * between); for kubelet's ListAndWatch stream ended (backs off when it keeps ending soon after
 * registering). */
void dp_ep_schedule_register(dp_endpoint *ep, uint64_t usec);
void dp_endpoint_restart(dp_endpoint *ep, const char *why);
void dp_endpoint_kubelet_created(dp_endpoint *ep);
void dp_ep_stream_ended(dp_endpoint *ep);
/* endpoint_state.c: the metrics (dp/metrics.h) of ep's current state; of a health change (first:
 * the first check); of a registration attempt (EP_FAIL_NONE: registered). */
void dp_ep_metrics_state(const dp_endpoint *ep);
void dp_ep_metrics_health(const dp_endpoint *ep, bool first);
void dp_ep_metrics_registration(const dp_endpoint *ep, enum ep_fail kind);
void dp_endpoint_list_and_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata);

/* endpoint_socket.c: serve on a fresh "<prefix>-<n>.sock" (ep->socket_name), removing a
 * stale socket of ours that holds the name; remove our socket (only the inode we created);
 * remove every stale socket of our prefix (returns how many); "<prefix>-<6 base32hex>.sock"
 * (dp_socket_stale: endpoint.h). */
int dp_ep_socket_serve(dp_endpoint *ep, const dp_grpc_method *methods, size_t n_methods);
void dp_ep_socket_remove(dp_endpoint *ep);
unsigned dp_ep_socket_sweep(dp_endpoint *ep);
bool dp_ep_socket_ours(const char *prefix, const char *name);

/* endpoint_rpc.c: GetPreferredAllocation's answer to one container request: the driver's prefer
 * hook when it gives a valid one (dp_driver), else dp_ep_prefer's. *ret: free() the array. */
struct dp_ep_container;
int dp_ep_prefer_answer(dp_endpoint *ep, const struct dp_ep_container *c, char ***ret, size_t *ret_n);

/* endpoint.c: send the current list to one stream (only) or to every open stream (NULL). */
void dp_ep_send_list(dp_endpoint *ep, struct ep_stream *only);

/* endpoint_health.c: the check timer (disarmed), freed with the hold by done; the first
 * check's hold: armed (with first_check_hold_usec) before the first registration attempt,
 * released when it ends. */
int dp_ep_health_init(dp_endpoint *ep);
void dp_ep_health_done(dp_endpoint *ep);
int dp_ep_hold_start(dp_endpoint *ep);
void dp_ep_hold_release(dp_endpoint *ep);

/* endpoint_rpc.c: fills out (at least 8 entries) with the served methods; returns the count. */
size_t dp_endpoint_methods(dp_endpoint *ep, dp_grpc_method *out);

/* endpoint_watch.c */
int dp_endpoint_watch_start(dp_endpoint *ep);
void dp_endpoint_watch_stop(dp_endpoint *ep);
/* Re-arm the directory watch if it is gone. */
void dp_endpoint_watch_ensure(dp_endpoint *ep);
/* Remember kubelet.sock's identity (device, inode, ctime) as a Register is sent to it. */
void dp_endpoint_watch_remember(dp_endpoint *ep);
/* True when kubelet.sock is still the file remembered (its creation is no news). */
bool dp_endpoint_watch_kubelet_same(const dp_endpoint *ep);
/* kubelet.sock created (the watch's event): restart, unless registering with that very file. */
void dp_endpoint_watch_kubelet_created(dp_endpoint *ep);
