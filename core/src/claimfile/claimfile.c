/* SPDX-License-Identifier: Apache-2.0 */
/* claimfile: a claim's allocation as a small text file, written atomically, read strictly. */
#include "dp/claimfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/buf.h"
#include "dp/kubeenv.h"
#include "dp/macro.h"

#define HEADER "sdp-claim 1\n"
#define FAIL(err, ...) (snprintf(why, why_size, __VA_ARGS__), (err))

static bool request_valid(const char *s)
{
	char a[DP_DRACLAIM_REQUEST_MAX + 1];
	const char *slash = strchr(s, '/');

	if (strlen(s) > DP_DRACLAIM_REQUEST_MAX)
		return false;
	if (!slash)
		return dp_kube_dns_label(s);
	memcpy(a, s, (size_t)(slash - s));
	a[slash - s] = '\0';
	return dp_kube_dns_label(a) && dp_kube_dns_label(slash + 1);
}

bool dp_claimfile_result_valid(const dp_draclaim_result *r, char *why, size_t why_size)
{
	if (!request_valid(r->request))
		return FAIL(false, "request name \"%.*s\" is not one or two DNS labels joined by '/'", 130, r->request);
	if (!dp_kube_dns_label(r->device))
		return FAIL(false, "device name \"%.*s\" is not a DNS label", 70, r->device);
	if ((r->share_id[0] && !dp_kube_uid(r->share_id, DP_DRACLAIM_SHARE_MAX)))
		return FAIL(false, "share ID \"%.*s\" is not a UID", 70, r->share_id);
	return true;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* The rename made durable: the directory holding path fsync'd (best effort). */
static void sync_dir(const char *path)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 0;

	if (n >= sizeof(dir))
		return;
	memcpy(dir, slash ? path : ".", slash ? n : 1);
	dir[slash ? (n ? n : 1) : 1] = '\0';
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0)
		(void)fsync(fd);
}

int dp_claimfile_write(const char *path, const dp_draclaim *c)
{
	_cleanup_(dp_buf_done) dp_buf b = { 0 };
	char tmp[PATH_MAX], why[8];
	int r;

	if (!c || c->n == 0 || c->n > DP_DRACLAIM_RESULTS_MAX)
		return -EINVAL;
	dp_buf_puts(&b, HEADER);
	for (size_t i = 0; i < c->n; i++) {
		const dp_draclaim_result *x = &c->results[i];
		if (!dp_claimfile_result_valid(x, why, sizeof(why)))
			return -EINVAL;
		dp_buf_printf(&b, "%s\t%s\t%s\t%d\n", x->request, x->device, x->share_id, x->admin_access);
	}
	if (b.oom)
		return -ENOMEM;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if ((r = write_all(fd, b.data, b.len)) < 0 || (fsync(fd) < 0 && (r = -errno)) ||
	    (rename(tmp, path) < 0 && (r = -errno))) {
		unlink(tmp);
		return r;
	}
	sync_dir(path);
	return 0;
}

/* One result line (NUL-terminated, no newline) into *x. */
static int parse_line(char *line, dp_draclaim_result *x, char *why, size_t why_size)
{
	char *f[4] = { line, NULL, NULL, NULL };
	int n = 1;

	for (char *p = line; *p; p++) {
		if (*p != '\t')
			continue;
		if (n == 4)
			return FAIL(-EBADMSG, "not 4 tab-separated fields");
		*p = '\0';
		f[n++] = p + 1;
	}
	if (n != 4)
		return FAIL(-EBADMSG, "not 4 tab-separated fields");
	if (strlen(f[0]) > DP_DRACLAIM_REQUEST_MAX || strlen(f[1]) > DP_DRACLAIM_DEVICE_MAX ||
	    strlen(f[2]) > DP_DRACLAIM_SHARE_MAX || (strcmp(f[3], "0") != 0 && strcmp(f[3], "1") != 0))
		return FAIL(-EBADMSG, "a field too long, or admin access not 0 or 1");
	snprintf(x->request, sizeof(x->request), "%s", f[0]);
	snprintf(x->device, sizeof(x->device), "%s", f[1]);
	snprintf(x->share_id, sizeof(x->share_id), "%s", f[2]);
	x->admin_access = f[3][0] == '1';
	return dp_claimfile_result_valid(x, why, why_size) ? 0 : -EBADMSG;
}

static int read_file(const char *path, char *buf, size_t size, size_t *len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW);
	size_t n = 0;
	ssize_t k;

	if (fd < 0)
		return -errno;
	while ((k = read(fd, buf + n, size - n)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		n += (size_t)k;
		if (n == size)
			return -EFBIG;
	}
	buf[n] = '\0';
	*len = n;
	return 0;
}

int dp_claimfile_parse(char *buf, size_t len, dp_draclaim *ret, char *why, size_t why_size)
{
	dp_draclaim claim = { 0 }, *c = &claim;

	if (len > DP_CLAIMFILE_MAX)
		return FAIL(-EBADMSG, "over %u bytes", DP_CLAIMFILE_MAX);
	if (buf[len] != '\0' || strlen(buf) != len || strncmp(buf, HEADER, strlen(HEADER)) != 0)
		return FAIL(-EBADMSG, "no \"sdp-claim 1\" header, or a NUL byte");
	char *p = buf + strlen(HEADER);
	while (*p) {
		char *nl = strchr(p, '\n');
		if (!nl)
			return FAIL(-EBADMSG, "line %zu: no newline at its end", c->n + 2);
		if (c->n == DP_DRACLAIM_RESULTS_MAX)
			return FAIL(-EBADMSG, "more than %d results", DP_DRACLAIM_RESULTS_MAX);
		*nl = '\0';
		char w[160];
		if (parse_line(p, &c->results[c->n], w, sizeof(w)) < 0)
			return FAIL(-EBADMSG, "line %zu: %s", c->n + 2, w);
		c->n++;
		p = nl + 1;
	}
	if (c->n == 0)
		return FAIL(-EBADMSG, "no result");
	*ret = claim;
	return 0;
}

int dp_claimfile_read(const char *path, dp_draclaim *ret, char *why, size_t why_size)
{
	char buf[DP_CLAIMFILE_MAX + 2] = "";
	size_t len = 0;
	int r;

	if ((r = read_file(path, buf, DP_CLAIMFILE_MAX + 1, &len)) < 0)
		return r == -EFBIG ? FAIL(-EBADMSG, "over %u bytes", DP_CLAIMFILE_MAX) : r;
	return dp_claimfile_parse(buf, len, ret, why, why_size);
}
