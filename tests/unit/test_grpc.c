/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "../../core/src/grpc_internal.h"

/* ---- grpc-timeout parsing ---- */

static int parse(const char *s, uint64_t *ret)
{
	return dp_grpc_parse_timeout(s, strlen(s), ret);
}

static void test_timeout_parse_units(void **state)
{
	static const struct {
		const char *s;
		uint64_t usec;
	} cases[] = {
		{ "1H", 3600ULL * 1000000 },  { "2M", 120ULL * 1000000 }, { "3S", 3000000 },
		{ "4m", 4000 },               { "5u", 5 },                { "6000n", 6 },
		{ "0S", 0 },                  { "00000001S", 1000000 },   { "30000000u", 30000000 },
		{ "99999999H", 99999999ULL * 3600 * 1000000 },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		uint64_t v = 12345;
		assert_int_equal(parse(cases[i].s, &v), 0);
		if (v != cases[i].usec)
			fail_msg("%s -> %llu, want %llu", cases[i].s, (unsigned long long)v,
				 (unsigned long long)cases[i].usec);
	}
}

static void test_timeout_parse_nanos_round_up(void **state)
{
	uint64_t v;

	assert_int_equal(parse("1n", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(parse("999n", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(parse("1000n", &v), 0);
	assert_int_equal(v, 1);
	assert_int_equal(parse("1001n", &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(parse("0n", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(parse("99999999n", &v), 0);
	assert_int_equal(v, 100000);
}

static void test_timeout_parse_rejects(void **state)
{
	static const char *const bad[] = {
		"",          "S",        "1",         "10",       "123456789S", "1x",
		"1s",        "1h",       "+1S",       "-1S",      " 1S",        "1 S",
		"1S ",       "0x1S",     "1.5S",      "1SS",      "S1",         "1\x00S",
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		uint64_t v = 777;
		size_t len = strlen(bad[i]);
		if (i == DP_ELEMENTSOF(bad) - 1)
			len = 3; /* embedded NUL */
		if (dp_grpc_parse_timeout(bad[i], len, &v) != -EINVAL)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(v, 777); /* untouched on failure */
	}
	assert_int_equal(dp_grpc_parse_timeout(NULL, 0, &(uint64_t){ 0 }), -EINVAL);
	/* length is honoured: "1S" inside a longer buffer */
	uint64_t v;
	assert_int_equal(dp_grpc_parse_timeout("1Sxyz", 2, &v), 0);
	assert_int_equal(v, 1000000);
	/* 8 digits is the limit, 9 are rejected whatever the value */
	assert_int_equal(parse("12345678m", &v), 0);
	assert_int_equal(v, 12345678ULL * 1000);
	assert_int_equal(parse("000000001m", &v), -EINVAL);
}

/* ---- grpc-timeout formatting ---- */

static void test_timeout_format_values(void **state)
{
	static const struct {
		uint64_t usec;
		const char *s;
	} cases[] = {
		{ 0, "0n" },
		{ 1, "1000n" },
		{ 99999, "99999000n" },
		{ 100000, "100000u" },
		{ 30ULL * 1000000, "30000000u" },
		{ 99999999ULL, "99999999u" },
		{ 100000000ULL, "100000m" },
		{ 100000001ULL, "100001m" }, /* rounded up, never shorter */
		{ 99999999ULL * 1000, "99999999m" },
		{ 99999999ULL * 1000 + 1, "100000S" },
		{ 3600ULL * 1000000 * 100000, "6000000M" }, /* 10^5 hours: fits 8 digits as minutes */
		{ 99999999ULL * 60 * 1000000, "99999999M" },
		{ 99999999ULL * 60 * 1000000 + 1, "1666667H" },
		{ UINT64_MAX, "99999999H" },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		char buf[16];
		dp_grpc_format_timeout(cases[i].usec, buf);
		if (strcmp(buf, cases[i].s) != 0)
			fail_msg("%llu -> %s, want %s", (unsigned long long)cases[i].usec, buf, cases[i].s);
	}
}

static void test_timeout_format_roundtrip(void **state)
{
	uint64_t vals[] = { 1,          7,           999,         1000,        12345,
			    999999,     1000000,     10000000,    123456789,   3600000000ULL,
			    86400000000ULL, 987654321012ULL, 99999999ULL * 60 * 1000000 + 5 };
	for (size_t i = 0; i < DP_ELEMENTSOF(vals); i++) {
		char buf[16];
		uint64_t back;
		dp_grpc_format_timeout(vals[i], buf);
		assert_true(strlen(buf) >= 2 && strlen(buf) <= 9);
		assert_int_equal(parse(buf, &back), 0);
		assert_true(back >= vals[i]);
		/* at most one unit of the chosen resolution above: the coarser unit is only taken when
		 * the finer value exceeded 8 digits, so the value has >= 10^5 units (1e-5 relative) */
		assert_true(back - vals[i] <= vals[i] / 100000 + 1);
	}
}

/* ---- percent-encoding ---- */

static void test_percent_encode(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", "" },
		{ "plain text, with spaces!", "plain text, with spaces!" },
		{ "~ and ` pass", "~ and ` pass" },
		{ "100%", "100%25" },
		{ "a\nb\tc\r", "a%0Ab%09c%0D" },
		{ "\x7f\x01", "%7F%01" },
		{ "caf\xc3\xa9 \xe2\x82\xac", "caf%C3%A9 %E2%82%AC" },
		{ "\xff", "%FF" },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		char *e = dp_grpc_percent_encode(cases[i].in);
		assert_non_null(e);
		assert_string_equal(e, cases[i].out);
		free(e);
	}
}

static void test_percent_decode(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "", "" },
		{ "no escapes", "no escapes" },
		{ "100%25", "100%" },
		{ "caf%C3%A9", "caf\xc3\xa9" },
		{ "lower%c3%a9", "lower\xc3\xa9" },
		{ "bad %zz kept", "bad %zz kept" },
		{ "half %4", "half %4" },
		{ "trailing %", "trailing %" },
		{ "%%41", "%A" },
		{ "%g1%1g", "%g1%1g" },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		char *d = dp_grpc_percent_decode(cases[i].in, strlen(cases[i].in));
		assert_non_null(d);
		assert_string_equal(d, cases[i].out);
		free(d);
	}
	/* len is honoured (no NUL needed): "%4" cut from "%41" stays verbatim */
	char *d = dp_grpc_percent_decode("%41", 2);
	assert_string_equal(d, "%4");
	free(d);
}

static void test_percent_roundtrip_all_bytes(void **state)
{
	char in[256];
	for (int i = 1; i < 256; i++)
		in[i - 1] = (char)i;
	in[255] = '\0';
	char *e = dp_grpc_percent_encode(in);
	assert_non_null(e);
	for (const char *p = e; *p; p++)
		assert_true(*p >= 0x20 && *p <= 0x7e);
	char *d = dp_grpc_percent_decode(e, strlen(e));
	assert_string_equal(d, in);
	free(e);
	free(d);
}

/* ---- framing ---- */

struct sink {
	unsigned n;
	size_t lens[16];
	uint8_t data[16][64];
	int ret; /* returned by the callback */
};

static int sink_fn(void *ud, const uint8_t *msg, size_t len)
{
	struct sink *s = ud;
	assert_non_null(msg);
	assert_true(s->n < 16);
	s->lens[s->n] = len;
	memcpy(s->data[s->n], msg, len < 64 ? len : 64);
	s->n++;
	return s->ret;
}

static size_t frame(uint8_t *out, const char *msg, size_t len)
{
	dp_grpc_frame_header(out, len);
	memcpy(out + 5, msg, len);
	return len + 5;
}

static void test_frame_header(void **state)
{
	uint8_t h[5];
	dp_grpc_frame_header(h, 0);
	assert_memory_equal(h, "\0\0\0\0\0", 5);
	dp_grpc_frame_header(h, 0x01020304);
	assert_memory_equal(h, "\x00\x01\x02\x03\x04", 5);
	dp_grpc_frame_header(h, DP_GRPC_MAX_MESSAGE);
	assert_memory_equal(h, "\x00\x00\x40\x00\x00", 5);
}

static void test_deframer_byte_at_a_time(void **state)
{
	uint8_t buf[64];
	size_t n = frame(buf, "hello", 5);
	n += frame(buf + n, "", 0);
	n += frame(buf + n, "xy", 2);
	struct sink s = { 0 };
	dp_grpc_deframer d;

	dp_grpc_deframer_init(&d, 100);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(dp_grpc_deframer_feed(&d, buf + i, 1, sink_fn, &s), 0);
		/* idle exactly at message boundaries */
		bool boundary = i + 1 == 10 || i + 1 == 15 || i + 1 == n;
		assert_int_equal(dp_grpc_deframer_idle(&d), boundary);
	}
	assert_int_equal(s.n, 3);
	assert_int_equal(d.n_msgs, 3);
	assert_int_equal(s.lens[0], 5);
	assert_memory_equal(s.data[0], "hello", 5);
	assert_int_equal(s.lens[1], 0);
	assert_int_equal(s.lens[2], 2);
	assert_memory_equal(s.data[2], "xy", 2);
	dp_grpc_deframer_done(&d);
}

static void test_deframer_one_chunk(void **state)
{
	uint8_t buf[64];
	size_t n = frame(buf, "abc", 3);
	n += frame(buf + n, "defg", 4);
	n += frame(buf + n, "hi", 2);
	struct sink s = { 0 };
	dp_grpc_deframer d;

	dp_grpc_deframer_init(&d, 100);
	/* two and a half messages, then the rest */
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n - 1, sink_fn, &s), 0);
	assert_int_equal(s.n, 2);
	assert_false(dp_grpc_deframer_idle(&d));
	assert_int_equal(dp_grpc_deframer_feed(&d, buf + n - 1, 1, sink_fn, &s), 0);
	assert_int_equal(s.n, 3);
	assert_memory_equal(s.data[1], "defg", 4);
	assert_memory_equal(s.data[2], "hi", 2);
	assert_true(dp_grpc_deframer_idle(&d));
	dp_grpc_deframer_done(&d);
}

static void test_deframer_callback_stops(void **state)
{
	uint8_t buf[64];
	size_t n = frame(buf, "abc", 3);
	n += frame(buf + n, "def", 3);
	struct sink s = { .ret = 42 };
	dp_grpc_deframer d;

	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), 42);
	assert_int_equal(s.n, 1);
	dp_grpc_deframer_done(&d);
}

