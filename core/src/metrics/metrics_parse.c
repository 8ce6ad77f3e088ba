/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics_parse: the metrics listener's pure parsers (dp/metrics.h), fuzzed by
 * fuzz_metrics_http: the HTTP/1.x request head as it arrives (dp_metrics_http_parse) and
 * METRICS_ADDRESS (dp_metrics_parse_address), whose every error names what is wrong.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "dp/macro.h"
#include "dp/metrics.h"

/* ---- the request head ---- */

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool is_ctl(char c)
{
	return (unsigned char)c < 0x20 || c == 0x7f;
}

/* Where the head ends (the byte after the empty line that follows the request line), 0 when
 * not yet. Empty lines before the request line are not its end (RFC 9112 section 2.2). */
static size_t head_end(const char *buf, size_t len)
{
	size_t start = 0;
	bool started = false;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		size_t l = i - start;
		if (l > 0 && buf[i - 1] == '\r')
			l--;
		if (l == 0 && started)
			return i + 1;
		started = started || l > 0;
		start = i + 1;
	}
	return 0;
}

/* Length of the line at p (up to end), without its CR LF / LF; *next the next line. */
static size_t line(const char *p, const char *end, const char **next)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p));
	size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
	*next = nl ? nl + 1 : end;
	if (n > 0 && p[n - 1] == '\r')
		n--;
	return n;
}

struct request_line {
	bool get, head, metrics, host_required; /* host_required: HTTP/1.1 (or a later 1.x) */
};

/* "METHOD SP target SP HTTP/1.x": the status it deserves (0 when it is well-formed). */
static int request_line(const char *p, size_t n, struct request_line *ret)
{
	size_t m = 0;
	while (m < n && is_tchar(p[m]))
		m++;
	if (m == 0 || m >= n || p[m] != ' ')
		return 400;
	const char *t = p + m + 1;
	const char *sp = memchr(t, ' ', n - m - 1);
	if (!sp || sp == t || *t != '/')
		return 400;
	size_t tlen = (size_t)(sp - t);
	for (size_t i = 0; i < tlen; i++)
		if (is_ctl(t[i]) || (unsigned char)t[i] >= 0x80)
			return 400;
	const char *v = sp + 1;
	size_t vlen = n - (size_t)(v - p);
	if (vlen != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9')
		return 400;
	if (v[5] != '1')
		return 505;
	size_t path = 0; /* the target up to its query (the buffer is not NUL-terminated) */
	while (path < tlen && t[path] != '?')
		path++;
	ret->metrics = path == 8 && memcmp(t, "/metrics", 8) == 0;
	ret->get = m == 3 && memcmp(p, "GET", 3) == 0;
	ret->head = m == 4 && memcmp(p, "HEAD", 4) == 0;
	ret->host_required = v[7] != '0';
	return 0;
}

/* "name: value": 0 when well-formed (no folding, a token name, no control byte but HTAB);
 * *hosts counts the Host fields. */
static int header_line(const char *p, size_t n, unsigned *hosts)
{
	size_t m = 0;
	while (m < n && is_tchar(p[m]))
		m++;
	if (m == 0 || m >= n || p[m] != ':')
		return 400;
	for (size_t i = m + 1; i < n; i++)
		if (is_ctl(p[i]) && p[i] != '\t')
			return 400;
	if (m == 4 && strncasecmp(p, "host", 4) == 0)
		(*hosts)++;
	return 0;
}

/* The first non-empty line at or after p. */
static const char *skip_empty_lines(const char *p, const char *end)
{
	const char *next;
	while (p < end && line(p, end, &next) == 0)
		p = next;
	return p;
}

int dp_metrics_http_parse(const char *buf, size_t len, dp_metrics_request *ret)
{
	size_t end = head_end(buf, len);
	struct request_line rl = { 0 };
	unsigned hosts = 0;
	const char *p = skip_empty_lines(buf, buf + end), *next;

	if (end == 0 && len < DP_METRICS_HTTP_HEAD_MAX)
		return 0;
	if (end == 0 || end > DP_METRICS_HTTP_HEAD_MAX) {
		*ret = (dp_metrics_request){ .status = 431 };
		return 1;
	}
	int status = request_line(p, line(p, buf + end, &next), &rl);
	for (p = next; status == 0 && p < buf + end;) {
		size_t n = line(p, buf + end, &next);
		if (n > 0)
			status = header_line(p, n, &hosts);
		p = next;
	}
	if (status == 0 && (hosts > 1 || (hosts == 0 && rl.host_required)))
		status = 400;
	if (status == 0)
		status = !rl.metrics ? 404 : rl.get || rl.head ? 200 : 405;
	*ret = (dp_metrics_request){ .status = status, .head = rl.head };
	return 1;
}

/* ---- METRICS_ADDRESS ---- */

static int bad_address(char *err, size_t errlen, const char *fmt, ...) _printf_(3, 4);
static int bad_address(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive, as in metrics.c) */
	(void)vsnprintf(err, errlen, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	return -EINVAL;
}

/* Decimal digits only, 0 to 65535. */
static int parse_port(const char *s, uint16_t *ret, char *err, size_t errlen)
{
	unsigned long v = 0;
	if (*s == '\0')
		return bad_address(err, errlen, "missing port after the last ':'");
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return bad_address(err, errlen, "port \"%.40s\" is not a decimal number", s);
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > 65535)
			return bad_address(err, errlen, "port %.40s is out of range (0 to 65535)", s);
	}
	*ret = (uint16_t)v;
	return 0;
}

