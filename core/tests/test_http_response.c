/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The helpers' HTTP/1.1 answer parser: what it reports for well-formed answers (Content-Length,
 * chunked, read to the end, interim 1xx, bodies cut short) and that every malformed or oversized
 * header block is -EBADMSG with nothing written; the whole body decoded once all there, and
 * refused (nothing written) when cut short, malformed or over its bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "dp/http_response.h"

static int parse(const char *s, dp_http_response *r)
{
	return dp_http_response_parse(s, strlen(s), r);
}

static void test_content_length(void **state)
{
	dp_http_response r;
	assert_int_equal(parse("HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
			       "Content-Length: 5\r\n\r\n{\"a\":PAST", &r), 0);
	assert_int_equal(r.status, 500);
	assert_true(r.head_done && r.body_done);
	assert_string_equal(r.excerpt, "{\"a\":");
	assert_int_equal(parse("HTTP/1.1 200 OK\r\ncontent-length:  10 \r\n\r\nabc", &r), 0);
	assert_false(r.body_done); /* 3 of 10 bytes at hand */
	assert_string_equal(r.excerpt, "abc");
}

static void test_chunked(void **state)
{
	dp_http_response r;
	assert_int_equal(parse("HTTP/1.1 422 Unprocessable\r\nTransfer-Encoding: chunked\r\n\r\n"
			       "4;ext=1\r\nab\r\n\r\n3\r\ncde\r\n0\r\n\r\n", &r), 0);
	assert_int_equal(r.status, 422);
	assert_true(r.body_done);
	assert_string_equal(r.excerpt, "ab..cde"); /* CR LF inside the data shown as dots */
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nab", &r), 0);
	assert_false(r.body_done);
	assert_string_equal(r.excerpt, "ab");
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", &r), -EBADMSG);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", &r), -EBADMSG);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\n", &r),
			 -EBADMSG);
}

static void test_until_close_and_no_body(void **state)
{
	dp_http_response r;
	assert_int_equal(parse("HTTP/1.0 403 Forbidden\r\n\r\n\x01\x7f\xff ok", &r), 0);
	assert_int_equal(r.status, 403);
	assert_false(r.body_done); /* ends with the connection */
	assert_string_equal(r.excerpt, "... ok");
	assert_int_equal(parse("HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", &r), 0);
	assert_true(r.body_done);
	assert_string_equal(r.excerpt, "");
}

static void test_interim(void **state)
{
	dp_http_response r;
	assert_int_equal(parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", &r), 0);
	assert_int_equal(r.status, 201);
	assert_string_equal(r.excerpt, "{}");
	assert_int_equal(parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 2", &r), -EAGAIN);
}

static void test_excerpt_bounded(void **state)
{
	char *s = malloc(8192);
	dp_http_response r;
	assert_non_null(s);
	strcpy(s, "HTTP/1.1 500 x\r\n\r\n");
	memset(s + strlen(s), 'y', 4000);
	s[18 + 4000] = '\0';
	assert_int_equal(parse(s, &r), 0);
	assert_int_equal(r.excerpt_len, DP_HTTP_EXCERPT_MAX);
	assert_int_equal(strlen(r.excerpt), DP_HTTP_EXCERPT_MAX);
	free(s);
}

static void test_incomplete(void **state)
{
	dp_http_response r = { .status = 77 };
	assert_int_equal(parse("", &r), -EAGAIN);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", &r), -EAGAIN);
	assert_int_equal(r.status, 77); /* nothing written */
}

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 099 x\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n",
		"SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
		"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n", "HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 9999999999999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dp_http_response r = { .status = 77 };
		if (parse(bad[i], &r) != -EBADMSG)
			fail_msg("accepted: %s", bad[i]);
		assert_int_equal(r.status, 77);
	}
	/* a NUL inside the header block */
	static const char nul[] = "HTTP/1.1 200 OK\r\nA: \0b\r\n\r\n";
	dp_http_response r;
	assert_int_equal(dp_http_response_parse(nul, sizeof(nul) - 1, &r), -EBADMSG);
}

static void test_head_too_long(void **state)
{
	size_t n = DP_HTTP_HEAD_MAX + 64;
	char *s = malloc(n + 1);
	dp_http_response r;
	assert_non_null(s);
	strcpy(s, "HTTP/1.1 200 OK\r\nX: ");
	memset(s + strlen(s), 'a', n - strlen(s));
	s[n] = '\0';
	assert_int_equal(parse(s, &r), -EBADMSG);
	free(s);
}

/* dp_http_response_body of s: its errno, or 0 with the body compared to want. */
static int body(const char *s, bool eof, size_t max, const char *want)
{
	char *b = (char *)"untouched";
	size_t n = 7;
	int k = dp_http_response_body(s, strlen(s), eof, max, &b, &n);
	if (k < 0) {
		assert_string_equal(b, "untouched");
		assert_int_equal(n, 7);
		return k;
	}
	assert_int_equal(n, strlen(want));
	assert_memory_equal(b, want, n);
	assert_int_equal(b[n], '\0');
	free(b);
	return 0;
}

static void test_body_whole(void **state)
{
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}", false, 100, "{\"a\":1}"), 0);
	/* bytes after a Content-Length body are not its */
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}garbage", false, 100, "{}"), 0);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "3\r\n{\"a\r\n4;ext=1\r\n\":1}\r\n0\r\n\r\n", false, 100, "{\"a\":1}"), 0);
	assert_int_equal(body("HTTP/1.1 200 OK\r\n\r\nto the end", true, 100, "to the end"), 0);
	assert_int_equal(body("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", false, 100, ""), 0);
}

static void test_body_incomplete(void **state)
{
	const char *part = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\"";
	const char *chunk = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n";
	assert_int_equal(body(part, false, 100, NULL), -EAGAIN);
	assert_int_equal(body(part, true, 100, NULL), -EBADMSG);
	assert_int_equal(body(chunk, false, 100, NULL), -EAGAIN);
	assert_int_equal(body(chunk, true, 100, NULL), -EBADMSG); /* no last chunk */
	assert_int_equal(body("HTTP/1.1 200 OK\r\n\r\nuntil close", false, 100, NULL), -EAGAIN);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-", false, 100, NULL), -EAGAIN);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-", true, 100, NULL), -EBADMSG);
}

static void test_body_refused(void **state)
{
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-Length: 101\r\n\r\n", false, 100, NULL), -EFBIG);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "6\r\n123456\r\n0\r\n\r\n", false, 5, NULL), -EFBIG);
	assert_int_equal(body("HTTP/1.1 200 OK\r\n\r\n123456", true, 5, NULL), -EFBIG);
	/* a chunk's data not followed by CRLF, a bad size */
	assert_int_equal(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "2\r\nabc\r\n0\r\n\r\n", false, 100, NULL), -EBADMSG);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "zz\r\nab\r\n0\r\n\r\n", false, 100, NULL), -EBADMSG);
	assert_int_equal(body("HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", false, 100,
			      NULL), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_content_length), cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_until_close_and_no_body), cmocka_unit_test(test_interim),
		cmocka_unit_test(test_excerpt_bounded), cmocka_unit_test(test_incomplete),
		cmocka_unit_test(test_malformed), cmocka_unit_test(test_head_too_long),
		cmocka_unit_test(test_body_whole), cmocka_unit_test(test_body_incomplete),
		cmocka_unit_test(test_body_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