static void test_deframer_max_size(void **state)
{
	uint8_t buf[64] = { 0 };
	struct sink s = { 0 };
	dp_grpc_deframer d;

	/* exactly max: accepted */
	dp_grpc_deframer_init(&d, 16);
	dp_grpc_frame_header(buf, 16);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, 21, sink_fn, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.lens[0], 16);
	dp_grpc_deframer_done(&d);

	/* max + 1: refused from the prefix alone, nothing allocated */
	dp_grpc_deframer_init(&d, 16);
	dp_grpc_frame_header(buf, 17);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, 5, sink_fn, &s), -EMSGSIZE);
	assert_null(d.msg);
	assert_int_equal(d.msg_have, 0);
	/* sticky */
	assert_int_equal(dp_grpc_deframer_feed(&d, buf + 5, 3, sink_fn, &s), -EMSGSIZE);
	assert_int_equal(s.n, 1);
	dp_grpc_deframer_done(&d);

	/* a huge declared length with the real limit */
	dp_grpc_deframer_init(&d, DP_GRPC_MAX_MESSAGE);
	memcpy(buf, "\x00\xff\xff\xff\xff", 5);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, 5, sink_fn, &s), -EMSGSIZE);
	assert_null(d.msg);
	dp_grpc_deframer_done(&d);
	dp_grpc_deframer_init(&d, DP_GRPC_MAX_MESSAGE);
	dp_grpc_frame_header(buf, DP_GRPC_MAX_MESSAGE + 1);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, 5, sink_fn, &s), -EMSGSIZE);
	dp_grpc_deframer_done(&d);
}

