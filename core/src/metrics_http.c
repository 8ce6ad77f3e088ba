/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_http: the metrics listener (dp/metrics.h). A minimal HTTP/1.x responder on the
 * daemon's loop, one request per connection: the request head is read into a fixed buffer
 * (DP_METRICS_HTTP_HEAD_MAX), parsed by dp_metrics_http_parse (metrics_parse.c), answered with one
 * response rendered whole (the exposition is bounded by the registry's fixed table) and
 * "Connection: close"; then our side is shut down and the peer's rest read and dropped until it
 * closes. Every connection is closed DP_METRICS_HTTP_DEADLINE_USEC after its accept, finished
 * or not (slow senders and slow readers alike), and at most DP_METRICS_HTTP_MAX_CONNS are open:
 * a further one is closed at accept. Why not libmicrohttpd: Debian's links GnuTLS, whose
 * p11-kit dependency has no static library, and the shipped daemons are static (musl).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/metrics.h"
#include "dp_version.h"

#define EPISODE_USEC (60 * DP_USEC_PER_SEC)
#define ACCEPT_PAUSE_USEC (DP_USEC_PER_SEC) /* after accept failed (EMFILE, ...): no busy loop */

/* ---- the listener ---- */

enum { LIM_CONNECTIONS, LIM_HEAD, LIM_DEADLINE, LIM_REQUEST, LIM_N };
static const char *const lim_names[LIM_N] = { "connections", "head", "deadline", "request" };

struct mconn {
	dp_metrics_server *srv;
	int fd;
	dp_source *io, *timer;
	size_t in_len;
	char *out;
	size_t out_len, out_off;
	bool answered, draining;
	char in[DP_METRICS_HTTP_HEAD_MAX];
};

struct dp_metrics_server {
	dp_loop *loop;
	int fd;
	dp_source *io, *pause;
	struct mconn *conns[DP_METRICS_HTTP_MAX_CONNS];
	unsigned n;
	dp_metrics_limit_fn limit_fn;
	void *limit_ud;
	uint64_t lim_last[LIM_N];
	uint64_t deadline_usec;
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

static void conn_release(struct mconn *c)
{
	dp_source_free(c->io);
	dp_source_free(c->timer);
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

/* The whole response in c->out. */
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
	c->out = malloc(total);
	if (!c->out)
		return -ENOMEM;
	memcpy(c->out, head, (size_t)hn);
	if (!req->head) {
		memcpy(c->out + hn, body, blen);
		if (status != 200)
			c->out[total - 1] = '\n';
	}
	c->out_len = total;
	c->answered = true;
	return dp_io_set_events(c->io, EPOLLOUT);
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

static int conn_read(struct mconn *c)
{
	char sink[512];
	char *p = c->draining ? sink : c->in + c->in_len;
	size_t room = c->draining ? sizeof(sink) : sizeof(c->in) - c->in_len;
	ssize_t n = read(c->fd, p, room);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0 || c->draining)
		return n <= 0 ? -ECONNRESET : 0;
	c->in_len += (size_t)n;
	dp_metrics_request req;
	if (dp_metrics_http_parse(c->in, c->in_len, &req) == 0)
		return 0;
	if (req.status != 200)
		refused(c, req.status);
	return respond(c, &req);
}

static int conn_write(struct mconn *c)
{
	ssize_t n = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	c->out_off += (size_t)n;
	if (c->out_off < c->out_len)
		return 0;
	/* Sent: our side is done; read until the peer closes (closing with unread input would
	 * reset the connection and could cut our answer short), bounded by the deadline. */
	(void)shutdown(c->fd, SHUT_WR);
	c->draining = true;
	return dp_io_set_events(c->io, EPOLLIN);
}

static int on_conn(dp_source *src, int fd, uint32_t revents, void *userdata)
{
	struct mconn *c = userdata;
	int r = 0;
	if (c->answered && !c->draining && (revents & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
		r = conn_write(c);
	else if (revents & (EPOLLIN | EPOLLERR | EPOLLHUP))
		r = conn_read(c);
	if (r < 0)
		conn_free(c);
	return 0;
}

static int on_deadline(dp_source *src, void *userdata)
{
	struct mconn *c = userdata;
	if (!c->draining) {
		dp_metrics_http_refused("deadline");
		limit_hit(c->srv, LIM_DEADLINE, "connection closed 5 s after accept");
	}
	conn_free(c);
	return 0;
}

static int conn_new(dp_metrics_server *s, int fd)
{
	struct mconn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->srv = s;
	c->fd = fd;
	s->conns[s->n++] = c;
	int r = dp_io_add(s->loop, fd, EPOLLIN, on_conn, c, &c->io);
	if (r >= 0)
		r = dp_timer_add(s->loop, s->deadline_usec, 0, on_deadline, c, &c->timer);
	if (r < 0)
		conn_free(c);
	return r;
}

static int on_pause_over(dp_source *src, void *userdata)
{
	dp_metrics_server *s = userdata;
	return dp_io_set_events(s->io, EPOLLIN);
}

static int on_accept(dp_source *src, int lfd, uint32_t revents, void *userdata)
{
	dp_metrics_server *s = userdata;
	for (int i = 0; i < 16; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return 0;
			dp_debug("metrics: accept failed", "error=%s", strerror(errno));
			(void)dp_io_set_events(s->io, 0);
			return dp_timer_set(s->pause, ACCEPT_PAUSE_USEC, 0);
		}
		if (s->n == DP_METRICS_HTTP_MAX_CONNS) {
			close(fd);
			dp_metrics_http_refused("connections");
			limit_hit(s, LIM_CONNECTIONS, "further connections closed at accept");
			continue;
		}
		(void)conn_new(s, fd);
	}
	return 0;
}

static int listen_on(const struct sockaddr *addr, socklen_t len)
{
	int one = 1, zero = 0;
	_cleanup_close_ int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (addr->sa_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	if (bind(fd, addr, len) < 0 || listen(fd, 16) < 0)
		return -errno;
	return TAKE_FD(fd);
}

int dp_metrics_server_new(dp_loop *loop, const struct sockaddr *addr, socklen_t len, dp_metrics_server **ret)
{
	const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
	int fd = listen_on(addr, len);
	/* ":PORT" on a node without IPv6: every IPv4 address */
	if (fd == -EAFNOSUPPORT && addr->sa_family == AF_INET6 &&
	    memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0) {
		struct sockaddr_in in4 = { .sin_family = AF_INET, .sin_port = in6->sin6_port };
		in4.sin_addr.s_addr = htonl(INADDR_ANY);
		fd = listen_on((const struct sockaddr *)&in4, sizeof(in4));
	}
	if (fd < 0)
		return fd;
	_cleanup_(dp_metrics_server_freep) dp_metrics_server *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->loop = loop;
	s->fd = fd;
	s->deadline_usec = DP_METRICS_HTTP_DEADLINE_USEC;
	int r = dp_io_add(loop, fd, EPOLLIN, on_accept, s, &s->io);
	if (r < 0 || (r = dp_timer_add_disarmed(loop, on_pause_over, s, &s->pause)) < 0)
		return r;
	*ret = TAKE_PTR(s);
	return 0;
}

void dp_metrics_server_set_limit_fn(dp_metrics_server *s, dp_metrics_limit_fn fn, void *userdata)
{
	s->limit_fn = fn;
	s->limit_ud = userdata;
}

void dp_metrics_server_set_deadline(dp_metrics_server *s, uint64_t usec)
{
	s->deadline_usec = usec;
}

int dp_metrics_server_address(const dp_metrics_server *s, char *buf, size_t size)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in in4 = { 0 };
	struct sockaddr_in6 in6 = { 0 };
	socklen_t len = sizeof(ss);
	char ip[INET6_ADDRSTRLEN];
	if (getsockname(s->fd, (struct sockaddr *)&ss, &len) < 0)
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
	dp_source_free(s->pause);
	close(s->fd);
	free(s);
	return NULL;
}

/* ---- the daemons' opt-in (logs above debug, as dp_endpoint_log_events does) ---- */

static dp_metrics_server *started;

static void log_limit(const char *what, const char *detail, void *userdata)
{
	char q[200];
	dp_warn("metrics limit reached", "what=%s action=%s max_connections=%d head_max=%d deadline_s=%llu", what,
		dp_logq(q, sizeof(q), detail), DP_METRICS_HTTP_MAX_CONNS, DP_METRICS_HTTP_HEAD_MAX,
		(unsigned long long)(DP_METRICS_HTTP_DEADLINE_USEC / DP_USEC_PER_SEC));
}

int dp_metrics_start(dp_loop *loop, const char *daemon)
{
	const char *v = getenv("METRICS_ADDRESS");
	struct sockaddr_storage ss;
	socklen_t len;
	char err[200], q[300], q2[300], addr[80];

	if (!v || !*v)
		return 0;
	int r = dp_metrics_parse_address(v, &ss, &len, err, sizeof(err));
	if (r < 0) {
		dp_error("invalid METRICS_ADDRESS", "value=%s error=%s", dp_logq(q, sizeof(q), v),
			 dp_logq(q2, sizeof(q2), err));
		return r;
	}
	dp_metrics_build_info(daemon, DP_VERSION);
	dp_metrics_stop();
	r = dp_metrics_server_new(loop, (const struct sockaddr *)&ss, len, &started);
	if (r < 0) {
		dp_error("cannot listen for metrics", "address=%s error=%s", dp_logq(q, sizeof(q), v), strerror(-r));
		return r == -EINVAL ? -EADDRNOTAVAIL : r;
	}
	dp_metrics_server_set_limit_fn(started, log_limit, NULL);
	if (dp_metrics_server_address(started, addr, sizeof(addr)) < 0)
		snprintf(addr, sizeof(addr), "%s", v);
	dp_info("metrics listening", "address=%s path=/metrics", addr);
	return 0;
}

void dp_metrics_stop(void)
{
	started = dp_metrics_server_free(started);
}
