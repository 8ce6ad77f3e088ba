/* SPDX-License-Identifier: Apache-2.0 */
/*
 * labels: one JSON merge patch of this node's labels, sent with libcurl's multi interface
 * driven by the core loop (CURLMOPT_SOCKETFUNCTION -> dp_io sources, CURLMOPT_TIMERFUNCTION ->
 * a dp timer). One attempt at a time; a failed one is retried after a back-off.
 */
#include "labels.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/buf.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "dp_version.h"

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define SA_TOKEN SA_DIR "/token"
#define SA_CA SA_DIR "/ca.crt"
#define LABEL_ENABLED "hyperlight.dev/enabled"
#define LABEL_HYPERVISOR "hyperlight.dev/hypervisor"
#define USER_AGENT "hyperlight-device-plugin/" DP_VERSION

#define CONNECT_TIMEOUT_MS 5000L
#define TRANSFER_TIMEOUT_MS 15000L
#define BACKOFF_FIRST_USEC (1 * DP_USEC_PER_SEC)
#define BACKOFF_MAX_USEC (300 * DP_USEC_PER_SEC)
#define EXCERPT_MAX 200
#define TOKEN_MAX 16384
#define DNS_SUBDOMAIN_MAX 253
#define LABEL_VALUE_MAX 63

/* One socket curl asked us to watch (curl_multi_assign'ed to it). */
struct hl_sock {
	dp_source *src;
	struct hl_sock *next;
};

struct hl_labels {
	dp_loop *loop;
	CURLM *multi;               /* NULL once labelled */
	CURL *easy;                 /* the attempt in flight, or NULL */
	struct curl_slist *headers; /* the in-flight attempt's headers (holds the token) */
	dp_source *curl_timer;      /* CURLMOPT_TIMERFUNCTION */
	dp_source *retry;           /* the next attempt */
	struct hl_sock *socks;
	char *node;
	char *url;
	char hypervisor[LABEL_VALUE_MAX + 1];
	char token_path[PATH_MAX];
	char ca_path[PATH_MAX];
	dp_buf body;
	char excerpt[EXCERPT_MAX + 1]; /* start of the response body */
	size_t excerpt_len;
	char errbuf[CURL_ERROR_SIZE];
	uint64_t backoff_usec;
	unsigned attempts;
	bool done;
};

DP_DEFINE_CLEANUP(hl_labels, hl_labels_free)

/* ---------------------------------------------------------------- configuration */

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool is_alnum(char c)
{
	return is_lower_alnum(c) || (c >= 'A' && c <= 'Z');
}

/* Kubernetes' IsDNS1123Subdomain: dot-separated [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 253 bytes. */
static bool dns_subdomain(const char *s)
{
	size_t n = strlen(s);
	bool at_start = true;

	if (n == 0 || n > DNS_SUBDOMAIN_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '.') {
			if (at_start || s[i - 1] == '-')
				return false;
			at_start = true;
			continue;
		}
		if (c == '-' ? at_start : !is_lower_alnum(c))
			return false;
		at_start = false;
	}
	return !at_start && s[n - 1] != '-';
}

/* A non-empty Kubernetes label value: (([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?, <= 63. */
static bool label_value(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > LABEL_VALUE_MAX || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

/* A host name or IPv4 literal as it may appear in a URL: [A-Za-z0-9.-], <= 253 bytes. */
static bool url_host(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > DNS_SUBDOMAIN_MAX || s[0] == '-' || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '.')
			return false;
	return true;
}

static bool tcp_port(const char *s)
{
	unsigned long v = 0;

	if (!*s || strlen(s) > 5)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v >= 1 && v <= 65535 && s[0] != '0';
}

static bool file_exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* https://HOST:PORT/api/v1/nodes/NODE; HOST bracketed when it is an IPv6 literal. Returns 0,
 * 1 (inactive: why says so, logged at info), 2 (invalid: logged at warn) or -ENOMEM. */
