/* SPDX-License-Identifier: Apache-2.0 */
/*
 * claimfile: a claim's allocation for one driver (dp/draclaim.h's dp_draclaim) as a small text
 * file, how the DRA helper program hands what it read from the API server to the daemon (which
 * links no JSON library) and how the daemon keeps the claims it prepared across its restarts
 * (the checkpoint). Written atomically (a temporary file in the same directory, fsync'd, then
 * renamed), mode 0600. The format, one line each:
 *
 *   sdp-claim 1
 *   <request> TAB <device> TAB <share ID or nothing> TAB <0|1: admin access>     (1..32 lines)
 *
 * Read strictly: the header, 1..DP_DRACLAIM_RESULTS_MAX result lines, each field checked as the
 * API checks it (a request is one or two DNS labels joined by '/', a device a DNS label, a share
 * ID of [0-9A-Za-z-]); anything else is -EBADMSG, as is a file over 16 KiB.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/draclaim.h"

#define DP_CLAIMFILE_MAX (16u << 10)

/* Whether r's fields are what the API allows (see above); why says which is not. */
bool dp_claimfile_result_valid(const dp_draclaim_result *r, char *why, size_t why_size);
/* Write c (1..32 valid results, else -EINVAL) to path atomically. Negative errno on failure
 * (nothing left behind but what was there). */
int dp_claimfile_write(const char *path, const dp_draclaim *c);
/* Parse buf[len] (NUL-terminated at buf[len]; changed in place) as dp_claimfile_read does. */
int dp_claimfile_parse(char *buf, size_t len, dp_draclaim *ret, char *why, size_t why_size);
/* Read path into *ret (written only on success). -ENOENT and other open errors; -EBADMSG (why
 * says where) for anything not as written by dp_claimfile_write. */
int dp_claimfile_read(const char *path, dp_draclaim *ret, char *why, size_t why_size);
