/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: the process's Prometheus metrics (opt-in: METRICS_ADDRESS) and their HTTP listener.
 *
 * Registry (metrics.c): a fixed table of at most DP_METRICS_MAX_SERIES series, filled by the
 * hooks in the endpoint, the gRPC server, the CDI writer and hyperlight's probe whether or not
 * a listener runs (an update is a lookup in a small table, no allocation). Label values are
 * bounded: resources and spec names are the daemon's own (fixed at start), the gRPC limits a
 * fixed set, and no method name is a label; a free-text reason becomes its class
 * (dp_metrics_reason_class) and each family holds at most DP_METRICS_MAX_REASONS classes, any
 * further one counted as "other". A series that does not fit the table is dropped and counted
 * in sdp_metrics_series_dropped_total. Names and meanings: docs/operations.md, "Metrics".
 *
 * Listener (metrics_http.c; its parsers in metrics_parse.c; the daemons' opt-in dp_metrics_start
 * in metrics.c): one TCP socket on the daemon's loop, HTTP/1.x, one request per
 * connection: GET or HEAD /metrics. Limits: DP_METRICS_HTTP_MAX_CONNS connections at once (a
 * newcomer takes the slot of the oldest connection without a complete request), a request head
 * of DP_METRICS_HTTP_HEAD_MAX bytes (431) within DP_METRICS_HTTP_HEAD_DEADLINE_USEC of the
 * accept, the whole exchange within DP_METRICS_HTTP_DEADLINE_USEC (then closed). A bind that
 * fails is retried on the same socket (made before the seccomp filter) with back-off.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "dp/loop.h"

#define DP_METRICS_MAX_SERIES 256
#define DP_METRICS_MAX_REASONS 16     /* reason classes per family, then "other" */
#define DP_METRICS_LABEL_MAX 96       /* bytes of one label value (longer: cut) */
#define DP_METRICS_RENDER_MAX (192u << 10) /* the exposition never exceeds this (bounded table) */

/* ---- registry ---- */

/* sdp_build_info{daemon,version} 1. */
void dp_metrics_build_info(const char *daemon, const char *version);
/* sdp_devices_advertised / sdp_devices_healthy {resource}. */
void dp_metrics_devices(const char *resource, size_t advertised, size_t healthy);
/* sdp_registered{resource} 0/1. */
void dp_metrics_registered(const char *resource, bool registered);
/* sdp_health_transitions_total{resource,to="healthy|unhealthy",reason}: reason is the class of
 * the reason text ("" for healthy). */
void dp_metrics_health_transition(const char *resource, bool healthy, const char *reason);
/* sdp_registrations_total{resource,result}: result "ok" or a failure kind (a fixed set). */
void dp_metrics_registration(const char *resource, const char *result);
/* sdp_allocate_total{resource,result}: result a gRPC status name ("OK", "UNAVAILABLE", ...). */
void dp_metrics_allocate(const char *resource, const char *result);
/* sdp_probe_runs_total, sdp_probe_failures_total{reason}, sdp_probe_duration_seconds. */
void dp_metrics_probe(bool ok, const char *reason, uint64_t usec);
/* sdp_dra_prepare_total{driver,result}: result "prepared" (fetched, checkpointed: its duration,
 * from the kubelet's call to the answer, in sdp_dra_prepare_duration_seconds), "checkpoint" (answered
 * from the checkpoint) or "error"; sdp_dra_unprepare_total{driver,result="ok|error"};
 * sdp_dra_slice_syncs_total{driver,result="published|unchanged|error"}. */
void dp_metrics_dra_prepare(const char *driver, const char *result, uint64_t usec);
void dp_metrics_dra_unprepare(const char *driver, bool ok);
void dp_metrics_dra_slices(const char *driver, const char *result);
/* sdp_cdi_spec_repairs_total{spec} / sdp_cdi_spec_write_failures_total{spec}. */
void dp_metrics_cdi_repair(const char *spec);
void dp_metrics_cdi_write_failure(const char *spec);
/* sdp_grpc_unimplemented_total: a call of a method no server of the process routes (no label:
 * the method name is the caller's choice). */
void dp_metrics_grpc_unimplemented(void);
/* sdp_grpc_limit_hits_total{what}: what is the gRPC layer's limit name ("input", "output",
 * "streams", "connections", "fds": dp_grpc_limit_fn), counted at every hit. */
void dp_metrics_grpc_limit(const char *what);
/* sdp_metrics_http_refused_total{reason}: the listener's own refusals (limits, bad requests). */
void dp_metrics_http_refused(const char *reason);

/* The class of a free-text reason: its leading words up to the first character that is not a
 * letter, '_', '-' or a space (a digit, '/', ':', ...), trailing spaces dropped, at most 48
 * bytes; "unknown" when that is empty. "EACCES opening /dev/kvm" -> "EACCES opening". */
void dp_metrics_reason_class(const char *reason, char *buf, size_t size);

/* The text exposition format 0.0.4 of every series into buf; *ret_len its length (no NUL).
 * -ENOBUFS when it does not fit (it always fits DP_METRICS_RENDER_MAX). */
int dp_metrics_render(char *buf, size_t size, size_t *ret_len);
/* Forget every series (tests). */
void dp_metrics_reset(void);

/* ---- HTTP request head and METRICS_ADDRESS (metrics_parse.c: pure, fuzzed: fuzz/fuzz_metrics_http.c) ---- */

