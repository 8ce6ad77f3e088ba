/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_decode: requests encoded by protobuf-c (and by hand, for what protobuf-c cannot
 * encode) decoded and checked against a device index. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api.pb-c.h"
#include "dp/grpc.h"
#include "requests/endpoint_decode.h"

/* An index like the endpoint's: IDs "0".."n-1" (or given ones) in an arena, sorted offsets. */
struct index {
	struct dp_ep_index x;
	char *arena;
	uint32_t *sorted;
};

static const char *cmp_base;
static int cmp_off(const void *a, const void *b)
{
	return strcmp(cmp_base + *(const uint32_t *)a, cmp_base + *(const uint32_t *)b);
}

static void index_init(struct index *ix, const char *const *ids, size_t n, const char *prefix)
{
	size_t size = 0;
	char tmp[64];
	for (size_t i = 0; i < n; i++)
		size += (ids ? strlen(ids[i]) : (size_t)snprintf(tmp, sizeof(tmp), "%s%zu", prefix, i)) + 1;
	ix->arena = malloc(size);
	ix->sorted = calloc(n, sizeof(*ix->sorted));
	assert_non_null(ix->arena);
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids)
			snprintf(tmp, sizeof(tmp), "%s", ids[i]);
		else
			snprintf(tmp, sizeof(tmp), "%s%zu", prefix, i);
		memcpy(ix->arena + off, tmp, strlen(tmp) + 1);
		ix->sorted[i] = (uint32_t)off;
		off += strlen(tmp) + 1;
	}
	cmp_base = ix->arena;
	qsort(ix->sorted, n, sizeof(*ix->sorted), cmp_off);
	ix->x = (struct dp_ep_index){ ix->arena, ix->sorted, n, "example.com/thing" };
}

static void index_done(struct index *ix)
{
	free(ix->arena);
	free(ix->sorted);
}

/* An AllocateRequest of nc containers, the IDs of container i in ids[i] (NULL-terminated). */
static uint8_t *pack_allocate(char **const *ids, size_t nc, size_t *ret_len)
{
	V1beta1__ContainerAllocateRequest cs[32], *ptrs[32];
	V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
	assert_true(nc <= 32);
	for (size_t i = 0; i < nc; i++) {
		v1beta1__container_allocate_request__init(&cs[i]);
		cs[i].devices_ids = ids[i];
		while (ids[i][cs[i].n_devices_ids])
			cs[i].n_devices_ids++;
		ptrs[i] = &cs[i];
	}
	req.container_requests = ptrs;
	req.n_container_requests = nc;
	*ret_len = v1beta1__allocate_request__get_packed_size(&req);
	uint8_t *buf = malloc(*ret_len ? *ret_len : 1);
	assert_non_null(buf);
	v1beta1__allocate_request__pack(&req, buf);
	return buf;
}

static int decode(enum dp_ep_kind k, const struct index *ix, const uint8_t *b, size_t len,
		  struct dp_ep_request **ret, dp_buf *why)
{
	dp_buf_done(why);
	int s = dp_ep_decode(k, &ix->x, b, len, ret, why);
	dp_buf_append(why, "", 1);
	return s;
}

static void expect_refused(enum dp_ep_kind k, const struct index *ix, const uint8_t *b, size_t len,
			   const char *want)
{
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	int s = decode(k, ix, b, len, &req, &why);
	if (s != DP_GRPC_INVALID_ARGUMENT || !strstr(why.data, want))
		fail_msg("status %d message \"%s\", want INVALID_ARGUMENT with \"%s\"", s, why.data, want);
	assert_null(req);
}

static void allocate_points_into_the_index(void **state)
{
	struct index ix;
	index_init(&ix, (const char *const[]){ "b", "a", "10", "1" }, 4, NULL);
	size_t len;
	_cleanup_free_ uint8_t *b = pack_allocate((char **const[]){ (char *[]){ "1", "a", NULL },
								    (char *[]){ "10", NULL } }, 2, &len);
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, b, len, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->n, 2);
	assert_int_equal(req->c[0].ids.n, 2);
	assert_string_equal(req->c[0].ids.ids[0], "1");
	assert_string_equal(req->c[0].ids.ids[1], "a");
	assert_int_equal(req->c[1].ids.n, 1);
	assert_string_equal(req->c[1].ids.ids[0], "10");
	for (size_t c = 0; c < 2; c++)
		for (size_t i = 0; i < req->c[c].ids.n; i++)
			assert_true(req->c[c].ids.ids[i] >= ix.arena && req->c[c].ids.ids[i] < ix.arena + 9);
	assert_int_equal(req->size, sizeof(*req) + 2 * sizeof(req->c[0]) + 3 * sizeof(char *));
	free(req);
	index_done(&ix);
}

