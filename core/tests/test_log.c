/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/macro.h"
#include "dp_test.h"

static struct dpt_capture cap;

static bool matches(const char *s, const char *re)
{
	regex_t rx;
	int r;

	assert_int_equal(regcomp(&rx, re, REG_EXTENDED | REG_NOSUB), 0);
	r = regexec(&rx, s, 0, NULL, 0);
	regfree(&rx);
	return r == 0;
}

static int setup(void **state)
{
	unsetenv("LOG_LEVEL");
	dp_log_set_level(DP_LOG_INFO);
	return 0;
}

#define TIME_RE "time=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z"

static void test_line_format(void **state)
{
	char q[64];
	const char *out;

	dpt_capture_start(&cap, STDERR_FILENO);
	dp_info("registered with kubelet", "resource=%s", "hyperlight.dev/hypervisor");
	dp_error("stop", "reason=%s", dp_logq(q, sizeof(q), "socket gone"));
	dp_warn("plain", NULL);
	out = dpt_capture_end(&cap);
	assert_true(matches(out, "^" TIME_RE " level=info msg=\"registered with kubelet\" "
				 "resource=hyperlight.dev/hypervisor\n" TIME_RE
				 " level=error msg=stop reason=\"socket gone\"\n" TIME_RE
				 " level=warn msg=plain\n$"));
}

static void test_levels(void **state)
{
	const char *out;

	assert_false(dp_log_enabled(DP_LOG_DEBUG));
	assert_true(dp_log_enabled(DP_LOG_INFO));
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_debug("hidden", NULL);
	dp_log_set_level(DP_LOG_ERROR);
	dp_warn("hidden too", NULL);
	dp_error("shown", NULL);
	dp_log_set_level(DP_LOG_DEBUG);
	dp_debug("now shown", "n=%d", 1);
	out = dpt_capture_end(&cap);
	assert_null(strstr(out, "hidden"));
	assert_true(matches(out, "^" TIME_RE " level=error msg=shown\n" TIME_RE
				 " level=debug msg=\"now shown\" n=1\n$"));
}

static void test_init_from_env(void **state)
{
	const char *out;

	setenv("LOG_LEVEL", "DeBuG", 1);
	assert_int_equal(dp_log_init(), 0);
	assert_true(dp_log_enabled(DP_LOG_DEBUG));

	setenv("LOG_LEVEL", "error", 1);
	assert_int_equal(dp_log_init(), 0);
	assert_false(dp_log_enabled(DP_LOG_WARN));
	assert_true(dp_log_enabled(DP_LOG_ERROR));

	setenv("LOG_LEVEL", "WARN", 1);
	assert_int_equal(dp_log_init(), 0);
	assert_false(dp_log_enabled(DP_LOG_INFO));
	assert_true(dp_log_enabled(DP_LOG_WARN));

	/* Invalid: -EINVAL, one warning naming the value, level info. */
	setenv("LOG_LEVEL", "loud noise", 1);
	dpt_capture_start(&cap, STDERR_FILENO);
	assert_int_equal(dp_log_init(), -EINVAL);
	out = dpt_capture_end(&cap);
	assert_true(matches(out, "^" TIME_RE " level=warn msg=\"[^\"]*LOG_LEVEL[^\"]*\" "
				 "value=\"loud noise\"[^\n]*\n$"));
	assert_true(dp_log_enabled(DP_LOG_INFO));
	assert_false(dp_log_enabled(DP_LOG_DEBUG));

	/* Unset keeps the default. */
	unsetenv("LOG_LEVEL");
	assert_int_equal(dp_log_init(), 0);
	assert_true(dp_log_enabled(DP_LOG_INFO));
	assert_false(dp_log_enabled(DP_LOG_DEBUG));
}

struct logq_case {
	const char *in, *want;
};

/* Each case quoted into a buffer of the given size. */
static void check_logq(size_t size, const struct logq_case *cases, size_t n)
{
	char b[64];

	assert_true(size <= sizeof(b));
	for (size_t i = 0; i < n; i++)
		assert_string_equal(dp_logq(b, size, cases[i].in), cases[i].want);
}

