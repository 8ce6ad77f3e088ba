/* SPDX-License-Identifier: Apache-2.0 */
/* draapi_claim: the "dra-claim" helper entry: one ResourceClaim fetched, read and handed over. */
#include "dp/draapi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/claimfile.h"
#include "dp/draclaim.h"
#include "dp/kubeapi.h"
#include "dp/kubeenv.h"
#include "dp/macro.h"
#include "dp_version.h"
#include "draapi_util.h"

#define WHY_MAX 512

/* The claim in body (status 200) read for driver and pool, written to out. */
static void take_claim(const char *body, size_t len, char **argv)
{
	_cleanup_free_ dp_draclaim *c = calloc(1, sizeof(*c));
	char why[WHY_MAX];
	int r;

	if (!c) {
		dp_helper_reply_fail("out of memory");
		return;
	}
	if (dp_draclaim_read(body, len, argv[6], argv[7], argv[8], c, why, sizeof(why)) < 0) {
		dp_helper_reply_fail("ResourceClaim %s/%s: %s", argv[4], argv[5], why);
		return;
	}
	if ((r = dp_claimfile_write(argv[9], c)) < 0) {
		dp_helper_reply_fail("cannot write %s: %s", argv[9], strerror(-r));
		return;
	}
	char detail[32];
	snprintf(detail, sizeof(detail), "results=%zu", c->n);
	dp_helper_reply_ok(detail);
}

/* dra-claim <api> <token> <ca> <namespace> <name> <uid> <driver> <pool> <out> */
static void entry_claim(int argc, char **argv)
{
	char *body = NULL;
	char path[600], why[WHY_MAX];
	size_t len = 0;
	dp_kubeapi a;
	int status, r;

	if (argc != 10 || !dp_kube_dns_label(argv[4]) || !dp_kube_dns_subdomain(argv[5]) || !dp_kube_uid(argv[6], 128) ||
	    !dp_kube_dns_subdomain(argv[7]) || !dp_kube_dns_subdomain(argv[8]) || argv[9][0] != '/') {
		dp_helper_reply_fail("invalid " DP_DRAAPI_CLAIM " arguments: <api> <token> <ca> <namespace> <name> "
				     "<uid> <driver> <pool> <out>");
		return;
	}
	if (dp_draapi_open(&a, argv) < 0)
		return;
	snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s", argv[4], argv[5]);
	r = dp_kubeapi_call(&a, "GET", path, NULL, 0, DP_DRACLAIM_INPUT_MAX, &status, &body, &len, why, sizeof(why));
	dp_kubeapi_done(&a);
	if (r < 0)
		dp_helper_reply_fail("%s", why);
	else if (status == 404)
		dp_helper_reply_fail("ResourceClaim %s/%s not found", argv[4], argv[5]);
	else if (status != 200)
		dp_draapi_reply_status("GET ResourceClaim", status, body, len);
	else
		take_claim(body, len, argv);
	free(body);
}

const dp_helper_entry dp_draapi_claim_entry = { DP_DRAAPI_CLAIM, entry_claim };
