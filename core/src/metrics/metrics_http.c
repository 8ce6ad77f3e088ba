/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_http: the metrics listener (dp/metrics.h). A minimal HTTP/1.x responder on the
 * daemon's loop, one request per connection: the request head is read into a fixed buffer
 * (DP_METRICS_HTTP_HEAD_MAX) within DP_METRICS_HTTP_HEAD_DEADLINE_USEC of the accept, parsed by
 * dp_metrics_http_parse (metrics_parse.c), answered with one response rendered whole (the
 * exposition is bounded by the registry's fixed table) and "Connection: close"; then our side
 * is shut down: after a 400 or 431 the connection is closed at once, after another answer the
 * peer's rest (at most DRAIN_MAX bytes) is read and dropped until it closes. Every connection is
 * closed DP_METRICS_HTTP_DEADLINE_USEC after its accept, finished or not (a slow reader). At most
 * DP_METRICS_HTTP_MAX_CONNS are open: a newcomer takes the slot of the one that has held its slot
 * longest without a complete request (else of an answered one its peer has not closed); only
 * when every slot is writing an answer is the newcomer closed at accept. Costs in fds: the
 * socket, one timer for every deadline and wake-up, a spare (/dev/null, given up for an accept
 * when the process is out of fds), and one per connection. The socket is made once; a failed
 * bind or listen is retried on it with back-off (the daemons' seccomp filter refuses new TCP
 * sockets). Why not libmicrohttpd: Debian's links GnuTLS, whose p11-kit dependency has no
 * static library, and the shipped daemons are static (musl).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/metrics.h"

#define EPISODE_USEC (60 * DP_USEC_PER_SEC)
#define ACCEPT_PAUSE_USEC (DP_USEC_PER_SEC) /* after accept failed (EMFILE, ...): no busy loop */
#define DRAIN_MAX DP_METRICS_HTTP_HEAD_MAX /* read after an answer while the peer's close is awaited */
/* The kernel hands a connection to accept once its first bytes arrived (or after about this many
 * seconds): a scrape is accepted with its request, so a newcomer evicting the connection held
 * longest without one never takes it for an idle peer's (the request was not there yet). */
#define DEFER_ACCEPT_S 1

/* ---- the listener ---- */

enum { LIM_CONNECTIONS, LIM_EVICTED, LIM_HEAD, LIM_HEAD_TIMEOUT, LIM_SLOW_READER, LIM_REQUEST, LIM_N };
static const char *const lim_names[LIM_N] = { "connections",  "evicted",     "head",
					      "head_timeout", "slow_reader", "request" };

/* Reading the request head; writing the answer; answered (our side shut down), reading what the
 * peer still sends (at most DRAIN_MAX bytes) until it closes. */
enum cstate { C_HEAD, C_WRITING, C_DRAINING };

struct mconn {
	dp_metrics_server *srv;
	int fd;
	dp_source *io;
	uint32_t events;
	enum cstate state;
	bool close_when_sent; /* 400, 431: what the peer sends is not HTTP; never read again */
	uint64_t seq, accepted, expires; /* seq: accept order; expires: the head's or the whole deadline */
	size_t in_len, drained;
	char *out;
	size_t out_len, out_off;
	char in[DP_METRICS_HTTP_HEAD_MAX];
};

struct dp_metrics_server {
	dp_loop *loop;
	int fd, spare; /* spare: /dev/null, given up for an accept when the process is out of fds */
	dp_source *io, *timer; /* io once listening; one timer for every deadline and wake-up */
	struct sockaddr_storage addr;
	socklen_t addr_len;
	bool bound, listening;
	int listen_err;
	uint64_t retry_usec, wake, armed, accepts; /* wake: an accept pause's end or the next bind */
	dp_metrics_listen_fn listen_fn;
	void *listen_ud;
	struct mconn *conns[DP_METRICS_HTTP_MAX_CONNS];
	unsigned n;
	dp_metrics_limit_fn limit_fn;
	void *limit_ud;
	uint64_t lim_last[LIM_N];
	uint64_t head_usec, deadline_usec;
};

static char render_buf[DP_METRICS_RENDER_MAX];

static void limit_hit(dp_metrics_server *s, unsigned what, const char *detail)
{
	uint64_t now = dp_now_usec();
	dp_debug("metrics: limit reached", "what=%s", lim_names[what]);
	if ((s->lim_last[what] == 0 || now - s->lim_last[what] >= EPISODE_USEC) && s->limit_fn)
		s->limit_fn(lim_names[what], detail, s->limit_ud);
	s->lim_last[what] = now ? now : 1;
}

/* Arm the timer for the earliest deadline or wake-up (unchanged: no system call). */
static void arm(dp_metrics_server *s)
{
	uint64_t due = s->wake, now;
	for (unsigned i = 0; i < s->n; i++)
		if (due == 0 || s->conns[i]->expires < due)
			due = s->conns[i]->expires;
	if (due == s->armed)
		return;
	now = dp_now_usec();
	s->armed = due;
	(void)dp_timer_set(s->timer, due == 0 ? 0 : due > now ? due - now : 1, 0);
}

/* Hold the spare fd again (after a close: the fd just freed, before any other accept). */
static void spare_take(dp_metrics_server *s)
{
	if (s->spare < 0)
		s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void conn_release(struct mconn *c)
{
	dp_source_free(c->io);
	close(c->fd);
	free(c->out);
	free(c);
}

static void conn_free(struct mconn *c)
{
	dp_metrics_server *s = c->srv;
	for (unsigned i = 0; i < s->n; i++)
		if (s->conns[i] == c) {
			s->conns[i] = s->conns[--s->n];
			break;
		}
	conn_release(c);
	spare_take(s);
}

static int conn_events(struct mconn *c, uint32_t events)
{
	if (c->events == events)
		return 0;
	c->events = events;
	return dp_io_set_events(c->io, events);
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

/* gcc 12 -fanalyzer loses a connection reached through a run-time index (s->conns[i], make_room)
 * and reports its answer leaked: it is the connection's, freed with it (conn_release). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-malloc-leak"
#endif
/* The whole response in c->out; the connection is writing it, within the whole deadline. */
static int respond(struct mconn *c, const dp_metrics_request *req)
{
	int status = req->status;
	const char *type = "text/plain; charset=utf-8";
	const char *body = render_buf;
	size_t blen = 0;
	char head[512];

	if (status == 200 && dp_metrics_render(render_buf, sizeof(render_buf), &blen) < 0)
		status = 500;
	if (status == 200) {
		type = "text/plain; version=0.0.4; charset=utf-8";
	} else {
		body = reason_phrase(status);
		blen = strlen(body);
	}
	int hn = snprintf(head, sizeof(head),
			  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			  "Connection: close\r\n\r\n",
			  status, reason_phrase(status), type, blen + (status == 200 ? 0 : 1),
			  status == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (hn < 0 || (size_t)hn >= sizeof(head))
		return -EINVAL;
	size_t total = (size_t)hn + (req->head ? 0 : blen + (status == 200 ? 0 : 1));
	char *out = malloc(total);
	if (!out)
		return -ENOMEM;
	memcpy(out, head, (size_t)hn);
	if (!req->head) {
		memcpy(out + hn, body, blen);
		if (status != 200)
			out[total - 1] = '\n';
	}
	c->state = C_WRITING;
	c->expires = c->accepted + c->srv->deadline_usec;
	c->out_len = total;
	c->out = out;
	return 0;
}

static void refused(struct mconn *c, int status)
{
	switch (status) {
	case 404: dp_metrics_http_refused("not_found"); break;
	case 405: dp_metrics_http_refused("method_not_allowed"); break;
	case 431:
		dp_metrics_http_refused("head_too_large");
		limit_hit(c->srv, LIM_HEAD, "answered 431, connection closed");
		break;
	default:
		dp_metrics_http_refused("bad_request");
		limit_hit(c->srv, LIM_REQUEST, "malformed request answered 400, connection closed");
		break;
	}
}

/* Write what the answer still has. Once sent our side is shut down; after a 400 or 431 the
 * connection is closed then (-ECONNABORTED: nothing more is read), else the peer's close is
 * awaited (closing with its input unread would reset the connection and could cut the answer). */
static int conn_write(struct mconn *c)
{
	ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? conn_events(c, EPOLLOUT) : -errno;
	c->out_off += (size_t)n;
	if (c->out_off < c->out_len)
		return conn_events(c, EPOLLOUT);
	(void)shutdown(c->fd, SHUT_WR);
	if (c->close_when_sent)
		return -ECONNABORTED;
	c->state = C_DRAINING;
	return conn_events(c, EPOLLIN);
}

/* Read more of the head; once it is complete (or refused), answer at once. */
static int conn_read_head(struct mconn *c)
{
	ssize_t n = read(c->fd, c->in + c->in_len, sizeof(c->in) - c->in_len);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	c->in_len += (size_t)n;
	dp_metrics_request req;
	if (dp_metrics_http_parse(c->in, c->in_len, &req) == 0)
		return 0;
	if (req.status != 200)
		refused(c, req.status);
	c->close_when_sent = req.status == 400 || req.status == 431;
	int r = respond(c, &req);
	return r < 0 ? r : conn_write(c);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Answered: read and drop until the peer closes, at most DRAIN_MAX bytes. */
static int conn_drain(struct mconn *c)
{
	char sink[1024];
	ssize_t n = read(c->fd, sink, sizeof(sink));
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET;
	c->drained += (size_t)n;
	return c->drained > DRAIN_MAX ? -EMSGSIZE : 0;
}

static int on_conn(dp_source *src, int fd, uint32_t revents, void *userdata)
{
	struct mconn *c = userdata;
	int r = c->state == C_HEAD ? conn_read_head(c) : c->state == C_WRITING ? conn_write(c) : conn_drain(c);
	if (r < 0)
		conn_free(c);
	return 0;
}

/* Its deadline passed: without a complete head (the head deadline), or its answer not taken. */
static void conn_expire(struct mconn *c)
{
	if (c->state == C_HEAD) {
		dp_metrics_http_refused("head_timeout");
		limit_hit(c->srv, LIM_HEAD_TIMEOUT, "no complete request head in time, closed without an answer");
	} else {
		dp_metrics_http_refused("slow_reader");
		limit_hit(c->srv, LIM_SLOW_READER, "the peer did not take its answer and close in time, closed");
	}
	conn_free(c);
}

static struct mconn *oldest(const dp_metrics_server *s, enum cstate state)
{
	struct mconn *o = NULL;
	for (unsigned i = 0; i < s->n; i++)
		if (s->conns[i]->state == state && (!o || s->conns[i]->seq < o->seq))
			o = s->conns[i];
	return o;
}

static void evict(struct mconn *c)
{
	dp_metrics_http_refused("evicted");
	limit_hit(c->srv, LIM_EVICTED,
		  c->state == C_HEAD ? "the connection longest without a complete request closed for a new one"
				     : "an answered connection its peer had not closed, closed for a new one");
	conn_free(c);
}

/* Free a slot for a newcomer: the connection that has held its slot longest without a complete
 * request (read first: a request that has just arrived is answered instead), else the oldest
 * answered one whose peer has not closed. false when every slot is writing an answer. */
static bool make_room(dp_metrics_server *s)
{
	struct mconn *c;
	while ((c = oldest(s, C_HEAD))) {
		int r = conn_read_head(c);
		if (r < 0) {
			conn_free(c);
			return true;
		}
		if (c->state == C_HEAD) {
			evict(c);
			return true;
		}
	}
	c = oldest(s, C_DRAINING);
	if (c)
		evict(c);
	return c != NULL;
}

/* One accepted fd, -EAGAIN when none waits. Out of fds (EMFILE, ENFILE; the kernel says so
 * whether or not a connection waits) the spare is given up for it, then, when one is known to
 * wait (the first accept of a wake-up), a slot (make_room): clients of other sockets holding
 * every fd cannot keep a scrape out. */
static int accept_fd(dp_metrics_server *s, bool waiting)
{
	for (;;) {
		int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		int r = -errno;
		if (r == -EINTR || r == -ECONNABORTED)
			continue;
		if (r != -EMFILE && r != -ENFILE)
			return r;
		if (s->spare >= 0) {
			close(s->spare);
			s->spare = -1;
		} else if (!waiting) {
			return -EAGAIN; /* maybe none waits: a waiting one wakes the loop again */
		} else if (!make_room(s)) {
			return r;
		}
	}
}

static int conn_new(dp_metrics_server *s, int fd)
{
	struct mconn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		spare_take(s);
		return -ENOMEM;
	}
	c->srv = s;
	c->fd = fd;
	c->seq = s->accepts++;
	c->accepted = dp_now_usec();
	c->expires = c->accepted + s->head_usec;
	c->events = EPOLLIN;
	s->conns[s->n++] = c;
	int r = dp_io_add(s->loop, fd, EPOLLIN, on_conn, c, &c->io);
	if (r < 0) {
		conn_free(c);
		return r;
	}
	arm(s);
	return 0;
}

/* Every slot is writing an answer: the newcomer is closed at once. */
static void refuse(dp_metrics_server *s, int fd)
{
	close(fd);
	spare_take(s);
	dp_metrics_http_refused("connections");
	limit_hit(s, LIM_CONNECTIONS, "every connection was being answered, the new one closed at accept");
}

/* accept failed otherwise (ENOBUFS, ...), or out of fds with nothing to give up: no busy loop. */
static int pause_accepting(dp_metrics_server *s, int error)
{
	dp_debug("metrics: accept failed", "error=%s", dp_errname(error));
	(void)dp_io_set_events(s->io, 0);
	s->wake = dp_now_usec() + ACCEPT_PAUSE_USEC;
	arm(s);
	return 0;
}

static int on_accept(dp_source *src, int lfd, uint32_t revents, void *userdata)
{
	dp_metrics_server *s = userdata;
	int fd = 0;
	for (int i = 0; i < 16 && fd >= 0; i++) {
		fd = accept_fd(s, i == 0);
		if (fd < 0)
			break;
		if (s->n == DP_METRICS_HTTP_MAX_CONNS && !make_room(s))
			refuse(s, fd);
		else
			(void)conn_new(s, fd);
	}
	spare_take(s); /* given up for nothing (none waited): the fd is still free */
	return fd < 0 && fd != -EAGAIN ? pause_accepting(s, fd) : 0;
}

/* Bind (once: a bound socket cannot be bound again) and listen. */
static int listen_now(dp_metrics_server *s)
{
	if (!s->bound && bind(s->fd, (const struct sockaddr *)&s->addr, s->addr_len) < 0)
		return -errno;
	s->bound = true;
	if (listen(s->fd, 16) < 0)
		return -errno;
	return dp_io_add(s->loop, s->fd, EPOLLIN, on_accept, s, &s->io);
}

/* A failure is retried after the back-off (1 s doubling to 60 s) and reported when its reason
 * is new. The socket is watched only once it listens (an unbound one polls as hung up). */
static void try_listen(dp_metrics_server *s)
{
	int r = listen_now(s);
	if (r == 0) {
		s->listening = true;
		s->listen_err = 0;
		if (s->listen_fn)
			s->listen_fn(s, 0, 0, s->listen_ud);
		return;
	}
	dp_debug("metrics: cannot listen", "error=%s retry_in_ms=%llu", dp_errname(r),
		 (unsigned long long)(s->retry_usec / DP_USEC_PER_MSEC));
	if (r != s->listen_err && s->listen_fn)
		s->listen_fn(s, r, s->retry_usec, s->listen_ud);
	s->listen_err = r;
	s->wake = dp_now_usec() + s->retry_usec;
	s->retry_usec = s->retry_usec * 2 < DP_METRICS_HTTP_RETRY_MAX_USEC ? s->retry_usec * 2
									 : DP_METRICS_HTTP_RETRY_MAX_USEC;
	arm(s);
}

static int on_timer(dp_source *src, void *userdata)
{
	dp_metrics_server *s = userdata;
	uint64_t now = dp_now_usec();
	s->armed = 0; /* a one-shot that fired */
	for (unsigned i = s->n; i-- > 0;) /* conn_free moves the last one (seen) to i */
		if (s->conns[i]->expires <= now)
			conn_expire(s->conns[i]);
	if (s->wake && s->wake <= now) {
		s->wake = 0;
		if (s->listening)
			(void)dp_io_set_events(s->io, EPOLLIN); /* the accept pause is over */
		else
			try_listen(s);
	}
	arm(s);
	return 0;
}

/* The socket for addr (into *ss); ":PORT" on a node without IPv6: every IPv4 address. */
static int open_socket(const struct sockaddr *addr, socklen_t len, struct sockaddr_storage *ss, socklen_t *ss_len)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
	int one = 1, zero = 0, defer = DEFER_ACCEPT_S;
	if (len > sizeof(*ss))
		return -EINVAL;
	memcpy(ss, addr, len);
	*ss_len = len;
	int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 && errno == EAFNOSUPPORT && addr->sa_family == AF_INET6 &&
	    memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0) {
		struct sockaddr_in in4 = { .sin_family = AF_INET, .sin_port = in6->sin6_port };
		in4.sin_addr.s_addr = htonl(INADDR_ANY);
		memcpy(ss, &in4, sizeof(in4));
		*ss_len = sizeof(in4);
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	}
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ss->ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer));
	return fd;
}

