/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc server: a listening unix socket, one h2 connection per peer, one dp_grpc_call per stream.
 *
 * Call states: RECV (request arriving; nobody outside knows the call), OWNED (handed to the
 * method's handler, not ended yet), ENDED (the owner finished it, or was told through the cancel
 * callback, or we answered an invalid request ourselves). The struct lives until nghttp2 closes
 * the stream (or the connection ends), but only an OWNED call may be used by the owner.
 * User callbacks (handlers, cancel callbacks) always run between dp_h2_enter/leave of the call's
 * connection, so nothing they do (even dp_grpc_server_free) frees what the caller still uses.
 */
#include "dp/grpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "dp/log.h"
#include "grpc_internal.h"
#include "h2.h"

#define ACCEPTS_PER_WAKE 16
#define ACCEPT_BACKOFF_USEC (100 * DP_USEC_PER_MSEC)
#define GRPC_MESSAGE_MAX 4096 /* grpc-message is cut to this many bytes before encoding */
#define NO_RST UINT32_MAX

const dp_grpc_limits dp_grpc_default_limits = {
	.max_connections = 64,
	.max_concurrent_streams = 128,
	.max_header_list = 16 * 1024,
	.max_outbuf = 8 * 1024 * 1024,
};

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

/* ---- call helpers ---- */

static nghttp2_session *call_session(const dp_grpc_call *c)
{
	return dp_h2_session(c->conn->h2);
}

static void call_drop_queue(dp_grpc_call *c, bool keep_partial)
{
	qmsg **pp = &c->qhead;
	size_t dropped = 0;

	if (keep_partial && *pp && (*pp)->off > 0)
		pp = &(*pp)->next;
	while (*pp) {
		qmsg *m = *pp;
		*pp = m->next;
		dropped += m->len - m->off;
		free(m);
	}
	c->qtail = pp;
	dp_h2_account(c->conn->h2, -(ptrdiff_t)dropped);
}

static void call_free(dp_grpc_call *c)
{
	sconn *conn = c->conn;

	if (c->prev)
		c->prev->next = c->next;
	else
		conn->calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (conn->server)
		conn->server->n_calls--;
	call_drop_queue(c, false);
	dp_source_free(c->timer);
	dp_grpc_deframer_done(&c->deframer);
	free(c->path);
	free(c->req);
	free(c->message);
	free(c);
}

/* Tell the owner the call ended without it (once; never for a call it finished). */
static void call_notify_cancel(dp_grpc_call *c, int status)
{
	if (c->state != CALL_OWNED)
		return;
	c->state = CALL_ENDED;
	dp_source_free(c->timer);
	c->timer = NULL;
	if (c->cancel_fn)
		c->cancel_fn(c, status, c->cancel_ud);
}

/* Cut at a UTF-8 character boundary at most max bytes in. */
static size_t utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return n;
	while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	return max;
}

#define NV(n, v, vlen) \
	{ (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vlen), NGHTTP2_NV_FLAG_NONE }

/* Submit grpc-status/grpc-message, as trailers or (first) Trailers-Only with http_status.
 * -ENOMEM, -EPROTO. */
static int call_submit_status(dp_grpc_call *c, bool trailers_only, int http_status)
{
	char st[16], hs[8];
	_cleanup_free_ char *cut = NULL, *enc = NULL;
	const char *msg = c->message ? c->message : "";
	int r;

	cut = strndup(msg, utf8_cut(msg, GRPC_MESSAGE_MAX));
	enc = cut ? dp_grpc_percent_encode(cut) : NULL;
	if (!enc)
		return -ENOMEM;
	snprintf(st, sizeof(st), "%d", c->status);
	snprintf(hs, sizeof(hs), "%d", http_status);
	if (trailers_only) {
		const nghttp2_nv nva[] = {
			NV(":status", hs, strlen(hs)),
			NV("content-type", "application/grpc", 16),
			NV("grpc-status", st, strlen(st)),
			NV("grpc-message", enc, strlen(enc)),
		};
		r = nghttp2_submit_response(call_session(c), c->stream_id, nva, DP_ELEMENTSOF(nva), NULL);
	} else {
		const nghttp2_nv nva[] = {
			NV("grpc-status", st, strlen(st)),
			NV("grpc-message", enc, strlen(enc)),
		};
		r = nghttp2_submit_trailer(call_session(c), c->stream_id, nva, DP_ELEMENTSOF(nva));
	}
	if (r != 0)
		dp_debug("grpc: submitting status failed", "stream=%d error=%s", c->stream_id,
			 nghttp2_strerror(r));
	return r == 0 ? 0 : r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
}

