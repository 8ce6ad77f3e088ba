/* SPDX-License-Identifier: Apache-2.0 */
/*
 * labels: patch this node's labels hyperlight.dev/enabled=<true|false> and
 * hyperlight.dev/hypervisor=<kvm|mshv> through the API server (design decision 10), and with
 * companions (companion.h) hyperlight.dev/<resource>=<true|false> for each (its resource's
 * name, hyperlight.dev/tun by default).
 * Each true|false label follows its own device's verdict (hl_labels_verdict): the first verdict
 * sets it at once; after that a verdict must hold for NODE_LABELS_HOLD seconds (default 10)
 * before the label follows it, so a device that flaps faster than that never moves the label.
 * One PATCH carries every label that has a verdict; none is sent before the hypervisor's first.
 * Active only when NODE_LABELS is not "false" (the chart's nodeLabels=false with PLUGIN_API=dra,
 * whose API access needs NODE_NAME and the token too), NODE_NAME is set and an in-cluster service
 * account is mounted
 * (<root>/var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}, API server from
 * KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT). This is the parent side: it validates
 * the configuration, keeps the retry policy and logs; each attempt is one short-lived helper
 * child (dp/helper.h): the program hyperlight-label-node (label-node/, its HTTPS client on
 * Mbed TLS), so the daemon itself never maps an HTTP or TLS library and nothing ever blocks the
 * gRPC service; label-node/label_node.h is all the two share. A failed attempt is retried
 * with a back-off (1 s doubling, capped at 5 min) until it succeeds; then it waits for the
 * next change of the label.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/loop.h"
#include "label-node/label_node.h"

/* One attempt's child: killed at this deadline (its own 15 s exchange timeout,
 * HL_LABEL_TRANSFER_TIMEOUT_MS, comes first; this bounds anything else, e.g. a child stuck
 * loading libraries). */
#define HL_LABELS_DEADLINE_USEC (20 * DP_USEC_PER_SEC)
#define HL_LABELS_KILL_GRACE_USEC (2 * DP_USEC_PER_SEC)
/* NODE_LABELS_HOLD: how long a new verdict must hold before hyperlight.dev/enabled follows it,
 * in seconds, 0..3600 (0: at once); unset: 10; invalid: 10 and a warning. */
#define HL_LABELS_HOLD_ENV "NODE_LABELS_HOLD"
#define HL_LABELS_HOLD_DEFAULT_S 10u
#define HL_LABELS_HOLD_MAX_S 3600u
/* The verdict's reason kept for the log line of a label set to "false". */
#define HL_LABELS_REASON_MAX 256
/* Companion labels at most (companion.h's HL_COMPANION_TYPES), and a key's length at most
 * ("hyperlight.dev/" and a name part of 1..63). */
#define HL_LABELS_COMPANIONS_MAX HL_LABEL_COMPANIONS_MAX
#define HL_LABELS_KEY_MAX (sizeof(HL_LABEL_PREFIX) - 1 + 63)
/* hl_labels_verdict's which: the hypervisor's; companion i's is 1 + i. */
#define HL_LABELS_HYPERVISOR 0

typedef struct hl_labels hl_labels;

typedef struct hl_labels_params {
	const char *exe;        /* helper executable; NULL: this binary (/proc/self/exe) */
	uint64_t deadline_usec; /* 0: HL_LABELS_DEADLINE_USEC */
} hl_labels_params;

/* Start labelling. Nothing is spawned here: the first attempt runs from the loop after the
 * hypervisor's first verdict (hl_labels_verdict).
 * hypervisor is the label value ("kvm" or "mshv"; any valid Kubernetes label value);
 * companions[0..n_companions) the companions' label keys (hl_labels_companion_key; the daemon
 * passes their resource names), at most HL_LABELS_COMPANIONS_MAX, none twice; params
 * may be NULL (the defaults).
 * *ret is NULL (and 0 returned) when labelling does not apply; one line says why: info for
 * NODE_NAME, the service account files or KUBERNETES_SERVICE_HOST/PORT missing, warn for an
 * invalid NODE_NAME (not a DNS subdomain), host or port. Errors (*ret untouched): -EINVAL (loop
 * or ret NULL, hypervisor not a label value, a companion key invalid or twice, too many,
 * SDP_TEST_ROOT relative, params->exe empty),
 * -ENAMETOOLONG (root prefix too long), -ENOMEM, timerfd errors.
 * Each attempt is one child (label-node/label_patch.h): it re-reads the token and sends
 * PATCH /api/v1/nodes/<NODE_NAME> (JSON merge patch, TLS verified against the service
 * account's ca.crt only; connect 5 s, whole transfer 15 s). HTTP 200 or 201 is success;
 * anything else is logged at warn and retried: "status=<code> body=<excerpt of at most 200
 * bytes>" for an answer, "error=<reason>" otherwise (the child's reason: transport error, token
 * or CA file unreadable, TLS handshake refused; or the helper's: killed by a signal, timeout
 * after 20 s). */
int hl_labels_start(dp_loop *loop, const char *hypervisor, const char *const *companions, size_t n_companions,
		    const hl_labels_params *params, hl_labels **ret);
/* A device's verdict (every check's; hl_plugin_verdict_fn); which: HL_LABELS_HYPERVISOR or
 * 1 + the companion's index. The first one is labelled at once (the first attempt waits for
 * the hypervisor's), a later different one once it has held for the hold (a verdict back to
 * the label's value within the hold cancels it). hyperlight.dev/enabled set to "false" is
 * logged at info with its reason; each label that follows a held verdict is logged at info with
 * the verdict's reason. NULL l (labelling off) or which out of range: nothing. */
void hl_labels_verdict(hl_labels *l, size_t which, bool healthy, const char *reason);
/* key is a companion's label key: "hyperlight.dev/" and a label name part (1..63 of
 * [A-Za-z0-9-_.], a letter or digit at each end), neither hyperlight.dev/enabled nor
 * hyperlight.dev/hypervisor. */
bool hl_labels_companion_key(const char *key);
/* Kill a running attempt's child (the loop reaps it), release every timer. Call before
 * dp_loop_free(). Accepts NULL, returns NULL. */
hl_labels *hl_labels_free(hl_labels *l);
/* True while the API server has every label the verdicts ask for (NULL: false). */
bool hl_labels_done(const hl_labels *l);
/* The O_PATH fd the label helper execs through (dp_helper_exe_fd), open for l's lifetime, for
 * the daemon's seccomp exec rule; -1 for NULL (labelling off) or when it could not be opened. */
int hl_labels_exe_fd(const hl_labels *l);