static int api_url(const char *node, char **ret, char *why, size_t size)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	const char *port = getenv("KUBERNETES_SERVICE_PORT");
	struct in6_addr a6;
	char *url;
	int n;

	if (!host || !*host || !port || !*port) {
		snprintf(why, size, "%s is not set (not running in a cluster)",
			 !host || !*host ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT");
		return 1;
	}
	bool v6 = inet_pton(AF_INET6, host, &a6) == 1;
	if (!v6 && !url_host(host)) {
		snprintf(why, size, "KUBERNETES_SERVICE_HOST is not an IP address or host name");
		return 2;
	}
	if (!tcp_port(port)) {
		snprintf(why, size, "KUBERNETES_SERVICE_PORT is not a port number (1..65535)");
		return 2;
	}
	n = asprintf(&url, "https://%s%s%s:%s/api/v1/nodes/%s", v6 ? "[" : "", host, v6 ? "]" : "",
		     port, node);
	if (n < 0)
		return -ENOMEM;
	*ret = url;
	return 0;
}

/* Fills node, url, token_path and ca_path. Returns 0 (active), 1 / 2 (inactive, see api_url),
 * or a negative errno (-ENOMEM; -EINVAL / -ENAMETOOLONG from an unusable root prefix). */
static int load_config(hl_labels *l, char *why, size_t size)
{
	const char *node = getenv("NODE_NAME");
	int r;

	if (!node || !*node) {
		snprintf(why, size, "NODE_NAME is not set");
		return 1;
	}
	if (!dns_subdomain(node)) {
		snprintf(why, size, "NODE_NAME is not a valid node name (DNS subdomain: lower-case "
				    "letters, digits, '-' and '.', at most 253 bytes)");
		return 2;
	}
	if ((r = dp_path(l->token_path, sizeof(l->token_path), SA_TOKEN)) < 0 ||
	    (r = dp_path(l->ca_path, sizeof(l->ca_path), SA_CA)) < 0)
		return r;
	if (!file_exists(l->token_path) || !file_exists(l->ca_path)) {
		snprintf(why, size, "no service account mounted (%s missing)",
			 file_exists(l->token_path) ? SA_CA : SA_TOKEN);
		return 1;
	}
	if (!(l->node = strdup(node)))
		return -ENOMEM;
	return api_url(node, &l->url, why, size);
}

/* {"metadata":{"labels":{"hyperlight.dev/enabled":"true","hyperlight.dev/hypervisor":"kvm"}}} */
static int render_body(dp_buf *b, const char *hypervisor)
{
	dp_buf_puts(b, "{\"metadata\":{\"labels\":{");
	dp_buf_json_string(b, LABEL_ENABLED);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, "true");
	dp_buf_puts(b, ",");
	dp_buf_json_string(b, LABEL_HYPERVISOR);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, hypervisor);
	dp_buf_puts(b, "}}}");
	return b->oom ? -ENOMEM : 0;
}

/* ---------------------------------------------------------------- curl <-> loop */

static int on_socket_event(dp_source *s, int fd, uint32_t revents, void *userdata);

static int sock_events(int what)
{
	return (what & CURL_POLL_IN ? EPOLLIN : 0) | (what & CURL_POLL_OUT ? EPOLLOUT : 0);
}

static void sock_remove(hl_labels *l, struct hl_sock *hs)
{
	for (struct hl_sock **p = &l->socks; *p; p = &(*p)->next)
		if (*p == hs) {
			*p = hs->next;
			break;
		}
	dp_source_free(hs->src);
	free(hs);
}

