/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_server.h: server internals shared by grpc_server.c (connections, the listening socket),
 * grpc_request.c (a call's request side) and grpc_call.c (its response side, the public call API).
 *
 * Call states: RECV (request arriving; nobody outside knows the call), OWNED (handed to the
 * method's handler, not ended yet), ENDED (the owner finished it, or was told through the cancel
 * callback, or we answered an invalid request ourselves). The struct lives until nghttp2 closes
 * the stream (or the connection ends), but only an OWNED call may be used by the owner.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "dp/grpc.h"
#include "dp/list.h"
#include "grpc_internal.h"
#include "h2.h"

#define NO_RST UINT32_MAX

typedef struct sconn sconn;

typedef struct qmsg {
	struct qmsg *next;
	size_t len, off;
	uint8_t data[];
} qmsg;

enum call_state { CALL_RECV, CALL_OWNED, CALL_ENDED };

struct dp_grpc_call {
	sconn *conn;
	DP_LIST_FIELDS(dp_grpc_call); /* on conn->calls */
	int32_t stream_id;
	enum call_state state;
	dp_grpc_method method; /* a copy: the server may be gone while the call lives */
	char *path;
	/* request headers */
	size_t header_bytes;
	unsigned n_method, n_path, n_scheme, n_authority, n_ct, n_timeout;
	bool is_post, ct_ok, timeout_bad, malformed, too_big, regular_seen, headers_done;
	uint64_t timeout_usec, deadline;
	dp_source *timer;
	/* request body */
	dp_grpc_deframer deframer;
	uint8_t *req;
	size_t req_len;
	size_t in_bytes; /* request bytes held (partial message + whole message), budgeted */
	bool have_req, extra_msg, req_ended;
	/* response */
	bool discard;         /* the final answer is decided: ignore the rest of the request */
	bool headers_sent;    /* response HEADERS submitted (with our data provider) */
	bool deferred;        /* the data provider returned NGHTTP2_ERR_DEFERRED */
	bool finish_pending;  /* trailers go out once the queue is empty */
	bool response_done;   /* the HEADERS frame with END_STREAM was sent */
	uint32_t rst_code;    /* RST_STREAM to send after the final HEADERS, or NO_RST */
	int status;
	char *message;
	qmsg *qhead, **qtail;
	dp_grpc_cancel_fn cancel_fn;
	void *cancel_ud;
};

struct sconn {
	dp_grpc_server *server; /* NULL once the server is gone */
	DP_LIST_FIELDS(sconn);  /* on server->conns while linked */
	dp_h2 *h2;
	dp_grpc_call *calls;
	size_t max_header_list;
	size_t max_outbuf;
	dp_source *timer;     /* handshake deadline, then idle check */
	uint64_t last_active; /* last frame received or stream closed (dp_now_usec) */
	uint64_t accepted;    /* when accepted (dp_now_usec) */
	size_t in_bytes;      /* request bytes its calls hold (budgeted while linked) */
	size_t out_bytes;     /* response bytes its calls queued (budgeted while linked) */
	bool handshaken;      /* the client's preface and SETTINGS arrived */
	bool shutting_down;
	bool evicted;         /* frozen over the output budget: closed from its timer */
	bool protected_;      /* dp_grpc_call_protect: never chosen to make room */
};

struct dp_grpc_server {
	dp_loop *loop;
	int fd;
	dp_source *listen_io, *backoff;
	dp_grpc_method *methods;
	size_t n_methods;
	dp_grpc_limits limits;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	sconn *conns;
	unsigned n_conns, n_calls;
	bool freeing;
	dp_grpc_server *gnext; /* every server of the process (the budget is the process's) */
};

/* Free a call (its queue, timer, buffers) and unlink it from its connection. */
void grpc_call_free(dp_grpc_call *c);
/* Tell the owner the call ended without it (once; never for a call it finished). */
void grpc_call_notify_cancel(dp_grpc_call *c, int status);
/* Decide the final status (once): trailers after what is queued (queued messages not yet
 * started are dropped when drop is set), or Trailers-Only (with http_status). A RECV call
 * becomes ENDED. -EALREADY when decided before or the connection is closing; -ENOMEM, -EPROTO. */
int grpc_call_end(dp_grpc_call *c, int status, const char *message, bool drop, int http_status);
/* Reset the stream with code; the request is ignored from now on. */
void grpc_call_rst(dp_grpc_call *c, uint32_t code);
/* Drop the queued response bytes (keep_partial: not the message half sent). */
void grpc_call_drop_queue(dp_grpc_call *c, bool keep_partial);

/* ---- the process's budget (grpc_budget.c) ---- */

void grpc_budget_add_server(dp_grpc_server *s);
void grpc_budget_remove_server(dp_grpc_server *s);
/* The connection leaves its server: its bytes leave the totals. */
void grpc_budget_unlink(sconn *conn);
/* The call's request buffers changed: recount. */
void grpc_in_update(dp_grpc_call *c);
/* len more request bytes arrive for c: make room by refusing (RESOURCE_EXHAUSTED) the biggest
 * request of the connection holding the most. -ENOBUFS when c itself is that request. */
int grpc_in_reserve(dp_grpc_call *c, size_t len);
/* The connection queued (delta > 0) or handed over / dropped (delta < 0) response bytes. */
void grpc_out_account(sconn *conn, ptrdiff_t delta);
/* len more response bytes for conn: make room by closing the connections that should go
 * first (stalled sockets, then the newest). -ENOBUFS when conn itself should go first (or a
 * protected one is left over the budget). */
int grpc_out_reserve(sconn *conn, size_t len);
/* A limit was hit: the limit hook hears of it once per episode. */
void grpc_limit_hit(const char *what, const char *action, size_t held, size_t max);
/* Freeze conn (its output is dropped now), tell its owners and close it from the loop. */
void grpc_conn_evict(sconn *conn);
/* The evicted connection's owners are told (RESOURCE_EXHAUSTED), then it is closed. */
void grpc_conn_evicted(sconn *conn);
/* A stream was just handed to its handler on conn: enforce max_stream_connections. */
void grpc_streams_cap(dp_grpc_server *s, sconn *conn);
/* The connection a new one replaces when the server is full, or NULL. */
sconn *grpc_evictable(const dp_grpc_server *s);

/* ---- grpc_request.c ---- */

/* The server's nghttp2 callbacks and options (s->cbs, s->opt). -ENOMEM. */
int grpc_server_callbacks(dp_grpc_server *s);

/* ---- grpc_server.c ---- */

/* Graceful stop of one connection: owners told (UNAVAILABLE), trailers, GOAWAY, flush, close. */
void grpc_conn_shutdown(sconn *conn);
/* Take the connection out of its server (and its bytes out of the budget). */
void grpc_conn_unlink(sconn *conn);
/* A handler holds one of its calls. */
bool grpc_conn_busy(const sconn *conn);
