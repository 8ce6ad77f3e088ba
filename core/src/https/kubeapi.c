/* SPDX-License-Identifier: Apache-2.0 */
/* kubeapi: bearer-token JSON calls to the API server, one HTTPS exchange each. */
#include "dp/kubeapi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/macro.h"

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

int dp_kubeapi_init(dp_kubeapi *a, const char *api, const char *token_path, const char *ca_path,
		    const char *user_agent)
{
	char token[DP_KUBEAPI_TOKEN_MAX];
	int r = read_token(token_path, token, sizeof(token));

	if (r == 0) {
		a->api = api;
		a->ca_path = ca_path;
		a->user_agent = user_agent;
		snprintf(a->auth, sizeof(a->auth), "Authorization: Bearer %s", token);
	}
	explicit_bzero(token, sizeof(token));
	return r;
}

void dp_kubeapi_done(dp_kubeapi *a)
{
	explicit_bzero(a->auth, sizeof(a->auth));
}

int dp_kubeapi_call(const dp_kubeapi *a, const char *method, const char *path, const char *json, size_t json_len,
		    size_t body_max, int *status, char **body, size_t *body_len, char *why, size_t why_size)
{
	const char *headers[] = { a->user_agent, "Accept: application/json", a->auth,
				  json ? "Content-Type: application/json" : NULL, NULL };
	_cleanup_free_ char *url = NULL;
	dp_http_response r;
	int k;

	if (asprintf(&url, "%s%s", a->api, path) < 0) {
		url = NULL;
		snprintf(why, why_size, "out of memory");
		return -ENOMEM;
	}
	dp_https_request q = {
		.url = url, .method = method, .ca_path = a->ca_path, .headers = headers,
		.body = json, .body_len = json ? json_len : 0,
		.connect_timeout_ms = DP_KUBEAPI_CONNECT_TIMEOUT_MS, .timeout_ms = DP_KUBEAPI_TRANSFER_TIMEOUT_MS,
		.body_max = body_max,
	};
	if ((k = dp_https_fetch(&q, &r, body, body_len, why, why_size)) < 0)
		return k;
	*status = r.status;
	return 0;
}
