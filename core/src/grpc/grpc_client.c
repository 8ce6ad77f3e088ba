/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_client: one unary call on its own connection (Register, health probes). Connects without
 * blocking (retrying a refused or missing socket every few milliseconds until the deadline),
 * sends the client preface, SETTINGS, the request HEADERS and one framed message with
 * END_STREAM, and collects the response HEADERS, the message and the trailers. It never sends
 * PINGs (the server's are acknowledged by nghttp2). The result is reported once, from the
 * connection's closed callback or a timer, never from inside dp_grpc_client_call_new().
 */
#include "dp/grpc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp_version.h"
#include "grpc_internal.h"
#include "h2.h"

#define CONNECT_RETRY_USEC (5 * DP_USEC_PER_MSEC)
#define REFUSED_RETRIES 3 /* new connections for a request the server refused unprocessed */
#define CLIENT_MAX_OUTBUF ((size_t)8 << 20) /* 8 MiB */
#define CLIENT_MAX_TIMEOUT_USEC (99999999ULL * 3600 * DP_USEC_PER_SEC)

struct dp_grpc_client_call {
	dp_loop *loop;
	struct sockaddr_un sa;
	char *authority, *path;
	uint8_t *req; /* framed request */
	size_t req_len, req_off;
	uint64_t deadline;
	dp_grpc_client_done_fn done;
	void *userdata;

	int fd;                       /* while connecting */
	dp_source *connect_io, *retry, *deadline_timer;
	dp_h2 *h2;
	int32_t stream_id;

	/* response */
	int http_status;
	bool have_http_status, ct_ok, headers_checked;
	bool have_grpc_status;
	int grpc_status;
	char *grpc_message;
	dp_grpc_deframer deframer;
	uint8_t *resp;
	size_t resp_len;
	bool have_resp;

	/* result */
	bool result_set;
	int status;
	char *message;
	bool cancelled, reporting;
	bool retrying;     /* closing for another attempt (refusals: attempts refused unprocessed) */
	unsigned refusals;
};

static nghttp2_session_callbacks *client_cbs(void);

/* ---- result and teardown ---- */

_printf_(3, 4) static void client_result(dp_grpc_client_call *c, int status, const char *fmt, ...)
{
	va_list ap;

	if (c->result_set)
		return;
	c->result_set = true;
	c->status = status;
	va_start(ap, fmt);
	if (vasprintf(&c->message, fmt, ap) < 0)
		c->message = NULL;
	va_end(ap);
}

static void client_free(dp_grpc_client_call *c)
{
	dp_source_free(c->connect_io);
	dp_source_free(c->retry);
	dp_source_free(c->deadline_timer);
	if (c->fd >= 0)
		close(c->fd);
	dp_grpc_deframer_done(&c->deframer);
	DP_FREE_MANY(c->authority, c->path, c->req, c->grpc_message, c->resp, c->message, c);
}

/* Report (unless cancelled) and free. Never called while c->h2 is alive. */
static void client_report(dp_grpc_client_call *c)
{
	if (!c->result_set)
		client_result(c, DP_GRPC_UNAVAILABLE, "connection closed before the response");
	if (!c->cancelled && c->done) {
		bool ok = c->status == DP_GRPC_OK;
		c->reporting = true;
		c->done(c->userdata, c->status, c->message ? c->message : "", ok ? c->resp : NULL,
			ok ? c->resp_len : 0);
	}
	client_free(c);
}

/* A new connection for the same request: nothing of the last attempt carries over. */
static void client_reset_attempt(dp_grpc_client_call *c)
{
	c->retrying = false;
	c->stream_id = 0;
	c->req_off = 0;
	c->have_http_status = c->ct_ok = c->headers_checked = c->have_grpc_status = false;
	dp_timer_set_asap(c->retry);
}

static void client_closed(dp_h2 *h, int error, void *userdata)
{
	dp_grpc_client_call *c = userdata;

	c->h2 = NULL;
	if (c->retrying && !c->result_set && !c->cancelled) {
		client_reset_attempt(c);
		return;
	}
	if (error == -EPROTO)
		client_result(c, DP_GRPC_UNAVAILABLE, "HTTP/2 protocol error on the connection");
	else if (error == -EPIPE || error == -ECONNRESET)
		client_result(c, DP_GRPC_UNAVAILABLE, "connection closed by the server before the status (%s)",
			      strerror(-error));
	else if (error < 0)
		client_result(c, DP_GRPC_UNAVAILABLE, "connection error: %s", strerror(-error));
	else
		client_result(c, DP_GRPC_UNAVAILABLE, "connection closed (EOF) before the status");
	client_report(c);
}

/* The outcome is known: reset the stream if still open, close, report. */
static void client_end(dp_grpc_client_call *c, bool rst)
{
	if (c->h2) {
		if (rst && c->stream_id > 0)
			nghttp2_submit_rst_stream(dp_h2_session(c->h2), NGHTTP2_FLAG_NONE, c->stream_id,
						  NGHTTP2_CANCEL);
		dp_h2_close(c->h2, true, 0); /* now, or once the current callback returns */
	} else {
		client_report(c);
	}
}

/* ---- response processing (nghttp2 callbacks, user_data = the call) ---- */

static void client_check_headers(dp_grpc_client_call *c)
{
	c->headers_checked = true;
	if (!c->have_http_status)
		client_result(c, DP_GRPC_INTERNAL, "malformed header: missing HTTP status");
	else if (c->http_status != 200)
		client_result(c, dp_grpc_status_from_http(c->http_status),
			      "unexpected HTTP status code received from server: %d", c->http_status);
	else if (!c->ct_ok)
		client_result(c, DP_GRPC_UNKNOWN, "unexpected or missing content-type in the response");
}

/* HEADERS with END_STREAM (trailers, or Trailers-Only). */
static void client_status_received(dp_grpc_client_call *c)
{
	_cleanup_free_ char *msg = NULL;

	if (!c->have_grpc_status) {
		client_result(c, DP_GRPC_UNKNOWN, "response ended without grpc-status");
		return;
	}
	if (c->grpc_status == DP_GRPC_OK && !c->have_resp) {
		client_result(c, DP_GRPC_INTERNAL, "no response message");
		return;
	}
	msg = c->grpc_message ? dp_grpc_percent_decode(c->grpc_message, strlen(c->grpc_message))
			      : strdup("");
	client_result(c, c->grpc_status, "%s", msg ? msg : "");
}

static int client_on_header(nghttp2_session *session, const nghttp2_frame *frame,
			    const uint8_t *name, size_t namelen, const uint8_t *value,
			    size_t valuelen, uint8_t flags, void *user_data)
{
	dp_grpc_client_call *c = user_data;

	if (frame->hd.type != NGHTTP2_HEADERS || frame->hd.stream_id != c->stream_id)
		return 0;
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		c->have_http_status = valuelen == 3 && value[0] >= '1' && value[0] <= '9' &&
				      value[1] >= '0' && value[1] <= '9' && value[2] >= '0' &&
				      value[2] <= '9';
		if (c->have_http_status)
			c->http_status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
	} else if (namelen == 12 && memcmp(name, "content-type", 12) == 0) {
		c->ct_ok = dp_grpc_content_type_ok(value, valuelen);
	} else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
		if (dp_grpc_parse_status(value, valuelen, &c->grpc_status) < 0)
			client_result(c, DP_GRPC_INTERNAL, "malformed grpc-status");
		c->have_grpc_status = true;
	} else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
		free(c->grpc_message);
		c->grpc_message = strndup((const char *)value, valuelen);
		if (!c->grpc_message)
			return NGHTTP2_ERR_CALLBACK_FAILURE;
	}
	return 0;
}

