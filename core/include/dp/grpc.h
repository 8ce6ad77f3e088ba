/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc: gRPC over HTTP/2 (nghttp2) on unix sockets, server and client, driven by dp_loop.
 *
 * Server: listens on a unix socket, one nghttp2 session per connection. A request is validated
 * (:method POST, content-type application/grpc*, :path routed to a method; :authority
 * "localhost" or the raw socket path that older kubelets sent), its single message is framed
 * (5-byte prefix, at most DP_GRPC_MAX_MESSAGE bytes, compressed flag -> UNIMPLEMENTED) and
 * handed to the method's handler once the request ended (END_STREAM). A handler answers now
 * or later through the call: unary methods with exactly one dp_grpc_call_send() (which also
 * sends OK trailers) or one dp_grpc_call_finish() with an error; server-streaming methods with
 * any number of dp_grpc_call_send() then dp_grpc_call_finish(). grpc-timeout is enforced:
 * at the deadline the call ends with DEADLINE_EXCEEDED (trailers, then RST_STREAM(CANCEL)).
 * A call ends for its owner exactly once: either by finish/unary send, or by its cancel
 * callback (RST_STREAM from the peer, connection EOF or error, deadline, server shutdown);
 * after that the call pointer is invalid. Errors found before the handler runs (unknown
 * method -> UNIMPLEMENTED, wrong content-type -> HTTP 415 + INVALID_ARGUMENT, malformed
 * grpc-timeout -> INTERNAL, oversize message -> RESOURCE_EXHAUSTED, decided from the 5-byte
 * prefix) are answered Trailers-Only, followed by RST_STREAM(NO_ERROR) when the request was
 * still arriving; malformed requests (not POST, missing or duplicate pseudo-headers) are reset
 * with PROTOCOL_ERROR. Any nghttp2 error closes that connection only.
 *
 * Output produced from user code is written from the loop's next iteration, so no
 * callback runs inside dp_grpc_call_send/finish or dp_grpc_client_call_new (only
 * dp_grpc_server_free runs cancel callbacks, by design); from inside a callback, once it
 * returns.
 *
 * Client: one connection per call (Register, health checks), no keepalive PINGs; connect()
 * that fails with ECONNREFUSED/ENOENT/EAGAIN is retried every 5 ms until the deadline.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "dp/loop.h"

#define DP_GRPC_MAX_MESSAGE (4u << 20) /* 4 MiB */

enum dp_grpc_status {
	DP_GRPC_OK = 0,
	DP_GRPC_CANCELLED = 1,
	DP_GRPC_UNKNOWN = 2,
	DP_GRPC_INVALID_ARGUMENT = 3,
	DP_GRPC_DEADLINE_EXCEEDED = 4,
	DP_GRPC_NOT_FOUND = 5,
	DP_GRPC_ALREADY_EXISTS = 6,
	DP_GRPC_PERMISSION_DENIED = 7,
	DP_GRPC_RESOURCE_EXHAUSTED = 8,
	DP_GRPC_FAILED_PRECONDITION = 9,
	DP_GRPC_ABORTED = 10,
	DP_GRPC_OUT_OF_RANGE = 11,
	DP_GRPC_UNIMPLEMENTED = 12,
	DP_GRPC_INTERNAL = 13,
	DP_GRPC_UNAVAILABLE = 14,
	DP_GRPC_DATA_LOSS = 15,
	DP_GRPC_UNAUTHENTICATED = 16,
};

/* ---- server ---- */

typedef struct dp_grpc_server dp_grpc_server;
typedef struct dp_grpc_call dp_grpc_call;

enum dp_grpc_kind { DP_GRPC_METHOD_UNARY, DP_GRPC_METHOD_SERVER_STREAM };

/* msg/len: the request message (valid only during the call). userdata: the method's. The
 * handler runs once the request ended (END_STREAM); it may answer at once or keep the call and
 * answer later (from a timer, another callback...), until the call ends. */
