/* SPDX-License-Identifier: Apache-2.0 */
/* buf: the growable byte buffer and its JSON / YAML string emitters (dp/buf.h). */
#include "dp/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dp_buf_done(dp_buf *b)
{
	free(b->data);
	*b = (dp_buf){ 0 };
}

/* Room for need bytes (doubling from 64): false when memory runs out. */
static bool buf_grow(dp_buf *b, size_t need)
{
	size_t cap = b->cap ? b->cap : 64;

	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return false;
	b->data = p;
	b->cap = cap;
	return true;
}

/* Make room for n more bytes plus the NUL. false (and oom set) when impossible. */
static bool buf_reserve(dp_buf *b, size_t n)
{
	if (b->oom)
		return false;
	if (n > SIZE_MAX - 1 - b->len || (b->len + n + 1 > b->cap && !buf_grow(b, b->len + n + 1)))
		b->oom = true;
	return !b->oom;
}

void dp_buf_append(dp_buf *b, const void *p, size_t n)
{
	if (!buf_reserve(b, n))
		return;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void dp_buf_puts(dp_buf *b, const char *s)
{
	dp_buf_append(b, s, strlen(s));
}

void dp_buf_printf(dp_buf *b, const char *fmt, ...)
{
	va_list ap;

	if (b->oom)
		return;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true; /* only EOVERFLOW / bad format: the content is incomplete */
		return;
	}
	if (!buf_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

static void buf_putc(dp_buf *b, char c)
{
	dp_buf_append(b, &c, 1);
}

/* The escape letter for the control characters both JSON and YAML name, or 0. */
static char named_escape(unsigned char c)
{
	switch (c) {
	case '"':
		return '"';
	case '\\':
		return '\\';
	case '\b':
		return 'b';
	case '\f':
		return 'f';
	case '\n':
		return 'n';
	case '\r':
		return 'r';
	case '\t':
		return 't';
	default:
		return 0;
	}
}

void dp_buf_json_string(dp_buf *b, const char *str)
{
	const char *s = str ? str : "";
	const char *run = s;

	buf_putc(b, '"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e = named_escape(c);

		if (!e && c >= 0x20)
			continue; /* DEL and UTF-8 bytes pass */
		dp_buf_append(b, run, (size_t)(s - run));
		if (e)
			dp_buf_printf(b, "\\%c", e);
		else
			dp_buf_printf(b, "\\u%04x", (unsigned)c);
		run = s + 1;
	}
	dp_buf_append(b, run, (size_t)(s - run));
	buf_putc(b, '"');
}

/* Well-formed UTF-8 by lead byte (Unicode, table 3-7 "Well-Formed UTF-8 Byte Sequences"): the
 * sequence's length, the payload bits of the lead byte, and the range of the second byte, which
 * is what excludes overlongs, surrogates and code points past U+10FFFF. */
static const struct utf8_lead {
	unsigned char first, last; /* lead bytes of the row */
	unsigned char len, mask, lo, hi;
} utf8_leads[] = {
	{ 0xc2, 0xdf, 2, 0x1f, 0x80, 0xbf },
	{ 0xe0, 0xe0, 3, 0x0f, 0xa0, 0xbf },
	{ 0xe1, 0xec, 3, 0x0f, 0x80, 0xbf },
	{ 0xed, 0xed, 3, 0x0f, 0x80, 0x9f },
	{ 0xee, 0xef, 3, 0x0f, 0x80, 0xbf },
	{ 0xf0, 0xf0, 4, 0x07, 0x90, 0xbf },
	{ 0xf1, 0xf3, 4, 0x07, 0x80, 0xbf },
	{ 0xf4, 0xf4, 4, 0x07, 0x80, 0x8f },
};

/* Decode one UTF-8 sequence (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
 * Returns its length and sets *cp, or 0 when s does not start a valid sequence. */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp)
{
	const struct utf8_lead *l = NULL;
	uint32_t v;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	for (size_t i = 0; i < DP_ELEMENTSOF(utf8_leads) && !l; i++)
		if (s[0] >= utf8_leads[i].first && s[0] <= utf8_leads[i].last)
			l = &utf8_leads[i];
	if (!l || s[1] < l->lo || s[1] > l->hi) /* s[1] is the NUL after a lone lead byte */
		return 0;
	v = s[0] & l->mask;
	for (size_t i = 1; i < l->len; i++) {
		if ((s[i] & 0xc0) != 0x80) /* also stops at the NUL */
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	*cp = v;
	return l->len;
}

/* Code points a YAML 1.1/1.2 stream may not hold raw (or that 1.1 reads as line breaks). */
static bool yaml_must_escape(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0xfeff || cp == 0xfffe || cp == 0xffff;
}

void dp_buf_yaml_string(dp_buf *b, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");

	buf_putc(b, '"');
	while (*s) {
		uint32_t cp;
		size_t n = utf8_decode(s, &cp);
		char e = 0;

		if (n == 1)
			e = named_escape(*s);

		if (n == 0) {
			dp_buf_puts(b, "\\uFFFD");
			n = 1;
		} else if (e) {
			dp_buf_printf(b, "\\%c", e);
		} else if (!yaml_must_escape(cp)) {
			dp_buf_append(b, s, n);
		} else if (cp <= 0xff) {
			dp_buf_printf(b, "\\x%02X", (unsigned)cp);
		} else {
			dp_buf_printf(b, "\\u%04X", (unsigned)cp);
		}
		s += n;
	}
	buf_putc(b, '"');
}
