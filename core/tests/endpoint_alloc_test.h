/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_alloc_test: an Allocate of two container requests, as endpoint_rpc.c builds it from
 * the wire, for the endpoint's unit tests (test_endpoint_driver.c, test_endpoint_alloclog.c).
 * Static inline: each test binary takes its own copy, none is linked into the product.
 */
#pragma once

#include <stdlib.h>

#include "endpoint/endpoint_internal.h"
#include "requests/endpoint_decode.h"

static inline dp_alloc *dpt_make_alloc(dp_endpoint *ep, char **c0, size_t n0, char **c1, size_t n1)
{
	struct dp_ep_request *req = calloc(1, sizeof(*req) + 2 * sizeof(struct dp_ep_container));
	dp_alloc *a = calloc(1, sizeof(*a));
	assert_non_null(req);
	assert_non_null(a);
	req->n = 2;
	req->c = (struct dp_ep_container *)(req + 1);
	req->c[0].ids = (struct dp_ep_ids){ c0, n0 };
	req->c[1].ids = (struct dp_ep_ids){ c1, n1 };
	a->ep = ep;
	a->req = req;
	a->n = 2;
	a->resp = calloc(2, sizeof(*a->resp));
	assert_non_null(a->resp);
	for (size_t i = 0; i < 2; i++)
		v1beta1__container_allocate_response__init(&a->resp[i]);
	return a;
}