#define DP_METRICS_HTTP_HEAD_MAX 8192
#define DP_METRICS_HTTP_MAX_CONNS 4
/* From the accept to the end of the request head: a scraper sends its few hundred bytes in one
 * write right after connecting, so they arrive within a round trip; 1 s is hundreds of round
 * trips on a pod network, and a peer holding a slot without a request loses it within 1 s. */
#define DP_METRICS_HTTP_HEAD_DEADLINE_USEC (1 * DP_USEC_PER_SEC)
/* From the accept to the close, whatever the connection is doing (a slow reader). */
#define DP_METRICS_HTTP_DEADLINE_USEC (5 * DP_USEC_PER_SEC)
/* A failed bind or listen is tried again after 1 s, doubling to 60 s. */
#define DP_METRICS_HTTP_RETRY_FIRST_USEC (1 * DP_USEC_PER_SEC)
#define DP_METRICS_HTTP_RETRY_MAX_USEC (60 * DP_USEC_PER_SEC)

typedef struct dp_metrics_request {
	int status; /* the answer: 200, 400, 404, 405, 431 (505 for a version other than 1.x) */
	bool head;  /* HEAD: no body */
} dp_metrics_request;

/* Parse what arrived so far. 0: the head is incomplete (read more); 1: *ret filled (the head
 * ended, or it is malformed or too long: ret->status says how to answer). Empty lines before the
 * request line are skipped (RFC 9112 section 2.2); the head ends at the empty line after it (CRLF
 * CRLF, or LF LF). HTTP/1.1 without a Host header, or any request with two, is 400 (section
 * 3.2). Bytes after the head are ignored. */
int dp_metrics_http_parse(const char *buf, size_t len, dp_metrics_request *ret);

/* "HOST:PORT" (numeric IPv4 or "localhost"), ":PORT" (every address: [::] dual-stack, else
 * 0.0.0.0), "[IPv6]:PORT"; port 0..65535. -EINVAL with a message in err naming what is wrong
 * (missing port, empty or unbalanced brackets, port not a number or out of range, a host that
 * is not a numeric address, ...). */
int dp_metrics_parse_address(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len, char *err,
			     size_t errlen);

/* ---- listener ---- */

typedef struct dp_metrics_server dp_metrics_server;
/* Called once per episode of a limit (an episode ends after a minute without it): what is
 * "connections" (every slot busy answering: a newcomer closed at accept), "evicted" (a
 * connection without a complete request, or answered but not closed by its peer, closed for a
 * newcomer), "head" (too large), "head_timeout" (no complete head within the head deadline),
 * "slow_reader" (the answer not taken and the connection not closed by the deadline) or
 * "request" (malformed). */
typedef void (*dp_metrics_limit_fn)(const char *what, const char *detail, void *userdata);
/* Called when the listener starts listening (error 0), and when a bind or listen fails with an
 * error other than the previous attempt's (-errno; the next attempt in retry_usec): once per
 * episode of failures and reason. */
typedef void (*dp_metrics_listen_fn)(dp_metrics_server *s, int error, uint64_t retry_usec, void *userdata);

/* Make the socket (non-blocking, close-on-exec) and a spare fd now, then bind and listen on
 * addr and serve on loop; a failed bind or listen is retried on the same socket after
 * DP_METRICS_HTTP_RETRY_FIRST_USEC doubling to DP_METRICS_HTTP_RETRY_MAX_USEC (the retries
 * need no new socket: they work under a seccomp filter that refuses TCP sockets). listen_fn
 * (may be NULL) hears of both, the first time before this returns. -errno only when the socket
 * cannot be made or no memory. */
int dp_metrics_server_new(dp_loop *loop, const struct sockaddr *addr, socklen_t len, dp_metrics_listen_fn listen_fn,
			  void *userdata, dp_metrics_server **ret);
void dp_metrics_server_set_limit_fn(dp_metrics_server *s, dp_metrics_limit_fn fn, void *userdata);
/* Tests: other deadlines (head, whole connection) for the connections accepted from now on. */
void dp_metrics_server_set_deadlines(dp_metrics_server *s, uint64_t head_usec, uint64_t usec);
bool dp_metrics_server_listening(const dp_metrics_server *s);
/* The bound address as "HOST:PORT" / "[IPv6]:PORT" (port 0 resolved; not bound yet: the
 * address asked for). */
int dp_metrics_server_address(const dp_metrics_server *s, char *buf, size_t size);
unsigned dp_metrics_server_connections(const dp_metrics_server *s);
/* Close the listener and every connection. Accepts NULL, returns NULL. */
dp_metrics_server *dp_metrics_server_free(dp_metrics_server *s);
DP_DEFINE_CLEANUP(dp_metrics_server, dp_metrics_server_free)

/* The daemons' main path (logs at info/warn/error, like dp_endpoint_log_events): reads
 * METRICS_ADDRESS; unset or empty: metrics off, returns 0. Else sets build info and starts the
 * listener (before the seccomp filter: it creates a TCP socket). Logs "metrics listening
 * address=HOST:PORT" once it listens, "cannot listen for metrics" at error once per episode of
 * failed binds (retried with back-off while the daemon serves), the limits at warn once per
 * episode. -EINVAL only for an invalid value (logged; exit 2): a listener that cannot be made
 * is logged and left off, it never stops the daemon. dp_metrics_stop frees it (accepts none). */
int dp_metrics_start(dp_loop *loop, const char *daemon);
void dp_metrics_stop(void);
