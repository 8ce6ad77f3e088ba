/* SPDX-License-Identifier: Apache-2.0 */
/*
 * h2: (internal) one HTTP/2 connection = one socket fd + one nghttp2 session, driven by the loop.
 *
 * Input is read and fed to nghttp2_session_mem_recv(); output is pulled with
 * nghttp2_session_mem_send() and written without blocking, small frames gathered into one write
 * (one wake-up of the peer per answer, not one per frame); what the socket does not take is kept
 * and sent when it becomes writable. The owner accounts the bytes it queued
 * for streams (dp_h2_account); when the socket is blocked and the total exceeds max_outbuf,
 * reading from the peer pauses until the socket drains.
 *
 * Re-entrancy: nghttp2 forbids mem_recv/mem_send/session_del from inside its callbacks, and an
 * owner's user callbacks may free anything. So every entry into nghttp2 or into user code is
 * bracketed by dp_h2_enter()/dp_h2_leave(); while inside, dp_h2_kick() only marks the session
 * for a flush and dp_h2_close() only marks it for closing; both happen at the outermost
 * dp_h2_leave(). After a dp_h2_leave() the caller must assume the connection (and whatever its
 * closed callback freed) is gone.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nghttp2/nghttp2.h>

#include "dp/loop.h"

typedef struct dp_h2 dp_h2;

/* The connection ended: EOF (error 0), socket error (-errno), nghttp2 failure (-EPROTO), both
 * sides done (0), or dp_h2_close() was called (its error). Runs exactly once, never inside an
 * nghttp2 call; the session still exists (its streams' user data may be freed here), nghttp2
 * must not be called from here. The dp_h2 is freed right after return. */
typedef void (*dp_h2_closed_fn)(dp_h2 *h, int error, void *userdata);

/* Wrap connected socket fd (taken over on success, closed on free) with a new session whose
 * user data is userdata. Nothing is sent until dp_h2_kick(). -ENOMEM, -EPROTO (nghttp2), or the
 * loop's errors. */
int dp_h2_new(dp_loop *loop, int fd, bool server, const nghttp2_session_callbacks *cbs,
	      const nghttp2_option *opt, size_t max_outbuf, dp_h2_closed_fn closed, void *userdata,
	      dp_h2 **ret);

nghttp2_session *dp_h2_session(const dp_h2 *h);
dp_loop *dp_h2_loop(const dp_h2 *h);
/* True once dp_h2_close() was requested or the transport ended (no more output will be sent
 * except the final flush). */
bool dp_h2_closing(const dp_h2 *h);

void dp_h2_enter(dp_h2 *h);
/* May run the pending flush and close (and thereby the closed callback, which may free the
 * owner). */
void dp_h2_leave(dp_h2 *h);

/* Read what has already arrived, as the loop does on EPOLLIN (between enter and leave): a server
 * reads a connection as it accepts it, so a client that wrote its preface and request before
 * the accept (the exec probe does, in one write) is read before another accept can make room
 * by closing it. */
void dp_h2_read(dp_h2 *h);

/* Output was submitted: write it at the outermost dp_h2_leave(), or, when called outside any
 * enter/leave (from user code), from the loop's next iteration (a one-shot timer owned by the
 * connection), so that no callback runs inside the caller. */
void dp_h2_kick(dp_h2 *h);
/* End the connection: when flush is true, one non-blocking attempt to write what nghttp2 has
 * queued (GOAWAY, trailers); then the closed callback with error, and free. Now, or at the
 * outermost dp_h2_leave(). A second call is ignored. */
void dp_h2_close(dp_h2 *h, bool flush, int error);

/* The owner queued (delta > 0) or handed to nghttp2 (delta < 0) stream bytes. */
void dp_h2_account(dp_h2 *h, ptrdiff_t delta);
/* Bytes waiting: the owner's queued bytes plus what the socket has not taken yet. */
size_t dp_h2_pending(const dp_h2 *h);
/* Since when (dp_now_usec) the socket has refused output without the peer taking any since;
 * 0 when it takes what it is given. A peer that does not read keeps an old value; one that
 * reads resets it each time it drains the socket. */
uint64_t dp_h2_blocked_since(const dp_h2 *h);
/* End the connection without a word: nothing more is read or written from now on, and the
 * closed callback (with error) runs at the next outermost dp_h2_leave() (the owner brackets
 * one when it wants it to run). dp_h2_closing() is true from now on. */
void dp_h2_freeze(dp_h2 *h, int error);
