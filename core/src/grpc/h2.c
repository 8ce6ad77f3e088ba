/* SPDX-License-Identifier: Apache-2.0 */
/* h2: one nghttp2 session per connection, its socket, output buffer and read pausing. */
#include "h2.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp/log.h"

#define H2_READ_CHUNK (64u * 1024u)
#define H2_READS_PER_WAKE 4
#define H2_GATHER_BYTES 4096u /* small frames gathered into one send */

struct dp_h2 {
	dp_loop *loop;
	int fd;
	dp_source *io;
	nghttp2_session *session;
	uint8_t *out; /* what the socket did not take of the last mem_send chunk */
	size_t out_off, out_len, out_cap;
	size_t queued; /* owner-accounted stream bytes */
	uint64_t blocked_since; /* the socket has refused output since then (0: it takes it) */
	size_t max_outbuf;
	size_t peeked; /* input handed to nghttp2 and not consumed yet (h2_read) */
	uint32_t events;
	unsigned depth;
	bool want_flush;
	dp_source *kick; /* one-shot timer: flush output submitted from user code */
	bool closing, close_flush, finishing;
	bool broken; /* the socket failed: nothing more can be written */
	int close_error;
	dp_h2_closed_fn closed;
	void *userdata;
};

nghttp2_session *dp_h2_session(const dp_h2 *h)
{
	return h->session;
}

dp_loop *dp_h2_loop(const dp_h2 *h)
{
	return h->loop;
}

bool dp_h2_closing(const dp_h2 *h)
{
	return h->closing;
}

void dp_h2_account(dp_h2 *h, ptrdiff_t delta)
{
	if (delta < 0 && (size_t)-delta > h->queued)
		h->queued = 0;
	else
		h->queued += (size_t)delta;
}

size_t dp_h2_pending(const dp_h2 *h)
{
	return h->queued + (h->out_len - h->out_off);
}

uint64_t dp_h2_blocked_since(const dp_h2 *h)
{
	return h->blocked_since;
}


static void h2_fail(dp_h2 *h, int error)
{
	if (!h->closing) {
		h->closing = true;
		h->close_error = error;
	}
	h->close_flush = false;
	h->broken = true;
}

void dp_h2_freeze(dp_h2 *h, int error)
{
	if (h->events != 0 && !h->finishing && dp_io_set_events(h->io, 0) == 0)
		h->events = 0;
	h2_fail(h, error);
	h->want_flush = false;
}

static void h2_update_events(dp_h2 *h)
{
	bool blocked = h->out_off < h->out_len;
	uint32_t ev = 0;

	if (h->closing || h->broken)
		return;
	/* Pause reading only while the peer does not take our output and too much is waiting:
	 * pausing while we merely wait for its WINDOW_UPDATE would deadlock. */
	if (!(blocked && dp_h2_pending(h) > h->max_outbuf))
		ev |= EPOLLIN;
	if (blocked)
		ev |= EPOLLOUT;
	if (ev != h->events && dp_io_set_events(h->io, ev) == 0)
		h->events = ev;
}

/* Make room for len more bytes after out_len. -ENOMEM. */
static int h2_reserve(dp_h2 *h, size_t len)
{
	if (h->out_len + len > h->out_cap) {
		uint8_t *p = realloc(h->out, h->out_len + len);
		if (!p)
			return -ENOMEM;
		h->out = p;
		h->out_cap = h->out_len + len;
	}
	return 0;
}

/* Append bytes to what is waiting to be sent. -ENOMEM. */
static int h2_append(dp_h2 *h, const uint8_t *data, size_t len)
{
	int r = h2_reserve(h, len);
	if (r < 0)
		return r;
	memcpy(h->out + h->out_len, data, len);
	h->out_len += len;
	return 0;
}

