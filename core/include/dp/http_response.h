/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_response: what the node-label child needs from an HTTP/1.1 answer, parsed from the bytes
 * received so far: the status code and the start of the body, decoded (Content-Length, chunked,
 * or up to the connection's end) and made printable; and, once all there, the whole body decoded.
 * Pure: no I/O; fuzzed
 * (fuzz/fuzz_http_response.c). The peer is the API server, but nothing in it is trusted: every
 * length is checked against what was received, and a malformed answer is -EBADMSG.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The most header bytes (status line and header fields) accepted. */
#define DP_HTTP_HEAD_MAX 16384
/* The most body bytes kept, for a log line. */
#define DP_HTTP_EXCERPT_MAX 200

typedef struct dp_http_response {
	int status;       /* 100..999 */
	bool head_done;   /* the empty line that ends the header block was seen */
	bool body_done;   /* the whole body was received (its length known and reached) */
	size_t excerpt_len;
	char excerpt[DP_HTTP_EXCERPT_MAX + 1]; /* the body's first bytes, each outside printable ASCII shown as '.' */
} dp_http_response;

/* Parses buf[len] (everything received so far) into *ret. 0: the header block is complete
 * (ret->status and the excerpt from the body bytes at hand; ret->body_done when it is all
 * there); -EAGAIN: the header block is not complete yet (nothing written); -EBADMSG: not an
 * HTTP/1.x answer, a malformed or conflicting header, a bad chunk size, or a header block
 * longer than DP_HTTP_HEAD_MAX (nothing written). */
int dp_http_response_parse(const char *buf, size_t len, dp_http_response *ret);
/* The whole body of the answer in buf[len], decoded (the framing dp_http_response_parse reads),
 * in a new allocation *ret (free()), NUL-terminated after its *ret_len bytes; written only on
 * success. eof: the peer closed after buf[len] (which ends a body framed by the connection's
 * end, and makes any other incomplete answer malformed). -EAGAIN: not all received yet;
 * -EBADMSG: malformed, or cut short at eof; -EFBIG: the body is over max bytes; -ENOMEM. */
int dp_http_response_body(const char *buf, size_t len, bool eof, size_t max, char **ret, size_t *ret_len);
