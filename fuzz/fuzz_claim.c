/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target: a ResourceClaim's JSON read for one driver and pool (core/src/draclaim/draclaim.c,
 * through jansson), the way NodePrepareResources will read what the API server sends. Each input
 * is read for the driver "kata.nvidia.com", pool "node-a", claim UID "uid-1". Invariants: an
 * error leaves the output untouched and says why (a non-empty message); a success has 1..32
 * results, each with a non-empty request and device of their bounds and NUL-terminated fields.
 */
#include <errno.h>
#include <string.h>

#include "dp/draclaim.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_draclaim c, untouched;
	char why[256] = "";

	memset(&c, 0xa5, sizeof(c));
	memcpy(&untouched, &c, sizeof(c));
	int r = dp_draclaim_read((const char *)data, size, "uid-1", "kata.nvidia.com", "node-a", &c, why, sizeof(why));
	if (r < 0) {
		FUZZ_CHECK(memcmp(&c, &untouched, sizeof(c)) == 0);
		FUZZ_CHECK(why[0] != '\0');
		FUZZ_CHECK(r == -EFBIG || r == -EBADMSG || r == -ESTALE || r == -ENODATA || r == -EXDEV);
		return 0;
	}
	FUZZ_CHECK(r == 0);
	FUZZ_CHECK(c.n >= 1 && c.n <= DP_DRACLAIM_RESULTS_MAX);
	for (size_t i = 0; i < c.n; i++) {
		const dp_draclaim_result *res = &c.results[i];
		FUZZ_CHECK(memchr(res->request, '\0', sizeof(res->request)) != NULL && res->request[0]);
		FUZZ_CHECK(memchr(res->device, '\0', sizeof(res->device)) != NULL && res->device[0]);
		FUZZ_CHECK(memchr(res->share_id, '\0', sizeof(res->share_id)) != NULL);
	}
	return 0;
}