static ssize_t call_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
			 uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
	dp_grpc_call *c = source->ptr;
	size_t n = 0;

	while (n < length && c->qhead) {
		qmsg *m = c->qhead;
		size_t k = m->len - m->off < length - n ? m->len - m->off : length - n;
		memcpy(buf + n, m->data + m->off, k);
		m->off += k;
		n += k;
		if (m->off == m->len) {
			c->qhead = m->next;
			if (!c->qhead)
				c->qtail = &c->qhead;
			free(m);
		}
	}
	dp_h2_account(c->conn->h2, -(ptrdiff_t)n);
	if (!c->qhead && c->finish_pending) {
		*data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		c->finish_pending = false;
		if (call_submit_status(c, false, 200) < 0)
			return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
		return (ssize_t)n;
	}
	if (n == 0) {
		c->deferred = true;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

/* Make sure response headers are submitted with our data provider, or wake the provider. */
static int call_push(dp_grpc_call *c)
{
	int r = 0;

	if (!c->headers_sent) {
		const nghttp2_nv nva[] = {
			NV(":status", "200", 3),
			NV("content-type", "application/grpc", 16),
		};
		nghttp2_data_provider prd = { .source.ptr = c, .read_callback = call_read };
		r = nghttp2_submit_response(call_session(c), c->stream_id, nva, DP_ELEMENTSOF(nva), &prd);
		if (r == 0)
			c->headers_sent = true;
	} else if (c->deferred) {
		r = nghttp2_session_resume_data(call_session(c), c->stream_id);
		if (r == 0)
			c->deferred = false;
	}
	dp_h2_kick(c->conn->h2);
	return r == 0 ? 0 : r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
}

/* Decide the final status (once): trailers after what is queued, or Trailers-Only. Queued
 * messages not yet started are dropped when drop is set. The call becomes ENDED. */
static int call_end(dp_grpc_call *c, int status, const char *message, bool drop, int http_status)
{
	int r;

	if (c->state == CALL_RECV)
		c->state = CALL_ENDED;
	c->discard = true;
	if (c->finish_pending || c->response_done || dp_h2_closing(c->conn->h2))
		return -EALREADY;
	free(c->message);
	c->message = message ? strdup(message) : NULL;
	c->status = status;
	if (drop)
		call_drop_queue(c, true);
	if (!c->headers_sent && http_status == 200 && !c->qhead) {
		r = call_submit_status(c, true, 200);
		c->headers_sent = r == 0;
		dp_h2_kick(c->conn->h2);
		return r;
	}
	if (!c->headers_sent && http_status != 200) {
		r = call_submit_status(c, true, http_status);
		c->headers_sent = r == 0;
		dp_h2_kick(c->conn->h2);
		return r;
	}
	c->finish_pending = true;
	return call_push(c);
}

static void call_rst(dp_grpc_call *c, uint32_t code)
{
	c->discard = true;
	if (c->state == CALL_RECV)
		c->state = CALL_ENDED;
	nghttp2_submit_rst_stream(call_session(c), NGHTTP2_FLAG_NONE, c->stream_id, code);
	dp_h2_kick(c->conn->h2);
}

/* ---- the public call API ---- */

void dp_grpc_call_set_cancel(dp_grpc_call *call, dp_grpc_cancel_fn fn, void *userdata)
{
	if (!call)
		return;
	call->cancel_fn = fn;
	call->cancel_ud = userdata;
}

uint64_t dp_grpc_call_deadline(const dp_grpc_call *call)
{
	return call ? call->deadline : 0;
}

const char *dp_grpc_call_path(const dp_grpc_call *call)
{
	return call ? call->path : NULL;
}

/* Queue a framed message of len bytes; returns where to write the payload. */
static uint8_t *call_queue(dp_grpc_call *c, size_t len)
{
	qmsg *m = malloc(sizeof(*m) + 5 + len);

	if (!m)
		return NULL;
	m->next = NULL;
	m->len = 5 + len;
	m->off = 0;
	dp_grpc_frame_header(m->data, len);
	*c->qtail = m;
	c->qtail = &m->next;
	dp_h2_account(c->conn->h2, (ptrdiff_t)m->len);
	return m->data + 5;
}

/* Checks before queuing len bytes; ends the call on a size or buffer limit. */
static int call_send_check(dp_grpc_call *c, size_t len)
{
	char msg[128];
	dp_h2 *h;
	int r;

	if (c->state != CALL_OWNED)
		return -ESTALE;
	h = c->conn->h2;
	if (dp_h2_closing(h))
		return 0;
	if (len > DP_GRPC_MAX_MESSAGE) {
		snprintf(msg, sizeof(msg), "grpc: trying to send message larger than max (%zu vs. %u)",
			 len, DP_GRPC_MAX_MESSAGE);
		r = -EMSGSIZE;
	} else if (dp_h2_pending(h) + len + 5 > 2 * c->conn->max_outbuf) {
		snprintf(msg, sizeof(msg), "grpc: output buffer of the connection is full (%zu bytes)",
			 dp_h2_pending(h));
		r = -ENOBUFS;
	} else {
		return 0;
	}
	c->state = CALL_ENDED;
	call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
	return r;
}

/* The payload is in the queue: end a unary call with OK, or wake the stream. The API functions
 * never flush themselves (dp_h2_kick defers it), so no callback runs inside them. */
static int call_sent(dp_grpc_call *c)
{
	int r;

	if (c->method.kind == DP_GRPC_METHOD_UNARY) {
		c->state = CALL_ENDED;
		r = call_end(c, DP_GRPC_OK, NULL, false, 200);
	} else {
		r = call_push(c);
	}
	return r == -EALREADY ? 0 : r;
}

int dp_grpc_call_send(dp_grpc_call *call, const uint8_t *msg, size_t len)
{
	uint8_t *p;
	int r;

	if (!call || (!msg && len > 0))
		return -EINVAL;
	r = call_send_check(call, len);
	if (r < 0)
		return r;
	if (dp_h2_closing(call->conn->h2)) {
		/* The connection is going: the cancel callback follows; a unary call is done. */
		if (call->method.kind == DP_GRPC_METHOD_UNARY)
			call->state = CALL_ENDED;
		return 0;
	}
	p = call_queue(call, len);
	if (!p)
		return -ENOMEM;
	if (len > 0)
		memcpy(p, msg, len);
	return call_sent(call);
}

int dp_grpc_call_send_pb(dp_grpc_call *call, const ProtobufCMessage *msg)
{
	size_t len;
	uint8_t *p;
	int r;

	if (!call || !msg)
		return -EINVAL;
	len = protobuf_c_message_get_packed_size(msg);
	r = call_send_check(call, len);
	if (r < 0)
		return r;
	if (dp_h2_closing(call->conn->h2)) {
		if (call->method.kind == DP_GRPC_METHOD_UNARY)
			call->state = CALL_ENDED;
		return 0;
	}
	p = call_queue(call, len);
	if (!p)
		return -ENOMEM;
	protobuf_c_message_pack(msg, p);
	return call_sent(call);
}

int dp_grpc_call_finish(dp_grpc_call *call, int status, const char *message)
{
	int r;

	if (!call || status < 0)
		return -EINVAL;
	if (call->state != CALL_OWNED)
		return -ESTALE;
	call->state = CALL_ENDED;
	dp_source_free(call->timer);
	call->timer = NULL;
	r = call_end(call, status, message, false, 200);
	return r == -EALREADY ? 0 : r;
}

/* ---- request processing ---- */

static int call_deadline(dp_source *s, void *userdata)
{
	dp_grpc_call *c = userdata;
	dp_h2 *h = c->conn->h2;

	dp_h2_enter(h);
	dp_source_free(c->timer);
	c->timer = NULL;
	call_notify_cancel(c, DP_GRPC_DEADLINE_EXCEEDED);
	c->rst_code = NGHTTP2_CANCEL;
	if (call_end(c, DP_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", true, 200) == -EALREADY &&
	    !c->response_done && !dp_h2_closing(h))
		call_rst(c, NGHTTP2_CANCEL); /* the answer is stuck behind flow control */
	dp_h2_kick(h);
	dp_h2_leave(h);
	return 0;
}

static const dp_grpc_method *server_route(const dp_grpc_server *s, const char *path)
{
	for (size_t i = 0; i < s->n_methods; i++)
		if (strcmp(s->methods[i].path, path) == 0)
			return &s->methods[i];
	return NULL;
}

static void unknown_method_message(const dp_grpc_server *s, const char *path, char *buf, size_t size)
{
	const char *slash = strrchr(path, '/');
	size_t svc_len = slash && slash > path ? (size_t)(slash - path - 1) : 0;

	for (size_t i = 0; svc_len > 0 && i < s->n_methods; i++)
		if (strncmp(s->methods[i].path, path, svc_len + 2) == 0) {
			snprintf(buf, size, "unknown method %s for service %.*s", slash + 1, (int)svc_len,
				 path + 1);
			return;
		}
	snprintf(buf, size, "unknown service %.*s", svc_len > 0 ? (int)svc_len : (int)strlen(path),
		 svc_len > 0 ? path + 1 : path);
}

/* All request headers are in: validate, route, start the deadline. */
static void call_headers_done(dp_grpc_call *c)
{
	dp_grpc_server *s = c->conn->server;
	const dp_grpc_method *m;
	char msg[256];

	c->headers_done = true;
	if (c->malformed || c->n_method != 1 || c->n_path != 1 || c->n_scheme > 1 ||
	    c->n_authority > 1 || !c->is_post || !c->path || c->path[0] != '/') {
		call_rst(c, NGHTTP2_PROTOCOL_ERROR);
		return;
	}
	if (c->too_big) {
		snprintf(msg, sizeof(msg), "request header list larger than %zu bytes",
			 c->conn->max_header_list);
		call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
		return;
	}
	if (c->n_ct != 1 || !c->ct_ok) {
		call_end(c, DP_GRPC_INVALID_ARGUMENT, "invalid gRPC request content-type", false, 415);
		return;
	}
	if (c->timeout_bad) {
		call_end(c, DP_GRPC_INTERNAL, "malformed grpc-timeout", false, 200);
		return;
	}
	if (!s) {
		call_rst(c, NGHTTP2_REFUSED_STREAM);
		return;
	}
	m = server_route(s, c->path);
	if (!m) {
		unknown_method_message(s, c->path, msg, sizeof(msg));
		call_end(c, DP_GRPC_UNIMPLEMENTED, msg, false, 200);
		return;
	}
	c->method = *m;
	if (c->n_timeout) {
		c->deadline = dp_now_usec() + c->timeout_usec;
		/* (a zero timeout fires as soon as possible) */
		if (dp_timer_add(dp_h2_loop(c->conn->h2), c->timeout_usec, 0, call_deadline, c,
				 &c->timer) < 0)
			call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, "cannot arm the deadline", false, 200);
	}
}

static int call_on_message(void *userdata, const uint8_t *msg, size_t len)
{
	dp_grpc_call *c = userdata;

	if (c->have_req) {
		c->extra_msg = true;
		return 1;
	}
	c->req = malloc(len ? len : 1);
	if (!c->req)
		return -ENOMEM;
	memcpy(c->req, msg, len);
	c->req_len = len;
	c->have_req = true;
	return 0;
}

static void call_data(dp_grpc_call *c, const uint8_t *data, size_t len)
{
	char msg[128];
	int r = dp_grpc_deframer_feed(&c->deframer, data, len, call_on_message, c);

	if (r == 0)
		return;
	if (r == -EMSGSIZE) {
		const uint8_t *h = c->deframer.hdr;
		snprintf(msg, sizeof(msg), "grpc: received message larger than max (%u vs. %u)",
			 (unsigned)h[1] << 24 | (unsigned)h[2] << 16 | (unsigned)h[3] << 8 | h[4],
			 DP_GRPC_MAX_MESSAGE);
		call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
	} else if (r == -EPROTONOSUPPORT) {
		call_end(c, DP_GRPC_UNIMPLEMENTED, "grpc: compressed messages are not supported", false, 200);
	} else if (r == -EBADMSG) {
		call_end(c, DP_GRPC_INTERNAL, "grpc: invalid message flag", false, 200);
	} else if (c->extra_msg) {
		call_end(c, DP_GRPC_INTERNAL, "grpc: more than one request message", false, 200);
	} else {
		call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory", false, 200);
	}
}

/* END_STREAM from the peer: hand the request to the handler. */
static void call_request_end(dp_grpc_call *c)
{
	c->req_ended = true;
	if (c->discard || c->state != CALL_RECV)
		return;
	if (!dp_grpc_deframer_idle(&c->deframer)) {
		call_end(c, DP_GRPC_INTERNAL, "grpc: request ended inside a message", false, 200);
		return;
	}
	if (!c->have_req) {
		call_end(c, DP_GRPC_INTERNAL, "grpc: no request message", false, 200);
		return;
	}
	c->state = CALL_OWNED;
	c->method.handler(c, c->req, c->req_len, c->method.userdata);
	free(c->req);
	c->req = NULL;
}

/* ---- nghttp2 callbacks (user_data = sconn) ---- */

static dp_grpc_call *stream_call(nghttp2_session *session, int32_t stream_id)
{
	return nghttp2_session_get_stream_user_data(session, stream_id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	sconn *conn = user_data;
	dp_grpc_call *c;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	if (conn->shutting_down || !conn->server) {
		nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
					  NGHTTP2_REFUSED_STREAM);
		return 0;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	c->conn = conn;
	c->stream_id = frame->hd.stream_id;
	c->rst_code = NO_RST;
	c->qtail = &c->qhead;
	dp_grpc_deframer_init(&c->deframer, DP_GRPC_MAX_MESSAGE);
	if (nghttp2_session_set_stream_user_data(session, c->stream_id, c) != 0) {
		free(c);
		return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	c->next = conn->calls;
	if (c->next)
		c->next->prev = c;
	conn->calls = c;
	conn->server->n_calls++;
	return 0;
}

static bool name_is(const uint8_t *name, size_t len, const char *lit)
{
	return len == strlen(lit) && memcmp(name, lit, len) == 0;
}

static void call_pseudo_header(dp_grpc_call *c, const uint8_t *name, size_t namelen,
			       const uint8_t *value, size_t valuelen)
{
	if (c->regular_seen) {
		c->malformed = true; /* pseudo-headers come first */
	} else if (name_is(name, namelen, ":method")) {
		c->n_method++;
		c->is_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
	} else if (name_is(name, namelen, ":path")) {
		if (c->n_path++ == 0 && !memchr(value, '\0', valuelen))
			c->path = strndup((const char *)value, valuelen);
	} else if (name_is(name, namelen, ":scheme")) {
		c->n_scheme++;
	} else if (name_is(name, namelen, ":authority")) {
		c->n_authority++; /* "localhost", or the socket path old kubelets sent: both fine */
	} else {
		c->malformed = true;
	}
}

static void call_header(dp_grpc_call *c, const uint8_t *name, size_t namelen, const uint8_t *value,
			size_t valuelen)
{
	for (size_t i = 0; i < namelen; i++)
		if (name[i] >= 'A' && name[i] <= 'Z')
			c->malformed = true; /* HTTP/2 header names are lowercase */
	if (namelen > 0 && name[0] == ':') {
		call_pseudo_header(c, name, namelen, value, valuelen);
		return;
	}
	c->regular_seen = true;
	if (name_is(name, namelen, "content-type")) {
		c->n_ct++;
		c->ct_ok = dp_grpc_content_type_ok(value, valuelen);
	} else if (name_is(name, namelen, "grpc-timeout")) {
		if (c->n_timeout++ > 0 ||
		    dp_grpc_parse_timeout((const char *)value, valuelen, &c->timeout_usec) < 0)
			c->timeout_bad = true;
	} else if (name_is(name, namelen, "host")) {
		c->n_authority++;
	} else if (name_is(name, namelen, "connection")) {
		c->malformed = true;
	}
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
		     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
		     void *user_data)
{
	sconn *conn = user_data;
	dp_grpc_call *c;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0; /* trailers from a client carry nothing we use */
	c = stream_call(session, frame->hd.stream_id);
	if (!c || c->headers_done || c->too_big)
		return 0;
	c->header_bytes += namelen + valuelen + 32;
	if (c->header_bytes > conn->max_header_list) {
		c->too_big = true;
		return 0;
	}
	call_header(c, name, namelen, value, valuelen);
	return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	dp_grpc_call *c;

	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	c = stream_call(session, frame->hd.stream_id);
	if (!c)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
		call_headers_done(c);
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
		call_request_end(c);
	return 0;
}

static int on_data_chunk_recv(nghttp2_session *session, uint8_t flags, int32_t stream_id,
			      const uint8_t *data, size_t len, void *user_data)
{
	dp_grpc_call *c = stream_call(session, stream_id);

	if (c && !c->discard && c->headers_done && c->state == CALL_RECV)
		call_data(c, data, len);
	return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	dp_grpc_call *c;

	if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	c = stream_call(session, frame->hd.stream_id);
	if (!c)
		return 0;
	c->response_done = true;
	/* The answer is complete: a deadline resets with CANCEL; a request still arriving is cut
	 * short with NO_ERROR (PROTOCOL-HTTP2.md, early server closure). */
	if (c->rst_code != NO_RST)
		nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, c->stream_id, c->rst_code);
	else if (!c->req_ended)
		nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, c->stream_id, NGHTTP2_NO_ERROR);
	return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
			   void *user_data)
{
	dp_grpc_call *c = stream_call(session, stream_id);

	if (!c)
		return 0;
	dp_debug("grpc: stream closed", "stream=%d code=%s", stream_id,
		 dp_grpc_h2_error_name(error_code));
	call_notify_cancel(c, DP_GRPC_CANCELLED);
	call_free(c);
	return 0;
}

/* ---- connections ---- */

static void conn_unlink(sconn *conn)
{
	dp_grpc_server *s = conn->server;

	if (!s)
		return;
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		s->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	s->n_conns--;
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		s->n_calls--;
	conn->server = NULL;
	conn->prev = conn->next = NULL;
}

static void conn_closed(dp_h2 *h, int error, void *userdata)
{
	sconn *conn = userdata;

	dp_debug("grpc: connection closed", "error=%d", error);
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		call_notify_cancel(c, DP_GRPC_CANCELLED);
	while (conn->calls)
		call_free(conn->calls);
	conn_unlink(conn);
	free(conn);
}

static int conn_new(dp_grpc_server *s, int fd)
{
	const nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, s->limits.max_concurrent_streams },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, s->limits.max_header_list },
	};
	sconn *conn = calloc(1, sizeof(*conn));
	int r;

	if (!conn)
		return -ENOMEM;
	conn->server = s;
	conn->max_header_list = s->limits.max_header_list;
	conn->max_outbuf = s->limits.max_outbuf;
	r = dp_h2_new(s->loop, fd, true, s->cbs, s->opt, s->limits.max_outbuf, conn_closed, conn,
		      &conn->h2);
	if (r < 0) {
		free(conn);
		return r;
	}
	conn->next = s->conns;
	if (conn->next)
		conn->next->prev = conn;
	s->conns = conn;
	s->n_conns++;
	/* grpc-go requires SETTINGS as the server's first frame. */
	dp_h2_enter(conn->h2);
	if (nghttp2_submit_settings(dp_h2_session(conn->h2), NGHTTP2_FLAG_NONE, iv,
				    DP_ELEMENTSOF(iv)) != 0)
		dp_h2_close(conn->h2, false, -EPROTO);
	dp_h2_kick(conn->h2);
	dp_h2_leave(conn->h2);
	return 0;
}

