/* SPDX-License-Identifier: Apache-2.0 */
/* http_response: the status and body of an HTTP/1.1 answer, parsed from the bytes so far. */
#include "dp/http_response.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CHUNK_SIZE_MAX ((size_t)1 << 40)

enum framing { BY_CLOSE, BY_LENGTH, BY_CHUNKS };

struct head {
	int status;
	enum framing framing;
	size_t length;  /* BY_LENGTH */
	size_t end;     /* offset of the body */
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The header block's end (the offset after CRLF CRLF) within buf[len], or 0. */
static size_t head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n')
			return i + 4;
	return 0;
}

/* "HTTP/1.x SSS[ reason]" in line[n]. */
static int parse_status_line(const char *line, size_t n, int *ret)
{
	if (n < 12 || memcmp(line, "HTTP/1.", 7) != 0 || !is_digit(line[7]) || line[8] != ' ')
		return -EBADMSG;
	if (!is_digit(line[9]) || !is_digit(line[10]) || !is_digit(line[11]) || line[9] == '0')
		return -EBADMSG;
	if (n > 12 && line[12] != ' ')
		return -EBADMSG;
	*ret = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
	return 0;
}

/* v[n] with optional whitespace around it trimmed. */
static void trim(const char **v, size_t *n)
{
	while (*n > 0 && (**v == ' ' || **v == '\t'))
		(*v)++, (*n)--;
	while (*n > 0 && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
		(*n)--;
}

static int parse_length(const char *v, size_t n, size_t *ret)
{
	size_t x = 0;

	if (n == 0 || n > 15)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		if (!is_digit(v[i]))
			return -EBADMSG;
		x = x * 10 + (size_t)(v[i] - '0');
	}
	*ret = x;
	return 0;
}

/* One "name: value" line into h. Content-Length twice with different values, a
 * Transfer-Encoding other than chunked, or both framings: -EBADMSG. */
static int parse_field(const char *line, size_t n, struct head *h, bool *have_length)
{
	const char *colon = memchr(line, ':', n), *v;
	size_t name_len, vn, length;

	if (!colon || colon == line)
		return -EBADMSG;
	name_len = (size_t)(colon - line);
	for (size_t i = 0; i < name_len; i++)
		if (!is_tchar(line[i]))
			return -EBADMSG;
	v = colon + 1;
	vn = n - name_len - 1;
	trim(&v, &vn);
	if (name_len == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
		if (parse_length(v, vn, &length) < 0 || (*have_length && length != h->length))
			return -EBADMSG;
		*have_length = true;
		h->length = length;
	} else if (name_len == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
		if (vn != 7 || strncasecmp(v, "chunked", 7) != 0)
			return -EBADMSG;
		h->framing = BY_CHUNKS;
	}
	return 0;
}

/* The header block buf[end] (CRLF CRLF included) into h. */
static int parse_head(const char *buf, size_t end, struct head *h)
{
	bool have_length = false;
	const char *p = buf, *stop = buf + end - 2;
	int r;

	*h = (struct head){ .framing = BY_CLOSE, .end = end };
	for (bool first = true; p < stop; first = false) {
		const char *eol = memchr(p, '\r', (size_t)(stop - p));
		if (!eol || eol[1] != '\n' || memchr(p, '\n', (size_t)(eol - p)) || memchr(p, '\0', (size_t)(eol - p)))
			return -EBADMSG;
		size_t n = (size_t)(eol - p);
		r = first ? parse_status_line(p, n, &h->status) : parse_field(p, n, h, &have_length);
		if (r < 0)
			return r;
		p = eol + 2;
	}
	if (h->framing == BY_CHUNKS && have_length)
		return -EBADMSG;
	if (have_length)
		h->framing = BY_LENGTH;
	if (h->status == 204 || h->status == 304 || (h->status >= 100 && h->status < 200)) {
		h->framing = BY_LENGTH;
		h->length = 0;
	}
	return 0;
}

static void keep(dp_http_response *r, const char *p, size_t n)
{
	size_t room = DP_HTTP_EXCERPT_MAX - r->excerpt_len;

	for (size_t i = 0; i < n && i < room; i++) {
		unsigned char c = (unsigned char)p[i];
		r->excerpt[r->excerpt_len++] = (char)(c < ' ' || c >= 0x7f ? '.' : c);
	}
	r->excerpt[r->excerpt_len] = '\0';
}

/* The chunk-size line at p (up to stop): its size and the offset of its data; -EAGAIN when the
 * line is not complete. Extensions (";name=value") are skipped. */