/* "[IPv6]:PORT": the address between the brackets into host, *port after the ':'. */
static int split_bracketed(const char *s, char *host, size_t size, const char **port, char *err, size_t errlen)
{
	const char *close = strchr(s, ']');
	if (!close)
		return bad_address(err, errlen, "missing ']' after the IPv6 address (expected [IPv6]:PORT)");
	if (close == s + 1)
		return bad_address(err, errlen,
				   "empty IPv6 address in \"[]\" (expected [IPv6]:PORT, or :PORT for every address)");
	if (memchr(s + 1, '[', (size_t)(close - s - 1)) || strchr(close + 1, ']'))
		return bad_address(err, errlen, "unbalanced brackets (expected [IPv6]:PORT)");
	if (close[1] == '\0')
		return bad_address(err, errlen, "missing port after ']' (expected [IPv6]:PORT)");
	if (close[1] != ':')
		return bad_address(err, errlen, "expected ':' and the port after ']'");
	if ((size_t)(close - s - 1) >= size)
		return bad_address(err, errlen, "the address in brackets is too long (at most %zu bytes)", size - 1);
	memcpy(host, s + 1, (size_t)(close - s - 1));
	host[close - s - 1] = '\0';
	*port = close + 2;
	return 0;
}

/* "HOST:PORT" or ":PORT": the host (maybe empty) into host, *port after the ':'. */
static int split_plain(const char *s, char *host, size_t size, const char **port, char *err, size_t errlen)
{
	const char *colon = strrchr(s, ':');
	size_t hl = colon ? (size_t)(colon - s) : 0;
	if (strchr(s, '[') || strchr(s, ']'))
		return bad_address(err, errlen, "unbalanced brackets (expected [IPv6]:PORT)");
	if (!colon)
		return bad_address(err, errlen, "missing port (expected HOST:PORT, :PORT or [IPv6]:PORT)");
	if (memchr(s, ':', hl))
		return bad_address(err, errlen, "an IPv6 address needs brackets: [IPv6]:PORT");
	if (hl >= size)
		return bad_address(err, errlen, "the host is too long (at most %zu bytes)", size - 1);
	memcpy(host, s, hl);
	host[hl] = '\0';
	*port = colon + 1;
	return 0;
}

static int parse_ipv6(const char *host, struct sockaddr_in6 *in6, char *err, size_t errlen)
{
	struct in_addr a4;
	in6->sin6_family = AF_INET6;
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1)
		return 0;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return bad_address(err, errlen, "\"%s\" in brackets is an IPv4 address (write it without brackets)",
				   host);
	return bad_address(err, errlen, "\"%s\" is not a numeric IPv6 address", host);
}

/* Empty: every address ([::], or 0.0.0.0 where the kernel has no IPv6: dp_metrics_server_new). */
static int parse_host(const char *host, struct sockaddr_storage *ss, char *err, size_t errlen)
{
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (*host == '\0') {
		in6->sin6_family = AF_INET6;
		in6->sin6_addr = in6addr_any;
		return 0;
	}
	in4->sin_family = AF_INET;
	if (strcmp(host, "localhost") == 0)
		host = "127.0.0.1";
	if (inet_pton(AF_INET, host, &in4->sin_addr) != 1)
		return bad_address(err, errlen,
				   "host \"%s\" is not a numeric IPv4 address (host names are not resolved, only "
				   "localhost; IPv6: [ADDRESS]:PORT)",
				   host);
	return 0;
}

int dp_metrics_parse_address(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len, char *err,
			     size_t errlen)
{
	char host[64] = "";
	const char *port_s = "";
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	uint16_t port = 0;
	bool bracketed = s[0] == '[';

	int r = bracketed ? split_bracketed(s, host, sizeof(host), &port_s, err, errlen)
			  : split_plain(s, host, sizeof(host), &port_s, err, errlen);
	if (r < 0 || (r = parse_port(port_s, &port, err, errlen)) < 0)
		return r;
	r = bracketed ? parse_ipv6(host, in6, err, errlen) : parse_host(host, &ss, err, errlen);
	if (r < 0)
		return r;
	if (ss.ss_family == AF_INET6)
		in6->sin6_port = htons(port);
	else
		in4->sin_port = htons(port);
	*ret = ss;
	*ret_len = ss.ss_family == AF_INET6 ? sizeof(*in6) : sizeof(*in4);
	return 0;
}
