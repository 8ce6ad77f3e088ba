/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_budget: the memory the process's gRPC servers may hold for their peers, across every
 * connection of every server (kata serves several resources, one server each), and who pays
 * when it is full (dp/grpc.h, dp_grpc_budget; docs/architecture.md, "gRPC limits").
 *
 * Input: the connection holding the most request bytes is the offender (a client spreading
 * unfinished messages over streams is one holder); its biggest request is refused. kubelet's
 * and the health probe's requests are small: a connection holding less than max_input / (number
 * of connections) is never the biggest while the total is over the budget.
 * Output: what costs memory is a peer that does not read. A connection whose socket has been
 * full for a second or more (the peer took nothing since) is closed first, the longest first;
 * a reader (kubelet takes its ListAndWatch answers as they come) drains its socket, which
 * resets its time; then the newest connections holding output (kubelet's is an old one).
 * Slots: streams may hold at most max_stream_connections of a server's connections, so a new
 * connection always finds one to evict (the exec probe, a short call always gets in).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "grpc_server.h"

#define EPISODE_USEC (60 * DP_USEC_PER_SEC) /* a limit quiet this long ends its episode */
#define STALL_USEC DP_USEC_PER_SEC            /* a socket full this long: its peer does not read */

const dp_grpc_budget dp_grpc_default_budget = {
	.max_input = (size_t)5 << 20,  /* one 4 MiB request and every small one */
	.max_output = (size_t)13 << 20, /* three 4 MiB answers in flight, 1 MiB of small ones */
};

static dp_grpc_budget budget = { (size_t)5 << 20, (size_t)13 << 20 };
static size_t in_total, out_total;
static dp_grpc_server *servers;
static dp_grpc_limit_fn limit_fn;
static void *limit_ud;

enum { LIM_INPUT, LIM_OUTPUT, LIM_STREAMS, LIM_CONNECTIONS, LIM_FDS, LIM_N };
static const char *const lim_names[LIM_N] = { "input", "output", "streams", "connections", "fds" };
static uint64_t lim_last[LIM_N]; /* last hit, 0: never */

int dp_grpc_set_budget(const dp_grpc_budget *b)
{
	if (!b) {
		budget = dp_grpc_default_budget;
		return 0;
	}
	if (b->max_input < DP_GRPC_MAX_MESSAGE + 5 || b->max_output < DP_GRPC_MAX_MESSAGE + 5)
		return -EINVAL;
	budget = *b;
	return 0;
}

size_t dp_grpc_input_held(void)
{
	return in_total;
}

size_t dp_grpc_output_held(void)
{
	return out_total;
}

void dp_grpc_set_limit_hook(dp_grpc_limit_fn fn, void *userdata)
{
	limit_fn = fn;
	limit_ud = userdata;
	memset(lim_last, 0, sizeof(lim_last)); /* every limit starts a new episode */
}

void dp_grpc_log_limit(const char *what, const char *action, size_t held, size_t max,
		       void *userdata)
{
	char q[128];
	dp_warn("gRPC limit reached", "what=%s action=%s held=%zu max=%zu", what,
		dp_logq(q, sizeof(q), action), held, max);
}

void grpc_limit_hit(const char *what, const char *action, size_t held, size_t max)
{
	uint64_t now = dp_now_usec();
	size_t i = 0;

	while (i < LIM_N - 1 && strcmp(lim_names[i], what) != 0)
		i++;
	dp_debug("grpc: limit reached", "what=%s held=%zu max=%zu", what, held, max);
	dp_metrics_grpc_limit(lim_names[i]); /* every hit; the hook once per episode */
	if (lim_last[i] == 0 || now - lim_last[i] >= EPISODE_USEC) {
		if (limit_fn)
			limit_fn(what, action, held, max, limit_ud);
	}
	lim_last[i] = now ? now : 1;
}

void grpc_budget_add_server(dp_grpc_server *s)
{
	s->gnext = servers;
	servers = s;
}

void grpc_budget_remove_server(dp_grpc_server *s)
{
	for (dp_grpc_server **p = &servers; *p; p = &(*p)->gnext)
		if (*p == s) {
			*p = s->gnext;
			break;
		}
}

void grpc_budget_unlink(sconn *conn)
{
	in_total -= conn->in_bytes < in_total ? conn->in_bytes : in_total;
	out_total -= conn->out_bytes < out_total ? conn->out_bytes : out_total;
}

/* ---- input ---- */

void grpc_in_update(dp_grpc_call *c)
{
	size_t now = c->deframer.msg_have + (c->req ? c->req_len : 0);
	sconn *conn = c->conn;

	if (conn->server)
		in_total = in_total - c->in_bytes + now;
	conn->in_bytes = conn->in_bytes - c->in_bytes + now;
	c->in_bytes = now;
}

static dp_grpc_call *in_biggest_call(const sconn *conn)
{
	dp_grpc_call *big = NULL;

	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		if (c->in_bytes > 0 && (!big || c->in_bytes > big->in_bytes))
			big = c;
	return big;
}

static sconn *in_biggest_conn(void)
{
	sconn *big = NULL;

	for (dp_grpc_server *s = servers; s; s = s->gnext)
		for (sconn *c = s->conns; c; c = c->next)
			if (c->in_bytes > 0 && (!big || c->in_bytes > big->in_bytes))
				big = c;
	return big;
}

int grpc_in_reserve(dp_grpc_call *c, size_t len)
{
	while (in_total + len > budget.max_input) {
		sconn *conn = in_biggest_conn();
		dp_grpc_call *victim = conn ? in_biggest_call(conn) : NULL;
		size_t held = in_total;

		/* The arriving request is refused when it is (or would become) the biggest. */
		if (!victim || victim == c || c->in_bytes + len >= victim->in_bytes) {
			grpc_limit_hit("input", "request refused", held + len, budget.max_input);
			return -ENOBUFS;
		}
		grpc_limit_hit("input", "request refused", held + len, budget.max_input);
		grpc_call_end(victim, DP_GRPC_RESOURCE_EXHAUSTED,
			      "grpc: the server's request memory is full", false, 200);
		dp_grpc_deframer_done(&victim->deframer);
		free(victim->req);
		victim->req = NULL;
		grpc_in_update(victim);
	}
	return 0;
}

/* ---- output ---- */

void grpc_out_account(sconn *conn, ptrdiff_t delta)
{
	size_t d = delta < 0 ? (size_t)-delta : (size_t)delta;

	dp_h2_account(conn->h2, delta);
	if (delta < 0) {
		d = d < conn->out_bytes ? d : conn->out_bytes;
		conn->out_bytes -= d;
		if (conn->server)
			out_total -= d < out_total ? d : out_total;
	} else {
		conn->out_bytes += d;
		if (conn->server)
			out_total += d;
	}
}

/* Whether a should be closed before b to make room: a stalled socket (full, its peer took
 * nothing for STALL_USEC: no reader pauses that long) before the others, the longest stalled
 * first; then the most recently accepted first (kubelet's connection is an old one, and a
 * reader's socket, blocked for a moment in the middle of a 4 MiB answer, is not ranked ahead
 * of newcomers whose answers are not even flushed yet). */
static bool out_before(const sconn *a, const sconn *b, uint64_t now)
{
	uint64_t ba = dp_h2_blocked_since(a->h2), bb = dp_h2_blocked_since(b->h2);
	bool sa = ba != 0 && now - ba >= STALL_USEC, sb = bb != 0 && now - bb >= STALL_USEC;

	if (sa != sb)
		return sa;
	if (sa && ba != bb)
		return ba < bb;
	return a->accepted > b->accepted;
}

/* The linked connection to close first among those holding output and self (about to hold
 * some), or NULL. Protected connections are never chosen. */
static sconn *out_victim(sconn *self)
{
	uint64_t now = dp_now_usec();
	sconn *v = self->protected_ ? NULL : self;

	for (dp_grpc_server *s = servers; s; s = s->gnext)
		for (sconn *c = s->conns; c; c = c->next)
			if (c != self && !c->protected_ && c->out_bytes > 0 &&
			    (!v || out_before(c, v, now)))
				v = c;
	return v;
}

int grpc_out_reserve(sconn *conn, size_t len)
{
	while (out_total + len > budget.max_output) {
		sconn *victim = out_victim(conn);
		size_t held = out_total;

		grpc_limit_hit("output", "non-reading connection closed", held + len,
			       budget.max_output);
		if (!victim || victim == conn)
			return -ENOBUFS;
		grpc_conn_evict(victim);
	}
	return 0;
}

/* ---- connection slots ---- */

/* The connection holds a server-streaming call its handler owns. */
static bool conn_streams(const sconn *conn)
{
	for (const dp_grpc_call *c = conn->calls; c; c = c->next)
		if (c->state == CALL_OWNED && c->method.kind == DP_GRPC_METHOD_SERVER_STREAM)
			return true;
	return false;
}

/* A stream was just handed to its handler on conn: beyond max_stream_connections, the most
 * recently accepted other connection holding one (not protected) is closed, so that streams
 * never take the slots short calls need, and a new stream (kubelet's after it registered
 * again) is always served. */
void grpc_streams_cap(dp_grpc_server *s, sconn *conn)
{
	unsigned n = 0;
	sconn *victim = NULL;

	for (sconn *c = s->conns; c; c = c->next) {
		if (c->shutting_down || !conn_streams(c))
			continue;
		n++;
		if (c != conn && !c->protected_ && (!victim || c->accepted >= victim->accepted))
			victim = c;
	}
	if (n <= s->limits.max_stream_connections || !victim)
		return;
	grpc_limit_hit("streams", "newest other connection holding a stream closed", n,
		       s->limits.max_stream_connections);
	grpc_conn_shutdown(victim);
}

/* An evicted connection's owners are told, then it is closed (nothing sent: it does not read). */
void grpc_conn_evicted(sconn *conn)
{
	dp_h2 *h = conn->h2;

	dp_h2_enter(h);
	for (dp_grpc_call *c = conn->calls; c; c = c->next)
		grpc_call_notify_cancel(c, DP_GRPC_RESOURCE_EXHAUSTED);
	dp_h2_leave(h); /* closes it (frozen) */
}

void grpc_conn_evict(sconn *conn)
{
	grpc_conn_unlink(conn);
	conn->shutting_down = true;
	conn->evicted = true;
	for (dp_grpc_call *c = conn->calls; c; c = c->next) {
		grpc_call_drop_queue(c, false);
		c->discard = true;
	}
	dp_h2_freeze(conn->h2, -ENOBUFS);
	/* The owners hear of it from the loop, not inside the send that made room. */
	if (dp_timer_set_asap(conn->timer) < 0)
		grpc_conn_evicted(conn);
}

/* How readily a connection that is not busy makes room for a new one, lower first: it
 * completed its handshake and holds no call (it had its chance and used it for nothing), it
 * holds only requests still arriving or answers leaving, or the server has not read its
 * handshake yet. A client reconnecting as fast as it is closed (grpc-go after a GOAWAY) makes
 * a new connection every turn of the loop; with "least recently active" alone, 16 of them
 * closed the exec probe's connection before its request (sent with its preface, in one
 * write) was read. */
static int idle_rank(const sconn *c)
{
	if (!c->handshaken)
		return 2;
	return c->calls ? 1 : 0;
}

/* Among connections not busy, a goes before b. Unread ones go oldest first: the one accepted
 * longest ago had the most time to write and wrote nothing. The server reads a connection as it
 * accepts it and reads the chosen one once more before closing it (grpc_server.c,
 * server_victim), so a client that has written by then is served, not closed: a connect loop
 * that never writes cannot close the exec probe's connection between its accept and its
 * write (the newest-first order could: tests/kubelet/probe_flood_test.go). */
static bool idle_before(const sconn *a, const sconn *b)
{
	int ra = idle_rank(a), rb = idle_rank(b);

	if (ra != rb)
		return ra < rb;
	if (ra == 2)
		return a->accepted <= b->accepted;
	return a->last_active <= b->last_active;
}

/* The connection not busy that goes first (idle_before), else the least recently active one
 * holding no stream (at most max_stream_connections do), never a protected one; or NULL. */
sconn *grpc_evictable(const dp_grpc_server *s)
{
	sconn *idle = NULL, *nostream = NULL;

	for (sconn *c = s->conns; c; c = c->next) {
		if (c->shutting_down || c->protected_)
			continue;
		if (!grpc_conn_busy(c) && (!idle || idle_before(c, idle)))
			idle = c;
		if (!conn_streams(c) && (!nostream || c->last_active <= nostream->last_active))
			nostream = c;
	}
	return idle ? idle : nostream;
}
