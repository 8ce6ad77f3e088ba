/* SPDX-License-Identifier: Apache-2.0 */
/*
 * labels: patch this node's labels hyperlight.dev/enabled=true and
 * hyperlight.dev/hypervisor=<kvm|mshv> through the API server (design decision 10).
 * Active only when NODE_NAME is set and an in-cluster service account is mounted
 * (<root>/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}, API server from
 * KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT). libcurl's multi interface is driven by the
 * core loop (socket and timer callbacks): nothing ever blocks the gRPC service. A failed attempt
 * is retried with a back-off (1 s doubling, capped at 5 min) until it succeeds; then it stops.
 */
#pragma once

#include <stdbool.h>

#include "dp/loop.h"

typedef struct hl_labels hl_labels;

/* Start labelling. Nothing touches the network here: the first attempt runs from the loop.
 * hypervisor is the label value ("kvm" or "mshv"; any valid Kubernetes label value).
 * *ret is NULL (and 0 returned) when labelling does not apply; one line says why: info for
 * NODE_NAME, the service account files or KUBERNETES_SERVICE_HOST/PORT missing, warn for an
 * invalid NODE_NAME (not a DNS subdomain), host or port. Errors (*ret untouched): -EINVAL (loop
 * or ret NULL, hypervisor not a label value, SDP_TEST_ROOT relative), -ENAMETOOLONG (root
 * prefix too long), -ENOMEM, -EIO (libcurl could not be initialised).
 * Each attempt re-reads the token, sends PATCH /api/v1/nodes/<NODE_NAME> (JSON merge patch,
 * TLS verified against the service account's ca.crt only; connect 5 s, whole transfer 15 s)
 * and succeeds on HTTP 200 or 201; anything else is logged at warn (status and a sanitised
 * excerpt of at most 200 bytes of the body, or the transport error) and retried. */
int hl_labels_start(dp_loop *loop, const char *hypervisor, hl_labels **ret);
/* Abort any transfer, release every socket, timer and curl handle. Call before dp_loop_free().
 * Accepts NULL, returns NULL. */
hl_labels *hl_labels_free(hl_labels *l);
/* True once the API server accepted the patch (NULL: false). */
bool hl_labels_done(const hl_labels *l);