static void test_logq(void **state)
{
	static const struct logq_case cases[] = {
		{ "simple/value-1.0", "simple/value-1.0" },
		{ "", "\"\"" },
		{ "two words", "\"two words\"" },
		{ "a=b", "\"a=b\"" },
		{ "say \"hi\"", "\"say \\\"hi\\\"\"" },
		{ "back\\slash", "\"back\\\\slash\"" },
		{ "l1\nl2\tx", "\"l1\\nl2\\tx\"" },
		{ "bell\a\r\x7f", "\"bell\\x07\\x0d\\x7f\"" },
		{ "caf\xc3\xa9", "caf\xc3\xa9" }, /* UTF-8 kept */
		{ NULL, "(null)" },
	};

	check_logq(64, cases, DP_ELEMENTSOF(cases));
}

static void test_logq_truncation(void **state)
{
	static const struct logq_case cases[] = {
		/* Too long: cut, marked with ..., still a closed quoted value within the buffer. */
		{ "abcdefghijklmnop", "\"abcdef...\"" },
		/* An escape is never split. */
		{ "abcd\n\n\nxyz", "\"abcd\\n...\"" },
		/* A UTF-8 character is never split: "é" needs 2 bytes, only 1 would fit. */
		{ "abcde\xc3\xa9zzzzzz", "\"abcde...\"" },
		{ "abc \xc3\xa9zzzzzz", "\"abc \xc3\xa9...\"" },
		{ "abcdefgh ijk", "\"abcdef...\"" },
		/* Fits exactly without truncation: 9 bytes of content. */
		{ "abcd efgh", "\"abcd efgh\"" },
	};
	char b[12], tiny[2];

	check_logq(sizeof(b), cases, DP_ELEMENTSOF(cases));
	assert_string_equal(dp_logq(tiny, sizeof(tiny), "xyz"), "");
	assert_string_equal(dp_logq(b, 0, "x"), "");
}

static void test_long_line_truncated(void **state)
{
	static char big[20000];
	const char *out;
	size_t len;

	memset(big, 'v', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_info("long", "data=%s", big);
	dp_info("after", NULL);
	out = dpt_capture_end(&cap);
	/* Exactly two lines: the first cut with "...", the second intact. */
	const char *nl = strchr(out, '\n');
	assert_non_null(nl);
	len = (size_t)(nl - out) + 1;
	assert_true(len <= 4096);
	assert_true(len > 1000);
	assert_memory_equal(nl - 3, "...", 3);
	assert_true(matches(nl + 1, "^" TIME_RE " level=info msg=after\n$"));
}

static void test_errno_preserved(void **state)
{
	dpt_capture_start(&cap, STDERR_FILENO);
	errno = ENOTCONN;
	dp_info("x", NULL);
	assert_int_equal(errno, ENOTCONN);
	dpt_capture_end(&cap);
}

/* Error fields carry the errno's name, whatever sign the caller holds it with. */
static void test_errname(void **state)
{
	assert_string_equal(dp_errname(-ENOENT), "ENOENT");
	assert_string_equal(dp_errname(ENOENT), "ENOENT");
	assert_string_equal(dp_errname(-ECONNRESET), "ECONNRESET");
	assert_string_equal(dp_errname(0), "none");
	assert_string_equal(dp_errname(-4000), "errno4000");
	assert_non_null(dp_errname(INT_MIN));
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_info("x", "error=%s", dp_errname(-ENOENT));
	assert_true(matches(dpt_capture_end(&cap), "^" TIME_RE " level=info msg=x error=ENOENT\n$"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_line_format, setup),
		cmocka_unit_test_setup(test_levels, setup),
		cmocka_unit_test_setup(test_init_from_env, setup),
		cmocka_unit_test_setup(test_logq, setup),
		cmocka_unit_test_setup(test_logq_truncation, setup),
		cmocka_unit_test_setup(test_long_line_truncated, setup),
		cmocka_unit_test_setup(test_errno_preserved, setup),
		cmocka_unit_test_setup(test_errname, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