static void set_cloexec(int fd)
{
	int flags = fcntl(fd, F_GETFD);
	if (flags >= 0 && !(flags & FD_CLOEXEC))
		(void)fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

/* Watch a socket curl announced for the first time. */
static int sock_add(hl_labels *l, curl_socket_t fd, int what)
{
	struct hl_sock *hs = calloc(1, sizeof(*hs));
	int r;

	if (!hs)
		return -ENOMEM;
	r = dp_io_add(l->loop, fd, (uint32_t)sock_events(what), on_socket_event, l, &hs->src);
	if (r < 0) {
		free(hs);
		return r;
	}
	hs->next = l->socks;
	l->socks = hs;
	if (curl_multi_assign(l->multi, fd, hs) != CURLM_OK) {
		sock_remove(l, hs);
		return -EIO;
	}
	set_cloexec(fd); /* sockets curl made itself (the threaded resolver's socketpair) lack it */
	return 0;
}

/* CURLMOPT_SOCKETFUNCTION. Returns 0, or -1 (curl then fails the transfer). */
static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	static const char *const names[] = { "none", "in", "out", "inout", "remove" };
	hl_labels *l = userp;
	struct hl_sock *hs = socketp;
	int r;

	dp_debug("node labels: curl socket", "fd=%d watch=%s", fd,
		 what >= 0 && what < (int)DP_ELEMENTSOF(names) ? names[what] : "?");
	if (what == CURL_POLL_REMOVE) {
		if (hs)
			sock_remove(l, hs);
		return 0;
	}
	r = hs ? dp_io_set_events(hs->src, (uint32_t)sock_events(what)) : sock_add(l, fd, what);
	if (r < 0) {
		dp_debug("node labels: cannot watch a curl socket", "fd=%d error=%s", fd, strerror(-r));
		return -1;
	}
	return 0;
}

/* CURLOPT_OPENSOCKETFUNCTION: curl's own socket() call does not set close-on-exec; the probe
 * helper is exec'ed from this process while a transfer may be in flight. */
static curl_socket_t on_open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a)
{
	int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static int on_curl_timer_fired(dp_source *s, void *userdata);

/* CURLMOPT_TIMERFUNCTION: -1 disarms, 0 means as soon as possible. Never calls into curl. */
static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	hl_labels *l = userp;
	uint64_t usec = timeout_ms > 0 ? (uint64_t)timeout_ms * DP_USEC_PER_MSEC : 0;
	int r;

	if (timeout_ms < 0)
		return l->curl_timer ? (dp_timer_set(l->curl_timer, 0, 0) < 0 ? -1 : 0) : 0;
	if (!l->curl_timer)
		r = dp_timer_add(l->loop, usec, 0, on_curl_timer_fired, l, &l->curl_timer);
	else
		r = usec ? dp_timer_set(l->curl_timer, usec, 0) : dp_timer_set_asap(l->curl_timer);
	return r < 0 ? -1 : 0;
}

static void attempt_finish(hl_labels *l, CURLcode res);

/* Hand finished transfers over; stops when a success tore the multi handle down. */
static void drain(hl_labels *l)
{
	CURLMsg *m;
	int left;

	while (l->multi && (m = curl_multi_info_read(l->multi, &left)))
		if (m->msg == CURLMSG_DONE && m->easy_handle == l->easy)
			attempt_finish(l, m->data.result);
}

static void socket_action(hl_labels *l, curl_socket_t fd, int ev_bitmask)
{
	int running;
	CURLMcode mc = curl_multi_socket_action(l->multi, fd, ev_bitmask, &running);
	if (mc != CURLM_OK)
		dp_debug("node labels: curl_multi_socket_action failed", "error=%s",
			 curl_multi_strerror(mc));
	drain(l);
}

static int on_socket_event(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	int ev = (revents & EPOLLIN ? CURL_CSELECT_IN : 0) | (revents & EPOLLOUT ? CURL_CSELECT_OUT : 0) |
		 (revents & (EPOLLERR | EPOLLHUP) ? CURL_CSELECT_ERR : 0);
	socket_action(userdata, fd, ev);
	return 0;
}

static int on_curl_timer_fired(dp_source *s, void *userdata)
{
	socket_action(userdata, CURL_SOCKET_TIMEOUT, 0);
	return 0;
}

