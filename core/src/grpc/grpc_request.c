/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_request: the request side of a server call: nghttp2's receive callbacks, header
 * validation, routing to a method, the deadline, the request message, and the hand-over to the
 * handler at END_STREAM.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "dp/metrics.h"
#include "grpc_internal.h"
#include "grpc_server.h"

/* ---- request processing ---- */

static int call_deadline(dp_source *s, void *userdata)
{
	dp_grpc_call *c = userdata;
	dp_h2 *h = c->conn->h2;

	dp_h2_enter(h);
	dp_source_free(c->timer);
	c->timer = NULL;
	grpc_call_notify_cancel(c, DP_GRPC_DEADLINE_EXCEEDED);
	c->rst_code = NGHTTP2_CANCEL;
	if (grpc_call_end(c, DP_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", true, 200) == -EALREADY &&
	    !c->response_done && !dp_h2_closing(h))
		grpc_call_rst(c, NGHTTP2_CANCEL); /* the answer is stuck behind flow control */
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

static void unknown_method_message(const dp_grpc_server *s, const char *path, char *buf,
				   size_t size)
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

/* ---- unknown methods: counted, each distinct name reported once (bounded) ---- */

static dp_grpc_unimplemented_fn unknown_fn;
static void *unknown_ud;
static char unknown_seen[DP_GRPC_UNKNOWN_METHODS][DP_GRPC_UNKNOWN_PATH_MAX + 1];
static unsigned n_unknown_seen; /* up to DP_GRPC_UNKNOWN_METHODS, then one more: "further" */

void dp_grpc_set_unimplemented_hook(dp_grpc_unimplemented_fn fn, void *userdata)
{
	unknown_fn = fn;
	unknown_ud = userdata;
	n_unknown_seen = 0; /* every name is new again */
}

void dp_grpc_log_unimplemented(const char *path, void *userdata)
{
	char q[DP_GRPC_UNKNOWN_PATH_MAX + 32];

	if (path)
		dp_warn("unknown gRPC method", "method=%s", dp_logq(q, sizeof(q), path));
	else
		dp_warn("further unknown gRPC methods not logged", "logged=%u", DP_GRPC_UNKNOWN_METHODS);
}

/* Whether path (compared on its first DP_GRPC_UNKNOWN_PATH_MAX bytes) was reported before;
 * if not, it is remembered while there is room. */
static bool unknown_already_seen(const char *path)
{
	unsigned n = n_unknown_seen < DP_GRPC_UNKNOWN_METHODS ? n_unknown_seen : DP_GRPC_UNKNOWN_METHODS;

	for (unsigned i = 0; i < n; i++)
		if (strncmp(unknown_seen[i], path, DP_GRPC_UNKNOWN_PATH_MAX) == 0)
			return true;
	if (n_unknown_seen < DP_GRPC_UNKNOWN_METHODS)
		snprintf(unknown_seen[n_unknown_seen], sizeof(unknown_seen[0]), "%s", path);
	return false;
}

/* A call of an unknown method: counted; the hook hears of a new name, or once of "further". */
static void unknown_method_called(const char *path)
{
	dp_metrics_grpc_unimplemented();
	if (unknown_already_seen(path) || n_unknown_seen > DP_GRPC_UNKNOWN_METHODS)
		return;
	if (unknown_fn)
		unknown_fn(n_unknown_seen < DP_GRPC_UNKNOWN_METHODS ? path : NULL, unknown_ud);
	n_unknown_seen++;
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
		grpc_call_rst(c, NGHTTP2_PROTOCOL_ERROR);
		return;
	}
	if (c->too_big) {
		snprintf(msg, sizeof(msg), "request header list larger than %zu bytes",
			 c->conn->max_header_list);
		grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
		return;
	}
	if (c->n_ct != 1 || !c->ct_ok) {
		grpc_call_end(c, DP_GRPC_INVALID_ARGUMENT, "invalid gRPC request content-type", false, 415);
		return;
	}
	if (c->timeout_bad) {
		grpc_call_end(c, DP_GRPC_INTERNAL, "malformed grpc-timeout", false, 200);
		return;
	}
	if (!s) {
		grpc_call_rst(c, NGHTTP2_REFUSED_STREAM);
		return;
	}
	m = server_route(s, c->path);
	if (!m) {
		unknown_method_called(c->path);
		unknown_method_message(s, c->path, msg, sizeof(msg));
		grpc_call_end(c, DP_GRPC_UNIMPLEMENTED, msg, false, 200);
		return;
	}
	c->method = *m;
	if (c->n_timeout) {
		c->deadline = dp_now_usec() + c->timeout_usec;
		/* (a zero timeout fires as soon as possible) */
		if (dp_timer_add(dp_h2_loop(c->conn->h2), c->timeout_usec, 0, call_deadline, c,
				 &c->timer) < 0)
			grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, "cannot arm the deadline", false, 200);
	}
}

