/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (h): the node-label child's HTTP/1.1 answer parser (hyperlight/label-node/http_response.c).
 * The input is an answer as received, parsed whole and at every prefix length a reader could
 * have at hand. Checks: a result is 0, -EAGAIN or -EBADMSG; on 0 the status is 100..999, the
 * excerpt is NUL-terminated, at most HL_HTTP_EXCERPT_MAX bytes and printable; on an error the
 * output is untouched; once a prefix parses, the longer ones keep the status.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "http_response.h"

static void check_one(const uint8_t *data, size_t size, int *status)
{
	hl_http_response r;
	memset(&r, 0xa5, sizeof(r));
	int k = hl_http_response_parse((const char *)data, size, &r);

	FUZZ_CHECK(k == 0 || k == -EAGAIN || k == -EBADMSG);
	if (k != 0) {
		FUZZ_CHECK(((const unsigned char *)&r)[0] == 0xa5);
		return;
	}
	FUZZ_CHECK(r.status >= 100 && r.status <= 999 && r.head_done);
	FUZZ_CHECK(r.excerpt_len <= HL_HTTP_EXCERPT_MAX && strlen(r.excerpt) == r.excerpt_len);
	for (size_t i = 0; i < r.excerpt_len; i++)
		FUZZ_CHECK(r.excerpt[i] >= ' ' && r.excerpt[i] < 0x7f);
	FUZZ_CHECK(*status == 0 || *status == r.status);
	*status = r.status;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int status = 0;

	if (size > 3 * HL_HTTP_HEAD_MAX)
		return 0;
	for (size_t n = 0; n <= size; n += 1 + n / 8)
		check_one(data, n, &status);
	check_one(data, size, &status);
	return 0;
}
