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
#include "dp/kubeapi.h"

#define WHY_MAX 512

/* {"metadata":{"labels":{"hyperlight.dev/enabled":"true","hyperlight.dev/hypervisor":"kvm"}}} */
static int render_body(dp_buf *b, const char *hypervisor, const char *enabled)
{
	dp_buf_puts(b, "{\"metadata\":{\"labels\":{");
	dp_buf_json_string(b, HL_LABEL_ENABLED);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, enabled);
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

/* label-node <url> <token path> <ca path> <hypervisor> <true|false> */
static void entry_label_node(int argc, char **argv)
{
	_cleanup_(dp_buf_done) dp_buf body = { 0 };
	dp_kubeapi a;
	int r;

	if (argc != 6 || (strcmp(argv[5], "true") != 0 && strcmp(argv[5], "false") != 0)) {
		dp_helper_reply_fail("invalid " HL_LABEL_HELPER
				     " arguments: <url> <token path> <ca path> <hypervisor> <true|false>");
		return;
	}
	r = dp_kubeapi_init(&a, "", argv[2], argv[3], NULL);
	if (r < 0) {
		dp_helper_reply_fail("cannot read the service account token %s: %s", argv[2],
				     r == -EBADMSG ? "empty or not printable" : strerror(-r));
		return;
	}
	if (render_body(&body, argv[4], argv[5]) < 0)
		dp_helper_reply_fail("out of memory");
	else
		send_patch(argv[1], argv[3], &body, a.auth);
	dp_kubeapi_done(&a);
}

const dp_helper_entry hl_label_helper = { HL_LABEL_HELPER, entry_label_node };
