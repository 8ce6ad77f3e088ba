/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubeenv: where a daemon in a pod reaches the Kubernetes API, and as whom: its node's name
 * (NODE_NAME, from the downward API), the API server (KUBERNETES_SERVICE_HOST and _PORT, set by
 * the kubelet in every pod) and the pod's service account (its token and CA bundle under
 * <SDP_TEST_ROOT>/var/run/secrets/kubernetes.io/serviceaccount). Validated here once, for the
 * node labels and DRA's API side alike; the helper programs that talk to the API server are
 * given what this reads.
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define DP_KUBE_NODE_MAX 253
/* "https://" "[" IPv6 "]" ":" port, or a host name of at most 253 bytes */
#define DP_KUBE_API_MAX 280

#define DP_KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct dp_kubeenv {
	char node[DP_KUBE_NODE_MAX + 1]; /* NODE_NAME, a DNS subdomain */
	char api[DP_KUBE_API_MAX + 1];   /* https://HOST:PORT (HOST bracketed when IPv6) */
	char token_path[PATH_MAX];
	char ca_path[PATH_MAX];
} dp_kubeenv;

/*
 * Read the environment into *ret (written only on 0). 0: usable; 1: not in a cluster (NODE_NAME,
 * KUBERNETES_SERVICE_HOST or _PORT unset or empty, no service account mounted: the token or CA
 * file missing or not a regular file); 2: invalid (NODE_NAME not a DNS subdomain, the host not
 * an IP address or host name, the port not 1..65535). For 1 and 2 why[why_size] says which, for
 * a log line. Negative errno: -EINVAL / -ENAMETOOLONG from an unusable SDP_TEST_ROOT.
 */
int dp_kubeenv_load(dp_kubeenv *ret, char *why, size_t why_size);
/* Kubernetes' IsDNS1123Subdomain: dot-separated [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 253 bytes. */
bool dp_kube_dns_subdomain(const char *s);
/* A UID as the API writes one (and a DRA share ID): 1..max bytes of [0-9A-Za-z-]; safe in a file
 * name and a log line. */
bool dp_kube_uid(const char *s, size_t max);
/* Kubernetes' IsDNS1123Label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63 bytes. */
bool dp_kube_dns_label(const char *s);
