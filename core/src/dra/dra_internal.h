/* SPDX-License-Identifier: Apache-2.0 */
/* dra_internal: the service's state, shared by dra.c (the DRA calls) and dra_health.c (the health streams). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dp/dra.h"
#include "dp/grpc.h"

struct dp_dra {
	dp_grpc_server *server;
	dp_dra_driver drv;
	void *userdata;
	uint8_t *health_msg; /* the encoded NodeWatchResourcesResponse; NULL: no health reported yet */
	size_t health_len;
	dp_grpc_call *watch[DP_DRA_HEALTH_STREAMS_MAX];
	size_t n_watch;
};

/* NodeWatchResources (dra_health.c). */
void dp_dra_rpc_watch(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata);