static int client_on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame,
				void *user_data)
{
	dp_grpc_client_call *c = user_data;

	if (frame->hd.stream_id != c->stream_id || c->result_set)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS && !c->headers_checked)
		client_check_headers(c);
	if (c->result_set) {
		client_end(c, true);
		return 0;
	}
	if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
	    (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		if (frame->hd.type == NGHTTP2_HEADERS)
			client_status_received(c);
		else
			client_result(c, DP_GRPC_INTERNAL, "response ended without trailers");
		client_end(c, false);
	}
	return 0;
}

static int client_on_message(void *userdata, const uint8_t *msg, size_t len)
{
	dp_grpc_client_call *c = userdata;

	if (c->have_resp)
		return 1;
	c->resp = malloc(len ? len : 1);
	if (!c->resp)
		return -ENOMEM;
	memcpy(c->resp, msg, len);
	c->resp_len = len;
	c->have_resp = true;
	return 0;
}

static int client_on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id,
			  const uint8_t *data, size_t len, void *user_data)
{
	dp_grpc_client_call *c = user_data;
	int r;

	if (stream_id != c->stream_id || c->result_set)
		return 0;
	r = dp_grpc_deframer_feed(&c->deframer, data, len, client_on_message, c);
	if (r == 0)
		return 0;
	if (r == -EMSGSIZE)
		client_result(c, DP_GRPC_RESOURCE_EXHAUSTED,
			      "grpc: received message larger than max (%u vs. %u)",
			      (unsigned)c->deframer.hdr[1] << 24 | (unsigned)c->deframer.hdr[2] << 16 |
				      (unsigned)c->deframer.hdr[3] << 8 | c->deframer.hdr[4],
			      DP_GRPC_MAX_MESSAGE);
	else if (r == -EPROTONOSUPPORT)
		client_result(c, DP_GRPC_INTERNAL, "grpc: compressed response message (no grpc-encoding)");
	else if (r == -EBADMSG)
		client_result(c, DP_GRPC_INTERNAL, "grpc: invalid message flag in the response");
	else if (r == 1)
		client_result(c, DP_GRPC_INTERNAL, "more than one response message in a unary call");
	else
		client_result(c, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory for the response");
	client_end(c, true);
	return 0;
}

static int client_on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
				  void *user_data)
{
	dp_grpc_client_call *c = user_data;

	if (stream_id != c->stream_id)
		return 0;
	/* Refused unprocessed (RST_STREAM REFUSED_STREAM, or a GOAWAY below our stream): nothing
	 * was acted on, so it is sent again on a new connection (RFC 9113 8.7, grpc-go's
	 * transparent retry), a few times within the deadline. */
	if (error_code == NGHTTP2_REFUSED_STREAM && !c->have_http_status &&
	    c->refusals < REFUSED_RETRIES && !c->result_set) {
		c->refusals++;
		c->retrying = true;
		dp_debug("grpc: refused unprocessed, again", "path=%s attempt=%u", c->path, c->refusals + 1);
		dp_h2_close(c->h2, false, 0);
		return 0;
	}
	if (error_code != NGHTTP2_NO_ERROR)
		client_result(c, dp_grpc_status_from_rst(error_code),
			      "stream reset by the server before the status (%s)",
			      dp_grpc_h2_error_name(error_code));
	else
		client_result(c, DP_GRPC_INTERNAL, "stream closed without a status");
	client_end(c, false);
	return 0;
}

