/* SPDX-License-Identifier: Apache-2.0 */
/*
 * http_response: what the node-label child needs from an HTTP/1.1 answer, parsed from the bytes
 * received so far: the status code and the start of the body, decoded (Content-Length, chunked,
 * or up to the connection's end) and made printable. Pure: no I/O, no allocation; fuzzed
 * (fuzz/http_response_fuzz.c). The peer is the API server, but nothing in it is trusted: every
 * length is checked against what was received, and a malformed answer is -EBADMSG.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The most header bytes (status line and header fields) accepted. */
#define HL_HTTP_HEAD_MAX 16384
/* The most body bytes kept, for a log line. */
#define HL_HTTP_EXCERPT_MAX 200

typedef struct hl_http_response {
	int status;       /* 100..999 */
	bool head_done;   /* the empty line that ends the header block was seen */
	bool body_done;   /* the whole body was received (its length known and reached) */
	size_t excerpt_len;
	char excerpt[HL_HTTP_EXCERPT_MAX + 1]; /* the body's first bytes, each outside printable ASCII shown as '.' */
} hl_http_response;

/* Parses buf[len] (everything received so far) into *ret. 0: the header block is complete
 * (ret->status and the excerpt from the body bytes at hand; ret->body_done when it is all
 * there); -EAGAIN: the header block is not complete yet (nothing written); -EBADMSG: not an
 * HTTP/1.x answer, a malformed or conflicting header, a bad chunk size, or a header block
 * longer than HL_HTTP_HEAD_MAX (nothing written). */
int hl_http_response_parse(const char *buf, size_t len, hl_http_response *ret);