static int server_backoff_done(dp_source *src, void *userdata)
{
	dp_grpc_server *s = userdata;

	dp_io_set_events(s->listen_io, EPOLLIN);
	return 0;
}

static int server_accept(dp_source *src, int fd, uint32_t revents, void *userdata)
{
	dp_grpc_server *s = userdata;

	for (int i = 0; i < ACCEPTS_PER_WAKE; i++) {
		int cfd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* Out of fds or memory: stop accepting for a moment instead of spinning. */
				dp_debug("grpc: accept failed, backing off", "errno=%d", errno);
				dp_io_set_events(s->listen_io, 0);
				dp_timer_set(s->backoff, ACCEPT_BACKOFF_USEC, 0);
			}
			break;
		}
		if (s->n_conns >= s->limits.max_connections) {
			dp_debug("grpc: connection limit reached, closing new connection", "limit=%u",
				 s->limits.max_connections);
			close(cfd);
			continue;
		}
		if (conn_new(s, cfd) < 0)
			close(cfd);
	}
	return 0;
}

/* ---- server ---- */

static int server_callbacks(dp_grpc_server *s)
{
	if (nghttp2_session_callbacks_new(&s->cbs) != 0 || nghttp2_option_new(&s->opt) != 0)
		return -ENOMEM;
	nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(s->cbs, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, on_data_chunk_recv);
	nghttp2_session_callbacks_set_on_frame_send_callback(s->cbs, on_frame_send);
	nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, on_stream_close);

	/* Old kubelets send the socket path as :authority, which HTTP messaging rejects: we
	 * validate method, path, content-type and pseudo-headers ourselves. */
	nghttp2_option_set_no_http_messaging(s->opt, 1);
	nghttp2_option_set_no_closed_streams(s->opt, 1);
	nghttp2_option_set_max_send_header_block_length(s->opt, 64 * 1024);
	nghttp2_option_set_max_deflate_dynamic_table_size(s->opt, 4096);
	nghttp2_option_set_max_outbound_ack(s->opt, 1000);       /* PING/SETTINGS ACK flood */
	nghttp2_option_set_max_settings(s->opt, 32);
	nghttp2_option_set_stream_reset_rate_limit(s->opt, 1000, 33); /* rapid reset */
	nghttp2_option_set_max_continuations(s->opt, 8);        /* CONTINUATION flood */
	return 0;
}