static ssize_t client_read_req(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
			       size_t length, uint32_t *data_flags, nghttp2_data_source *source,
			       void *user_data)
{
	dp_grpc_client_call *c = source->ptr;
	size_t n = c->req_len - c->req_off < length ? c->req_len - c->req_off : length;

	memcpy(buf, c->req + c->req_off, n);
	c->req_off += n;
	if (c->req_off == c->req_len)
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)n;
}

/* ---- connecting ---- */

static int client_submit(dp_grpc_client_call *c)
{
	static const nghttp2_settings_entry iv[] = { { NGHTTP2_SETTINGS_ENABLE_PUSH, 0 } };
	nghttp2_session *session = dp_h2_session(c->h2);
	uint64_t now = dp_now_usec();
	char timeout[16];
	const char *ua = "sdp/" DP_VERSION;
	const nghttp2_nv nva[] = {
		{ (uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0 },
		{ (uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0 },
		{ (uint8_t *)":path", (uint8_t *)c->path, 5, strlen(c->path), 0 },
		{ (uint8_t *)":authority", (uint8_t *)c->authority, 10, strlen(c->authority), 0 },
		{ (uint8_t *)"grpc-timeout", (uint8_t *)timeout, 12, 0, 0 },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0 },
		{ (uint8_t *)"te", (uint8_t *)"trailers", 2, 8, 0 },
		{ (uint8_t *)"user-agent", (uint8_t *)ua, 10, strlen(ua), 0 },
	};
	nghttp2_nv nv[DP_ELEMENTSOF(nva)];
	nghttp2_data_provider prd = { .source.ptr = c, .read_callback = client_read_req };
	int32_t id;

	dp_grpc_format_timeout(c->deadline > now ? c->deadline - now : 1, timeout);
	memcpy(nv, nva, sizeof(nva));
	nv[4].valuelen = strlen(timeout);
	if (nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, iv, DP_ELEMENTSOF(iv)) != 0)
		return -ENOMEM;
	id = nghttp2_submit_request(session, NULL, nv, DP_ELEMENTSOF(nv), &prd, c);
	if (id < 0)
		return id == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
	c->stream_id = id;
	dp_h2_kick(c->h2);
	return 0;
}