static void test_deframer_flags(void **state)
{
	uint8_t buf[16];
	struct sink s = { 0 };
	dp_grpc_deframer d;

	size_t n = frame(buf, "z", 1);
	buf[0] = 1;
	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), -EPROTONOSUPPORT);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), -EPROTONOSUPPORT);
	dp_grpc_deframer_done(&d);

	buf[0] = 2;
	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), -EBADMSG);
	dp_grpc_deframer_done(&d);

	buf[0] = 0x80;
	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), -EBADMSG);
	dp_grpc_deframer_done(&d);
	assert_int_equal(s.n, 0);

	/* done() resets an errored deframer for reuse */
	buf[0] = 0;
	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, n, sink_fn, &s), 0);
	assert_int_equal(s.n, 1);
	dp_grpc_deframer_done(&d);
}

static void test_deframer_partial_freed(void **state)
{
	uint8_t buf[16];
	dp_grpc_deframer d;

	frame(buf, "partial", 7);
	dp_grpc_deframer_init(&d, 100);
	assert_int_equal(dp_grpc_deframer_feed(&d, buf, 8, NULL, NULL), 0);
	assert_false(dp_grpc_deframer_idle(&d));
	assert_non_null(d.msg);
	dp_grpc_deframer_done(&d); /* frees the partial message (ASan checks the leak) */
	assert_null(d.msg);
	assert_true(dp_grpc_deframer_idle(&d));
}

