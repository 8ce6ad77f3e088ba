/* SPDX-License-Identifier: Apache-2.0 */
/* https: one blocking HTTP/1.1 request over TLS (Mbed TLS) for the node-label child. */
#include "dp/https.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>

#include "dp/buf.h"
#include "dp/loop.h"
#include "dp/macro.h"

#define HOST_MAX 253
#define ANSWER_MAX (DP_HTTP_HEAD_MAX + 4096)
#define USEC_PER_MSEC 1000u
#define SAN_IP_TAG (MBEDTLS_ASN1_CONTEXT_SPECIFIC | MBEDTLS_X509_SAN_IP_ADDRESS)

struct url {
	char host[HOST_MAX + 1]; /* without brackets */
	char port[6];
	const char *path;
	bool v6;
	unsigned char ip[16]; /* the address when the host is an IP literal */
	size_t ip_len;        /* 4, 16, or 0 for a name */
};

/* One exchange: the socket, the deadline its I/O waits up to, what failed, the error text. */
struct exchange {
	const dp_https_request *q;
	struct url url;
	int fd;
	uint64_t deadline;
	int io_err; /* positive errno of the last failed I/O; ETIMEDOUT at the deadline */
	char *why;
	size_t why_size;
};

struct tls {
	mbedtls_entropy_context entropy;
	mbedtls_ctr_drbg_context drbg;
	mbedtls_x509_crt ca;
	mbedtls_ssl_config conf;
	mbedtls_ssl_context ssl;
};

static int fail(struct exchange *x, int err, const char *fmt, ...) _printf_(3, 4);

static int fail(struct exchange *x, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->why, x->why_size, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	return err;
}

/* ---------------------------------------------------------------- URL */

static bool host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* "[v6]" or a name / IPv4 literal, up to ':' or '/' or the end; *rest after it. */
static int parse_host(const char *s, struct url *u, const char **rest)
{
	const char *end;
	size_t n;

	if (*s == '[') {
		end = strchr(s, ']');
		if (!end)
			return -EINVAL;
		s++;
		u->v6 = true;
	} else {
		end = s + strcspn(s, ":/");
	}
	n = (size_t)(end - s);
	if (n == 0 || n > HOST_MAX)
		return -EINVAL;
	memcpy(u->host, s, n);
	u->host[n] = '\0';
	*rest = end + (u->v6 ? 1 : 0);
	if (u->v6)
		return inet_pton(AF_INET6, u->host, u->ip) == 1 ? (u->ip_len = 16, 0) : -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!host_char(u->host[i]))
			return -EINVAL;
	if (inet_pton(AF_INET, u->host, u->ip) == 1)
		u->ip_len = 4;
	return 0;
}

static int parse_url(struct exchange *x)
{
	const char *url = x->q->url, *p;
	struct url *u = &x->url;

	if (strncmp(url, "https://", 8) != 0) {
		const char *colon = strstr(url, "://");
		return fail(x, -EPROTONOSUPPORT, "scheme %.*s not supported: https only",
			    colon ? (int)(colon - url) : 0, url);
	}
	if (parse_host(url + 8, u, &p) < 0)
		return fail(x, -EINVAL, "malformed URL %s: bad host", url);
	snprintf(u->port, sizeof(u->port), "443");
	if (*p == ':') {
		size_t n = strspn(++p, "0123456789");
		long port = n > 0 && n <= 5 ? strtol(p, NULL, 10) : 0;
		if (port < 1 || port > 65535 || (p[n] != '/' && p[n] != '\0'))
			return fail(x, -EINVAL, "malformed URL %s: bad port", url);
		snprintf(u->port, sizeof(u->port), "%ld", port);
		p += n;
	}
	u->path = *p ? p : "/";
	if (*u->path != '/')
		return fail(x, -EINVAL, "malformed URL %s", url);
	for (const char *c = u->path; *c; c++)
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
			return fail(x, -EINVAL, "malformed URL %s: bad path", url);
	return 0;
}

/* ---------------------------------------------------------------- the socket */

