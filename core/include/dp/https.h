/* SPDX-License-Identifier: Apache-2.0 */
/*
 * https: one HTTP/1.1 request over TLS, blocking, bounded by two deadlines, for the helper
 * programs that talk to the API server (hyperlight-label-node, sdp-kube-api). TLS is Mbed TLS (Debian's libmbedtls, 2.28): TLS 1.2, the peer's
 * certificate chain verified against the given CA file only, and its name checked against the
 * URL's host: a DNS name by Mbed TLS (subjectAltName dNSName, or the CN without one), an IP
 * address here (Mbed TLS 2.28 does not check iPAddress entries; this module requires one
 * equal to the address connected to). No proxy, no redirect, no HTTP/2, "Connection: close".
 */
#pragma once

#include <stddef.h>

#include "dp/http_response.h"

/* The longest body dp_https_fetch takes. */
#define DP_HTTPS_BODY_MAX ((size_t)16 << 20)

typedef struct dp_https_request {
	const char *url;              /* https://HOST[:PORT][/PATH]; HOST a name, IPv4, or [IPv6] */
	const char *method;           /* e.g. "PATCH" */
	const char *ca_path;          /* PEM file: the only trust anchors */
	const char *const *headers;   /* "Name: value" lines, NULL-terminated; Host, Content-Length
				       * and Connection are added */
	const char *body;
	size_t body_len;
	unsigned connect_timeout_ms;  /* name lookup excluded, each address tried within it */
	unsigned timeout_ms;          /* the whole exchange, from the start */
	size_t body_max;              /* dp_https_fetch: the longest body taken (1..DP_HTTPS_BODY_MAX) */
} dp_https_request;

/* Sends q and reads the answer's status line, header block and the start of its body into
 * *ret (written only on success; any status is a success here). Errors, with a sentence for a
 * log line in why[why_size] (never the request's headers, which hold the credentials):
 *   -EINVAL            the URL is malformed
 *   -EPROTONOSUPPORT   not https
 *   -ENOENT/-EACCES/...-EBADMSG  the CA file cannot be read or holds no certificate
 *   -EHOSTUNREACH      the host name does not resolve
 *   -ECONNREFUSED/...  no address accepted the connection (the last error)
 *   -ETIMEDOUT         a deadline passed (connecting, the handshake, or the answer)
 *   -EPROTO            the TLS handshake failed, including an untrusted certificate
 *   -EPERM             the certificate does not name the host
 *   -EBADMSG           the answer is not HTTP/1.x or ended before its header block did */
int dp_https_send(const dp_https_request *q, dp_http_response *ret, char *why, size_t why_size);
/* As dp_https_send, and the answer's whole body decoded into *body (free(); NUL-terminated after
 * its *body_len bytes), read until it is complete. Also: -EINVAL q->body_max 0 or over
 * DP_HTTPS_BODY_MAX; -EFBIG the body is longer than q->body_max; -EBADMSG the body is malformed or
 * cut short. */
int dp_https_fetch(const dp_https_request *q, dp_http_response *ret, char **body, size_t *body_len, char *why,
		   size_t why_size);
