/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc server internals shared by grpc_server.c (requests, connections, the listening socket)
 * and grpc_call.c (a call's response side and the public call API).
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
	dp_grpc_call *prev, *next;
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
	sconn *prev, *next;
	dp_h2 *h2;
	dp_grpc_call *calls;
	size_t max_header_list;
	size_t max_outbuf;
	dp_source *timer;     /* handshake deadline, then idle check */
	uint64_t last_active; /* last frame received or stream closed (dp_now_usec) */
	bool handshaken;      /* the client's preface and SETTINGS arrived */
	bool shutting_down;
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
