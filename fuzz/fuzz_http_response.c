/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (h): the helpers' HTTP/1.1 answer parser (core/src/https/http_response.c).
 * The input is an answer as received, parsed whole and at every prefix length a reader could
 * have at hand. Checks: a result is 0, -EAGAIN or -EBADMSG; on 0 the status is 100..999, the
 * excerpt is NUL-terminated, at most DP_HTTP_EXCERPT_MAX bytes and printable; on an error the
 * output is untouched; once a prefix parses, the longer ones keep the status. The whole body
 * (dp_http_response_body, at the end and before it): 0, -EAGAIN, -EBADMSG or -EFBIG, never
 * -EAGAIN at the end; on 0 within its bound, NUL-terminated, and its excerpt's start; on an
 * error nothing written.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "dp/http_response.h"

static void check_one(const uint8_t *data, size_t size, int *status)
{
	dp_http_response r;
	memset(&r, 0xa5, sizeof(r));
	int k = dp_http_response_parse((const char *)data, size, &r);

	FUZZ_CHECK(k == 0 || k == -EAGAIN || k == -EBADMSG);
	if (k != 0) {
		FUZZ_CHECK(((const unsigned char *)&r)[0] == 0xa5);
		return;
	}
	FUZZ_CHECK(r.status >= 100 && r.status <= 999 && r.head_done);
	FUZZ_CHECK(r.excerpt_len <= DP_HTTP_EXCERPT_MAX && strlen(r.excerpt) == r.excerpt_len);
	for (size_t i = 0; i < r.excerpt_len; i++)
		FUZZ_CHECK(r.excerpt[i] >= ' ' && r.excerpt[i] < 0x7f);
	FUZZ_CHECK(*status == 0 || *status == r.status);
	*status = r.status;
}

static void check_body(const uint8_t *data, size_t size, bool eof)
{
	char *b = NULL;
	size_t n = 0, max = 64;
	dp_http_response r;
	int k = dp_http_response_body((const char *)data, size, eof, max, &b, &n);

	FUZZ_CHECK(k == 0 || k == -EAGAIN || k == -EBADMSG || k == -EFBIG);
	FUZZ_CHECK(!(k == -EAGAIN && eof));
	if (k != 0) {
		FUZZ_CHECK(!b && n == 0);
		return;
	}
	FUZZ_CHECK(n <= max && b[n] == '\0');
	FUZZ_CHECK(dp_http_response_parse((const char *)data, size, &r) == 0);
	for (size_t i = 0; i < n && i < r.excerpt_len; i++) {
		unsigned char c = (unsigned char)b[i];
		FUZZ_CHECK(r.excerpt[i] == (c < ' ' || c >= 0x7f ? '.' : (char)c));
	}
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int status = 0;

	if (size > 3 * DP_HTTP_HEAD_MAX)
		return 0;
	for (size_t n = 0; n <= size; n += 1 + n / 8)
		check_one(data, n, &status);
	check_one(data, size, &status);
	check_body(data, size, false);
	check_body(data, size, true);
	return 0;
}