static int server_listen(dp_grpc_server *s, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* The socket inode's mode becomes the file's mode at bind: 0600 without a window. */
	if (fchmod(fd, 0600) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	if (chmod(path, 0600) < 0 || listen(fd, SOMAXCONN) < 0) {
		int r = -errno;
		unlink(path);
		close(fd);
		return r;
	}
	s->fd = fd;
	return 0;
}

static int server_check_args(dp_loop *loop, const char *socket_path, const dp_grpc_method *methods,
			     size_t n_methods, const dp_grpc_limits *limits, dp_grpc_server **ret)
{
	if (!loop || !socket_path || !*socket_path || (!methods && n_methods) || !ret)
		return -EINVAL;
	for (size_t i = 0; i < n_methods; i++)
		if (!methods[i].path || methods[i].path[0] != '/' || !methods[i].handler ||
		    (methods[i].kind != DP_GRPC_METHOD_UNARY &&
		     methods[i].kind != DP_GRPC_METHOD_SERVER_STREAM))
			return -EINVAL;
	if (limits && (limits->max_connections == 0 || limits->max_concurrent_streams == 0 ||
		       limits->max_header_list < 1024 || limits->max_outbuf == 0))
		return -EINVAL;
	return 0;
}

int dp_grpc_server_new(dp_loop *loop, const char *socket_path, const dp_grpc_method *methods,
		       size_t n_methods, const dp_grpc_limits *limits, dp_grpc_server **ret)
{
	dp_grpc_server *s;
	int r = server_check_args(loop, socket_path, methods, n_methods, limits, ret);

	if (r < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = loop;
	s->fd = -1;
	s->limits = limits ? *limits : dp_grpc_default_limits;
	s->n_methods = n_methods;
	s->methods = calloc(n_methods ? n_methods : 1, sizeof(*methods));
	r = s->methods ? server_callbacks(s) : -ENOMEM;
	if (r < 0)
		goto fail;
	if (n_methods)
		memcpy(s->methods, methods, n_methods * sizeof(*methods));
	r = dp_timer_add(loop, 0, 0, server_backoff_done, s, &s->backoff);
	if (r < 0)
		goto fail;
	dp_timer_set(s->backoff, 0, 0);
	r = server_listen(s, socket_path);
	if (r < 0)
		goto fail;
	r = dp_io_add(loop, s->fd, EPOLLIN, server_accept, s, &s->listen_io);
	if (r < 0) {
		unlink(socket_path);
		goto fail;
	}
	*ret = s;
	return 0;
fail:
	dp_grpc_server_free(s);
	return r;
}

/* Graceful stop of one connection: owners told (UNAVAILABLE), trailers, GOAWAY, flush, close. */
static void conn_shutdown(sconn *conn)
{
	dp_h2 *h = conn->h2;
	nghttp2_session *session = dp_h2_session(h);

	conn_unlink(conn);
	conn->shutting_down = true;
	dp_h2_enter(h);
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		call_notify_cancel(c, DP_GRPC_UNAVAILABLE);
	for (dp_grpc_call *c = conn->calls; c && !dp_h2_closing(h); c = c->next)
		if (!c->response_done && c->state != CALL_RECV)
			call_end(c, DP_GRPC_UNAVAILABLE, "server shutting down", true, 200);
		else if (c->state == CALL_RECV)
			call_rst(c, NGHTTP2_REFUSED_STREAM);
	if (!dp_h2_closing(h))
		nghttp2_submit_goaway(session, NGHTTP2_FLAG_NONE,
				      nghttp2_session_get_last_proc_stream_id(session),
				      NGHTTP2_NO_ERROR, NULL, 0);
	dp_h2_close(h, true, 0);
	dp_h2_leave(h);
}

dp_grpc_server *dp_grpc_server_free(dp_grpc_server *s)
{
	if (!s || s->freeing)
		return NULL;
	s->freeing = true;
	s->listen_io = dp_source_free(s->listen_io);
	s->backoff = dp_source_free(s->backoff);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	while (s->conns)
		conn_shutdown(s->conns);
	nghttp2_session_callbacks_del(s->cbs);
	nghttp2_option_del(s->opt);
	free(s->methods);
	free(s);
	return NULL;
}

unsigned dp_grpc_server_connections(const dp_grpc_server *s)
{
	return s ? s->n_conns : 0;
}

unsigned dp_grpc_server_calls(const dp_grpc_server *s)
{
	return s ? s->n_calls : 0;
}