/* Connected: start the HTTP/2 session and the request. -ENOMEM, -EPROTO. */
static int client_start(dp_grpc_client_call *c)
{
	nghttp2_session_callbacks *cbs = client_cbs();
	int r;

	if (!cbs)
		return -ENOMEM;
	r = dp_h2_new(c->loop, c->fd, false, cbs, NULL, CLIENT_MAX_OUTBUF, client_closed, c, &c->h2);
	nghttp2_session_callbacks_del(cbs);
	if (r < 0)
		return r;
	c->fd = -1; /* owned by h2 now */
	r = client_submit(c);
	if (r < 0) {
		/* Reported from the timer: never from inside call_new. */
		client_result(c, DP_GRPC_INTERNAL, "cannot submit the request (%s)", strerror(-r));
		dp_timer_set_asap(c->retry);
	}
	return 0;
}

static bool connect_retryable(int err)
{
	return err == ECONNREFUSED || err == ENOENT || err == EAGAIN;
}

static void client_connect_failed(dp_grpc_client_call *c, int err, bool from_new)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->connect_io = dp_source_free(c->connect_io);
	if (connect_retryable(err)) {
		dp_timer_set(c->retry, CONNECT_RETRY_USEC, 0);
		return;
	}
	client_result(c, DP_GRPC_UNAVAILABLE, "connect to %s: %s", c->sa.sun_path, strerror(err));
	if (from_new)
		dp_timer_set_asap(c->retry); /* report later, never from inside call_new */
	else
		client_report(c);
}

static int client_connect_ready(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	dp_grpc_client_call *c = userdata;
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err != 0) {
		client_connect_failed(c, err, false);
		return 0;
	}
	c->connect_io = dp_source_free(c->connect_io);
	if (client_start(c) < 0) {
		client_result(c, DP_GRPC_INTERNAL, "out of memory starting the connection");
		client_report(c);
	}
	return 0;
}

/* One connect attempt. Negative errno only for failures that end call_new itself. */
static int client_try_connect(dp_grpc_client_call *c, bool from_new)
{
	int r;

	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&c->sa, sizeof(c->sa)) == 0)
		return client_start(c);
	if (errno == EINPROGRESS) {
		r = dp_io_add(c->loop, c->fd, EPOLLOUT, client_connect_ready, c, &c->connect_io);
		if (r < 0)
			client_connect_failed(c, -r, from_new);
		return 0;
	}
	client_connect_failed(c, errno, from_new);
	return 0;
}

static int client_retry_fired(dp_source *s, void *userdata)
{
	dp_grpc_client_call *c = userdata;
	int r;

	if (c->result_set) { /* a failure found inside call_new, reported now */
		client_end(c, false);
		return 0;
	}
	r = client_try_connect(c, false);
	if (r < 0) {
		client_result(c, DP_GRPC_UNAVAILABLE, "socket: %s", strerror(-r));
		client_report(c);
	}
	return 0;
}

static int client_deadline_fired(dp_source *s, void *userdata)
{
	dp_grpc_client_call *c = userdata;

	client_result(c, DP_GRPC_DEADLINE_EXCEEDED, "deadline exceeded%s",
		      c->h2 ? "" : " while connecting");
	client_end(c, true);
	return 0;
}

static nghttp2_session_callbacks *client_cbs(void)
{
	nghttp2_session_callbacks *cbs;

	if (nghttp2_session_callbacks_new(&cbs) != 0)
		return NULL;
	nghttp2_session_callbacks_set_on_header_callback(cbs, client_on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, client_on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, client_on_data);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs, client_on_stream_close);
	return cbs;
}

