/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target: the request decoder (core/src/requests/endpoint_decode.c, on core/src/requests/pbwire.c), each
 * input decoded as an AllocateRequest, a PreferredAllocationRequest and a PreStartContainerRequest
 * against a small device index, and compared with protobuf-c. When ours accepts: protobuf-c
 * unpacks the same bytes to the same containers, lists, IDs (byte for byte: none holds a NUL) and
 * allocation_size; every ID points into the index; the limits hold; no ID repeats where the rules
 * forbid it; dp_ep_prefer's answer is within the lists and repeats nothing. (Ours refuses more than
 * protobuf-c: NULs, unknown and duplicate IDs, the limits, varints beyond 64 bits. protobuf-c
 * refuses more in one place: a length prefix longer than 5 bytes, which the wire format, ours
 * and grpc-go accept as any varint of up to 10; such an input is only compared when
 * protobuf-c takes it.)
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "dp/grpc.h"
#include "requests/endpoint_decode.h"
#include "fuzz.h"
#include "requests/pbwire.h"

static char arena[] = "0\0" "1\0" "10\0" "2\0" "hyperlight-0";
static const uint32_t sorted[] = { 0, 2, 4, 7, 9 }; /* strcmp order: 0 1 10 2 hyperlight-0 */
static const struct dp_ep_index x = { arena, sorted, 5, "fuzz.dev/dev" };

static void same_ids(const struct dp_ep_ids *ours, char **theirs, size_t n)
{
	FUZZ_CHECK(ours->n == n);
	for (size_t i = 0; i < n; i++) {
		FUZZ_CHECK(ours->ids[i] >= arena && ours->ids[i] < arena + sizeof(arena));
		FUZZ_CHECK(strcmp(ours->ids[i], theirs[i]) == 0);
	}
}

/* No pointer twice in a (or in a and b together when b is given). */
static void distinct(const struct dp_ep_ids *a, const struct dp_ep_ids *b)
{
	bool seen[sizeof(arena)] = { false };
	const struct dp_ep_ids *lists[] = { a, b };
	for (size_t l = 0; l < 2 && lists[l]; l++)
		for (size_t i = 0; i < lists[l]->n; i++) {
			size_t off = (size_t)(lists[l]->ids[i] - arena);
			FUZZ_CHECK(!seen[off]);
			seen[off] = true;
		}
}

/* A LEN field of data (and, when nested, of its containers) whose length prefix is longer than
 * the 5 bytes protobuf-c reads (its "error parsing length for length-prefixed data"). */
static bool long_length_prefix(const uint8_t *data, size_t size, bool nested)
{
	dp_pbreader r;
	dp_pbfield f;
	size_t at = 0;
	dp_pb_reader_init(&r, data, size);
	while (dp_pb_next(&r, &f) > 0) {
		if (f.wire == DP_PB_LEN) {
			const uint8_t *q = data + at;
			while (*q & 0x80) /* the tag */
				q++;
			if (f.data - (q + 1) > 5)
				return true;
			if (nested && f.number == 1 && long_length_prefix(f.data, f.len, false))
				return true;
		}
		at = dp_pb_offset(&r);
	}
	return false;
}

static void check_allocate(const struct dp_ep_request *r, const uint8_t *data, size_t size)
{
	V1beta1__AllocateRequest *p = v1beta1__allocate_request__unpack(NULL, size, data);
	if (!p) {
		FUZZ_CHECK(long_length_prefix(data, size, true));
		return;
	}
	FUZZ_CHECK(r->n == p->n_container_requests && r->n >= 1 && r->n <= DP_EP_MAX_CONTAINERS);
	bool seen[sizeof(arena)] = { false };
	size_t total = 0;
	for (size_t c = 0; c < r->n; c++) {
		same_ids(&r->c[c].ids, p->container_requests[c]->devices_ids,
			 p->container_requests[c]->n_devices_ids);
		FUZZ_CHECK(r->c[c].ids.n >= 1);
		for (size_t i = 0; i < r->c[c].ids.n; i++) {
			size_t off = (size_t)(r->c[c].ids.ids[i] - arena);
			FUZZ_CHECK(!seen[off]); /* over the whole request */
			seen[off] = true;
		}
		total += r->c[c].ids.n;
	}
	FUZZ_CHECK(total <= x.n);
	v1beta1__allocate_request__free_unpacked(p, NULL);
}

static void check_preferred(const struct dp_ep_request *r, const uint8_t *data, size_t size)
{
	V1beta1__PreferredAllocationRequest *p = v1beta1__preferred_allocation_request__unpack(NULL, size, data);
	if (!p) {
		FUZZ_CHECK(long_length_prefix(data, size, true));
		return;
	}
	FUZZ_CHECK(r->n == p->n_container_requests && r->n <= DP_EP_MAX_CONTAINERS);
	size_t total = 0;
	for (size_t c = 0; c < r->n; c++) {
		const V1beta1__ContainerPreferredAllocationRequest *pc = p->container_requests[c];
		same_ids(&r->c[c].ids, pc->available_deviceids, pc->n_available_deviceids);
		same_ids(&r->c[c].must_include, pc->must_include_deviceids, pc->n_must_include_deviceids);
		FUZZ_CHECK(r->c[c].allocation_size == pc->allocation_size);
		distinct(&r->c[c].ids, NULL);
		distinct(&r->c[c].must_include, NULL);
		total += r->c[c].ids.n + r->c[c].must_include.n;

		char **ids = NULL;
		size_t n = 0;
		FUZZ_CHECK(dp_ep_prefer(&r->c[c], &ids, &n) == 0);
		size_t want = pc->allocation_size > 0 ? (size_t)pc->allocation_size : 0;
		FUZZ_CHECK(n <= want);
		struct dp_ep_ids answer = { ids, n };
		distinct(&answer, NULL);
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(ids[i] >= arena && ids[i] < arena + sizeof(arena));
		free(ids);
	}
	FUZZ_CHECK(total <= 2 * x.n);
	v1beta1__preferred_allocation_request__free_unpacked(p, NULL);
}

static void check_prestart(const struct dp_ep_request *r, const uint8_t *data, size_t size)
{
	V1beta1__PreStartContainerRequest *p = v1beta1__pre_start_container_request__unpack(NULL, size, data);
	if (!p) {
		FUZZ_CHECK(long_length_prefix(data, size, false));
		return;
	}
	FUZZ_CHECK(r->n == 1);
	same_ids(&r->c[0].ids, p->devices_ids, p->n_devices_ids);
	distinct(&r->c[0].ids, NULL);
	v1beta1__pre_start_container_request__free_unpacked(p, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum dp_ep_kind kinds[] = { DP_EP_ALLOCATE, DP_EP_PREFERRED, DP_EP_PRESTART };
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		struct dp_ep_request *r = NULL;
		dp_buf why = { 0 };
		int status = dp_ep_decode(kinds[k], &x, data, size, &r, &why);
		if (status != DP_GRPC_OK) {
			FUZZ_CHECK(r == NULL);
			FUZZ_CHECK(status == DP_GRPC_INVALID_ARGUMENT || status == DP_GRPC_RESOURCE_EXHAUSTED);
			FUZZ_CHECK(why.len > 0 || why.oom);
		} else {
			FUZZ_CHECK(r != NULL && why.len == 0);
			if (kinds[k] == DP_EP_ALLOCATE)
				check_allocate(r, data, size);
			else if (kinds[k] == DP_EP_PREFERRED)
				check_preferred(r, data, size);
			else
				check_prestart(r, data, size);
		}
		free(r);
		dp_buf_done(&why);
	}
	return 0;
}
