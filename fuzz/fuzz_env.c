/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (g): configuration parsing. The input (up to its first NUL) is parsed with
 * dp_parse_u64 over a range taken from its first bytes, set as an environment variable and
 * read back with dp_env_u32 and dp_env_u64, and quoted with dp_logq into buffers of several
 * sizes. Checks: a success lies in the range and equals the digits' value; a failure leaves
 * the output untouched and gives a message naming the variable; dp_logq always NUL-terminates
 * within the buffer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/env.h"
#include "dp/log.h"
#include "fuzz.h"

#define VAR "SDP_FUZZ_VALUE"

static uint64_t bytes_u64(const uint8_t *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n && i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* Reference: decimal digits only, without overflow. */
static int reference(const char *s, uint64_t *ret)
{
	uint64_t v = 0;
	if (!*s)
		return -EINVAL;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
	}
	for (const char *p = s; *p; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*ret = v;
	return 0;
}

static void check_parse(const char *s, uint64_t min, uint64_t max)
{
	uint64_t v = 777, ref = 0;
	int r = dp_parse_u64(s, min, max, &v);
	int rr = reference(s, &ref);
	if (min > max) {
		FUZZ_CHECK(r == -EINVAL && v == 777);
		return;
	}
	if (rr == 0 && (ref < min || ref > max))
		rr = -ERANGE;
	FUZZ_CHECK(r == rr);
	FUZZ_CHECK(r == 0 ? v == ref : v == 777);
}

static void check_env(const char *s, uint64_t min, uint64_t max)
{
	char err[160] = "";
	uint32_t v32 = 5;
	uint64_t v64 = 5;
	if (setenv(VAR, s, 1) < 0)
		return;
	int r = dp_env_u32(VAR, 1, (uint32_t)min, (uint32_t)max, &v32, err, sizeof(err));
	if (r < 0) {
		FUZZ_CHECK(v32 == 5);
		FUZZ_CHECK(strstr(err, VAR) != NULL);
	} else {
		FUZZ_CHECK(v32 >= (uint32_t)min && v32 <= (uint32_t)max);
	}
	err[0] = '\0';
	r = dp_env_u64(VAR, 1, min, max, &v64, err, sizeof(err));
	if (r < 0)
		FUZZ_CHECK(v64 == 5 && strstr(err, VAR) != NULL);
	else
		FUZZ_CHECK(v64 >= min && v64 <= max);
	/* a tiny message buffer is cut, never overrun */
	char small[8];
	memset(small, 'x', sizeof(small));
	r = dp_env_u64(VAR, 1, min, max, &v64, small, sizeof(small));
	if (r < 0)
		FUZZ_CHECK(memchr(small, '\0', sizeof(small)) != NULL);
	else
		FUZZ_CHECK(memchr(small, '\0', sizeof(small)) == NULL); /* untouched on success */
	unsetenv(VAR);
}

static void check_logq(const char *s)
{
	static const size_t sizes[] = { 1, 2, 3, 8, 64, 4096 };
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *buf = malloc(sizes[i]);
		FUZZ_CHECK(buf != NULL);
		const char *q = dp_logq(buf, sizes[i], s);
		FUZZ_CHECK(q != NULL);
		if (q == buf)
			FUZZ_CHECK(memchr(buf, '\0', sizes[i]) != NULL);
		free(buf);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t min = 0, max = UINT64_MAX;
	if (size >= 2 && data[0] == 0xff) { /* "\xff" + 2 x 4 range bytes + value */
		min = bytes_u64(data + 1, size > 5 ? 4 : size - 1);
		max = size > 5 ? bytes_u64(data + 5, size > 9 ? 4 : size - 5) : UINT64_MAX;
		size_t skip = size > 9 ? 9 : size;
		data += skip;
		size -= skip;
	}
	char *s = fuzz_string(data, size);
	FUZZ_CHECK(s != NULL);
	check_parse(s, min, max);
	check_env(s, min, max);
	check_logq(s);
	free(s);
	return 0;
}
