/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_call: the response side of a server call (queue of framed messages, the nghttp2 data
 * provider, trailers / Trailers-Only) and the public dp_grpc_call_* API.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "grpc_internal.h"
#include "grpc_server.h"

#define GRPC_MESSAGE_MAX 4096 /* grpc-message is cut to this many bytes before encoding */

/* ---- call helpers ---- */

static nghttp2_session *call_session(const dp_grpc_call *c)
{
	return dp_h2_session(c->conn->h2);
}

void grpc_call_drop_queue(dp_grpc_call *c, bool keep_partial)
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
	grpc_out_account(c->conn, -(ptrdiff_t)dropped);
}

void grpc_call_free(dp_grpc_call *c)
{
	sconn *conn = c->conn;

	DP_LIST_REMOVE(conn->calls, c);
	if (conn->server)
		conn->server->n_calls--;
	grpc_call_drop_queue(c, false);
	dp_source_free(c->timer);
	dp_grpc_deframer_done(&c->deframer);
	free(c->req);
	c->req = NULL;
	grpc_in_update(c);
	free(c->path);
	free(c->message);
	free(c);
}

void grpc_call_notify_cancel(dp_grpc_call *c, int status)
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

/* A status or HTTP code (0..999) in decimal, without the printf machinery (every call ends here). */
static void put_code(char buf[static 4], int v)
{
	char *p = buf;
	v = v < 0 ? 0 : v > 999 ? 999 : v;
	if (v >= 100)
		*p++ = (char)('0' + v / 100);
	if (v >= 10)
		*p++ = (char)('0' + v / 10 % 10);
	*p++ = (char)('0' + v % 10);
	*p = '\0';
}

/* Submit grpc-status/grpc-message, as trailers or (first) Trailers-Only with http_status.
 * -ENOMEM, -EPROTO. */
static int call_submit_status(dp_grpc_call *c, bool trailers_only, int http_status)
{
	char st[4], hs[4];
	_cleanup_free_ char *cut = NULL, *enc = NULL;
	const char *msg = c->message ? c->message : "";
	int r;

	if (*msg) { /* an OK answer has no message: nothing to cut or encode */
		cut = strndup(msg, utf8_cut(msg, GRPC_MESSAGE_MAX));
		/* cut is freed by its _cleanup_ attribute, which the analyzer does not model */
		enc = cut ? dp_grpc_percent_encode(cut) : NULL; // NOLINT(clang-analyzer-unix.Malloc)
		if (!enc)
			return -ENOMEM;
		msg = enc;
	}
	put_code(st, c->status);
	put_code(hs, http_status);
	if (trailers_only) {
		const nghttp2_nv nva[] = {
			NV(":status", hs, strlen(hs)),
			NV("content-type", "application/grpc", 16),
			NV("grpc-status", st, strlen(st)),
			NV("grpc-message", msg, strlen(msg)),
		};
		r = nghttp2_submit_response(call_session(c), c->stream_id, nva, DP_ELEMENTSOF(nva), NULL);
	} else {
		const nghttp2_nv nva[] = {
			NV("grpc-status", st, strlen(st)),
			NV("grpc-message", msg, strlen(msg)),
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
	grpc_out_account(c->conn, -(ptrdiff_t)n);
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

int grpc_call_end(dp_grpc_call *c, int status, const char *message, bool drop, int http_status)
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
		grpc_call_drop_queue(c, true);
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

void grpc_call_rst(dp_grpc_call *c, uint32_t code)
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

void dp_grpc_call_protect(dp_grpc_call *call)
{
	if (call)
		call->conn->protected_ = true;
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
	grpc_out_account(c->conn, (ptrdiff_t)m->len);
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
	} else if (grpc_out_reserve(c->conn, len + 5) < 0 && !c->conn->protected_) {
		/* This connection is the one to go (the newest holder, or the only one): it is
		 * closed (the message dropped, the owner told from the loop), as if the peer had gone. */
		grpc_conn_evict(c->conn);
		return 0;
	} else {
		return 0;
	}
	c->state = CALL_ENDED;
	grpc_call_end(c, DP_GRPC_RESOURCE_EXHAUSTED, msg, false, 200);
	return r;
}

/* The payload is in the queue: end a unary call with OK, or wake the stream. The API functions
 * never flush themselves (dp_h2_kick defers it), so no callback runs inside them. */
static int call_sent(dp_grpc_call *c)
{
	int r;

	if (c->method.kind == DP_GRPC_METHOD_UNARY) {
		c->state = CALL_ENDED;
		r = grpc_call_end(c, DP_GRPC_OK, NULL, false, 200);
	} else {
		r = call_push(c);
	}
	return r == -EALREADY ? 0 : r;
}

/* Checks, then room in the queue for a len-byte message: *ret_p is where its payload goes, or
 * NULL when the connection is going (the cancel callback follows; a unary call is done). */
static int call_send_begin(dp_grpc_call *call, size_t len, uint8_t **ret_p)
{
	uint8_t *p = NULL;
	int r = call_send_check(call, len);

	if (r < 0)
		return r;
	if (dp_h2_closing(call->conn->h2)) {
		if (call->method.kind == DP_GRPC_METHOD_UNARY)
			call->state = CALL_ENDED;
	} else {
		p = call_queue(call, len);
		if (!p)
			return -ENOMEM;
	}
	*ret_p = p;
	return 0;
}

int dp_grpc_call_send(dp_grpc_call *call, const uint8_t *msg, size_t len)
{
	uint8_t *p;
	int r;

	if (!call || (!msg && len > 0))
		return -EINVAL;
	r = call_send_begin(call, len, &p);
	if (r < 0 || !p)
		return r;
	if (len > 0)
		memcpy(p, msg, len);
	return call_sent(call);
}

int dp_grpc_call_send_pb(dp_grpc_call *call, const ProtobufCMessage *msg)
{
	uint8_t *p;
	int r;

	if (!call || !msg)
		return -EINVAL;
	r = call_send_begin(call, protobuf_c_message_get_packed_size(msg), &p);
	if (r < 0 || !p)
		return r;
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
	r = grpc_call_end(call, status, message, false, 200);
	return r == -EALREADY ? 0 : r;
}