static void unknown_fields_are_skipped(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 3, "");
	/* container {ids "2", varint 7, fixed64, fixed32, bytes} + top-level unknown LEN and varint */
	const uint8_t b[] = { 0x0a, 0x16, 0x0a, 0x01, '2', 0x38, 0x05, 0x41, 1, 2, 3, 4, 5, 6, 7, 8, 0x4d,
			      1, 2, 3, 4, 0x52, 0x01, 'z', 0x12, 0x02, 'x', 'y', 0x18, 0x2a };
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, b, sizeof(b), &req, &why), DP_GRPC_OK);
	assert_int_equal(req->n, 1);
	assert_int_equal(req->c[0].ids.n, 1);
	assert_string_equal(req->c[0].ids.ids[0], "2");
	free(req);

	/* one ID and 2M unknown fields (4 MiB): nothing of them is kept */
	size_t n = 4u << 20;
	uint8_t *big = malloc(n + 16);
	size_t off = 0;
	big[off++] = 0x0a;
	size_t inner = n - 9; /* odd: 3 bytes of ID, then pairs */
	for (size_t v = inner; v; v >>= 7)
		big[off++] = (uint8_t)((v & 0x7f) | (v >> 7 ? 0x80 : 0));
	size_t end = off + inner;
	big[off++] = 0x0a;
	big[off++] = 0x01;
	big[off++] = '0';
	while (off < end) {
		big[off++] = 0x10;
		big[off++] = 0x00;
	}
	assert_int_equal(off, end);
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, big, end, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->c[0].ids.n, 1);
	assert_int_equal(req->size, sizeof(*req) + sizeof(req->c[0]) + sizeof(char *));
	free(req);
	free(big);
	index_done(&ix);
}

static void nul_in_an_id(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 3, "");
	/* "0\0../x": protobuf-c's unpack kept it as "0" */
	const uint8_t b[] = { 0x0a, 0x09, 0x0a, 0x07, '0', 0x00, '.', '.', '/', 'x', 'y' };
	expect_refused(DP_EP_ALLOCATE, &ix, b, sizeof(b), "holds a NUL byte: \"0\\u0000../xy\"");
	const uint8_t p[] = { 0x0a, 0x04, 0x12, 0x02, '1', 0x00 };
	expect_refused(DP_EP_PREFERRED, &ix, p, sizeof(p), "NUL byte");
	const uint8_t s[] = { 0x0a, 0x02, 0x00, '1' };
	expect_refused(DP_EP_PRESTART, &ix, s, sizeof(s), "NUL byte");
	index_done(&ix);
}