/* One non-blocking send: bytes taken (0 when the socket is full), or -errno. */
static ssize_t h2_send(dp_h2 *h, const uint8_t *data, size_t len)
{
	ssize_t w;
	do
		w = send(h->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return errno == EAGAIN ? 0 : -errno;
	return w;
}

/*
 * Pull what nghttp2 has to send into one write: nghttp2 hands out one frame per mem_send call,
 * and an Allocate answer is four (SETTINGS or PING ACK, HEADERS, DATA, trailers); writing each
 * on its own woke the peer four times per call. Small frames are gathered up to
 * H2_GATHER_BYTES; a large first chunk (a full DATA frame) is returned without a copy.
 * Returns the bytes to send at *ret (in h->out unless it was that large chunk), 0 when
 * nghttp2 has nothing, or a negative errno.
 */
static ssize_t h2_gather(dp_h2 *h, const uint8_t **ret)
{
	h->out_off = h->out_len = 0;
	while (h->out_len < H2_GATHER_BYTES) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(h->session, &data);
		if (n < 0) {
			dp_debug("h2: mem_send failed", "error=%s", nghttp2_strerror((int)n));
			return -EPROTO;
		}
		if (n == 0)
			break;
		if (h->out_len == 0 && (size_t)n >= H2_GATHER_BYTES) {
			*ret = data;
			return n;
		}
		if (h2_append(h, data, (size_t)n) < 0)
			return -ENOMEM;
	}
	*ret = h->out;
	return (ssize_t)h->out_len;
}

/* Write what we hold, then pull from nghttp2 until it has nothing or the socket is full.
 * Never called from inside an nghttp2 callback. */
/*
 * The peer closed while we wrote (EPIPE, ECONNRESET): what it sent before closing is still in our
 * receive buffer, a GOAWAY telling which streams it never processed among it. nghttp2 is handed
 * that input (its callbacks see a refused stream as refused, and a client sends it again)
 * before the connection fails.
 */
static uint8_t rbuf[H2_READ_CHUNK];

static void h2_read_last(dp_h2 *h, ssize_t err)
{
	if (err != -EPIPE && err != -ECONNRESET)
		return;
	/* what h2_read peeked was handled already: skipped, not handed over twice */
	if (h->peeked && recv(h->fd, rbuf, h->peeked, MSG_DONTWAIT) != (ssize_t)h->peeked)
		return;
	h->peeked = 0;
	for (int i = 0; i < H2_READS_PER_WAKE; i++) {
		ssize_t n = recv(h->fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);
		if (n <= 0 || nghttp2_session_mem_recv(h->session, rbuf, (size_t)n) < 0)
			break;
	}
}

static void h2_flush(dp_h2 *h)
{
	if (h->broken)
		return;
	h->depth++;
	h->want_flush = false;
	for (;;) {
		const uint8_t *data;
		ssize_t n, w;

		if (h->out_off < h->out_len) {
			w = h2_send(h, h->out + h->out_off, h->out_len - h->out_off);
			if (w < 0) {
				h2_read_last(h, w);
				h2_fail(h, (int)w);
			}
			if (w <= 0)
				break;
			h->out_off += (size_t)w;
			continue;
		}
		n = h2_gather(h, &data);
		if (n < 0)
			h2_fail(h, (int)n);
		if (n <= 0)
			break;
		w = h2_send(h, data, (size_t)n);
		if (w < 0) {
			h2_read_last(h, w);
			h2_fail(h, (int)w);
			break;
		}
		if (data == h->out) {
			h->out_off = (size_t)w;
			continue;
		}
		/* The large chunk lives in nghttp2's buffer until the next mem_send: keep its tail. */
		if (w < n && h2_append(h, data + w, (size_t)(n - w)) < 0) {
			h2_fail(h, -ENOMEM);
			break;
		}
	}
	if (h->out_off < h->out_len && h->blocked_since == 0)
		h->blocked_since = dp_now_usec();
	h2_update_events(h);
	h->depth--;
}

static void h2_free(dp_h2 *h)
{
	dp_source_free(h->kick);
	dp_source_free(h->io);
	if (h->fd >= 0)
		close(h->fd);
	nghttp2_session_del(h->session);
	free(h->out);
	free(h);
}

static void h2_finish(dp_h2 *h)
{
	h->finishing = true;
	h->depth++;
	if (h->close_flush)
		h2_flush(h);
	if (h->closed)
		h->closed(h, h->close_error, h->userdata);
	h2_free(h);
}

/* At depth 0: run the pending flush, detect the end, close. */
static void h2_settle(dp_h2 *h)
{
	if (!h->closing && h->want_flush)
		h2_flush(h);
	if (!h->closing && h->out_off == h->out_len && !nghttp2_session_want_read(h->session) &&
	    !nghttp2_session_want_write(h->session)) {
		h->closing = true;
		h->close_error = 0;
	}
	if (h->closing)
		h2_finish(h);
}

void dp_h2_enter(dp_h2 *h)
{
	h->depth++;
}

void dp_h2_leave(dp_h2 *h)
{
	if (--h->depth == 0 && !h->finishing)
		h2_settle(h);
}

