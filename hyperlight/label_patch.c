/* SPDX-License-Identifier: Apache-2.0 */
/*
 * label_patch: one blocking libcurl easy transfer in the helper child. libcurl is loaded with
 * dlopen (never linked): <curl/curl.h> gives the types and constants only.
 */
#include "label_patch.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/buf.h"
#include "dp/macro.h"
#include "dp_version.h"

#define USER_AGENT "hyperlight-device-plugin/" DP_VERSION
#define TOKEN_MAX 16384

/* The libcurl functions we call, typed from the header. */
struct curl_fns {
	__typeof__(curl_global_init) *global_init;
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_perform) *easy_perform;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_slist_append) *slist_append;
};

/* The response: the start of its body. */
struct excerpt {
	char text[HL_LABEL_EXCERPT_MAX + 1];
	size_t len;
};

/* dlopen + dlsym of every function in curl_fns; false with the reply written. The handle is
 * never closed: the process exits after one request. */
static bool load_curl(struct curl_fns *c)
{
	void *h = dlopen(HL_CURL_SONAME, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		dp_helper_reply_fail("cannot load " HL_CURL_SONAME ": %s", dlerror());
		return false;
	}
#define LOAD(field, name)                                                                  \
	do {                                                                               \
		if (!(c->field = (__typeof__(c->field))dlsym(h, name))) {                  \
			dp_helper_reply_fail(HL_CURL_SONAME " lacks " name ": %s", dlerror()); \
			return false;                                                      \
		}                                                                          \
	} while (0)
	LOAD(global_init, "curl_global_init");
	LOAD(easy_init, "curl_easy_init");
	LOAD(easy_setopt, "curl_easy_setopt");
	LOAD(easy_perform, "curl_easy_perform");
	LOAD(easy_getinfo, "curl_easy_getinfo");
	LOAD(easy_strerror, "curl_easy_strerror");
	LOAD(slist_append, "curl_slist_append");
#undef LOAD
	return true;
}

/* The token, trailing whitespace trimmed. -ENOENT and other open/read errors, -EFBIG at
 * size - 1 bytes or more, -EBADMSG when empty or holding bytes that cannot go into an HTTP
 * header. */
static int read_token(const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	size_t n = 0;
	ssize_t k;

	if (fd < 0)
		return -errno;
	while ((k = read(fd, buf + n, size - 1 - n)) != 0) {
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		n += (size_t)k;
		if (n == size - 1)
			return -EFBIG;
	}
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	if (n == 0)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] <= ' ' || (unsigned char)buf[i] >= 0x7f)
			return -EBADMSG;
	return 0;
}

/* {"metadata":{"labels":{"hyperlight.dev/enabled":"true","hyperlight.dev/hypervisor":"kvm"}}} */
static int render_body(dp_buf *b, const char *hypervisor)
{
	dp_buf_puts(b, "{\"metadata\":{\"labels\":{");
	dp_buf_json_string(b, HL_LABEL_ENABLED);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, "true");
	dp_buf_puts(b, ",");
	dp_buf_json_string(b, HL_LABEL_HYPERVISOR);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, hypervisor);
	dp_buf_puts(b, "}}}");
	return b->oom ? -ENOMEM : 0;
}

/* CURLOPT_WRITEFUNCTION: keep the first bytes, printable ASCII only; read and drop the rest. */
static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct excerpt *x = userdata;
	size_t n = size * nmemb, room = HL_LABEL_EXCERPT_MAX - x->len;
	size_t take = n < room ? n : room;

	for (size_t i = 0; i < take; i++) {
		unsigned char c = (unsigned char)ptr[i];
		x->text[x->len++] = (char)(c < ' ' || c >= 0x7f ? '.' : c);
	}
	x->text[x->len] = '\0';
	return n;
}

/* The request headers; NULL when out of memory. The list is never freed: the process exits. */
static struct curl_slist *make_headers(const struct curl_fns *c, const char *token)
{
	struct curl_slist *h = NULL, *t;
	_cleanup_free_ char *auth = NULL;