static void duplicates(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 4, "");
	size_t len;
	_cleanup_free_ uint8_t *one = pack_allocate((char **const[]){ (char *[]){ "0", "1", "0", NULL } }, 1, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, one, len, "duplicate device IDs for example.com/thing: \"0\"");
	_cleanup_free_ uint8_t *two = pack_allocate((char **const[]){ (char *[]){ "2", NULL }, (char *[]){ "3", "2", NULL } }, 2, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, two, len, "duplicate device IDs for example.com/thing: \"2\"");

	/* GetPreferredAllocation: an ID both available and must-include is fine, twice in one list is not */
	char *avail[] = { "0", "1", "2" }, *must[] = { "1" }, *twice[] = { "2", "2" };
	V1beta1__ContainerPreferredAllocationRequest c = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT, *cp = &c;
	V1beta1__PreferredAllocationRequest pr = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
	pr.container_requests = &cp;
	pr.n_container_requests = 1;
	c.available_deviceids = avail;
	c.n_available_deviceids = 3;
	c.must_include_deviceids = must;
	c.n_must_include_deviceids = 1;
	c.allocation_size = 2;
	uint8_t buf[256];
	len = v1beta1__preferred_allocation_request__pack(&pr, buf);
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_PREFERRED, &ix, buf, len, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->c[0].ids.n, 3);
	assert_int_equal(req->c[0].must_include.n, 1);
	assert_ptr_equal(req->c[0].must_include.ids[0], req->c[0].ids.ids[1]); /* one device, one pointer */
	assert_int_equal(req->c[0].allocation_size, 2);
	free(req);
	c.available_deviceids = twice;
	c.n_available_deviceids = 2;
	len = v1beta1__preferred_allocation_request__pack(&pr, buf);
	expect_refused(DP_EP_PREFERRED, &ix, buf, len, "duplicate device IDs for example.com/thing: \"2\"");
	c.available_deviceids = avail;
	c.n_available_deviceids = 3;
	c.must_include_deviceids = twice;
	c.n_must_include_deviceids = 2;
	len = v1beta1__preferred_allocation_request__pack(&pr, buf);
	expect_refused(DP_EP_PREFERRED, &ix, buf, len, "duplicate device IDs");

	/* the lists' fields interleaved on the wire (fuzz_decode): must "0", available "0", must "0"
	 * is still "0" twice in must-include (it was accepted, and dp_ep_prefer answered "0" twice) */
	const uint8_t mixed[] = { 0x0a, 0x0b, 0x12, 0x01, '0', 0x0a, 0x01, '0', 0x12, 0x01, '0', 0x18, 0x02 };
	expect_refused(DP_EP_PREFERRED, &ix, mixed, sizeof(mixed),
		       "duplicate device IDs for example.com/thing: \"0\"");
	const uint8_t mixed_avail[] = { 0x0a, 0x0b, 0x0a, 0x01, '1', 0x12, 0x01, '1', 0x0a, 0x01, '1', 0x18, 0x02 };
	expect_refused(DP_EP_PREFERRED, &ix, mixed_avail, sizeof(mixed_avail),
		       "duplicate device IDs for example.com/thing: \"1\"");
	index_done(&ix);
}

static void unknown_ids_named(void **state)
{
	struct index ix;
	index_init(&ix, (const char *const[]){ "10", "2" }, 2, NULL);
	size_t len;
	/* prefixes and extensions of known IDs are unknown */
	_cleanup_free_ uint8_t *b = pack_allocate((char **const[]){ (char *[]){ "1", "100", NULL } }, 1, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, b, len, "unknown device IDs for example.com/thing: \"1\", \"100\"");
	index_done(&ix);

	/* 12 unknown of 20: ten named, then "(and 2 more)"; a long one cut at 64 bytes */
	index_init(&ix, NULL, 20, "d");
	char *ids[13], names[12][8], longid[101];
	for (int i = 0; i < 11; i++) {
		snprintf(names[i], sizeof(names[i]), "x%d", i);
		ids[i] = names[i];
	}
	memset(longid, 'l', 100);
	longid[100] = '\0';
	ids[11] = longid;
	ids[12] = NULL;
	_cleanup_free_ uint8_t *many = pack_allocate((char **const[]){ ids }, 1, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, many, len, "\"x9\" (and 2 more)");
	_cleanup_free_ uint8_t *lng = pack_allocate((char **const[]){ (char *[]){ longid, NULL } }, 1, &len);
	char want[128];
	snprintf(want, sizeof(want), "\"%.64s\"... (100 bytes)", longid);
	expect_refused(DP_EP_ALLOCATE, &ix, lng, len, want);
	index_done(&ix);
}

