/* SPDX-License-Identifier: Apache-2.0 */
/* draapi_util: what the sdp-kube-api entries share. */
#pragma once

#include <stddef.h>

#include "dp/kubeapi.h"

/* The API client from argv[1..3] (<api> <token> <ca>); on failure the reply is written and a
 * negative errno returned. */
int dp_draapi_open(dp_kubeapi *a, char **argv);
/* Reply "fail <what>: status=<code> body=<excerpt>": the answer's first 200 bytes, each outside
 * printable ASCII shown as '.'. */
void dp_draapi_reply_status(const char *what, int status, const char *body, size_t len);