/* ---------------------------------------------------------------- one attempt */

/* The token, re-read for every attempt (projected tokens rotate), trailing whitespace trimmed.
 * -ENOENT and other open/read errors, -EFBIG above TOKEN_MAX, -EBADMSG when empty or holding
 * bytes that cannot go into an HTTP header. */
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

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	hl_labels *l = userdata;
	size_t n = size * nmemb, room = EXCERPT_MAX - l->excerpt_len;
	size_t take = n < room ? n : room;

	memcpy(l->excerpt + l->excerpt_len, ptr, take);
	l->excerpt_len += take;
	l->excerpt[l->excerpt_len] = '\0';
	return n; /* the rest is read and dropped */
}

static struct curl_slist *make_headers(const char *token)
{
	struct curl_slist *h = NULL, *t;
	_cleanup_free_ char *auth = NULL;

	if (asprintf(&auth, "Authorization: Bearer %s", token) < 0)
		return NULL;
	const char *lines[] = { "Content-Type: application/merge-patch+json", "Accept: application/json",
				"Expect:", auth };
	for (size_t i = 0; i < DP_ELEMENTSOF(lines); i++) {
		if (!(t = curl_slist_append(h, lines[i]))) {
			curl_slist_free_all(h);
			return NULL;
		}
		h = t;
	}
	explicit_bzero(auth, strlen(auth));
	return h;
}

static CURLcode configure(hl_labels *l, CURL *e)
{
	CURLcode c = CURLE_OK;
#define SET(opt, val) \
	if (c == CURLE_OK) \
		c = curl_easy_setopt(e, opt, val)
	SET(CURLOPT_URL, l->url);
	SET(CURLOPT_PROTOCOLS_STR, "https");
	SET(CURLOPT_CUSTOMREQUEST, "PATCH");
	SET(CURLOPT_POSTFIELDS, l->body.data);
	SET(CURLOPT_POSTFIELDSIZE, (long)l->body.len);
	SET(CURLOPT_HTTPHEADER, l->headers);
	SET(CURLOPT_USERAGENT, USER_AGENT);
	SET(CURLOPT_CAINFO, l->ca_path);
	SET(CURLOPT_CAPATH, (char *)NULL); /* trust the cluster CA only */
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
	SET(CURLOPT_TIMEOUT_MS, TRANSFER_TIMEOUT_MS);
	SET(CURLOPT_FORBID_REUSE, 1L); /* nothing stays open between attempts */
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, l);
	SET(CURLOPT_ERRORBUFFER, l->errbuf);
	SET(CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
#undef SET
	return c;
}

static void attempt_release(hl_labels *l)
{
	if (l->easy) {
		curl_multi_remove_handle(l->multi, l->easy);
		curl_easy_cleanup(l->easy);
		l->easy = NULL;
	}
	curl_slist_free_all(l->headers);
	l->headers = NULL;
}

/* Releases every curl resource and every source (the multi handle's callbacks may run). */
static void teardown(hl_labels *l)
{
	attempt_release(l);
	if (l->multi) {
		curl_multi_cleanup(l->multi);
		l->multi = NULL;
	}
	while (l->socks)
		sock_remove(l, l->socks);
	l->curl_timer = dp_source_free(l->curl_timer);
	l->retry = dp_source_free(l->retry);
}

static void schedule_retry(hl_labels *l)
{
	uint64_t delay = l->backoff_usec;
	int r;

	l->backoff_usec = delay >= BACKOFF_MAX_USEC / 2 ? BACKOFF_MAX_USEC : delay * 2;
	r = dp_timer_set(l->retry, delay, 0);
	if (r < 0)
		dp_warn("node labelling stopped: cannot arm the retry timer", "node=%s error=%s", l->node,
			strerror(-r));
}

