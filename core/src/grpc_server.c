/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc server: a listening unix socket, one h2 connection per peer, one dp_grpc_call per stream
 * (call states: see grpc_server.h). User callbacks (handlers, cancel callbacks) always run
 * between dp_h2_enter/leave of the call's connection, so nothing they do (even
 * dp_grpc_server_free) frees what the caller still uses.
 */
#include "dp/grpc.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
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
#include "grpc_server.h"

#define ACCEPTS_PER_WAKE 16
#define ACCEPT_BACKOFF_USEC (100 * DP_USEC_PER_MSEC)

const dp_grpc_limits dp_grpc_default_limits = {
	.max_connections = 64,
	.max_concurrent_streams = 128,
	.max_header_list = 16 * 1024,
	.max_outbuf = (size_t)8 << 20, /* 8 MiB */
	.handshake_usec = 10 * DP_USEC_PER_SEC,
	.idle_usec = 300 * DP_USEC_PER_SEC,
	.max_stream_connections = 48,
};


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

/* ---- connections ---- */

void grpc_conn_unlink(sconn *conn)
{
	dp_grpc_server *s = conn->server;

	if (!s)
		return;
	grpc_budget_unlink(conn);
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

	dp_debug("grpc: connection closed", "error=%s", dp_errname(error));
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		grpc_call_notify_cancel(c, DP_GRPC_CANCELLED);
	while (conn->calls)
		grpc_call_free(conn->calls);
	grpc_conn_unlink(conn);
	dp_source_free(conn->timer);
	free(conn);
}

/* A handler holds one of its calls. Streams still arriving (or stalled half-way) and answers
 * waiting for the peer to read do not count: they cannot pin a connection forever. */
bool grpc_conn_busy(const sconn *conn)
{
	for (const dp_grpc_call *c = conn->calls; c; c = c->next)
		if (c->state == CALL_OWNED)
			return true;
	return false;
}

/* Handshake deadline, then idle check: a connection that is not busy and received no frame for
 * idle_usec gets GOAWAY (its unfinished requests REFUSED_STREAM) and is closed. */
static int conn_timer(dp_source *src, void *userdata)
{
	sconn *conn = userdata;
	dp_grpc_server *s = conn->server;
	uint64_t now = dp_now_usec();

	if (conn->evicted) {
		grpc_conn_evicted(conn);
		return 0;
	}
	if (!s || conn->shutting_down)
		return 0;
	if (!conn->handshaken) {
		dp_debug("grpc: no HTTP/2 handshake in time, closing", "limit_usec=%llu",
			 (unsigned long long)s->limits.handshake_usec);
		grpc_conn_shutdown(conn);
		return 0;
	}
	if (grpc_conn_busy(conn) || now - conn->last_active < s->limits.idle_usec) {
		uint64_t since = grpc_conn_busy(conn) ? 0 : now - conn->last_active;
		dp_timer_set_coarse(src, s->limits.idle_usec - since, 0);
		return 0;
	}
	dp_debug("grpc: idle connection, closing", "limit_usec=%llu",
		 (unsigned long long)s->limits.idle_usec);
	grpc_conn_shutdown(conn);
	return 0;
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
	conn->last_active = conn->accepted = dp_now_usec();
	r = dp_timer_add(s->loop, s->limits.handshake_usec, 0, conn_timer, conn, &conn->timer);
	if (r < 0) {
		free(conn);
		return r;
	}
	r = dp_h2_new(s->loop, fd, true, s->cbs, s->opt, s->limits.max_outbuf, conn_closed, conn,
		      &conn->h2);
	if (r < 0) {
		dp_source_free(conn->timer);
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
				dp_debug("grpc: accept failed, backing off", "error=%s", dp_errname(errno));
				dp_io_set_events(s->listen_io, 0);
				dp_timer_set(s->backoff, ACCEPT_BACKOFF_USEC, 0);
			}
			break;
		}
		sconn *victim = s->n_conns >= s->limits.max_connections ? grpc_evictable(s) : NULL;
		if (victim) {
			grpc_limit_hit("connections", "least recently active connection closed",
				       s->n_conns + 1, s->limits.max_connections);
			grpc_conn_shutdown(victim);
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
	nghttp2_option_set_max_send_header_block_length(s->opt, (size_t)64 << 10);
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
		       limits->max_header_list < 1024 || limits->max_outbuf == 0 ||
		       limits->handshake_usec == 0 || limits->idle_usec == 0))
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
	if (s->limits.max_stream_connections == 0 ||
	    s->limits.max_stream_connections >= s->limits.max_connections)
		s->limits.max_stream_connections = s->limits.max_connections * 3 / 4;
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
	grpc_budget_add_server(s);
#ifdef __GLIBC__
	/* Messages up to 4 MiB come and go: glibc's default raises its mmap threshold when such a
	 * block is freed and then keeps the next ones on the heap, resident after free(), so the
	 * peak grows past what the budget holds. A fixed threshold returns them to the kernel, as
	 * musl (the shipped builds) always does. */
	(void)mallopt(M_MMAP_THRESHOLD, 256 * 1024);
#endif
	*ret = s;
	return 0;
fail:
	dp_grpc_server_free(s);
	return r;
}

/* Graceful stop of one connection: owners told (UNAVAILABLE), trailers, GOAWAY, flush, close. */
void grpc_conn_shutdown(sconn *conn)
{
	dp_h2 *h = conn->h2;
	nghttp2_session *session = dp_h2_session(h);

	grpc_conn_unlink(conn);
	conn->shutting_down = true;
	dp_h2_enter(h);
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		grpc_call_notify_cancel(c, DP_GRPC_UNAVAILABLE);
	for (dp_grpc_call *c = conn->calls; c && !dp_h2_closing(h); c = c->next)
		if (!c->response_done && c->state != CALL_RECV)
			grpc_call_end(c, DP_GRPC_UNAVAILABLE, "server shutting down", true, 200);
		else if (c->state == CALL_RECV)
			grpc_call_rst(c, NGHTTP2_REFUSED_STREAM);
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
	grpc_budget_remove_server(s);
	s->listen_io = dp_source_free(s->listen_io);
	s->backoff = dp_source_free(s->backoff);
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	while (s->conns)
		grpc_conn_shutdown(s->conns);
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