typedef void (*dp_grpc_handler)(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata);
/* The call ended without the owner finishing it (status says why: CANCELLED for a peer reset
 * or EOF, DEADLINE_EXCEEDED, UNAVAILABLE for server shutdown). The call is freed after return
 * and must not be used from here on (the call functions return -ESTALE inside). Never runs for
 * a call the owner already ended. */
typedef void (*dp_grpc_cancel_fn)(dp_grpc_call *call, int status, void *userdata);

typedef struct dp_grpc_method {
	const char *path; /* "/v1beta1.DevicePlugin/Allocate" */
	enum dp_grpc_kind kind;
	dp_grpc_handler handler;
	void *userdata;
} dp_grpc_method;

typedef struct dp_grpc_limits {
	unsigned max_connections;       /* accepted at once; at the limit a new connection evicts
					  * the least recently active one where no handler holds a
					  * call, else the least recently active one holding no
					  * server-streaming call (GOAWAY, close): a new connection
					  * always gets in (max_stream_connections < this) */
	unsigned max_concurrent_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS per connection */
	unsigned max_header_list;        /* SETTINGS_MAX_HEADER_LIST_SIZE, bytes (>= 1024); a larger
					  * request header list -> RESOURCE_EXHAUSTED */
	size_t max_outbuf;               /* when the peer does not read (socket full) and more than
					  * this waits, reading from it pauses until it drains; a
					  * send beyond 2 x max_outbuf fails with -ENOBUFS */
	uint64_t handshake_usec;         /* a connection whose client preface and first SETTINGS
					  * have not arrived by then is closed */
	uint64_t idle_usec;              /* a connection where no handler holds a call and no
					  * frame arrived for this long gets GOAWAY and is closed
					  * (requests still arriving are refused) */
	unsigned max_stream_connections; /* connections where a handler holds a server-streaming
					  * call (ListAndWatch, Watch); a new such call beyond it is
					  * served and the most recently accepted other such
					  * connection not protected gets GOAWAY and is closed.
					  * 0 or not below max_connections:
					  * max_connections * 3 / 4 */
} dp_grpc_limits;

/* The defaults used when limits is NULL (documented in docs/architecture.md):
 * 64 connections, 128 streams per connection, 16 KiB header list, 8 MiB output, 10 s
 * handshake, 5 min idle, 48 connections holding streams. Every field but
 * max_stream_connections must be non-zero (-EINVAL). */
extern const dp_grpc_limits dp_grpc_default_limits;

/* Create the socket (unlinking nothing: an existing path is -EADDRINUSE), listen and serve.
 * methods is copied (the strings must outlive the server). The socket file has mode 0600.
 * -EINVAL (bad arguments, a method path not starting with '/', limits out of range),
 * -ENAMETOOLONG, -ENOMEM, socket errors. */
int dp_grpc_server_new(dp_loop *loop, const char *socket_path, const dp_grpc_method *methods,
		       size_t n_methods, const dp_grpc_limits *limits, dp_grpc_server **ret);
/* Graceful stop: stop accepting, cancel every open call with UNAVAILABLE (their cancel
 * callbacks run, then the peer gets grpc-status UNAVAILABLE), GOAWAY on every connection, one
 * non-blocking write of all that, close. Nothing lingers: the loop may be freed right after.
 * Safe from inside any of the server's callbacks (the connection in use is closed once that
 * callback returns). The socket file is not removed (the owner decides). Returns NULL.
 * Accepts NULL. */
dp_grpc_server *dp_grpc_server_free(dp_grpc_server *s);
DP_DEFINE_CLEANUP(dp_grpc_server, dp_grpc_server_free)