static int chunk_header(const char *p, const char *stop, size_t *size, size_t *skip)
{
	size_t x = 0, i = 0;

	for (; p + i < stop; i++) {
		char c = p[i];
		int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
		if (d < 0)
			break;
		x = x * 16 + (size_t)d;
		if (x > CHUNK_SIZE_MAX)
			return -EBADMSG;
	}
	if (p + i == stop)
		return -EAGAIN;
	if (i == 0 || (p[i] != '\r' && p[i] != ';' && p[i] != ' ' && p[i] != '\t'))
		return -EBADMSG;
	const char *eol = memchr(p + i, '\r', (size_t)(stop - p - (ptrdiff_t)i));
	if (!eol || eol + 1 == stop)
		return -EAGAIN;
	if (eol[1] != '\n')
		return -EBADMSG;
	*size = x;
	*skip = (size_t)(eol + 2 - p);
	return 0;
}

/* The chunked body in p..stop: the excerpt from the chunks at hand; done at the last chunk. */
static int read_chunks(const char *p, const char *stop, dp_http_response *r)
{
	size_t size, skip;
	int k;

	while ((k = chunk_header(p, stop, &size, &skip)) == 0) {
		p += skip;
		if (size == 0) {
			r->body_done = true;
			return 0;
		}
		size_t have = (size_t)(stop - p);
		keep(r, p, size < have ? size : have);
		if (have < size + 2)
			return 0;
		if (p[size] != '\r' || p[size + 1] != '\n')
			return -EBADMSG;
		p += size + 2;
	}
	return k == -EAGAIN ? 0 : k;
}

/* The final answer's header block in buf[len] (interim 1xx answers skipped) into *h, the body's
 * offset into *off. */
static int final_head(const char *buf, size_t len, struct head *h, size_t *off)
{
	size_t end, o = 0;
	int k;

	for (;;) {
		end = head_end(buf + o, len - o < DP_HTTP_HEAD_MAX ? len - o : DP_HTTP_HEAD_MAX);
		if (end == 0)
			return len - o >= DP_HTTP_HEAD_MAX ? -EBADMSG : -EAGAIN;
		if ((k = parse_head(buf + o, end, h)) < 0)
			return k;
		o += end;
		if (h->status >= 200 || h->status == 101)
			break;
	}
	*off = o;
	return 0;
}

int dp_http_response_parse(const char *buf, size_t len, dp_http_response *ret)
{
	dp_http_response r = { 0 };
	struct head h;
	size_t off;
	int k;

	if ((k = final_head(buf, len, &h, &off)) < 0)
		return k;
	r.status = h.status;
	r.head_done = true;
	const char *body = buf + off, *stop = buf + len;
	size_t have = len - off;
	if (h.framing == BY_CHUNKS) {
		if ((k = read_chunks(body, stop, &r)) < 0)
			return k;
	} else {
		size_t n = h.framing == BY_LENGTH && h.length < have ? h.length : have;
		keep(&r, body, n);
		r.body_done = h.framing == BY_LENGTH && have >= h.length;
	}
	*ret = r;
	return 0;
}

/* The chunked body p..stop decoded into out (room for stop - p bytes); its length in *n. */
static int decode_chunks(const char *p, const char *stop, char *out, size_t *n)
{
	size_t size, skip, len = 0;
	int k;

	while ((k = chunk_header(p, stop, &size, &skip)) == 0) {
		p += skip;
		if (size == 0) {
			*n = len;
			return 0;
		}
		if ((size_t)(stop - p) < size + 2)
			return -EAGAIN;
		if (p[size] != '\r' || p[size + 1] != '\n')
			return -EBADMSG;
		memcpy(out + len, p, size);
		len += size;
		p += size + 2;
	}
	return k;
}

int dp_http_response_body(const char *buf, size_t len, bool eof, size_t max, char **ret, size_t *ret_len)
{
	struct head h;
	size_t off, n = 0;
	int k;

	if ((k = final_head(buf, len, &h, &off)) < 0)
		return k == -EAGAIN && eof ? -EBADMSG : k;
	size_t have = len - off;
	if (h.framing == BY_LENGTH && h.length > max)
		return -EFBIG;
	if (h.framing == BY_LENGTH && have < h.length)
		return eof ? -EBADMSG : -EAGAIN;
	if (h.framing == BY_CLOSE && !eof)
		return -EAGAIN;
	char *out = malloc(have + 1);
	if (!out)
		return -ENOMEM;
	if (h.framing == BY_CHUNKS) {
		k = decode_chunks(buf + off, buf + len, out, &n);
		if (k == -EAGAIN && eof)
			k = -EBADMSG;
	} else {
		n = h.framing == BY_LENGTH ? h.length : have;
	}
	if (k == 0 && n > max)
		k = -EFBIG;
	if (k < 0) {
		free(out);
		return k;
	}
	if (h.framing != BY_CHUNKS)
		memcpy(out, buf + off, n);
	out[n] = '\0';
	*ret = out;
	*ret_len = n;
	return 0;
}