int dp_metrics_server_new(dp_loop *loop, const struct sockaddr *addr, socklen_t len, dp_metrics_listen_fn listen_fn,
			  void *userdata, dp_metrics_server **ret)
{
	struct sockaddr_storage ss;
	socklen_t ss_len;
	int fd = open_socket(addr, len, &ss, &ss_len);
	if (fd < 0)
		return fd;
	_cleanup_(dp_metrics_server_freep) dp_metrics_server *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->fd = fd;
	s->spare = -1;
	s->addr = ss;
	s->addr_len = ss_len;
	int r = dp_timer_add_disarmed(loop, on_timer, s, &s->timer);
	if (r < 0)
		return r;
	spare_take(s);
	s->loop = loop;
	s->head_usec = DP_METRICS_HTTP_HEAD_DEADLINE_USEC;
	s->deadline_usec = DP_METRICS_HTTP_DEADLINE_USEC;
	s->retry_usec = DP_METRICS_HTTP_RETRY_FIRST_USEC;
	s->listen_fn = listen_fn;
	s->listen_ud = userdata;
	try_listen(s);
	*ret = TAKE_PTR(s);
	return 0;
}

void dp_metrics_server_set_limit_fn(dp_metrics_server *s, dp_metrics_limit_fn fn, void *userdata)
{
	s->limit_fn = fn;
	s->limit_ud = userdata;
}