static int call_on_message(void *userdata, const uint8_t *msg, size_t len)
{
	dp_grpc_call *c = userdata;

	if (c->have_req) {
		c->extra_msg = true;
		return 1;
	}
	c->req = dp_grpc_deframer_take(&c->deframer); /* no copy: held once */
	if (!c->req)
		c->req = malloc(1); /* an empty message */
	if (!c->req)
		return -ENOMEM;
	c->req_len = len;
	c->have_req = true;
	return 0;
}

/* Over the process's request budget: this request is the one refused. */
static void call_refuse_memory(dp_grpc_call *c)
{
	grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, "grpc: the server's request memory is full",
		      false, 200);
	dp_grpc_deframer_done(&c->deframer);
	free(c->req);
	c->req = NULL;
	grpc_in_update(c);
}

static void call_data(dp_grpc_call *c, const uint8_t *data, size_t len)
{
	char msg[128];
	int r;

	if (grpc_in_reserve(c, len) < 0) {
		call_refuse_memory(c);
		return;
	}
	r = dp_grpc_deframer_feed(&c->deframer, data, len, call_on_message, c);
	grpc_in_update(c);
	if (r == 0)
		return;
	if (r == -EMSGSIZE) {
		const uint8_t *h = c->deframer.hdr;
		snprintf(msg, sizeof(msg), "grpc: received message larger than max (%u vs. %u)",
			 (unsigned)h[1] << 24 | (unsigned)h[2] << 16 | (unsigned)h[3] << 8 | h[4],
			 DP_GRPC_MAX_MESSAGE);
		grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
	} else if (r == -EPROTONOSUPPORT) {
		grpc_call_end(c, DP_GRPC_UNIMPLEMENTED, "grpc: compressed messages are not supported",
			      false, 200);
	} else if (r == -EBADMSG) {
		grpc_call_end(c, DP_GRPC_INTERNAL, "grpc: invalid message flag", false, 200);
	} else if (c->extra_msg) {
		grpc_call_end(c, DP_GRPC_INTERNAL, "grpc: more than one request message", false, 200);
	} else {
		grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, "grpc: out of memory", false, 200);
	}
}

/* END_STREAM from the peer: hand the request to the handler. */
static void call_request_end(dp_grpc_call *c)
{
	sconn *conn = c->conn;

	c->req_ended = true;
	if (c->discard || c->state != CALL_RECV)
		return;
	if (!dp_grpc_deframer_idle(&c->deframer)) {
		grpc_call_end(c, DP_GRPC_INTERNAL, "grpc: request ended inside a message", false, 200);
		return;
	}
	if (!c->have_req) {
		grpc_call_end(c, DP_GRPC_INTERNAL, "grpc: no request message", false, 200);
		return;
	}
	c->state = CALL_OWNED;
	c->method.handler(c, c->req, c->req_len, c->method.userdata);
	free(c->req);
	c->req = NULL;
	grpc_in_update(c);
	if (c->method.kind == DP_GRPC_METHOD_SERVER_STREAM && conn->server)
		grpc_streams_cap(conn->server, conn);
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
	DP_LIST_PREPEND(conn->calls, c);
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
		return;
	}
	if (name_is(name, namelen, ":method")) {
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

/* The client's first SETTINGS (nghttp2 checked the preface before it): from now on the timer
 * checks for idleness. */
static void conn_handshaken(sconn *conn)
{
	conn->handshaken = true;
	if (conn->server) /* coarse: shares the backstops' wake-ups (loop.h) */
		dp_timer_set_coarse(conn->timer, conn->server->limits.idle_usec, 0);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
	sconn *conn = user_data;
	dp_grpc_call *c;

	conn->last_active = dp_now_usec();
	if (!conn->handshaken && frame->hd.type == NGHTTP2_SETTINGS &&
	    !(frame->hd.flags & NGHTTP2_FLAG_ACK))
		conn_handshaken(conn);
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
	sconn *conn = user_data;
	dp_grpc_call *c = stream_call(session, stream_id);

	conn->last_active = dp_now_usec();
	if (!c)
		return 0;
	dp_debug("grpc: stream closed", "stream=%d code=%s", stream_id,
		 dp_grpc_h2_error_name(error_code));
	grpc_call_notify_cancel(c, DP_GRPC_CANCELLED);
	grpc_call_free(c);
	return 0;
}

int grpc_server_callbacks(dp_grpc_server *s)
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
	nghttp2_option_set_max_send_header_block_length(s->opt, (size_t)64 << 10);
	nghttp2_option_set_max_deflate_dynamic_table_size(s->opt, 4096);
	nghttp2_option_set_max_outbound_ack(s->opt, 1000);       /* PING/SETTINGS ACK flood */
	nghttp2_option_set_max_settings(s->opt, 32);
	nghttp2_option_set_stream_reset_rate_limit(s->opt, 1000, 33); /* rapid reset */
	nghttp2_option_set_max_continuations(s->opt, 8);        /* CONTINUATION flood */
	return 0;
}