/* Waits for events on the socket until the deadline: 0, or -ETIMEDOUT / -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };

	for (;;) {
		uint64_t now = dp_now_usec();
		if (now >= deadline)
			return -ETIMEDOUT;
		int ms = (int)((deadline - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC);
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* One address: a non-blocking connect finished within the deadline. The socket or -errno. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline)
{
	_cleanup_close_ int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof(int);
	int err = 0, r;

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return TAKE_FD(fd);
	if (errno != EINPROGRESS)
		return -errno;
	if ((r = wait_fd(fd, POLLOUT, deadline)) < 0)
		return r;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return err ? -err : TAKE_FD(fd);
}

/* Every address of the host in turn, each within the connect timeout. */
static int tcp_connect(struct exchange *x)
{
	const struct url *u = &x->url;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *res = NULL;
	int r = -EHOSTUNREACH, g;

	if (u->ip_len)
		hints.ai_flags |= AI_NUMERICHOST;
	if ((g = getaddrinfo(u->host, u->port, &hints, &res)) != 0)
		return fail(x, -EHOSTUNREACH, "cannot resolve %s: %s", u->host,
			    g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
	for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		uint64_t deadline = dp_now_usec() + (uint64_t)x->q->connect_timeout_ms * USEC_PER_MSEC;
		r = connect_one(ai, deadline < x->deadline ? deadline : x->deadline);
		if (r >= 0)
			break;
	}
	freeaddrinfo(res);
	if (r < 0)
		return fail(x, r, "cannot connect to %s port %s: %s", u->host, u->port,
			    r == -ETIMEDOUT ? "timed out" : strerror(-r));
	x->fd = r;
	return 0;
}

/* One send (events POLLOUT) or recv (POLLIN), waiting for the socket up to the deadline. */
static int bio_io(struct exchange *x, unsigned char *buf, size_t len, short events)
{
	int r;

	for (;;) {
		ssize_t n = events == POLLOUT ? send(x->fd, buf, len, MSG_NOSIGNAL) : recv(x->fd, buf, len, 0);
		if (n >= 0)
			return (int)n;
		if (errno != EINTR && errno != EAGAIN)
			break;
		if (errno == EAGAIN && (r = wait_fd(x->fd, events, x->deadline)) < 0) {
			errno = -r;
			break;
		}
	}
	x->io_err = errno;
	if (errno == ETIMEDOUT)
		return MBEDTLS_ERR_SSL_TIMEOUT;
	return events == POLLOUT ? MBEDTLS_ERR_NET_SEND_FAILED : MBEDTLS_ERR_NET_RECV_FAILED;
}

/* Mbed TLS's I/O callbacks. */
static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
	return bio_io(ctx, (unsigned char *)buf, len, POLLOUT);
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
	return bio_io(ctx, buf, len, POLLIN);
}

/* ---------------------------------------------------------------- TLS */

/* Every context of struct tls as X(mbedtls type, member), in the order they are freed (the SSL
 * context uses its configuration until it is freed): each is initialised and freed, none
 * forgotten by one of the two. */
#define TLS_CONTEXTS(X) \
	X(ssl, ssl) X(ssl_config, conf) X(x509_crt, ca) X(ctr_drbg, drbg) X(entropy, entropy)

static void tls_free(struct tls *t)
{
#define TLS_FREE(type, member) mbedtls_##type##_free(&t->member);
	TLS_CONTEXTS(TLS_FREE)
#undef TLS_FREE
}

static void tls_init(struct tls *t)
{
#define TLS_INIT(type, member) mbedtls_##type##_init(&t->member);
	TLS_CONTEXTS(TLS_INIT)
#undef TLS_INIT
}

/* The reason for an Mbed TLS error code: the I/O error when the socket failed. */
static const char *tls_error(const struct exchange *x, int rc, char *buf, size_t size)
{
	if ((rc == MBEDTLS_ERR_SSL_TIMEOUT || rc == MBEDTLS_ERR_NET_SEND_FAILED ||
	     rc == MBEDTLS_ERR_NET_RECV_FAILED) && x->io_err)
		return x->io_err == ETIMEDOUT ? "timed out" : strerror(x->io_err);
	mbedtls_strerror(rc, buf, size);
	return buf;
}

static int load_ca(struct exchange *x, struct tls *t)
{
	char err[128];
	int rc = mbedtls_x509_crt_parse_file(&t->ca, x->q->ca_path);

	if (rc == MBEDTLS_ERR_PK_FILE_IO_ERROR) {
		FILE *f = fopen(x->q->ca_path, "re");
		int e = f ? EIO : errno;
		if (f)
			(void)fclose(f);
		return fail(x, -e, "cannot read the CA certificates %s: %s", x->q->ca_path, strerror(e));
	}
	if (rc < 0 || t->ca.version == 0) {
		mbedtls_strerror(rc, err, sizeof(err));
		return fail(x, -EBADMSG, "no CA certificate in %s: %s", x->q->ca_path, rc < 0 ? err : "none parsed");
	}
	return 0;
}

