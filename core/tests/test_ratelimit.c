/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dp/ratelimit.h"

#define SEC 1000000ull

/* The first burst events of a window pass; the rest are counted until the window closes. */
static void test_burst_then_suppressed(void **state)
{
	dp_ratelimit rl = DP_RATELIMIT_INIT(SEC, 3);
	uint64_t t = 5 * SEC;

	for (int i = 0; i < 3; i++)
		assert_true(dp_ratelimit_pass(&rl, t + (uint64_t)i));
	for (int i = 0; i < 997; i++)
		assert_false(dp_ratelimit_pass(&rl, t + 10 + (uint64_t)i));
	assert_int_equal(dp_ratelimit_end(&rl), t + SEC);
	assert_int_equal(dp_ratelimit_closed(&rl, t + SEC - 1), 0); /* still open */
	assert_int_equal(dp_ratelimit_closed(&rl, t + SEC), 997);
	assert_int_equal(dp_ratelimit_closed(&rl, t + SEC), 0); /* taken once */
	assert_int_equal(dp_ratelimit_end(&rl), 0);
	assert_true(dp_ratelimit_pass(&rl, t + SEC + 1)); /* a new window */
	assert_int_equal(dp_ratelimit_end(&rl), t + 2 * SEC + 1);
}

/* Nothing passes after a window that suppressed events closed until its count is taken. */
static void test_summary_owed_first(void **state)
{
	dp_ratelimit rl = DP_RATELIMIT_INIT(SEC, 1);

	assert_true(dp_ratelimit_pass(&rl, 100));
	assert_false(dp_ratelimit_pass(&rl, 200));
	assert_false(dp_ratelimit_pass(&rl, 100 + 2 * SEC));
	assert_int_equal(dp_ratelimit_closed(&rl, 100 + 2 * SEC), 1);
	assert_true(dp_ratelimit_pass(&rl, 100 + 2 * SEC));
}

/* A window without suppressed events simply ends; time 0 still opens one. */
static void test_quiet_windows(void **state)
{
	dp_ratelimit rl = DP_RATELIMIT_INIT(SEC, 2);

	assert_true(dp_ratelimit_pass(&rl, 0));
	assert_true(dp_ratelimit_pass(&rl, 1));
	assert_false(dp_ratelimit_pass(&rl, 2));
	assert_int_equal(dp_ratelimit_closed(&rl, SEC + 1), 1);
	for (uint64_t w = 2; w < 10; w++) {
		assert_true(dp_ratelimit_pass(&rl, w * SEC));
		assert_int_equal(dp_ratelimit_closed(&rl, w * SEC + SEC), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_then_suppressed),
		cmocka_unit_test(test_summary_owed_first),
		cmocka_unit_test(test_quiet_windows),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
