/* SPDX-License-Identifier: Apache-2.0 */
/* dra_health: DRAResourceHealth's NodeWatchResources streams beside the DRA service (dp/dra.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp/dra.h"
#include "dp/grpc.h"
#include "dra_health.pb-c.h"
#include "dra_internal.h"
#include "requests/pbwire.h"

/* The snapshot's encoding, or NULL before the first dp_dra_set_health. */
static int encode(const dp_dra_device_health *devs, size_t n, int64_t timeout, uint8_t **ret, size_t *ret_len)
{
	V1__NodeWatchResourcesResponse resp = V1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
	V1__DeviceHealth *h = calloc(n ? n : 1, sizeof(*h));
	V1__DeviceIdentifier *id = calloc(n ? n : 1, sizeof(*id));
	V1__DeviceHealth **hp = calloc(n ? n : 1, sizeof(*hp)); // NOLINT(bugprone-sizeof-expression): pointers
	int64_t now = (int64_t)time(NULL);
	int r = -ENOMEM;

	if (!h || !id || !hp)
		goto out;
	for (size_t i = 0; i < n; i++) {
		v1__device_identifier__init(&id[i]);
		id[i].pool_name = (char *)devs[i].pool;
		id[i].device_name = (char *)devs[i].device;
		v1__device_health__init(&h[i]);
		h[i].device = &id[i];
		h[i].health = (V1__HealthStatus)devs[i].health;
		h[i].last_updated_time = now;
		h[i].health_check_timeout_seconds = timeout;
		h[i].message = (char *)(devs[i].message ? devs[i].message : "");
		hp[i] = &h[i];
	}
	resp.n_devices = n;
	resp.devices = hp;
	size_t len = v1__node_watch_resources_response__get_packed_size(&resp);
	uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		goto out;
	v1__node_watch_resources_response__pack(&resp, buf);
	*ret = buf;
	*ret_len = len;
	r = 0;
out:
	free(h);
	free(id);
	free(hp);
	return r;
}

static void stream_gone(dp_grpc_call *call, int status, void *userdata)
{
	dp_dra *d = userdata;
	for (size_t i = 0; i < d->n_watch; i++)
		if (d->watch[i] == call) {
			d->watch[i] = d->watch[--d->n_watch];
			return;
		}
}

/* Send the snapshot on call. false: the stream could not take it and is over (ended by the gRPC
 * layer: a peer that does not read; or here: out of memory); the call is invalid then. No
 * callback runs inside a send or a finish (dp/grpc.h). */
static bool send_snapshot(dp_dra *d, dp_grpc_call *call)
{
	int r = dp_grpc_call_send(call, d->health_msg, d->health_len);
	if (r == -ENOMEM)
		(void)dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	return r == 0;
}

void dp_dra_rpc_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_dra *d = userdata;
	dp_pbreader rd;
	dp_pbfield f;
	int k;

	dp_pb_reader_init(&rd, msg, len);
	while ((k = dp_pb_next(&rd, &f)) > 0)
		; /* NodeWatchResourcesRequest has no field: every one is skipped */
	if (k < 0) {
		(void)dp_grpc_call_finish(call, DP_GRPC_INVALID_ARGUMENT, "malformed NodeWatchResourcesRequest");
		return;
	}
	if (!d->health_msg) {
		(void)dp_grpc_call_finish(call, DP_GRPC_UNIMPLEMENTED, "this driver reports no device health");
		return;
	}
	if (d->n_watch == DP_DRA_HEALTH_STREAMS_MAX) {
		(void)dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, "too many NodeWatchResources streams");
		return;
	}
	dp_grpc_call_set_cancel(call, stream_gone, d);
	if (send_snapshot(d, call))
		d->watch[d->n_watch++] = call;
}

int dp_dra_set_health(dp_dra *d, const dp_dra_device_health *devices, size_t n, int64_t timeout_seconds)
{
	uint8_t *msg;
	size_t len;
	int r;

	if (!d || (n && !devices) || timeout_seconds <= 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!devices[i].pool || !devices[i].device || devices[i].health > DP_DRA_HEALTH_UNHEALTHY)
			return -EINVAL;
	if ((r = encode(devices, n, timeout_seconds, &msg, &len)) < 0)
		return r;
	free(d->health_msg);
	d->health_msg = msg;
	d->health_len = len;
	for (size_t i = 0; i < d->n_watch;)
		if (send_snapshot(d, d->watch[i]))
			i++;
		else
			d->watch[i] = d->watch[--d->n_watch];
	return 0;
}
