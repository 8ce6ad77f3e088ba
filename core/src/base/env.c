/* SPDX-License-Identifier: Apache-2.0 */
/* env: strict decimal parsing of configuration values. */
#include "dp/env.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VALUE_SHOWN_MAX 64 /* bytes of an invalid value quoted in a message */

int dp_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int dp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;
	bool overflow = false;

	if (!s || !*s || min > max)
		return -EINVAL;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		unsigned d = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - d) / 10)
			overflow = true; /* keep scanning: "99...9x" is still not a number */
		else
			v = v * 10 + d;
	}
	if (overflow || v < min || v > max)
		return -ERANGE;
	if (ret)
		*ret = v;
	return 0;
}

static_assert(DP_ENV_QUOTED_SIZE >= VALUE_SHOWN_MAX * 4 + 8, "a quoted value fits DP_ENV_QUOTED_SIZE");

/* Quote s C-style for a message: "..." with \" \\ \n \t \xNN, at most VALUE_SHOWN_MAX bytes. */
void dp_env_quote(char *buf, size_t size, const char *s)
{
	size_t o = 0, i = 0;

	buf[o++] = '"';
	for (; i < VALUE_SHOWN_MAX && s[i] && o + 6 < size; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			o += (size_t)snprintf(buf + o, size - o, "\\%c", c);
		else if (c == '\n')
			o += (size_t)snprintf(buf + o, size - o, "\\n");
		else if (c == '\t')
			o += (size_t)snprintf(buf + o, size - o, "\\t");
		else if (c < ' ' || c == 0x7f)
			o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	if (s[i] && o + 5 < size)
		o += (size_t)snprintf(buf + o, size - o, "...");
	buf[o++] = '"';
	buf[o] = '\0';
}

/* "-" and one or more digits: a negative integer (dp_parse_u64 calls it not a number). */
static bool is_negative_integer(const char *s)
{
	if (s[0] != '-' || !s[1])
		return false;
	for (const char *p = s + 1; *p; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

static void format_error(char *err, size_t errlen, const char *name, const char *value, int r,
			 uint64_t min, uint64_t max)
{
	char q[DP_ENV_QUOTED_SIZE];

	if (!err || errlen == 0)
		return;
	if (min > max) {
		snprintf(err, errlen, "%s: invalid range %" PRIu64 "..%" PRIu64, name, min, max);
	} else if (r == -ERANGE || is_negative_integer(value)) {
		/* Digits only (after a minus sign): shown as given, cut after VALUE_SHOWN_MAX. */
		snprintf(err, errlen, "%s=%.*s%s is %sout of range %" PRIu64 "..%" PRIu64, name,
			 VALUE_SHOWN_MAX, value, strlen(value) > VALUE_SHOWN_MAX ? "..." : "",
			 value[0] == '-' ? "negative: " : "", min, max);
	} else {
		dp_env_quote(q, sizeof(q), value);
		snprintf(err, errlen, "%s=%s is not a decimal integer", name, q);
	}
}

int dp_env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, char *err,
	       size_t errlen)
{
	const char *value;
	uint64_t v;
	int r;

	if (!name || !ret)
		return -EINVAL;
	value = getenv(name);
	if (!value) {
		*ret = def;
		return 0;
	}
	r = dp_parse_u64(value, min, max, &v);
	if (r < 0) {
		format_error(err, errlen, name, value, r, min, max);
		return r;
	}
	*ret = v;
	return 0;
}

int dp_env_u32(const char *name, uint32_t def, uint32_t min, uint32_t max, uint32_t *ret, char *err,
	       size_t errlen)
{
	uint64_t v;
	int r;

	if (!ret)
		return -EINVAL;
	r = dp_env_u64(name, def, min, max, &v, err, errlen);
	if (r < 0)
		return r;
	*ret = (uint32_t)v;
	return 0;
}

int dp_env_plugin_api(bool *ret_dra, char *err, size_t errlen)
{
	const char *v = getenv("PLUGIN_API");
	char q[DP_ENV_QUOTED_SIZE];

	if (!v || !v[0] || strcmp(v, "device-plugin") == 0 || strcmp(v, "dra") == 0) {
		*ret_dra = v && strcmp(v, "dra") == 0;
		return 0;
	}
	dp_env_quote(q, sizeof(q), v);
	if (err)
		snprintf(err, errlen, "PLUGIN_API=%s is neither device-plugin nor dra", q);
	return -EINVAL;
}