/* Log a failed attempt (status 0: transport error) and schedule the next one. */
static void attempt_failed(hl_labels *l, long status, const char *error)
{
	char body[EXCERPT_MAX + 1], q[3 * EXCERPT_MAX + 8], qe[CURL_ERROR_SIZE + 64];
	unsigned long long retry_s = (unsigned long long)(l->backoff_usec / DP_USEC_PER_SEC);

	for (size_t i = 0; i <= l->excerpt_len; i++) {
		unsigned char c = (unsigned char)l->excerpt[i];
		body[i] = (char)((c && (c < ' ' || c >= 0x7f)) ? '.' : c);
	}
	if (status)
		dp_warn("node labelling failed", "node=%s attempt=%u status=%ld body=%s retry_in=%llus",
			l->node, l->attempts, status, dp_logq(q, sizeof(q), body), retry_s);
	else
		dp_warn("node labelling failed", "node=%s attempt=%u error=%s retry_in=%llus", l->node,
			l->attempts, dp_logq(qe, sizeof(qe), error), retry_s);
	schedule_retry(l);
}

static void attempt_finish(hl_labels *l, CURLcode res)
{
	long status = 0;

	if (res == CURLE_OK)
		curl_easy_getinfo(l->easy, CURLINFO_RESPONSE_CODE, &status);
	dp_debug("node labels: attempt finished", "attempt=%u result=%d status=%ld", l->attempts, res, status);
	if (res == CURLE_OK && (status == 200 || status == 201)) {
		l->done = true;
		dp_info("node labelled", "node=%s " LABEL_ENABLED "=true " LABEL_HYPERVISOR "=%s attempts=%u",
			l->node, l->hypervisor, l->attempts);
		teardown(l);
		return;
	}
	char error[CURL_ERROR_SIZE + 64] = "";
	if (res != CURLE_OK)
		snprintf(error, sizeof(error), "%s", l->errbuf[0] ? l->errbuf : curl_easy_strerror(res));
	attempt_release(l);
	attempt_failed(l, res == CURLE_OK ? status : 0, error);
}

/* Start one attempt. Failures before the transfer starts (token unreadable, out of memory)
 * count as failed attempts. */
static int attempt_start(hl_labels *l)
{
	char token[TOKEN_MAX];
	int r;

	l->attempts++;
	l->excerpt_len = 0;
	l->excerpt[0] = '\0';
	l->errbuf[0] = '\0';
	r = read_token(l->token_path, token, sizeof(token));
	if (r < 0) {
		char e[PATH_MAX + 64];
		snprintf(e, sizeof(e), "cannot read the service account token %s: %s", l->token_path,
			 r == -EBADMSG ? "empty or not printable" : strerror(-r));
		attempt_failed(l, 0, e);
		return r;
	}
	l->headers = make_headers(token);
	explicit_bzero(token, sizeof(token));
	if (!l->headers || !(l->easy = curl_easy_init()) || configure(l, l->easy) != CURLE_OK ||
	    curl_multi_add_handle(l->multi, l->easy) != CURLM_OK) {
		attempt_release(l);
		attempt_failed(l, 0, "cannot set up the request (out of memory?)");
		return -ENOMEM;
	}
	dp_debug("node labels: attempt started", "attempt=%u url=%s", l->attempts, l->url);
	return 0;
}

static int on_retry(dp_source *s, void *userdata)
{
	hl_labels *l = userdata;
	if (!l->easy && !l->done)
		(void)attempt_start(l);
	return 0;
}

/* ---------------------------------------------------------------- API */

static int cmp_int(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

static int curl_global(void)
{
	static bool initialised;
	if (initialised)
		return 0;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -EIO;
	initialised = true;
	return 0;
}

/* The fd a /proc/self/fd entry names, or -1 ("." and ".."). */
static int fd_of(const char *name)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(name, &end, 10);
	return errno || end == name || *end || v < 0 || v > INT_MAX ? -1 : (int)v;
}