static void limits(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 20, "");
	char *lists[20][2], names[20][4];
	for (int i = 0; i < 20; i++) {
		snprintf(names[i], sizeof(names[i]), "%d", i);
		lists[i][0] = names[i];
		lists[i][1] = NULL;
	}
	char **const containers[17] = { lists[0], lists[1], lists[2], lists[3], lists[4], lists[5],
					lists[6], lists[7], lists[8], lists[9], lists[10], lists[11],
					lists[12], lists[13], lists[14], lists[15], lists[16] };
	size_t len;
	_cleanup_free_ uint8_t *at = pack_allocate(containers, DP_EP_MAX_CONTAINERS, &len);
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, at, len, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->n, DP_EP_MAX_CONTAINERS);
	free(req);
	_cleanup_free_ uint8_t *over = pack_allocate(containers, DP_EP_MAX_CONTAINERS + 1, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, over, len, "more than 16 container requests (kubelet sends one)");
	index_done(&ix);

	/* as many IDs as devices: served; one more (even unknown) refused before any lookup */
	index_init(&ix, NULL, 3, "");
	_cleanup_free_ uint8_t *all = pack_allocate((char **const[]){ (char *[]){ "2", "1", "0", NULL } }, 1, &len);
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, all, len, &req, &why), DP_GRPC_OK);
	free(req);
	_cleanup_free_ uint8_t *more = pack_allocate((char **const[]){ (char *[]){ "2", "1", "0", "x", NULL } }, 1, &len);
	expect_refused(DP_EP_ALLOCATE, &ix, more, len,
		       "AllocateRequest names more than 3 device IDs (example.com/thing has 3 devices)");
	index_done(&ix);
}

static void empty_and_malformed(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 3, "");
	expect_refused(DP_EP_ALLOCATE, &ix, (const uint8_t *)"", 0, "Allocate request has no container requests");
	const uint8_t second_empty[] = { 0x0a, 0x03, 0x0a, 0x01, '0', 0x0a, 0x00 };
	expect_refused(DP_EP_ALLOCATE, &ix, second_empty, sizeof(second_empty), "container request 1 has no device IDs");
	const uint8_t varint_ids[] = { 0x0a, 0x02, 0x08, 0x01 };
	expect_refused(DP_EP_ALLOCATE, &ix, varint_ids, sizeof(varint_ids), "cannot decode AllocateRequest");
	const uint8_t varint_container[] = { 0x08, 0x01 };
	expect_refused(DP_EP_ALLOCATE, &ix, varint_container, sizeof(varint_container), "cannot decode AllocateRequest");
	const uint8_t truncated[] = { 0x0a, 0x03, 0x0a, 0x01, '0', 0x0a };
	expect_refused(DP_EP_ALLOCATE, &ix, truncated, sizeof(truncated), "cannot decode AllocateRequest: malformed field at byte 5");
	const uint8_t inner[] = { 0x0a, 0x03, 0x0a, 0x05, '0' };
	expect_refused(DP_EP_ALLOCATE, &ix, inner, sizeof(inner), "cannot decode AllocateRequest: malformed field at byte 2");
	const uint8_t size_len[] = { 0x0a, 0x02, 0x1a, 0x00 };
	expect_refused(DP_EP_PREFERRED, &ix, size_len, sizeof(size_len), "allocation_size");

	/* GetPreferredAllocation and PreStartContainer may be empty */
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_PREFERRED, &ix, (const uint8_t *)"", 0, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->n, 0);
	free(req);
	assert_int_equal(decode(DP_EP_PRESTART, &ix, (const uint8_t *)"", 0, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->n, 1);
	assert_int_equal(req->c[0].ids.n, 0);
	free(req);
	index_done(&ix);
}

/* The largest legal request at hyperlight's DEVICE_COUNT ceiling: every device in one container. */
static void largest_legal_request(void **state)
{
	enum { N = 134544 };
	struct index ix;
	index_init(&ix, NULL, N, "hyperlight-");
	char **ids = calloc(N + 1, sizeof(*ids));
	for (size_t i = 0; i < N; i++)
		ids[i] = ix.arena + ix.sorted[N - 1 - i]; /* reverse sorted order */
	size_t len;
	_cleanup_free_ uint8_t *b = pack_allocate((char **const[]){ ids }, 1, &len);
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_ALLOCATE, &ix, b, len, &req, &why), DP_GRPC_OK);
	assert_int_equal(req->c[0].ids.n, N);
	for (size_t i = 0; i < N; i++)
		assert_ptr_equal(req->c[0].ids.ids[i], ids[i]);
	assert_int_equal(req->size, sizeof(*req) + sizeof(req->c[0]) + N * sizeof(char *));
	free(req);
	free(ids);
	index_done(&ix);
}