/* ---- public API ---- */

static int client_init(dp_grpc_client_call *c, const char *socket_path, const char *authority,
		       const char *path, size_t req_len)
{
	c->fd = -1;
	if (strlen(socket_path) >= sizeof(c->sa.sun_path))
		return -ENAMETOOLONG;
	c->sa.sun_family = AF_UNIX;
	memcpy(c->sa.sun_path, socket_path, strlen(socket_path) + 1);
	dp_grpc_deframer_init(&c->deframer, DP_GRPC_MAX_MESSAGE);
	c->authority = strdup(authority);
	c->path = strdup(path);
	c->req_len = req_len + 5;
	c->req = malloc(c->req_len);
	if (!c->authority || !c->path || !c->req)
		return -ENOMEM;
	dp_grpc_frame_header(c->req, req_len);
	return 0;
}

static int client_new(dp_loop *loop, const char *socket_path, const char *authority,
		      const char *path, size_t req_len, uint64_t timeout_usec,
		      dp_grpc_client_done_fn done, void *userdata, dp_grpc_client_call **ret)
{
	dp_grpc_client_call *c;
	int r;

	if (!loop || !socket_path || !*socket_path || !authority || !path || path[0] != '/' ||
	    timeout_usec == 0 || !done || !ret)
		return -EINVAL;
	if (req_len > DP_GRPC_MAX_MESSAGE)
		return -EMSGSIZE;
	if (timeout_usec > CLIENT_MAX_TIMEOUT_USEC)
		timeout_usec = CLIENT_MAX_TIMEOUT_USEC; /* what grpc-timeout can say */
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = (dp_grpc_client_call){ .loop = loop, .done = done, .userdata = userdata,
				    .deadline = dp_now_usec() + timeout_usec };
	r = client_init(c, socket_path, authority, path, req_len);
	if (r >= 0)
		r = dp_timer_add(loop, timeout_usec, 0, client_deadline_fired, c, &c->deadline_timer);
	if (r >= 0)
		r = dp_timer_add_disarmed(loop, client_retry_fired, c, &c->retry);
	if (r < 0) {
		client_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

/* First connect attempt; on failure (no socket, no memory: h2 not created) free the call. */
static int client_go(dp_grpc_client_call *c, dp_grpc_client_call **ret)
{
	int r = client_try_connect(c, true);

	if (r < 0) {
		client_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

int dp_grpc_client_call_new(dp_loop *loop, const char *socket_path, const char *authority,
			    const char *path, const uint8_t *req, size_t req_len, uint64_t timeout_usec,
			    dp_grpc_client_done_fn done, void *userdata, dp_grpc_client_call **ret)
{
	dp_grpc_client_call *c;
	int r;

	if (!req && req_len > 0)
		return -EINVAL;
	r = client_new(loop, socket_path, authority, path, req_len, timeout_usec, done, userdata, &c);
	if (r < 0)
		return r;
	if (req_len > 0)
		memcpy(c->req + 5, req, req_len);
	return client_go(c, ret);
}

int dp_grpc_client_call_pb(dp_loop *loop, const char *socket_path, const char *authority,
			   const char *path, const ProtobufCMessage *req, uint64_t timeout_usec,
			   dp_grpc_client_done_fn done, void *userdata, dp_grpc_client_call **ret)
{
	dp_grpc_client_call *c;
	size_t len;
	int r;

	if (!req)
		return -EINVAL;
	len = protobuf_c_message_get_packed_size(req);
	r = client_new(loop, socket_path, authority, path, len, timeout_usec, done, userdata, &c);
	if (r < 0)
		return r;
	protobuf_c_message_pack(req, c->req + 5);
	return client_go(c, ret);
}

dp_grpc_client_call *dp_grpc_client_call_cancel(dp_grpc_client_call *c)
{
	if (!c || c->reporting)
		return NULL;
	c->cancelled = true;
	if (c->h2) {
		if (c->stream_id > 0)
			nghttp2_submit_rst_stream(dp_h2_session(c->h2), NGHTTP2_FLAG_NONE, c->stream_id,
						  NGHTTP2_CANCEL);
		dp_h2_close(c->h2, true, 0);
	} else {
		client_free(c);
	}
	return NULL;
}
