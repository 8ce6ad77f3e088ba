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

#define NAME_MAX_LEN 63

static void render_label(dp_buf *b, const char *key, size_t key_len, const char *value)
{
	char k[sizeof(HL_LABEL_PREFIX) + NAME_MAX_LEN];

	snprintf(k, sizeof(k), "%.*s", (int)key_len, key);
	dp_buf_puts(b, ",");
	dp_buf_json_string(b, k);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, value);
}

/* {"metadata":{"labels":{"hyperlight.dev/enabled":"true","hyperlight.dev/hypervisor":"kvm"
 * [,"hyperlight.dev/tun":"true"...]}}}; companions are checked (companion_arg). */
static int render_body(dp_buf *b, const char *hypervisor, const char *enabled, char **companions, int n)
{
	dp_buf_puts(b, "{\"metadata\":{\"labels\":{");
	dp_buf_json_string(b, HL_LABEL_ENABLED);
	dp_buf_puts(b, ":");
	dp_buf_json_string(b, enabled);
	render_label(b, HL_LABEL_HYPERVISOR, strlen(HL_LABEL_HYPERVISOR), hypervisor);
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(companions[i], '=');
		render_label(b, companions[i], (size_t)(eq - companions[i]), eq + 1);
	}
	dp_buf_puts(b, "}}}");
	return b->oom ? -ENOMEM : 0;
}

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* a and b ("<key>=...") name the same key. */
static bool same_key(const char *a, const char *b)
{
	size_t n = strcspn(a, "=");
	return n == strcspn(b, "=") && strncmp(a, b, n) == 0;
}

/* "hyperlight.dev/<name>=<true|false>": <name> a label name part (1..63 of [A-Za-z0-9-_.],
 * a letter or digit at each end), neither the enabled nor the hypervisor label's. */
static bool companion_arg(const char *arg)
{
	const char *name = arg + strlen(HL_LABEL_PREFIX), *eq = strchr(arg, '=');
	size_t n;

	if (strncmp(arg, HL_LABEL_PREFIX, strlen(HL_LABEL_PREFIX)) != 0 || !eq || eq < name)
		return false;
	n = (size_t)(eq - name);
	if (n == 0 || n > NAME_MAX_LEN || !alnum(name[0]) || !alnum(name[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(name[i]) && name[i] != '-' && name[i] != '_' && name[i] != '.')
			return false;
	if (same_key(arg, HL_LABEL_ENABLED "=") || same_key(arg, HL_LABEL_HYPERVISOR "="))
		return false;
	return strcmp(eq + 1, "true") == 0 || strcmp(eq + 1, "false") == 0;
}

static bool valid_args(int argc, char **argv)
{
	if (argc < 6 || argc > 6 + HL_LABEL_COMPANIONS_MAX || (strcmp(argv[5], "true") != 0 && strcmp(argv[5], "false") != 0))
		return false;
	for (int i = 6; i < argc; i++) {
		if (!companion_arg(argv[i]))
			return false;
		for (int j = 6; j < i; j++)
			if (same_key(argv[i], argv[j]))
				return false;
	}
	return true;
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

/* label-node <url> <token path> <ca path> <hypervisor> <true|false> [hyperlight.dev/<name>=<true|false>...] */
static void entry_label_node(int argc, char **argv)
{
	_cleanup_(dp_buf_done) dp_buf body = { 0 };
	dp_kubeapi a;
	int r;

	if (!valid_args(argc, argv)) {
		dp_helper_reply_fail("invalid " HL_LABEL_HELPER
				     " arguments: <url> <token path> <ca path> <hypervisor> <true|false>"
				     " [" HL_LABEL_PREFIX "<name>=<true|false>...]");
		return;
	}
	r = dp_kubeapi_init(&a, "", argv[2], argv[3], NULL);
	if (r < 0) {
		dp_helper_reply_fail("cannot read the service account token %s: %s", argv[2],
				     r == -EBADMSG ? "empty or not printable" : strerror(-r));
		return;
	}
	if (render_body(&body, argv[4], argv[5], argv + 6, argc - 6) < 0)
		dp_helper_reply_fail("out of memory");
	else
		send_patch(argv[1], argv[3], &body, a.auth);
	dp_kubeapi_done(&a);
}

const dp_helper_entry hl_label_helper = { HL_LABEL_HELPER, entry_label_node };
