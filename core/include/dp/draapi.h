/* SPDX-License-Identifier: Apache-2.0 */
/*
 * draapi: the child side of DRA's API-server work: the entries of the helper program
 * sdp-kube-api (core/src/draapi/main.c), each one short-lived child of a daemon
 * (dp/helper.h), so that a daemon never maps an HTTP, TLS or JSON library. The parent side is
 * dp/draside.h. Every entry starts with the API server, the token and the CA file:
 *
 *   dra-claim <api> <token> <ca> <namespace> <name> <uid> <driver> <pool> <out>
 *     GET the ResourceClaim, read it for driver and pool (dp/draclaim.h: the UID checked,
 *     allocated, this pool's devices), write its results to <out> (dp/claimfile.h) and answer
 *     "ok results=<n>"; else "fail <why>" ("ResourceClaim <ns>/<name> not found", "status=<code>
 *     body=<excerpt>", the reader's reason, the transport's).
 *
 *   dra-slices <api> <token> <ca> <driver> <node> <desired>
 *     Make the ResourceSlices of driver's pool <node> on node <node> hold the devices in the
 *     JSON file <desired> ({"devices":[...]}, each a resource.k8s.io/v1 Device), at most
 *     DP_DRAAPI_SLICE_DEVICES a slice, named "<node>-<driver>-<i>". Lists the pool's slices
 *     (field selector spec.nodeName and spec.driver); when they already hold exactly these
 *     devices in one complete generation, answers "ok unchanged generation=<g> slices=<k>";
 *     else writes them with the next generation (updating the slices it has, creating the
 *     others, deleting the rest) and answers "ok published generation=<g> slices=<k>
 *     devices=<n>". A conflict (someone else wrote a slice meanwhile) is a "fail": the parent
 *     tries again, which reads the new state.
 */
#pragma once

#include "dp/helper.h"

/* The helper program, installed beside each daemon. */
#define DP_KUBEAPI_EXE "sdp-kube-api"
#define DP_DRAAPI_CLAIM "dra-claim"
#define DP_DRAAPI_SLICES "dra-slices"
/* ResourceSliceMaxDevices in resource.k8s.io/v1 */
#define DP_DRAAPI_SLICE_DEVICES 128
/* A pool of at most this many devices (64 slices) */
#define DP_DRAAPI_POOL_DEVICES 8192

extern const dp_helper_entry dp_draapi_claim_entry;
extern const dp_helper_entry dp_draapi_slices_entry;
