/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_server: the listening unix socket and its connections (accept, the connection limit, the
 * handshake and idle timers, graceful shutdown), one h2 connection per peer, one dp_grpc_call per
 * stream (call states: see grpc_server.h; requests: grpc_request.c; responses: grpc_call.c).
 * User callbacks (handlers, cancel callbacks) always run
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
#define VICTIM_READS 4 /* unread connections read before one is closed for a new one */

const dp_grpc_limits dp_grpc_default_limits = {
	.max_connections = 64,
	.max_concurrent_streams = 128,
	.max_header_list = 16 * 1024,
	.max_outbuf = (size_t)8 << 20, /* 8 MiB */
	.handshake_usec = 10 * DP_USEC_PER_SEC,
	.idle_usec = 300 * DP_USEC_PER_SEC,
	.max_stream_connections = 48,
};

/* ---- connections ---- */

void grpc_conn_unlink(sconn *conn)
{
	dp_grpc_server *s = conn->server;

	if (!s)
		return;
	grpc_budget_unlink(conn);
	DP_LIST_REMOVE(s->conns, conn);
	s->n_conns--;
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		s->n_calls--;
	conn->server = NULL;
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
	DP_LIST_PREPEND(s->conns, conn);
	s->n_conns++;
	/* grpc-go requires SETTINGS as the server's first frame. */
	dp_h2_enter(conn->h2);
	if (nghttp2_submit_settings(dp_h2_session(conn->h2), NGHTTP2_FLAG_NONE, iv,
				    DP_ELEMENTSOF(iv)) != 0)
		dp_h2_close(conn->h2, false, -EPROTO);
	dp_h2_kick(conn->h2);
	dp_h2_read(conn->h2); /* a client that has written is read before the next accept */
	dp_h2_leave(conn->h2); /* may free conn */
	return 0;
}

static int server_backoff_done(dp_source *src, void *userdata)
{
	dp_grpc_server *s = userdata;

	dp_io_set_events(s->listen_io, EPOLLIN);
	return 0;
}

/*
 * The connection to close for a new one (grpc_evictable). One not read yet is read first: a
 * client that wrote its preface after its accept (the exec probe writes right after connect,
 * and a busy accept loop can take it in between) is then handled and not closed unread; a
 * client that wrote nothing stays the choice. Bounded: a few reads per accept.
 */
static sconn *server_victim(dp_grpc_server *s)
{
	for (int i = 0; i < VICTIM_READS; i++) {
		sconn *v = grpc_evictable(s);
		if (!v || v->handshaken)
			return v;
		dp_h2 *h = v->h2;
		dp_h2_enter(h);
		dp_h2_read(h);
		bool spoke = v->handshaken || dp_h2_closing(h);
		dp_h2_leave(h); /* may free v when it closed */
		if (!spoke)
			return v;
		if (s->n_conns < s->limits.max_connections)
			return NULL;
	}
	return grpc_evictable(s);
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
				grpc_limit_hit("fds", errno == EMFILE || errno == ENFILE ?
							      "new connections wait: out of file descriptors" :
							      "new connections wait: out of memory",
					       s->n_conns, s->limits.max_connections);
				dp_io_set_events(s->listen_io, 0);
				dp_timer_set(s->backoff, ACCEPT_BACKOFF_USEC, 0);
			}
			break;
		}
		sconn *victim = s->n_conns >= s->limits.max_connections ? server_victim(s) : NULL;
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
		int r = conn_new(s, cfd);
		if (r < 0) {
			close(cfd);
			grpc_limit_hit("fds", r == -EMFILE || r == -ENFILE ?
						      "new connection closed: out of file descriptors" :
						      "new connection closed: out of memory",
				       s->n_conns, s->limits.max_connections);
		}
	}
	return 0;
}

/* ---- server ---- */

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
	r = s->methods ? grpc_server_callbacks(s) : -ENOMEM;
	if (r < 0)
		goto fail;
	if (n_methods)
		memcpy(s->methods, methods, n_methods * sizeof(*methods));
	r = dp_timer_add_disarmed(loop, server_backoff_done, s, &s->backoff);
	if (r < 0)
		goto fail;
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
	DP_FREE_MANY(s->methods, s);
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