static int tls_setup(struct exchange *x, struct tls *t)
{
	static const char pers[] = "hyperlight-device-plugin label-node";
	char err[128];
	int rc;

	rc = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy, (const unsigned char *)pers,
				   sizeof(pers) - 1);
	if (rc == 0)
		rc = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
						 MBEDTLS_SSL_PRESET_DEFAULT);
	if (rc != 0) {
		mbedtls_strerror(rc, err, sizeof(err));
		return fail(x, -EPROTO, "cannot set up TLS: %s", err);
	}
	mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
	mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
	mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
	mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
	rc = mbedtls_ssl_setup(&t->ssl, &t->conf);
	/* A name: SNI, and Mbed TLS checks the certificate names it. An address: checked below. */
	if (rc == 0 && !x->url.ip_len)
		rc = mbedtls_ssl_set_hostname(&t->ssl, x->url.host);
	if (rc != 0) {
		mbedtls_strerror(rc, err, sizeof(err));
		return fail(x, -EPROTO, "cannot set up TLS: %s", err);
	}
	mbedtls_ssl_set_bio(&t->ssl, x, bio_send, bio_recv, NULL);
	return 0;
}

/* An iPAddress entry of the certificate's subjectAltName equal to the address connected to. */
static bool names_ip(const mbedtls_x509_crt *crt, const struct url *u)
{
	for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s && s->buf.p; s = s->next)
		if (s->buf.tag == SAN_IP_TAG && s->buf.len == u->ip_len && memcmp(s->buf.p, u->ip, u->ip_len) == 0)
			return true;
	return false;
}

static int handshake(struct exchange *x, struct tls *t)
{
	char err[256];
	int rc = mbedtls_ssl_handshake(&t->ssl);

	if (rc == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
		uint32_t flags = mbedtls_ssl_get_verify_result(&t->ssl);
		int n = mbedtls_x509_crt_verify_info(err, sizeof(err), "", flags);
		while (n > 0 && err[n - 1] == '\n')
			err[--n] = '\0';
		for (char *c = err; *c; c++)
			if (*c == '\n')
				*c = ';';
		return fail(x, (flags & MBEDTLS_X509_BADCERT_CN_MISMATCH) ? -EPERM : -EPROTO,
			    "TLS handshake with %s port %s: certificate rejected: %s", x->url.host, x->url.port, err);
	}
	if (rc != 0)
		return fail(x, rc == MBEDTLS_ERR_SSL_TIMEOUT && x->io_err == ETIMEDOUT ? -ETIMEDOUT : -EPROTO,
			    "TLS handshake with %s port %s failed: %s", x->url.host, x->url.port,
			    tls_error(x, rc, err, sizeof(err)));
	if (x->url.ip_len && !names_ip(mbedtls_ssl_get_peer_cert(&t->ssl), &x->url))
		return fail(x, -EPERM, "TLS handshake with %s port %s: certificate rejected: no subjectAltName "
			    "IP address %s in it", x->url.host, x->url.port, x->url.host);
	return 0;
}

/* ---------------------------------------------------------------- HTTP */

static int render_request(const struct exchange *x, dp_buf *b)
{
	const dp_https_request *q = x->q;
	bool default_port = strcmp(x->url.port, "443") == 0;

	dp_buf_printf(b, "%s %s HTTP/1.1\r\nHost: %s%s%s%s%s\r\n", q->method, x->url.path, x->url.v6 ? "[" : "",
		      x->url.host, x->url.v6 ? "]" : "", default_port ? "" : ":", default_port ? "" : x->url.port);
	for (const char *const *h = q->headers; h && *h; h++)
		dp_buf_printf(b, "%s\r\n", *h);
	dp_buf_printf(b, "Content-Length: %zu\r\nConnection: close\r\n\r\n", q->body_len);
	dp_buf_append(b, q->body, q->body_len);
	return b->oom ? -ENOMEM : 0;
}

static int send_all(struct exchange *x, struct tls *t, const dp_buf *b)
{
	char err[128];

	for (size_t off = 0; off < b->len;) {
		int n = mbedtls_ssl_write(&t->ssl, (const unsigned char *)b->data + off, b->len - off);
		if (n < 0)
			return fail(x, x->io_err == ETIMEDOUT ? -ETIMEDOUT : -EPROTO, "sending the request to %s port %s: %s",
				    x->url.host, x->url.port, tls_error(x, n, err, sizeof(err)));
		off += (size_t)n;
	}
	return 0;
}

/* The answer's bytes so far: buf[len], of cap. */
struct answer {
	char *buf;
	size_t len, cap;
};