	if (asprintf(&auth, "Authorization: Bearer %s", token) < 0)
		return NULL;
	const char *lines[] = { "Content-Type: application/merge-patch+json", "Accept: application/json",
				"Expect:", auth };
	for (size_t i = 0; i < DP_ELEMENTSOF(lines); i++) {
		if (!(t = c->slist_append(h, lines[i])))
			return NULL;
		h = t;
	}
	explicit_bzero(auth, strlen(auth));
	return h;
}

struct request {
	const char *url, *ca_path;
	const dp_buf *body;
	struct curl_slist *headers;
	struct excerpt excerpt;
	char errbuf[CURL_ERROR_SIZE];
};

static CURLcode configure(const struct curl_fns *c, CURL *e, struct request *q)
{
	CURLcode rc = CURLE_OK;
#define SET(opt, val) \
	if (rc == CURLE_OK) \
		rc = c->easy_setopt(e, opt, val)
	SET(CURLOPT_URL, q->url);
	SET(CURLOPT_PROTOCOLS_STR, "https");
	SET(CURLOPT_CUSTOMREQUEST, "PATCH");
	SET(CURLOPT_POSTFIELDS, q->body->data);
	SET(CURLOPT_POSTFIELDSIZE, (long)q->body->len);
	SET(CURLOPT_HTTPHEADER, q->headers);
	SET(CURLOPT_USERAGENT, USER_AGENT);
	SET(CURLOPT_CAINFO, q->ca_path);
	SET(CURLOPT_CAPATH, (char *)NULL); /* trust the cluster CA only */
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, HL_LABEL_CONNECT_TIMEOUT_MS);
	SET(CURLOPT_TIMEOUT_MS, HL_LABEL_TRANSFER_TIMEOUT_MS);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, &q->excerpt);
	SET(CURLOPT_ERRORBUFFER, q->errbuf);
#undef SET
	return rc;
}

/* One PATCH; writes the reply. */
static void send_patch(const struct curl_fns *c, struct request *q)
{
	long status = 0;
	CURLcode rc;
	CURL *e;

	if ((rc = c->global_init(CURL_GLOBAL_DEFAULT)) != CURLE_OK || !(e = c->easy_init())) {
		dp_helper_reply_fail("cannot initialise libcurl: %s",
				     rc != CURLE_OK ? c->easy_strerror(rc) : "out of memory");
		return;
	}
	if ((rc = configure(c, e, q)) != CURLE_OK) {
		dp_helper_reply_fail("cannot set up the request: %s", c->easy_strerror(rc));
		return;
	}
	rc = c->easy_perform(e);
	if (rc != CURLE_OK) {
		dp_helper_reply_fail("%s", q->errbuf[0] ? q->errbuf : c->easy_strerror(rc));
		return;
	}
	(void)c->easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200 || status == 201) {
		char detail[32];
		snprintf(detail, sizeof(detail), "status=%ld", status);
		dp_helper_reply_ok(detail);
	} else {
		dp_helper_reply_fail("status=%ld body=%s", status, q->excerpt.text);
	}
}

/* label-node <url> <token path> <ca path> <hypervisor> */
static void entry_label_node(int argc, char **argv)
{
	_cleanup_(dp_buf_done) dp_buf body = { 0 };
	struct curl_fns c;
	char token[TOKEN_MAX];
	struct request q;
	int r;

	if (argc != 5) {
		dp_helper_reply_fail("invalid " HL_LABEL_HELPER " arguments: <url> <token path> <ca path> <hypervisor>");
		return;
	}
	r = read_token(argv[2], token, sizeof(token));
	if (r < 0) {
		dp_helper_reply_fail("cannot read the service account token %s: %s", argv[2],
				     r == -EBADMSG ? "empty or not printable" : strerror(-r));
		return;
	}
	if (render_body(&body, argv[4]) < 0) {
		explicit_bzero(token, sizeof(token));
		dp_helper_reply_fail("out of memory");
		return;
	}
	if (!load_curl(&c)) {
		explicit_bzero(token, sizeof(token));
		return;
	}
	q = (struct request){ .url = argv[1], .ca_path = argv[3], .body = &body };
	q.headers = make_headers(&c, token);
	explicit_bzero(token, sizeof(token));
	if (!q.headers) {
		dp_helper_reply_fail("out of memory");
		return;
	}
	send_patch(&c, &q);
}

const dp_helper_entry hl_label_helper = { HL_LABEL_HELPER, entry_label_node };