static int h2_kick_fired(dp_source *s, void *userdata)
{
	dp_h2 *h = userdata;

	dp_h2_enter(h);
	h->want_flush = true;
	dp_h2_leave(h);
	return 0;
}

void dp_h2_kick(dp_h2 *h)
{
	if (h->finishing)
		return;
	h->want_flush = true;
	if (h->depth > 0)
		return;
	/* Called from user code (not from inside one of our callbacks): flush from the loop, so
	 * no callback re-enters the caller. A timer (not dp_defer) because it dies with us. */
	if (h->kick ? dp_timer_set_asap(h->kick) < 0
		    : dp_timer_add(h->loop, 0, 0, h2_kick_fired, h, &h->kick) < 0)
		h2_settle(h);
}

void dp_h2_close(dp_h2 *h, bool flush, int error)
{
	if (h->closing || h->finishing)
		return;
	h->closing = true;
	h->close_flush = flush && !h->broken;
	h->close_error = error;
	if (h->depth == 0)
		h2_finish(h);
}

/*
 * The input is peeked, handled (the answers flushed) and only then consumed. Consuming a unix
 * socket's data frees the sender's buffer space, which wakes a peer waiting for EPOLLOUT (Go's
 * netpoller registers every socket for it): consumed first, that wake-up lands on an idle
 * client between its request and our answer, one more cross-CPU wake-up per call (an
 * inter-processor interrupt, a VM exit on a virtual machine); consumed after the answer, it
 * meets a client the answer already woke. The bytes consumed are the bytes peeked: only this
 * loop reads the socket.
 */
static void h2_read(dp_h2 *h)
{
	for (int i = 0; i < H2_READS_PER_WAKE && !h->closing && (h->events & EPOLLIN); i++) {
		ssize_t n = recv(h->fd, rbuf, sizeof(rbuf), MSG_PEEK | MSG_DONTWAIT), r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			h2_fail(h, n == 0 ? 0 : -errno);
			break;
		}
		r = nghttp2_session_mem_recv(h->session, rbuf, (size_t)n);
		if (r < 0) {
			dp_debug("h2: mem_recv failed", "error=%s", nghttp2_strerror((int)r));
			h2_fail(h, -EPROTO);
			break;
		}
		h->peeked = (size_t)n;
		if (!h->closing)
			h2_flush(h);
		if (!h->peeked) /* h2_read_last consumed it: the connection failed */
			break;
		h->peeked = 0;
		if (recv(h->fd, rbuf, (size_t)n, MSG_DONTWAIT) != n) {
			h2_fail(h, -EIO);
			break;
		}
		if ((size_t)n < sizeof(rbuf))
			break;
	}
}

void dp_h2_read(dp_h2 *h)
{
	if (!h->closing)
		h2_read(h);
}

static int h2_io(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	dp_h2 *h = userdata;

	dp_h2_enter(h);
	if (revents & EPOLLOUT) {
		h->blocked_since = 0; /* the peer took some: it reads */
		h2_flush(h);
	}
	if (!h->closing && (revents & EPOLLIN))
		h2_read(h);
	/* Hang-up or error while not reading (paused) or after reading all: the peer is gone. */
	if (!h->closing && (revents & (EPOLLHUP | EPOLLERR)) && !(revents & EPOLLIN))
		h2_fail(h, (revents & EPOLLERR) ? -ECONNRESET : 0);
	dp_h2_leave(h);
	return 0;
}

int dp_h2_new(dp_loop *loop, int fd, bool server, const nghttp2_session_callbacks *cbs,
	      const nghttp2_option *opt, size_t max_outbuf, dp_h2_closed_fn closed, void *userdata,
	      dp_h2 **ret)
{
	dp_h2 *h = calloc(1, sizeof(*h));
	int r;

	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->fd = -1;
	h->max_outbuf = max_outbuf;
	h->closed = closed;
	h->userdata = userdata;
	r = server ? nghttp2_session_server_new2(&h->session, cbs, userdata, opt)
		   : nghttp2_session_client_new2(&h->session, cbs, userdata, opt);
	if (r != 0) {
		free(h);
		return r == NGHTTP2_ERR_NOMEM ? -ENOMEM : -EPROTO;
	}
	r = dp_io_add(loop, fd, EPOLLIN, h2_io, h, &h->io);
	if (r < 0) {
		nghttp2_session_del(h->session);
		free(h);
		return r;
	}
	h->events = EPOLLIN;
	h->fd = fd;
	*ret = h;
	return 0;
}
