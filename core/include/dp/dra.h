/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dra: the DRA service a driver serves to the kubelet (k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin,
 * proto/dra.proto): NodePrepareResources and NodeUnprepareResources on the driver's own socket
 * (/var/lib/kubelet/plugins/<driver>/dra.sock, the endpoint its plugin registration names:
 * dp/pluginreg.h).
 *
 * Each call names claims (namespace, UID, name); the service hands each claim to the driver
 * (prepare or unprepare), which answers it now or later (dp_dra_done), once; the call is
 * answered when every claim of it has been, with one map entry per claim UID, as the kubelet
 * requires (a claim it does not get back is asked again). A claim's answer is its devices (pool,
 * device, request names, CDI device IDs, share ID) or an error; the service copies what it is
 * given. A call that ends before it is answered (the kubelet gave up: its deadline, a cut
 * connection, the service stopping) cancels its claims still out: the driver's cancel is told
 * each, and must not answer it after (the claim's handle is gone once cancel returns).
 *
 * Requests are read from the wire (pbwire: nothing unpacked, unknown fields skipped) and
 * refused whole with INVALID_ARGUMENT, telling the driver nothing, when malformed, when a claim
 * lacks its UID, namespace or name, holds a NUL byte or a string over DP_DRA_STRING_MAX bytes,
 * when two claims share a UID, or when a call names more than DP_DRA_CLAIMS_MAX claims.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/loop.h"
#include "dp/macro.h"

#define DP_DRA_SERVICE "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
#define DP_DRA_PREPARE_PATH "/" DP_DRA_SERVICE "/NodePrepareResources"
#define DP_DRA_UNPREPARE_PATH "/" DP_DRA_SERVICE "/NodeUnprepareResources"
/* The name the plugin registration gives for this service's version. */
#define DP_DRA_VERSION "v1.DRAPlugin"
/* DRAResourceHealth (proto/dra_health.proto): the registration lists this beside DP_DRA_VERSION
 * when the driver reports health (dp_dra_set_health); the kubelet (gate ResourceHealthStatus,
 * beta and on since 1.36) then watches it and shows each prepared device's health in the status
 * of the pods that hold it (allocatedResourcesStatus). */
#define DP_DRA_HEALTH_VERSION "v1.DRAResourceHealth"
#define DP_DRA_HEALTH_WATCH_PATH "/v1.DRAResourceHealth/NodeWatchResources"
/* Streams of NodeWatchResources at once (the kubelet keeps one). */
#define DP_DRA_HEALTH_STREAMS_MAX 8

/* A claim's namespace, UID and name: the API's limits are 63, 36 and 253 bytes; this is the
 * bound of each (a DNS subdomain's). */
#define DP_DRA_STRING_MAX 253
/* Claims in one call: a pod's claims (the API allows 128 claim references a pod spec). */
#define DP_DRA_CLAIMS_MAX 256

typedef struct dp_dra dp_dra;
/* One claim of a call in flight, until it is answered or cancelled. */
typedef struct dp_dra_claim dp_dra_claim;

typedef struct dp_dra_device {
	const char *pool;
	const char *device;
	const char *const *requests; /* may be NULL with n_requests 0: every request */
	size_t n_requests;
	const char *const *cdi_ids;
	size_t n_cdi_ids;
	const char *share_id; /* NULL: absent */
} dp_dra_device;

typedef struct dp_dra_driver {
	/* prepare / unprepare the claim; answer with dp_dra_done (at once, or later) */
	void (*prepare)(dp_dra_claim *c, void *userdata);
	void (*unprepare)(dp_dra_claim *c, void *userdata);
	/* the claim's call ended before it was answered: forget c (it is freed after return) */
	void (*cancel)(dp_dra_claim *c, void *userdata);
	/* optional: grpc.health.v1 served on the same socket (the daemon's exec probe asks it) */
	struct dp_health *health;
} dp_dra_driver;

enum dp_dra_health { DP_DRA_HEALTH_UNKNOWN = 0, DP_DRA_HEALTH_HEALTHY = 1, DP_DRA_HEALTH_UNHEALTHY = 2 };

typedef struct dp_dra_device_health {
	const char *pool;
	const char *device;
	enum dp_dra_health health;
	const char *message; /* NULL: none */
} dp_dra_device_health;

/* Serve socket_path (mode 0600; an existing path is -EADDRINUSE, as dp_grpc_server_new). The
 * driver's three hooks are required (-EINVAL). */
int dp_dra_new(dp_loop *loop, const char *socket_path, const dp_dra_driver *driver, void *userdata,
	       dp_dra **ret);
/* Stop serving: calls in flight are cancelled (the driver's cancel told for each claim still
 * out), their peers get UNAVAILABLE. The socket file is left (the owner removes it). Accepts
 * NULL; returns NULL. */
dp_dra *dp_dra_free(dp_dra *d);
DP_DEFINE_CLEANUP(dp_dra, dp_dra_free)

/*
 * The devices' health (copied), sent at once to every NodeWatchResources stream and to each new
 * one; timeout_seconds (> 0) is how long the kubelet keeps it before it calls it UNKNOWN (call
 * again before: the verdict of every periodic check). Until the first call NodeWatchResources is
 * answered UNIMPLEMENTED (the kubelet stops watching a driver that reports none). The stream
 * request is read from the wire (its fields skipped; malformed: INVALID_ARGUMENT); more than
 * DP_DRA_HEALTH_STREAMS_MAX streams: RESOURCE_EXHAUSTED. -EINVAL, -ENOMEM.
 */
int dp_dra_set_health(dp_dra *d, const dp_dra_device_health *devices, size_t n, int64_t timeout_seconds);

const char *dp_dra_claim_namespace(const dp_dra_claim *c);
const char *dp_dra_claim_uid(const dp_dra_claim *c);
const char *dp_dra_claim_name(const dp_dra_claim *c);
/* Whether c is a NodePrepareResources claim (else NodeUnprepareResources). */
bool dp_dra_claim_preparing(const dp_dra_claim *c);

/*
 * Answer claim c: error NULL or "" and its devices (prepare; unprepare takes none), or error
 * (its devices ignored). Copied. c is gone after this call. -ENOMEM when the answer cannot be
 * kept: the claim is then answered with the error "out of memory", never left out.
 */
int dp_dra_done(dp_dra_claim *c, const dp_dra_device *devices, size_t n, const char *error);