/* The memory budget of the process, shared by every server (all their connections):
 * max_input: request bytes held before their handlers run (partial messages being reassembled,
 * whole messages whose request has not ended). When more arrive beyond it, the biggest request
 * of the connection holding the most is answered RESOURCE_EXHAUSTED and its bytes freed (the
 * arriving one, when it is that one).
 * max_output: response bytes queued that the peers have not taken. A send beyond it closes
 * other connections holding output until it fits (their calls cancelled with
 * RESOURCE_EXHAUSTED from the loop, nothing more sent), in this order: sockets full for a
 * second or more with nothing taken (the longest first), then the most recently accepted. When
 * the sender's own connection comes first, it is the one closed (the message is dropped, the
 * send returns 0, the owner is told through the cancel callback). Protected connections are
 * never chosen (a protected sender may go over the budget).
 * Defaults (docs/architecture.md): 5 MiB input, 13 MiB output. Each must be at least
 * DP_GRPC_MAX_MESSAGE + 5 (-EINVAL). NULL restores the defaults. */
typedef struct dp_grpc_budget {
	size_t max_input;
	size_t max_output;
} dp_grpc_budget;
extern const dp_grpc_budget dp_grpc_default_budget;
int dp_grpc_set_budget(const dp_grpc_budget *b);

/* A limit was hit (what: "input", "output", "streams", "connections", "fds"; action: what was
 * done; held/max: the measure and its limit). Every hit is counted in
 * sdp_grpc_limit_hits_total{what}; the hook is called once per episode of each limit (an
 * episode ends after a minute without that limit being hit; setting the hook starts new
 * episodes), from inside the server's work: it must only log or count. Library code only logs
 * at debug: a daemon opts into the warn line with dp_grpc_set_limit_hook(dp_grpc_log_limit,
 * NULL). */
typedef void (*dp_grpc_limit_fn)(const char *what, const char *action, size_t held, size_t max,
				 void *userdata);
void dp_grpc_set_limit_hook(dp_grpc_limit_fn fn, void *userdata);
/* level=warn msg="gRPC limit reached" what=... action=... held=... max=... */
void dp_grpc_log_limit(const char *what, const char *action, size_t held, size_t max,
		       void *userdata);

/* A call of a method no server routes was answered UNIMPLEMENTED (every one is counted in
 * sdp_grpc_unimplemented_total). The hook hears of each distinct :path once (paths compared on
 * their first DP_GRPC_UNKNOWN_PATH_MAX bytes), for the first DP_GRPC_UNKNOWN_METHODS of the
 * process; then once with path NULL, and of none after that: a client trying names in a loop
 * cannot flood the log. path is the caller's choice (any byte but NUL): quote it (dp_logq).
 * Called from inside the server's work: it must only log or count. Setting the hook forgets the
 * names seen. Library code only logs at debug: a daemon opts into the warn lines with
 * dp_grpc_set_unimplemented_hook(dp_grpc_log_unimplemented, NULL). */
#define DP_GRPC_UNKNOWN_METHODS 16
#define DP_GRPC_UNKNOWN_PATH_MAX 128
typedef void (*dp_grpc_unimplemented_fn)(const char *path, void *userdata);
void dp_grpc_set_unimplemented_hook(dp_grpc_unimplemented_fn fn, void *userdata);
/* level=warn msg="unknown gRPC method" method=...; path NULL:
 * level=warn msg="further unknown gRPC methods not logged" logged=16 */
void dp_grpc_log_unimplemented(const char *path, void *userdata);

/* The call's connection is one that must keep working (the kubelet's ListAndWatch): it is
 * never closed to make room for another connection or stream, nor for the output budget. */
void dp_grpc_call_protect(dp_grpc_call *call);

/* Set who is told when the call is cancelled. May be called from the handler or later. */
void dp_grpc_call_set_cancel(dp_grpc_call *call, dp_grpc_cancel_fn fn, void *userdata);
/* Absolute deadline (dp_now_usec clock) from grpc-timeout, 0 when none. */
uint64_t dp_grpc_call_deadline(const dp_grpc_call *call);
const char *dp_grpc_call_path(const dp_grpc_call *call);