/* The fds open now, ascending (readdir of /proc/self/fd). */
static int list_fds(int **ret, size_t *ret_n)
{
	_cleanup_free_ int *fds = NULL;
	size_t n = 0, cap = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		int fd = fd_of(e->d_name);
		if (fd < 0 || fd == dirfd(d))
			continue;
		if (n == cap) {
			int *p = reallocarray(fds, cap = cap ? 2 * cap : 64, sizeof(*fds));
			if (!p) {
				closedir(d);
				return -ENOMEM;
			}
			fds = p;
		}
		fds[n++] = fd;
	}
	closedir(d);
	if (n > 0) /* fds is NULL when n == 0: qsort's pointer must not be */
		qsort(fds, n, sizeof(*fds), cmp_int);
	*ret = TAKE_PTR(fds);
	*ret_n = n;
	return 0;
}

/* curl_multi_init() makes a wakeup socketpair without close-on-exec (curl 7.88 has no option
 * for it): mark every fd it opened, the probe helper must not inherit them. */
static CURLM *multi_init_cloexec(void)
{
	_cleanup_free_ int *before = NULL, *after = NULL;
	size_t nb = 0, na = 0;
	int r = list_fds(&before, &nb);
	CURLM *m = curl_multi_init();

	if (!m || r < 0 || (r = list_fds(&after, &na)) < 0) {
		if (m)
			dp_debug("node labels: cannot list the fds curl opened", "error=%s", strerror(-r));
		return m;
	}
	for (size_t i = 0; i < na; i++)
		if (nb == 0 || !bsearch(&after[i], before, nb, sizeof(*before), cmp_int))
			set_cloexec(after[i]);
	return m;
}

static int multi_new(hl_labels *l)
{
	if (!(l->multi = multi_init_cloexec()))
		return -ENOMEM;
	if (curl_multi_setopt(l->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket) != CURLM_OK ||
	    curl_multi_setopt(l->multi, CURLMOPT_SOCKETDATA, l) != CURLM_OK ||
	    curl_multi_setopt(l->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer) != CURLM_OK ||
	    curl_multi_setopt(l->multi, CURLMOPT_TIMERDATA, l) != CURLM_OK)
		return -EIO;
	return 0;
}

int hl_labels_start(dp_loop *loop, const char *hypervisor, hl_labels **ret)
{
	_cleanup_(hl_labels_freep) hl_labels *l = NULL;
	char why[256], q[300];
	int r;

	if (!loop || !ret || !label_value(hypervisor))
		return -EINVAL;
	if (!(l = calloc(1, sizeof(*l))))
		return -ENOMEM;
	l->loop = loop;
	l->backoff_usec = BACKOFF_FIRST_USEC;
	snprintf(l->hypervisor, sizeof(l->hypervisor), "%s", hypervisor);
	r = load_config(l, why, sizeof(why));
	if (r < 0)
		return r;
	if (r > 0) {
		dp_log(r == 1 ? DP_LOG_INFO : DP_LOG_WARN, "node labelling disabled", "reason=%s",
		       dp_logq(q, sizeof(q), why));
		*ret = NULL;
		return 0;
	}
	if ((r = render_body(&l->body, hypervisor)) < 0 || (r = curl_global()) < 0 || (r = multi_new(l)) < 0)
		return r;
	/* The first attempt runs from the loop: nothing here touches the network. */
	r = dp_timer_add(loop, 0, 0, on_retry, l, &l->retry);
	if (r < 0)
		return r;
	dp_info("node labelling enabled", "node=%s api=%s " LABEL_HYPERVISOR "=%s", l->node, l->url, hypervisor);
	*ret = TAKE_PTR(l);
	return 0;
}

hl_labels *hl_labels_free(hl_labels *l)
{
	if (!l)
		return NULL;
	teardown(l);
	dp_buf_done(&l->body);
	free(l->url);
	free(l->node);
	free(l);
	return NULL;
}

bool hl_labels_done(const hl_labels *l)
{
	return l && l->done;
}
