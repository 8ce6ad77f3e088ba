/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/env.h"

#define VAR "DP_TEST_ENV_VALUE"

static void test_parse_accepts(void **state)
{
	uint64_t v = 0;

	assert_int_equal(dp_parse_u64("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(dp_parse_u64("12345", 1, 12345, &v), 0);
	assert_int_equal(v, 12345);
	assert_int_equal(dp_parse_u64("007", 0, 100, &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(dp_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(dp_parse_u64("42", 0, 100, NULL), 0); /* validate only */
}

static void test_parse_rejects(void **state)
{
	static const char *const bad[] = {
		"", " 1", "1 ", "+1", "-1", "0x10", "12a", "1.5", "1e3", "１", "1\n", "\t7", "--",
	};
	uint64_t v = 99;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(dp_parse_u64(bad[i], 0, UINT64_MAX, &v), -EINVAL);
		assert_int_equal(v, 99); /* untouched */
	}
	assert_int_equal(dp_parse_u64(NULL, 0, 10, &v), -EINVAL);
	assert_int_equal(dp_parse_u64("5", 10, 1, &v), -EINVAL); /* min > max */
	assert_int_equal(dp_parse_u64("0", 1, 10, &v), -ERANGE);
	assert_int_equal(dp_parse_u64("11", 1, 10, &v), -ERANGE);
	assert_int_equal(dp_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(dp_parse_u64("99999999999999999999999", 0, UINT64_MAX, &v), -ERANGE);
	/* Garbage after an overflowing prefix is still "not a number". */
	assert_int_equal(dp_parse_u64("99999999999999999999999x", 0, UINT64_MAX, &v), -EINVAL);
	assert_int_equal(v, 99);
}

static void test_env_unset_uses_default(void **state)
{
	char err[128] = "untouched";
	uint64_t v = 0;
	uint32_t w = 0;

	unsetenv(VAR);
	assert_int_equal(dp_env_u64(VAR, 2000, 1, 12345, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 2000);
	assert_int_equal(dp_env_u32(VAR, 65534, 0, UINT32_MAX, &w, err, sizeof(err)), 0);
	assert_int_equal(w, 65534);
	assert_string_equal(err, "untouched");
}

static void test_env_valid(void **state)
{
	char err[128] = "";
	uint64_t v = 0;
	uint32_t w = 0;

	setenv(VAR, "0042", 1);
	assert_int_equal(dp_env_u64(VAR, 1, 1, 12345, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 42);
	setenv(VAR, "4294967295", 1);
	assert_int_equal(dp_env_u32(VAR, 1, 0, UINT32_MAX, &w, err, sizeof(err)), 0);
	assert_true(w == UINT32_MAX);
	unsetenv(VAR);
}

static void expect_error(const char *value, int code, const char *msg)
{
	char err[256] = "";
	uint64_t v = 77;

	setenv("DEVICE_COUNT", value, 1);
	assert_int_equal(dp_env_u64("DEVICE_COUNT", 5, 1, 12345, &v, err, sizeof(err)), code);
	assert_int_equal(v, 77);
	assert_string_equal(err, msg);
	unsetenv("DEVICE_COUNT");
}

static void test_env_messages(void **state)
{
	expect_error("12a", -EINVAL, "DEVICE_COUNT=\"12a\" is not a decimal integer");
	expect_error("", -EINVAL, "DEVICE_COUNT=\"\" is not a decimal integer");
	expect_error(" 12", -EINVAL, "DEVICE_COUNT=\" 12\" is not a decimal integer");
	/* A negative number is one, below the range (the code stays -EINVAL: not an unsigned). */
	expect_error("-1", -EINVAL, "DEVICE_COUNT=-1 is negative: out of range 1..12345");
	expect_error("-5", -EINVAL, "DEVICE_COUNT=-5 is negative: out of range 1..12345");
	expect_error("-", -EINVAL, "DEVICE_COUNT=\"-\" is not a decimal integer");
	expect_error("-5x", -EINVAL, "DEVICE_COUNT=\"-5x\" is not a decimal integer");
	expect_error("--5", -EINVAL, "DEVICE_COUNT=\"--5\" is not a decimal integer");
	expect_error("0x10", -EINVAL, "DEVICE_COUNT=\"0x10\" is not a decimal integer");
	expect_error("a\"b\\c\nd\te\x01", -EINVAL,
		     "DEVICE_COUNT=\"a\\\"b\\\\c\\nd\\te\\x01\" is not a decimal integer");
	expect_error("0", -ERANGE, "DEVICE_COUNT=0 is out of range 1..12345");
	expect_error("12346", -ERANGE, "DEVICE_COUNT=12346 is out of range 1..12345");
	expect_error("99999999999999999999", -ERANGE,
		     "DEVICE_COUNT=99999999999999999999 is out of range 1..12345");
}

static void test_env_long_value_cut(void **state)
{
	char value[300], err[512] = "";
	uint64_t v;

	memset(value, 'x', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	setenv(VAR, value, 1);
	assert_int_equal(dp_env_u64(VAR, 1, 0, 10, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "...\" is not a decimal integer"));
	assert_true(strlen(err) < 120);

	/* A small err buffer is filled safely. */
	char small[16];
	assert_int_equal(dp_env_u64(VAR, 1, 0, 10, &v, small, sizeof(small)), -EINVAL);
	assert_int_equal(strlen(small), sizeof(small) - 1);
	assert_memory_equal(small, VAR, sizeof(small) - 1);
	/* No err buffer at all. */
	assert_int_equal(dp_env_u64(VAR, 1, 0, 10, &v, NULL, 0), -EINVAL);
	unsetenv(VAR);
}

static void test_env_u32_range(void **state)
{
	char err[128] = "";
	uint32_t w = 3;

	setenv("DEVICE_UID", "4294967296", 1);
	assert_int_equal(dp_env_u32("DEVICE_UID", 0, 0, UINT32_MAX, &w, err, sizeof(err)), -ERANGE);
	assert_string_equal(err, "DEVICE_UID=4294967296 is out of range 0..4294967295");
	assert_int_equal(w, 3);
	unsetenv("DEVICE_UID");
	assert_int_equal(dp_env_u32(NULL, 0, 0, 1, &w, NULL, 0), -EINVAL);
	assert_int_equal(dp_env_u32("X", 0, 0, 1, NULL, NULL, 0), -EINVAL);
}

/* dp_env_quote, as hyperlight's DEVICE_MODE message uses it: the same quoting as above, and a
 * value of 64 bytes or more, each needing the longest escape, still fits DP_ENV_QUOTED_SIZE. */
static void test_env_quote(void **state)
{
	char q[DP_ENV_QUOTED_SIZE], value[300];

	dp_env_quote(q, sizeof(q), "0o660");
	assert_string_equal(q, "\"0o660\"");
	dp_env_quote(q, sizeof(q), "");
	assert_string_equal(q, "\"\"");
	dp_env_quote(q, sizeof(q), "a\"b\\c\nd\te\x01");
	assert_string_equal(q, "\"a\\\"b\\\\c\\nd\\te\\x01\"");
	memset(value, 0x01, sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	dp_env_quote(q, sizeof(q), value);
	assert_int_equal(strlen(q), 1 + 64 * 4 + 3 + 1);
	assert_memory_equal(q + strlen(q) - 8, "\\x01...\"", 8);
}

/* PLUGIN_API: unset, "", device-plugin and dra accepted; anything else refused with its value
 * quoted, the output untouched. */
static void test_plugin_api(void **state)
{
	char err[300] = "";
	bool dra = true;

	unsetenv("PLUGIN_API");
	assert_int_equal(dp_env_plugin_api(&dra, err, sizeof(err)), 0);
	assert_false(dra);
	setenv("PLUGIN_API", "dra", 1);
	assert_int_equal(dp_env_plugin_api(&dra, err, sizeof(err)), 0);
	assert_true(dra);
	setenv("PLUGIN_API", "", 1);
	assert_int_equal(dp_env_plugin_api(&dra, err, sizeof(err)), 0);
	assert_false(dra);
	setenv("PLUGIN_API", "dra", 1);
	assert_int_equal(dp_env_plugin_api(&dra, NULL, 0), 0);
	setenv("PLUGIN_API", "device-plugin", 1);
	assert_int_equal(dp_env_plugin_api(&dra, err, sizeof(err)), 0);
	assert_false(dra);
	assert_string_equal(err, "");
	dra = true;
	for (const char *bad[] = { "DRA", "devicePlugin", "dra ", "dra\n" }, **b = bad; b < bad + 4; b++) {
		setenv("PLUGIN_API", *b, 1);
		assert_int_equal(dp_env_plugin_api(&dra, err, sizeof(err)), -EINVAL);
		assert_true(dra);
	}
	assert_string_equal(err, "PLUGIN_API=\"dra\\n\" is neither device-plugin nor dra");
	assert_int_equal(dp_env_plugin_api(&dra, NULL, 0), -EINVAL);
	unsetenv("PLUGIN_API");
}

static void test_hex_digit(void **state)
{
	const char *digits = "0123456789abcdef", *upper = "ABCDEF";

	for (int i = 0; i < 16; i++)
		assert_int_equal(dp_hex_digit(digits[i]), i);
	for (int i = 0; i < 6; i++)
		assert_int_equal(dp_hex_digit(upper[i]), 10 + i);
	assert_int_equal(dp_hex_digit('g'), -1);
	assert_int_equal(dp_hex_digit('G'), -1);
	assert_int_equal(dp_hex_digit('/'), -1);
	assert_int_equal(dp_hex_digit(':'), -1);
	assert_int_equal(dp_hex_digit('@'), -1);
	assert_int_equal(dp_hex_digit('`'), -1);
	assert_int_equal(dp_hex_digit('\0'), -1);
	assert_int_equal(dp_hex_digit('x'), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_accepts),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_env_unset_uses_default),
		cmocka_unit_test(test_env_valid),
		cmocka_unit_test(test_env_messages),
		cmocka_unit_test(test_env_long_value_cut),
		cmocka_unit_test(test_env_u32_range),
		cmocka_unit_test(test_env_quote),
		cmocka_unit_test(test_hex_digit),
		cmocka_unit_test(test_plugin_api),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