/* Reads until the answer's header block and its excerpt (q->body_max 0), or its whole body, are
 * complete, or the peer closes; *closed: it did. */
static int read_answer(struct exchange *x, struct tls *t, struct answer *a, dp_http_response *ret, bool *closed)
{
	dp_http_response r;
	char err[128];
	int k = -EAGAIN, n = 0;

	while (a->len < a->cap) {
		n = mbedtls_ssl_read(&t->ssl, (unsigned char *)a->buf + a->len, a->cap - a->len);
		if (n <= 0)
			break;
		a->len += (size_t)n;
		k = dp_http_response_parse(a->buf, a->len, &r);
		if (k == -EBADMSG || (k == 0 && (r.body_done || (!x->q->body_max && r.excerpt_len == DP_HTTP_EXCERPT_MAX))))
			break;
	}
	*closed = n == 0 || n == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY || n == MBEDTLS_ERR_SSL_CONN_EOF;
	if (k == -EAGAIN && n < 0 && !*closed)
		return fail(x, x->io_err == ETIMEDOUT ? -ETIMEDOUT : -EPROTO, "waiting for the answer from %s port %s: %s",
			    x->url.host, x->url.port, tls_error(x, n, err, sizeof(err)));
	if (k < 0)
		return fail(x, -EBADMSG, "%s port %s answered %s", x->url.host, x->url.port,
			    k == -EAGAIN ? "no complete HTTP header block before closing" : "no valid HTTP/1.x");
	*ret = r;
	return 0;
}

/* The whole body of the answer read into a (q->body_max set). */
static int take_body(struct exchange *x, const struct answer *a, bool closed, char **body, size_t *body_len)
{
	int k = dp_http_response_body(a->buf, a->len, closed || a->len == a->cap, x->q->body_max, body, body_len);

	if (k == -EFBIG || (k < 0 && a->len == a->cap))
		return fail(x, -EFBIG, "%s port %s answered a body over %zu bytes", x->url.host, x->url.port,
			    x->q->body_max);
	if (k == -ENOMEM)
		return fail(x, k, "out of memory");
	if (k < 0)
		return fail(x, -EBADMSG, "%s port %s answered %s", x->url.host, x->url.port,
			    k == -EAGAIN ? "a body cut short" : "a malformed body");
	return 0;
}

static int exchange(const dp_https_request *q, dp_http_response *ret, char **body, size_t *body_len, char *why,
		    size_t why_size)
{
	_cleanup_(dp_buf_done) dp_buf req = { 0 };
	struct exchange x = { .q = q, .fd = -1, .why = why, .why_size = why_size };
	struct answer a = { .cap = ANSWER_MAX };
	dp_http_response resp;
	bool closed = false;
	struct tls t;
	int r;

	if (q->body_max)
		a.cap = DP_HTTP_HEAD_MAX + 2 * q->body_max + 4096; /* chunk framing included */
	x.deadline = dp_now_usec() + (uint64_t)q->timeout_ms * USEC_PER_MSEC;
	tls_init(&t);
	if ((r = parse_url(&x)) < 0 || (r = load_ca(&x, &t)) < 0)
		goto out;
	if (render_request(&x, &req) < 0 || !(a.buf = malloc(a.cap))) {
		r = fail(&x, -ENOMEM, "out of memory");
		goto out;
	}
	if ((r = tcp_connect(&x)) < 0 || (r = tls_setup(&x, &t)) < 0 || (r = handshake(&x, &t)) < 0 ||
	    (r = send_all(&x, &t, &req)) < 0 || (r = read_answer(&x, &t, &a, &resp, &closed)) < 0)
		goto out;
	if (q->body_max && (r = take_body(&x, &a, closed, body, body_len)) < 0)
		goto out;
	*ret = resp;
	(void)mbedtls_ssl_close_notify(&t.ssl);
out:
	tls_free(&t);
	free(a.buf);
	if (x.fd >= 0)
		close(x.fd);
	if (req.data)
		explicit_bzero(req.data, req.cap);
	return r;
}

int dp_https_send(const dp_https_request *q, dp_http_response *ret, char *why, size_t why_size)
{
	dp_https_request one = *q;

	one.body_max = 0;
	return exchange(&one, ret, NULL, NULL, why, why_size);
}

int dp_https_fetch(const dp_https_request *q, dp_http_response *ret, char **body, size_t *body_len, char *why,
		   size_t why_size)
{
	if (!q->body_max || q->body_max > DP_HTTPS_BODY_MAX)
		return -EINVAL;
	return exchange(q, ret, body, body_len, why, why_size);
}
