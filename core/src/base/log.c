/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: logfmt lines on stderr. Each line is built in one buffer and written with one write(2),
 * so lines from one process never interleave. A line longer than DP_LOG_LINE_MAX is cut at a
 * UTF-8 character boundary and ends in "...". Logging preserves errno.
 */
#include "dp/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define DP_LOG_LINE_MAX 4096
#define DP_LOG_VALUE_MAX 512

static enum dp_log_level log_level = DP_LOG_INFO;

static const char *const level_names[] = {
	[DP_LOG_DEBUG] = "debug",
	[DP_LOG_INFO] = "info",
	[DP_LOG_WARN] = "warn",
	[DP_LOG_ERROR] = "error",
};

static int parse_level(const char *s, enum dp_log_level *ret)
{
	for (size_t i = 0; i < DP_ELEMENTSOF(level_names); i++)
		if (strcasecmp(s, level_names[i]) == 0) {
			*ret = (enum dp_log_level)i;
			return 0;
		}
	return -EINVAL;
}

int dp_log_init(void)
{
	const char *v = getenv("LOG_LEVEL");
	enum dp_log_level lvl;
	char q[DP_LOG_VALUE_MAX];

	if (!v || !*v)
		return 0;
	if (parse_level(v, &lvl) < 0) {
		log_level = DP_LOG_INFO;
		dp_warn("invalid LOG_LEVEL, keeping info", "value=%s expected=debug|info|warn|error",
			dp_logq(q, sizeof(q), v));
		return -EINVAL;
	}
	log_level = lvl;
	return 0;
}

const char *dp_errname(int err)
{
	static char unknown[24];
	const char *n;

	if (err == 0)
		return "none";
	n = strerrorname_np(err == INT_MIN ? 0 : err < 0 ? -err : err);
	if (n)
		return n;
	snprintf(unknown, sizeof(unknown), "errno%d", err < 0 && err != INT_MIN ? -err : err);
	return unknown;
}

void dp_log_set_level(enum dp_log_level lvl)
{
	if (lvl >= DP_LOG_DEBUG && lvl <= DP_LOG_ERROR)
		log_level = lvl;
}

bool dp_log_enabled(enum dp_log_level lvl)
{
	return lvl >= log_level;
}

static bool needs_quoting(const char *s)
{
	if (!*s)
		return true;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
			return true;
	return false;
}

/* The escaped form of c (without quotes) into out[5]; returns its length. */
static size_t escape_char(unsigned char c, char out[5])
{
	static const char hex[] = "0123456789abcdef";

	switch (c) {
	case '"':
	case '\\':
		out[0] = '\\';
		out[1] = (char)c;
		return 2;
	case '\n':
		out[0] = '\\';
		out[1] = 'n';
		return 2;
	case '\t':
		out[0] = '\\';
		out[1] = 't';
		return 2;
	default:
		if (c < ' ' || c == 0x7f) {
			out[0] = '\\';
			out[1] = 'x';
			out[2] = hex[c >> 4];
			out[3] = hex[c & 0xf];
			return 4;
		}
		out[0] = (char)c;
		return 1;
	}
}

/* Length of the longest prefix of s[0..n) not ending inside a UTF-8 sequence. */
static size_t utf8_boundary(const char *s, size_t n)
{
	size_t i = n;

	/* Step back over continuation bytes to the start of the last character. */
	while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80 && n - i < 3)
		i--;
	if (i == 0)
		return n;
	unsigned char lead = (unsigned char)s[i - 1];
	size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
	return (n - (i - 1) >= want) ? n : i - 1;
}

/* Append the escaped form of s to buf+1 while it fits in limit bytes; returns the length. */
static size_t escape_into(char *buf, size_t limit, const char *s, bool *truncated)
{
	size_t o = 0;

	*truncated = false;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char e[5];
		size_t n = escape_char(*p, e);
		if (o + n > limit) {
			*truncated = true;
			return utf8_boundary(buf, o); /* escapes are ASCII: never split */
		}
		memcpy(buf + o, e, n);
		o += n;
	}
	return o;
}

const char *dp_logq(char *buf, size_t size, const char *s)
{
	bool truncated;
	size_t o;

	if (!buf || size == 0)
		return "";
	if (!s)
		s = "(null)";
	if (!needs_quoting(s) && strlen(s) < size) {
		memcpy(buf, s, strlen(s) + 1);
		return buf;
	}
	if (size < 3) { /* not even room for "" */
		buf[0] = '\0';
		return buf;
	}
	buf[0] = '"';
	o = 1 + escape_into(buf + 1, size - 3, s, &truncated);
	if (truncated) {
		/* Cut again, leaving room for "..." before the closing quote. */
		o = size >= 7 ? 1 + escape_into(buf + 1, size - 6, s, &truncated) : 1;
		if (size >= 7) {
			memcpy(buf + o, "...", 3);
			o += 3;
		}
	}
	buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

static size_t format_time(char *buf, size_t size)
{
	struct timespec ts;
	struct tm tm;
	char t[32];

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0 || !gmtime_r(&ts.tv_sec, &tm) ||
	    strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
		return (size_t)snprintf(buf, size, "time=unknown");
	return (size_t)snprintf(buf, size, "time=%s.%03ldZ", t, ts.tv_nsec / 1000000L);
}

static void write_all(const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDERR_FILENO, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

void dp_logv(enum dp_log_level lvl, const char *msg, const char *kv, va_list ap)
{
	char line[DP_LOG_LINE_MAX];
	char q[DP_LOG_VALUE_MAX];
	int saved = errno;
	size_t o, cap = sizeof(line) - 1; /* keep room for the newline */

	if (lvl < DP_LOG_DEBUG || lvl > DP_LOG_ERROR)
		lvl = DP_LOG_ERROR;
	if (!dp_log_enabled(lvl))
		return;

	o = format_time(line, cap);
	if (o < cap)
		o += (size_t)snprintf(line + o, cap - o, " level=%s msg=%s", level_names[lvl],
				      dp_logq(q, sizeof(q), msg ? msg : ""));
	if (o < cap && kv && *kv) {
		line[o++] = ' ';
		/* ap comes va_start()ed from dp_log() or the caller of dp_logv() (clang 14 false positive) */
		int n = vsnprintf(line + o, cap - o, kv, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
		o += n > 0 ? (size_t)n : 0;
	}
	if (o >= cap) { /* truncated: cut at a character boundary and mark it */
		o = utf8_boundary(line, cap - 3);
		memcpy(line + o, "...", 3); // NOLINT(bugprone-not-null-terminated-result): the line is written by length, never as a string
		o += 3;
	}
	line[o++] = '\n';
	write_all(line, o);
	errno = saved;
}

void dp_log(enum dp_log_level lvl, const char *msg, const char *kv, ...)
{
	va_list ap;

	va_start(ap, kv);
	dp_logv(lvl, msg, kv, ap);
	va_end(ap);
}