/* ---- internal helpers ---- */

static void test_content_type(void **state)
{
	static const char *const ok[] = { "application/grpc", "application/grpc+proto",
					  "application/grpc;charset=utf-8", "Application/GRPC" };
	static const char *const bad[] = { "", "application/json", "application/grpcx",
					   "application/grp", "text/plain", "application/grpc-web" };
	for (size_t i = 0; i < DP_ELEMENTSOF(ok); i++)
		assert_true(dp_grpc_content_type_ok((const uint8_t *)ok[i], strlen(ok[i])));
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++)
		assert_false(dp_grpc_content_type_ok((const uint8_t *)bad[i], strlen(bad[i])));
}

static void test_parse_status(void **state)
{
	int st = -1;
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"0", 1, &st), 0);
	assert_int_equal(st, 0);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"14", 2, &st), 0);
	assert_int_equal(st, 14);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"2147483647", 10, &st), 0);
	assert_int_equal(st, 2147483647);
	st = -1;
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"2147483648", 10, &st), -EINVAL);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"", 0, &st), -EINVAL);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"-1", 2, &st), -EINVAL);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)"1a", 2, &st), -EINVAL);
	assert_int_equal(dp_grpc_parse_status((const uint8_t *)" 1", 2, &st), -EINVAL);
	assert_int_equal(st, -1);
}

static void test_status_maps(void **state)
{
	assert_string_equal(dp_grpc_status_name(DP_GRPC_OK), "OK");
	assert_string_equal(dp_grpc_status_name(DP_GRPC_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
	assert_string_equal(dp_grpc_status_name(DP_GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
	assert_string_equal(dp_grpc_status_name(17), "INVALID_STATUS");
	assert_string_equal(dp_grpc_status_name(-1), "INVALID_STATUS");
	for (int i = 0; i <= 16; i++)
		assert_string_not_equal(dp_grpc_status_name(i), "INVALID_STATUS");

	assert_int_equal(dp_grpc_status_from_http(404), DP_GRPC_UNIMPLEMENTED);
	assert_int_equal(dp_grpc_status_from_http(503), DP_GRPC_UNAVAILABLE);
	assert_int_equal(dp_grpc_status_from_http(415), DP_GRPC_UNKNOWN);
	assert_int_equal(dp_grpc_status_from_http(400), DP_GRPC_INTERNAL);
	assert_int_equal(dp_grpc_status_from_rst(8), DP_GRPC_CANCELLED);
	assert_int_equal(dp_grpc_status_from_rst(7), DP_GRPC_UNAVAILABLE);
	assert_int_equal(dp_grpc_status_from_rst(11), DP_GRPC_RESOURCE_EXHAUSTED);
	assert_int_equal(dp_grpc_status_from_rst(1), DP_GRPC_INTERNAL);
	assert_string_equal(dp_grpc_h2_error_name(8), "CANCEL");
	assert_string_equal(dp_grpc_h2_error_name(99), "UNKNOWN");
}

#define PURE_TESTS                                                  \
	cmocka_unit_test(test_timeout_parse_units),                 \
	cmocka_unit_test(test_timeout_parse_nanos_round_up),        \
	cmocka_unit_test(test_timeout_parse_rejects),               \
	cmocka_unit_test(test_timeout_format_values),               \
	cmocka_unit_test(test_timeout_format_roundtrip),            \
	cmocka_unit_test(test_percent_encode),                      \
	cmocka_unit_test(test_percent_decode),                      \
	cmocka_unit_test(test_percent_roundtrip_all_bytes),         \
	cmocka_unit_test(test_frame_header),                        \
	cmocka_unit_test(test_deframer_byte_at_a_time),             \
	cmocka_unit_test(test_deframer_one_chunk),                  \
	cmocka_unit_test(test_deframer_callback_stops),             \
	cmocka_unit_test(test_deframer_max_size),                   \
	cmocka_unit_test(test_deframer_flags),                      \
	cmocka_unit_test(test_deframer_partial_freed),              \
	cmocka_unit_test(test_content_type),                        \
	cmocka_unit_test(test_parse_status),                        \
	cmocka_unit_test(test_status_maps)

int main(void)
{
	const struct CMUnitTest tests[] = {
		PURE_TESTS,
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
