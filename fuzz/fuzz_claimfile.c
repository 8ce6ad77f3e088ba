/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target: a claim file (core/src/claimfile/claimfile.c), the text the DRA helper hands the
 * daemon and the daemon keeps as its checkpoint, read as dp_claimfile_read reads it. Invariants:
 * an error is -EBADMSG, says why and leaves the output untouched; a success has 1..32 results,
 * each valid as the API allows (dp_claimfile_result_valid).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/claimfile.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_draclaim c, untouched;
	char why[256] = "", w[160];

	if (size > DP_CLAIMFILE_MAX + 16)
		return 0;
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	memset(&c, 0xa5, sizeof(c));
	memcpy(&untouched, &c, sizeof(c));
	int r = dp_claimfile_parse(buf, size, &c, why, sizeof(why));
	free(buf);
	if (r < 0) {
		FUZZ_CHECK(r == -EBADMSG && why[0] != '\0');
		FUZZ_CHECK(memcmp(&c, &untouched, sizeof(c)) == 0);
		return 0;
	}
	FUZZ_CHECK(r == 0 && c.n >= 1 && c.n <= DP_DRACLAIM_RESULTS_MAX);
	for (size_t i = 0; i < c.n; i++)
		FUZZ_CHECK(dp_claimfile_result_valid(&c.results[i], w, sizeof(w)));
	return 0;
}
