/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubeapi: calls to the Kubernetes API server from a helper program (never from a daemon): the
 * pod's service account token as a bearer credential, JSON in and out, each call one HTTPS
 * exchange (dp/https.h: the CA file the only trust anchor, connect 5 s, the whole exchange 15 s).
 */
#pragma once

#include <stddef.h>

#include "dp/https.h"

#define DP_KUBEAPI_TOKEN_MAX 16384
#define DP_KUBEAPI_CONNECT_TIMEOUT_MS 5000u
#define DP_KUBEAPI_TRANSFER_TIMEOUT_MS 15000u

typedef struct dp_kubeapi {
	const char *api;     /* https://HOST:PORT */
	const char *ca_path;
	const char *user_agent; /* "User-Agent: ..." */
	char auth[DP_KUBEAPI_TOKEN_MAX + 32]; /* "Authorization: Bearer <token>" */
} dp_kubeapi;

/* Read the token at token_path (trailing whitespace trimmed) into a's credential. -ENOENT and
 * other open/read errors; -EFBIG a token of DP_KUBEAPI_TOKEN_MAX bytes or more; -EBADMSG empty or
 * holding bytes that cannot go into an HTTP header. */
int dp_kubeapi_init(dp_kubeapi *a, const char *api, const char *token_path, const char *ca_path,
		    const char *user_agent);
/* Wipe the credential. */
void dp_kubeapi_done(dp_kubeapi *a);

/* One call: method path (from the API's root, e.g. "/apis/resource.k8s.io/v1/resourceslices"),
 * a JSON body (NULL: none), the answer's status into *status and its body into *body (free();
 * NUL-terminated; at most body_max bytes). Errors as dp_https_fetch, with why. */
int dp_kubeapi_call(const dp_kubeapi *a, const char *method, const char *path, const char *json, size_t json_len,
		    size_t body_max, int *status, char **body, size_t *body_len, char *why, size_t why_size);
