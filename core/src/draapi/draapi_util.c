/* SPDX-License-Identifier: Apache-2.0 */
/* draapi_util: the API client from the arguments, an unexpected answer as a reply. */
#include "draapi_util.h"

#include <errno.h>
#include <string.h>

#include "dp/helper.h"
#include "dp_version.h"

int dp_draapi_open(dp_kubeapi *a, char **argv)
{
	static const char ua[] = "User-Agent: sandbox-device-plugins/" DP_VERSION;
	int r;

	if (strncmp(argv[1], "https://", 8) != 0) {
		dp_helper_reply_fail("the API server %s is not an https URL", argv[1]);
		return -EINVAL;
	}
	if ((r = dp_kubeapi_init(a, argv[1], argv[2], argv[3], ua)) < 0)
		dp_helper_reply_fail("cannot read the service account token %s: %s", argv[2],
				     r == -EBADMSG ? "empty or not printable" : strerror(-r));
	return r;
}

void dp_draapi_reply_status(const char *what, int status, const char *body, size_t len)
{
	char excerpt[201];
	size_t n = len < sizeof(excerpt) - 1 ? len : sizeof(excerpt) - 1;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)body[i];
		excerpt[i] = (char)(c < ' ' || c >= 0x7f ? '.' : c);
	}
	excerpt[n] = '\0';
	dp_helper_reply_fail("%s: status=%d body=%s", what, status, excerpt);
}
