/* SPDX-License-Identifier: Apache-2.0 */
/* pbwire: the wire reader against protobuf-c's own encoding, and every malformed shape. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "api.pb-c.h"
#include "requests/pbwire.h"

static int next(const uint8_t *data, size_t len, dp_pbfield *f)
{
	dp_pbreader r;
	dp_pb_reader_init(&r, data, len);
	return dp_pb_next(&r, f);
}

static void reads_protobuf_c_encoding(void **state)
{
	char *avail[] = { "a", "bb" }, *must[] = { "ccc" };
	V1beta1__ContainerPreferredAllocationRequest c = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT;
	c.available_deviceids = avail;
	c.n_available_deviceids = 2;
	c.must_include_deviceids = must;
	c.n_must_include_deviceids = 1;
	c.allocation_size = -2;
	uint8_t buf[128];
	size_t len = v1beta1__container_preferred_allocation_request__pack(&c, buf);

	dp_pbreader r;
	dp_pbfield f;
	dp_pb_reader_init(&r, buf, len);
	const char *want[] = { "a", "bb", "ccc" };
	uint32_t numbers[] = { 1, 1, 2 };
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(dp_pb_next(&r, &f), 1);
		assert_int_equal(f.number, numbers[i]);
		assert_int_equal(f.wire, DP_PB_LEN);
		assert_int_equal(f.len, strlen(want[i]));
		assert_memory_equal(f.data, want[i], f.len);
	}
	assert_int_equal(dp_pb_next(&r, &f), 1);
	assert_int_equal(f.number, 3);
	assert_int_equal(f.wire, DP_PB_VARINT);
	assert_int_equal((int32_t)(uint32_t)f.varint, -2); /* int32 -2: a 10-byte varint */
	assert_int_equal(dp_pb_next(&r, &f), 0);
	assert_int_equal(dp_pb_offset(&r), len);
	assert_int_equal(dp_pb_next(&r, &f), 0);
}

static void fixed_and_varint_fields(void **state)
{
	dp_pbfield f;
	const uint8_t i64[] = { 0x09, 1, 2, 3, 4, 5, 6, 7, 8 }; /* field 1, wire 1 */
	assert_int_equal(next(i64, sizeof(i64), &f), 1);
	assert_int_equal(f.wire, DP_PB_I64);
	assert_int_equal(f.len, 8);
	assert_ptr_equal(f.data, i64 + 1);
	const uint8_t i32[] = { 0x15, 1, 2, 3, 4 }; /* field 2, wire 5 */
	assert_int_equal(next(i32, sizeof(i32), &f), 1);
	assert_int_equal(f.number, 2);
	assert_int_equal(f.wire, DP_PB_I32);
	assert_int_equal(f.len, 4);
	const uint8_t max[] = { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
	assert_int_equal(next(max, sizeof(max), &f), 1);
	assert_true(f.varint == UINT64_MAX);
	/* a non-canonical varint (0 in 3 bytes) is still 0 */
	const uint8_t padded[] = { 0x08, 0x80, 0x80, 0x00 };
	assert_int_equal(next(padded, sizeof(padded), &f), 1);
	assert_true(f.varint == 0);
	/* the largest field number, tag in 5 bytes */
	const uint8_t big[] = { 0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00 };
	assert_int_equal(next(big, sizeof(big), &f), 1);
	assert_int_equal(f.number, (1u << 29) - 1);
	const uint8_t empty_len[] = { 0x0a, 0x00 };
	assert_int_equal(next(empty_len, sizeof(empty_len), &f), 1);
	assert_int_equal(f.len, 0);
}

static void malformed(void **state)
{
	dp_pbfield f;
	static const struct {
		const char *what;
		uint8_t bytes[12];
		size_t len;
	} cases[] = {
		{ "field number 0", { 0x02, 0x00 }, 2 },
		{ "group start", { 0x0b }, 1 },
		{ "group end", { 0x0c }, 1 },
		{ "wire type 6", { 0x0e }, 1 },
		{ "wire type 7", { 0x0f }, 1 },
		{ "truncated tag", { 0x88 }, 1 },
		{ "tag of 6 bytes", { 0x88, 0x80, 0x80, 0x80, 0x80, 0x00 }, 6 },
		{ "tag beyond 32 bits", { 0x88, 0x80, 0x80, 0x80, 0x10, 0x00 }, 6 },
		{ "truncated varint", { 0x08, 0x80 }, 2 },
		{ "varint of 11 bytes", { 0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00 }, 12 },
		{ "varint beyond 64 bits", { 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02 }, 11 },
		{ "length beyond the end", { 0x0a, 0x03, 'a', 'b' }, 4 },
		{ "huge length", { 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 'a' }, 7 },
		{ "truncated 64-bit", { 0x09, 1, 2, 3, 4, 5, 6, 7 }, 8 },
		{ "truncated 32-bit", { 0x0d, 1, 2, 3 }, 4 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dp_pbreader r;
		dp_pb_reader_init(&r, cases[i].bytes, cases[i].len);
		if (dp_pb_next(&r, &f) != -EBADMSG)
			fail_msg("%s: accepted", cases[i].what);
		assert_int_equal(dp_pb_offset(&r), 0);
		assert_int_equal(dp_pb_next(&r, &f), -EBADMSG);
	}
}

static void error_offset(void **state)
{
	/* two good fields, then a truncated one: the reader stops at byte 5 */
	const uint8_t b[] = { 0x08, 0x01, 0x0a, 0x01, 'x', 0x0a, 0x05, 'y' };
	dp_pbreader r;
	dp_pbfield f;
	dp_pb_reader_init(&r, b, sizeof(b));
	assert_int_equal(dp_pb_next(&r, &f), 1);
	assert_int_equal(dp_pb_next(&r, &f), 1);
	assert_int_equal(dp_pb_next(&r, &f), -EBADMSG);
	assert_int_equal(dp_pb_offset(&r), 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reads_protobuf_c_encoding),
		cmocka_unit_test(fixed_and_varint_fields),
		cmocka_unit_test(malformed),
		cmocka_unit_test(error_offset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
