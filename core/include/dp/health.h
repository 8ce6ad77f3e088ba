/* SPDX-License-Identifier: Apache-2.0 */
/*
 * health: grpc.health.v1 (Check and Watch) served on a plugin socket, and the exec-probe client
 * behind the daemons' --health-check[=readiness] mode.
 * Services: "" (liveness: the loop answers) and "readiness" (decided by the owner's status
 * function); anything else is NOT_FOUND for Check and SERVICE_UNKNOWN for Watch. A service name
 * longer than 256 bytes or holding a NUL byte is INVALID_ARGUMENT. The request is read from the
 * wire without protobuf-c's unpack (core/src/requests/pbwire.h): unknown fields cost nothing.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/grpc.h"

enum dp_health_status {
	DP_HEALTH_UNKNOWN = 0,
	DP_HEALTH_SERVING = 1,
	DP_HEALTH_NOT_SERVING = 2,
	DP_HEALTH_SERVICE_UNKNOWN = 3,
};

#define DP_HEALTH_CHECK_PATH "/grpc.health.v1.Health/Check"
#define DP_HEALTH_WATCH_PATH "/grpc.health.v1.Health/Watch"
#define DP_HEALTH_READINESS "readiness"

typedef struct dp_health dp_health;
/* Status of service: DP_HEALTH_SERVING / DP_HEALTH_NOT_SERVING, or -ENOENT when unknown. */
typedef int (*dp_health_status_fn)(const char *service, void *userdata);

int dp_health_new(dp_health_status_fn fn, void *userdata, dp_health **ret);
/* Ends every Watch stream. Accepts NULL, returns NULL. */
dp_health *dp_health_free(dp_health *h);
DP_DEFINE_CLEANUP(dp_health, dp_health_free)
/* Write the two method entries (Check, Watch) into out; returns 2. */
size_t dp_health_methods(dp_health *h, dp_grpc_method out[static 2]);
/* Re-evaluate every watched service; send to the Watch streams whose status changed. */
void dp_health_changed(dp_health *h);
unsigned dp_health_watchers(const dp_health *h);

/*
 * The exec-probe client. dir: the device-plugins directory; prefixes: socket name prefixes of
 * the daemon's endpoints (dp_socket_prefix, endpoint.h: a socket "<prefix>-<n>.sock" of exactly
 * dp_socket_name's form belongs to that endpoint).
 * For every prefix, some socket with it must answer Check(service) with SERVING, where service
 * is "" (liveness) or "readiness". Stale sockets that refuse connections are skipped.
 * Returns 0 when healthy; -ENOENT (no socket for a prefix), -ETIMEDOUT, -ECONNREFUSED or
 * -EAGAIN (NOT_SERVING) otherwise, with a clear message in err.
 */
int dp_health_probe(const char *dir, const char *const *prefixes, size_t n_prefixes, bool readiness,
		    uint64_t timeout_usec, char *err, size_t errlen);
/*
 * The same for a daemon whose endpoints exist only when their hardware is present (kata): only
 * the prefixes that have a live socket are asked. A socket nobody listens on (connect() refused
 * at once: a stale file of a killed process) is ignored. Every prefix with a live socket needs
 * one SERVING answer; at least one live socket must exist for any prefix (-ENOENT otherwise,
 * "not live: no live plugin socket a-*.sock, b-*.sock in DIR"). Other returns as above.
 */
int dp_health_probe_present(const char *dir, const char *const *prefixes, size_t n_prefixes,
			    bool readiness, uint64_t timeout_usec, char *err, size_t errlen);
