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

/* Start labelling. *ret is NULL (and 0 returned) when labelling does not apply (NODE_NAME unset
 * or no service account); the daemon logs why at info level. Negative errno on setup failure. */
int hl_labels_start(dp_loop *loop, const char *hypervisor, hl_labels **ret);
/* Abort any transfer, free. Accepts NULL, returns NULL. */
hl_labels *hl_labels_free(hl_labels *l);
/* True once the API server accepted the patch. */
bool hl_labels_done(const hl_labels *l);
