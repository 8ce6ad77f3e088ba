/* SPDX-License-Identifier: Apache-2.0 */
/*
 * draside: a daemon's whole DRA side on one node, for one driver: the kubelet's plugin
 * registration (dp/pluginreg.h) and DRA service (dp/dra.h), the driver's ResourceSlices, and
 * its claims prepared and checkpointed. The daemon gives its devices (as resource.k8s.io/v1
 * Device objects, dp_draside_publish) and, for a claim's device, the CDI ID that injects it
 * (resolve); everything that talks to the API server runs in the helper program sdp-kube-api
 * (dp/draapi.h), one child at a time, so the daemon maps no HTTP, TLS or JSON library.
 *
 * Files, under <kubelet>/plugins/<driver>/ (made 0750; the kubelet's own layout):
 *   dra-<n>.sock       the DRA service and DRAResourceHealth, named in the registration (a new name per instance:
 *                      dp_socket_name; a killed instance's is swept at start), with
 *                      grpc.health.v1: liveness, and readiness = dp_draside_ready
 *   slices.json        the devices last given, what the helper publishes
 *   claims/<uid>       each prepared claim (dp/claimfile.h): the checkpoint
 * and <kubelet>/plugins_registry/<driver>-reg.sock.
 *
 * NodePrepareResources, per claim: a checkpointed claim is answered from its file (the
 * kubelet asks again after its own restart; no API call, the same answer); else the helper
 * fetches it (its UID checked, this driver's results in this node's pool), each device is
 * resolved, the claim file is renamed into place and the claim answered: the checkpoint is
 * written before the kubelet hears of it. A device the daemon does not resolve (unknown,
 * unusable) fails the claim with the daemon's reason and checkpoints nothing; the kubelet
 * retries. NodeUnprepareResources removes the claim's file (none: already unprepared, fine).
 * CDI specs are the daemon's own, one device per DRA device, written once, not per claim:
 * preparing writes no spec and unpreparing has none to remove (docs/dra.md says why).
 *
 * Slices: published at start, after each dp_draside_publish with a different set, after each
 * successful registration (a kubelet that restarted may have wiped them) and every 60 s (a
 * list, no write, when nothing changed); a failure is retried after 1 s, doubling up to 5 min.
 * Every outcome that changes something is logged once at info, a failure at warn.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/kubeenv.h"
#include "dp/loop.h"
#include "dp/macro.h"
#include "dp/seccomp.h"

#define DP_DRASIDE_CDI_MAX 256
/* The DRA socket's prefix ("dra-<n>.sock"), for the exec probe (dp/health.h). */
#define DP_DRASIDE_SOCKET_PREFIX "dra"
#define DP_DRASIDE_RESYNC_USEC (60 * DP_USEC_PER_SEC)

typedef struct dp_draside dp_draside;

/* device's CDI ID into cdi[size] (0), or why it cannot be prepared now (negative errno). */
typedef int (*dp_draside_resolve_fn)(const char *device, char *cdi, size_t size, char *why, size_t why_size,
				     void *userdata);

typedef struct dp_draside_config {
	const char *driver;         /* the DRA driver's name, a DNS subdomain of at most 63 bytes */
	const dp_kubeenv *env;      /* node (the pool's name), API server, service account */
	const char *kubelet_dir;    /* the kubelet's root, root-prefixed: "/var/lib/kubelet" */
	const char *exe;            /* sdp-kube-api; NULL: beside this daemon (dp_helper_sibling) */
	dp_draside_resolve_fn resolve;
	void *userdata;
} dp_draside_config;

/* Make the directories, serve the DRA service and the registration; nothing is published until
 * the first dp_draside_publish. -EINVAL (a bad configuration), -ENOMEM, file and socket errors. */
int dp_draside_new(dp_loop *loop, const dp_draside_config *c, dp_draside **ret);
/* dp_draside_new as a daemon in its pod starts it: the node, API server and service account
 * from the pod (dp_kubeenv_load: -ENOENT for something missing, -EINVAL for something invalid),
 * the kubelet's root /var/lib/kubelet under the root prefix; exe NULL: sdp-kube-api beside the
 * daemon. On failure why says what (a DRA driver that cannot publish or read claims serves
 * nothing). */
int dp_draside_new_in_pod(dp_loop *loop, const char *driver, const char *exe, dp_draside_resolve_fn resolve,
			  void *userdata, dp_draside **ret, char *why, size_t why_size);
/* The devices to publish: devices_json is {"devices":[...]} (the daemon's rendering; checked
 * by the helper). Copied; published when it differs from the last set given. -ENOMEM, write
 * errors of slices.json. */
int dp_draside_publish(dp_draside *s, const char *devices_json, size_t len);
/* The devices' health for the kubelet (DRAResourceHealth, dp/dra.h: it shows it in the status of
 * the pods that hold them): sent at once, and to the kubelet's next stream; the kubelet calls a
 * device UNKNOWN when no report came for DP_DRASIDE_HEALTH_TIMEOUT_S, so report after every
 * check. -EINVAL, -ENOMEM. */
#define DP_DRASIDE_HEALTH_TIMEOUT_S 90
typedef struct dp_draside_health {
	const char *device;
	bool healthy;
	const char *message; /* why not (or what the verdict rests on); NULL: none */
} dp_draside_health;
int dp_draside_set_health(dp_draside *s, const dp_draside_health *devices, size_t n);
/* Stop: the registration socket removed (the kubelet deregisters the driver; it wipes the
 * slices itself 30 s later unless the driver is back), the DRA service stopped, a helper child
 * killed. Checkpoints and slices.json stay. Accepts NULL, returns NULL. */
dp_draside *dp_draside_free(dp_draside *s);
DP_DEFINE_CLEANUP(dp_draside, dp_draside_free)

/* The helper's O_PATH fd (a daemon's seccomp exec rule); -1 for NULL. */
int dp_draside_exe_fd(const dp_draside *s);
/* A daemon's seccomp rules for its DRA side (dp/seccomp.h): futex, the API client's calls and
 * the exec of exe_fd (dp_draside_exe_fd); none for exe_fd -1. Returns how many were written
 * (at most cap; DP_DRASIDE_SECCOMP_RULES fit). */
#define DP_DRASIDE_SECCOMP_RULES 8
size_t dp_draside_seccomp_rules(int exe_fd, dp_seccomp_rule *out, size_t cap);
/* Registered by the kubelet and the slices published at least once since the last change. */
bool dp_draside_ready(const dp_draside *s);
/* Claims prepared from the API (first preparations) and from their checkpoint (repeats). */
unsigned dp_draside_prepared(const dp_draside *s, unsigned *repeats);