void dp_metrics_server_set_deadlines(dp_metrics_server *s, uint64_t head_usec, uint64_t usec)
{
	s->head_usec = head_usec < usec ? head_usec : usec;
	s->deadline_usec = usec;
}

bool dp_metrics_server_listening(const dp_metrics_server *s)
{
	return s->listening;
}

int dp_metrics_server_address(const dp_metrics_server *s, char *buf, size_t size)
{
	struct sockaddr_storage ss = s->addr;
	struct sockaddr_in in4 = { 0 };
	struct sockaddr_in6 in6 = { 0 };
	socklen_t len = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];
	if (s->bound && getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	bool v6 = ss.ss_family == AF_INET6;
	if (v6)
		memcpy(&in6, &ss, sizeof(in6));
	else
		memcpy(&in4, &ss, sizeof(in4));
	if (!inet_ntop(v6 ? AF_INET6 : AF_INET, v6 ? (const void *)&in6.sin6_addr : (const void *)&in4.sin_addr, ip,
		       sizeof(ip)))
		return -errno;
	unsigned port = ntohs(v6 ? in6.sin6_port : in4.sin_port);
	int n = snprintf(buf, size, v6 ? "[%s]:%u" : "%s:%u", ip, port);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

unsigned dp_metrics_server_connections(const dp_metrics_server *s)
{
	return s->n;
}

dp_metrics_server *dp_metrics_server_free(dp_metrics_server *s)
{
	if (!s)
		return NULL;
	for (unsigned i = 0; i < s->n; i++)
		conn_release(s->conns[i]);
	s->n = 0;
	dp_source_free(s->io);
	dp_source_free(s->timer);
	if (s->fd >= 0)
		close(s->fd);
	if (s->spare >= 0)
		close(s->spare);
	free(s);
	return NULL;
}