/* Send one response message (bytes already protobuf-encoded). Unary: also ends the call with
 * OK (the call is invalid afterwards). Stream: queues it (sent in order, flow-controlled).
 * -EMSGSIZE above DP_GRPC_MAX_MESSAGE, -ENOBUFS when the connection already holds 2 x
 * max_outbuf unsent bytes (a peer that does not read): the call is then ended with
 * RESOURCE_EXHAUSTED and is invalid. -ENOMEM (the call stays usable). -ESTALE if the call
 * already ended (only detectable inside its cancel callback). Output is written after the
 * loop's current batch; no callback runs inside these functions. */
int dp_grpc_call_send(dp_grpc_call *call, const uint8_t *msg, size_t len);
/* Encode with protobuf-c and send. */
int dp_grpc_call_send_pb(dp_grpc_call *call, const ProtobufCMessage *msg);
/* End the call with status and message (NULL = none; cut to 4 KiB), after queued messages.
 * Trailers-Only when nothing was sent yet. The call is invalid afterwards. -EINVAL, -ESTALE,
 * -ENOMEM. */
int dp_grpc_call_finish(dp_grpc_call *call, int status, const char *message);

/* ---- client ---- */

typedef struct dp_grpc_client_call dp_grpc_client_call;
/* status: grpc-status (or UNAVAILABLE/DEADLINE_EXCEEDED/INTERNAL for transport failures, with a
 * message saying what happened); message: the percent-decoded grpc-message or our own text,
 * never NULL (may be empty); resp: the single response message when status == OK (NULL
 * otherwise). Transport outcomes: connect failure, EOF or GOAWAY before the status ->
 * UNAVAILABLE; RST_STREAM before the status -> CANCEL: CANCELLED, REFUSED_STREAM: UNAVAILABLE,
 * ENHANCE_YOUR_CALM: RESOURCE_EXHAUSTED, others INTERNAL; :status != 200 -> grpc-go's HTTP
 * table (404 UNIMPLEMENTED, 429/502/503/504 UNAVAILABLE, 400 INTERNAL, else UNKNOWN); wrong
 * content-type -> UNKNOWN; OK without a message, or two messages -> INTERNAL; a response
 * over DP_GRPC_MAX_MESSAGE -> RESOURCE_EXHAUSTED. The call is freed when done returns
 * (dp_grpc_client_call_cancel on it from inside done is ignored; after done it is invalid). */
typedef void (*dp_grpc_client_done_fn)(void *userdata, int status, const char *message,
				       const uint8_t *resp, size_t resp_len);

/* Start a unary call on socket_path with :authority (e.g. "localhost"), deadline timeout_usec
 * (> 0; also sent as grpc-timeout, counting from when the request is sent). A connect that
 * fails with ECONNREFUSED, ENOENT or EAGAIN is retried every 5 ms until the deadline. done
 * runs exactly once, later (never from inside this call), unless the call is cancelled first.
 * -EINVAL, -EMSGSIZE (req_len > DP_GRPC_MAX_MESSAGE), -ENAMETOOLONG, -ENOMEM, socket errors. */
int dp_grpc_client_call_new(dp_loop *loop, const char *socket_path, const char *authority,
			    const char *path, const uint8_t *req, size_t req_len, uint64_t timeout_usec,
			    dp_grpc_client_done_fn done, void *userdata, dp_grpc_client_call **ret);
/* Abort: RST_STREAM(CANCEL), close, no callback. Accepts NULL, returns NULL. */
dp_grpc_client_call *dp_grpc_client_call_cancel(dp_grpc_client_call *c);
DP_DEFINE_CLEANUP(dp_grpc_client_call, dp_grpc_client_call_cancel)

/* Convenience: pack msg with protobuf-c and start a call. */
int dp_grpc_client_call_pb(dp_loop *loop, const char *socket_path, const char *authority,
			   const char *path, const ProtobufCMessage *req, uint64_t timeout_usec,
			   dp_grpc_client_done_fn done, void *userdata, dp_grpc_client_call **ret);

const char *dp_grpc_status_name(int status);