static struct dp_ep_request *decode_preferred(const struct index *ix, char **avail, size_t na, char **must,
					     size_t nm, int32_t size)
{
	V1beta1__ContainerPreferredAllocationRequest c = V1BETA1__CONTAINER_PREFERRED_ALLOCATION_REQUEST__INIT, *cp = &c;
	V1beta1__PreferredAllocationRequest pr = V1BETA1__PREFERRED_ALLOCATION_REQUEST__INIT;
	pr.container_requests = &cp;
	pr.n_container_requests = 1;
	c.available_deviceids = avail;
	c.n_available_deviceids = na;
	c.must_include_deviceids = must;
	c.n_must_include_deviceids = nm;
	c.allocation_size = size;
	size_t len = v1beta1__preferred_allocation_request__get_packed_size(&pr);
	_cleanup_free_ uint8_t *buf = malloc(len);
	v1beta1__preferred_allocation_request__pack(&pr, buf);
	struct dp_ep_request *req = NULL;
	_cleanup_(dp_buf_done) dp_buf why = { 0 };
	assert_int_equal(decode(DP_EP_PREFERRED, ix, buf, len, &req, &why), DP_GRPC_OK);
	return req;
}

static void assert_prefer(const struct dp_ep_request *req, const char *want)
{
	char **ids = NULL;
	size_t n = 0;
	assert_int_equal(dp_ep_prefer(&req->c[0], &ids, &n), 0);
	_cleanup_(dp_buf_done) dp_buf got = { 0 };
	for (size_t i = 0; i < n; i++)
		dp_buf_printf(&got, "%s%s", i ? "," : "", ids[i]);
	dp_buf_append(&got, "", 1);
	assert_string_equal(got.data, want);
	free(ids);
}

static void preferred_answer(void **state)
{
	struct index ix;
	index_init(&ix, NULL, 6, "");
	char *avail[] = { "5", "1", "3", "0", "4" }, *must[] = { "3", "2" };
	static const struct {
		int32_t size;
		const char *want;
	} cases[] = {
		{ 1, "3" },             /* must-include first, cut at the size */
		{ 2, "3,2" },
		{ 4, "3,2,5,1" },       /* then available in order, "3" not twice */
		{ 100, "3,2,5,1,0,4" }, /* capped at what the lists hold */
		{ 0, "" },
		{ -5, "" },
	};
	struct dp_ep_request *req = decode_preferred(&ix, avail, 5, must, 2, 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		req->c[0].allocation_size = cases[i].size;
		assert_prefer(req, cases[i].want);
	}
	free(req);
	req = decode_preferred(&ix, avail, 5, NULL, 0, 3);
	assert_prefer(req, "5,1,3");
	free(req);
	index_done(&ix);

	/* the largest legal request, every device available and half of them must-include: each
	 * device once, must-include first (this was O(n^2): 60,000 IDs took 8.5 s) */
	enum { N = 134544 };
	index_init(&ix, NULL, N, "hyperlight-");
	char **all = calloc(N, sizeof(*all)), **half = calloc(N / 2, sizeof(*half));
	for (size_t i = 0; i < N; i++)
		all[i] = ix.arena + ix.sorted[i];
	for (size_t i = 0; i < N / 2; i++)
		half[i] = all[N - 1 - 2 * i];
	req = decode_preferred(&ix, all, N, half, N / 2, N);
	char **ids = NULL;
	size_t n = 0;
	assert_int_equal(dp_ep_prefer(&req->c[0], &ids, &n), 0);
	assert_int_equal(n, N);
	for (size_t i = 0; i < N / 2; i++)
		assert_string_equal(ids[i], half[i]);
	for (size_t i = N / 2, k = 0; i < N; i++, k += 2)
		assert_string_equal(ids[i], all[k]); /* the even positions from the end are in half */
	free(ids);
	free(req);
	free(all);
	free(half);
	index_done(&ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(allocate_points_into_the_index),
		cmocka_unit_test(unknown_fields_are_skipped),
		cmocka_unit_test(nul_in_an_id),
		cmocka_unit_test(duplicates),
		cmocka_unit_test(unknown_ids_named),
		cmocka_unit_test(limits),
		cmocka_unit_test(empty_and_malformed),
		cmocka_unit_test(largest_legal_request),
		cmocka_unit_test(preferred_answer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
