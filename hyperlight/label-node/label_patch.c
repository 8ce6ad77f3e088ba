/* SPDX-License-Identifier: Apache-2.0 */
/*
 * label_patch: one blocking HTTPS PATCH (https.h) in the helper child.
 */
#include "label_patch.h"

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
#include "dp/https.h"

#define TOKEN_MAX 16384
#define WHY_MAX 512

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

/* One PATCH with the token's header; writes the reply. */
static void send_patch(const char *url, const char *ca_path, const dp_buf *body, const char *auth)
{
	static const char user_agent[] = "User-Agent: hyperlight-device-plugin/" DP_VERSION;
	const char *headers[] = { user_agent, "Content-Type: application/merge-patch+json",
				  "Accept: application/json", auth, NULL };
	dp_https_request q = {
		.url = url, .method = "PATCH", .ca_path = ca_path, .headers = headers,
		.body = body->data, .body_len = body->len,
		.connect_timeout_ms = HL_LABEL_CONNECT_TIMEOUT_MS, .timeout_ms = HL_LABEL_TRANSFER_TIMEOUT_MS,
	};
	dp_http_response r;
	char why[WHY_MAX];

	if (dp_https_send(&q, &r, why, sizeof(why)) < 0) {
		dp_helper_reply_fail("%s", why);
	} else if (r.status == 200 || r.status == 201) {
		char detail[32];
		snprintf(detail, sizeof(detail), "status=%d", r.status);
		dp_helper_reply_ok(detail);
	} else {
		dp_helper_reply_fail("status=%d body=%s", r.status, r.excerpt);
	}
}

/* label-node <url> <token path> <ca path> <hypervisor> */
static void entry_label_node(int argc, char **argv)
{
	_cleanup_(dp_buf_done) dp_buf body = { 0 };
	char token[TOKEN_MAX], auth[TOKEN_MAX + 32];
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
	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
	explicit_bzero(token, sizeof(token));
	if (render_body(&body, argv[4]) < 0)
		dp_helper_reply_fail("out of memory");
	else
		send_patch(argv[1], argv[3], &body, auth);
	explicit_bzero(auth, sizeof(auth));
}

const dp_helper_entry hl_label_helper = { HL_LABEL_HELPER, entry_label_node };
