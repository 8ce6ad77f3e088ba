/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_rpc: the DevicePlugin service methods of one endpoint, and one Allocate call. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "dp/cdi.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "requests/endpoint_decode.h"
#include "endpoint_alloclog.h"
#include "endpoint_internal.h"

/*
 * Decoded Allocate requests waiting for their answer (hyperlight's wait for the probe) hold at
 * most HELD_MAX bytes in total, over every endpoint of the process; a request that does not fit
 * is refused with RESOURCE_EXHAUSTED. A small one (kubelet's: one container, a few IDs) may also
 * use HELD_RESERVE more, so a client holding the budget with large requests does not starve it.
 * The largest valid request holds 8 bytes per device (1.1 MB at hyperlight's ceiling).
 */
#define HELD_MAX (4u << 20)
#define HELD_RESERVE (1u << 20)
#define HELD_SMALL (4u << 10)

static size_t held;

/* Decode msg against ep's devices (endpoint_decode.h): DP_GRPC_OK with *ret, or the status with
 * the reason in why. */
static int decode(const dp_endpoint *ep, enum dp_ep_kind kind, const uint8_t *msg, size_t len,
		  struct dp_ep_request **ret, dp_buf *why)
{
	struct dp_ep_index x = { .ids = ep->ids, .sorted = ep->sorted, .n = ep->n_devices,
				 .resource = ep->resource };
	return dp_ep_decode(kind, &x, msg, len, ret, why);
}

/* Refuse call with status and message; the daemon's handler is told (on_request_refused). */
static void refuse(dp_endpoint *ep, dp_grpc_call *call, int status, const char *msg)
{
	char q[300];
	bool allocate = strcmp(dp_grpc_call_path(call), "/v1beta1.DevicePlugin/Allocate") == 0;
	if (allocate) /* its own line, rate-bounded (endpoint_alloclog.h) */
		dp_ep_alloclog_refused(ep, dp_grpc_status_name(status), msg);
	else
		dp_debug("request refused", "path=%s status=%s message=%s", dp_grpc_call_path(call),
			 dp_grpc_status_name(status), dp_logq(q, sizeof(q), msg));
	if (ep->events.on_request_refused)
		ep->events.on_request_refused(ep, dp_grpc_call_path(call), status, msg, ep->events.userdata);
	if (allocate)
		dp_metrics_allocate(ep->resource, dp_grpc_status_name(status));
	dp_grpc_call_finish(call, status, msg);
}

/* Refuse call with status and the message in b (out of memory said so). */
static void finish_buf(dp_endpoint *ep, dp_grpc_call *call, int status, dp_buf *b)
{
	dp_buf_append(b, "", 1);
	refuse(ep, call, b->oom ? DP_GRPC_RESOURCE_EXHAUSTED : status, b->oom ? "out of memory" : b->data);
}

/* ---- small responses ---- */

static void rpc_options(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_endpoint *ep = userdata;
	V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	opts.pre_start_required = ep->pre_start_required;
	opts.get_preferred_allocation_available = ep->preferred_allocation;
	(void)dp_grpc_call_send_pb(call, &opts.base);
}

static void rpc_prestart(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_endpoint *ep = userdata;
	_cleanup_(dp_buf_done) dp_buf b = { 0 };
	struct dp_ep_request *req = NULL;
	int status = decode(ep, DP_EP_PRESTART, msg, len, &req, &b);
	if (status != DP_GRPC_OK) {
		finish_buf(ep, call, status, &b);
		return;
	}
	free(req);
	V1beta1__PreStartContainerResponse resp = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
	(void)dp_grpc_call_send_pb(call, &resp.base);
}

/* ---- Allocate ---- */

/* What container response r holds: each of its fields is a repeated message (api.proto), each
 * element allocated with its strings by push_field; r itself is an element of a->resp. */
static void resp_clear(V1beta1__ContainerAllocateResponse *r)
{
	const ProtobufCMessageDescriptor *d = r->base.descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		ProtobufCMessage **arr = *(ProtobufCMessage ***)((char *)r + f->offset);
		size_t n = *(size_t *)((char *)r + f->quantifier_offset);
		for (size_t j = 0; j < n; j++)
			protobuf_c_message_free_unpacked(arr[j], NULL);
		free(arr);
	}
}

static void alloc_free(dp_alloc *a)
{
	for (size_t i = 0; i < a->n; i++)
		resp_clear(&a->resp[i]);
	free(a->resp);
	if (a->req) {
		held -= a->req->size;
		free(a->req);
	}
	free(a);
}

static void alloc_on_cancel(dp_grpc_call *call, int status, void *userdata)
{
	dp_alloc *a = userdata;
	dp_debug("call cancelled", "path=%s status=%s resource=%s", dp_grpc_call_path(call),
		 dp_grpc_status_name(status), a->ep->resource);
	a->call = NULL;
}

/* Whether a decoded request of size bytes may be held until its answer. */
static bool held_fits(size_t size)
{
	size_t limit = HELD_MAX + (size <= HELD_SMALL ? HELD_RESERVE : 0);
	return size <= limit && held <= limit - size;
}

static void rpc_allocate(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_endpoint *ep = userdata;
	_cleanup_(dp_buf_done) dp_buf b = { 0 };
	_cleanup_free_ struct dp_ep_request *req = NULL;
	int status = decode(ep, DP_EP_ALLOCATE, msg, len, &req, &b);
	if (status == DP_GRPC_OK && !held_fits(req->size)) {
		dp_buf_printf(&b, "too many Allocate requests in progress: %zu bytes held, at most %u",
			      held, HELD_MAX);
		status = DP_GRPC_RESOURCE_EXHAUSTED;
	}
	dp_alloc *a = status ? NULL : calloc(1, sizeof(*a));
	if (a)
		a->resp = calloc(req->n, sizeof(*a->resp));
	if (status || !a || !a->resp) {
		if (!status)
			dp_buf_puts(&b, "out of memory");
		finish_buf(ep, call, status ? status : DP_GRPC_RESOURCE_EXHAUSTED, &b);
		free(a);
		return;
	}
	a->ep = ep;
	a->call = call;
	a->n = req->n;
	held += req->size;
	a->req = TAKE_PTR(req);
	a->deadline = dp_grpc_call_deadline(call);
	for (size_t i = 0; i < a->n; i++)
		v1beta1__container_allocate_response__init(&a->resp[i]);
	dp_grpc_call_set_cancel(call, alloc_on_cancel, a);
	ep->driver.allocate(ep, a, ep->userdata);
}

size_t dp_alloc_containers(const dp_alloc *a) { return a->n; }

char **dp_alloc_ids(const dp_alloc *a, size_t c, size_t *ret_n)
{
	*ret_n = a->req->c[c].ids.n;
	return a->req->c[c].ids.ids;
}

bool dp_alloc_cancelled(const dp_alloc *a) { return !a->call; }
uint64_t dp_alloc_deadline(const dp_alloc *a) { return a->deadline; }

/* gcc 12 -fanalyzer loses pointers stored through a run-time index (na[*n] = e) and reports
 * them leaked: they are owned by the response and freed with it (alloc_free). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-malloc-leak"
#endif
/* Grow a protobuf-c repeated pointer field by one element. */
static void *push(void ***arr, size_t *n, size_t size)
{
	void *e = calloc(1, size);
	void **na = e ? realloc(*arr, (*n + 1) * sizeof(void *)) : NULL;
	if (!na) {
		free(e);
		return NULL;
	}
	na[*n] = e;
	*arr = na;
	(*n)++;
	return e;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* A new element of container c's repeated message field (by its api.proto name), initialised,
 * or NULL with *ret_err: -EINVAL (no container c), -ENOMEM. */
static void *push_field(dp_alloc *a, size_t c, const char *field, int *ret_err)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(
		&v1beta1__container_allocate_response__descriptor, field);
	if (c >= a->n) {
		*ret_err = -EINVAL;
		return NULL;
	}
	char *r = (char *)&a->resp[c];
	void *e = push((void ***)(r + f->offset), (size_t *)(r + f->quantifier_offset),
		       ((const ProtobufCMessageDescriptor *)f->descriptor)->sizeof_message);
	if (!e) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	protobuf_c_message_init(f->descriptor, e);
	return e;
}

/* The CDI device named by the len bytes at name. */
static int add_cdi(dp_alloc *a, size_t c, const char *name, size_t len)
{
	int r = 0;
	V1beta1__CDIDevice *d = push_field(a, c, "cdi_devices", &r);
	if (!d)
		return r;
	d->name = strndup(name, len);
	return d->name ? 0 : -ENOMEM;
}

int dp_alloc_add_cdi(dp_alloc *a, size_t c, const char *cdi_name)
{
	return add_cdi(a, c, cdi_name, strlen(cdi_name));
}

/* Container c's CDI answer, built in one buffer: the annotation's key, its NUL, then its value
 * (the names, comma-separated), each name also added as a CDI device as it is appended. */
static int add_cdi_answer(dp_alloc *a, size_t c, const char *plugin_name, const char *kind,
			  const char *device)
{
	_cleanup_(dp_buf_done) dp_buf b = { 0 };
	size_t n;
	char **ids = dp_alloc_ids(a, c, &n);

	if (n == 0)
		return -EINVAL;
	dp_buf_puts(&b, "cdi.k8s.io/");
	dp_buf_puts(&b, plugin_name);
	dp_buf_puts(&b, "_");
	dp_buf_puts(&b, ids[0]);
	dp_buf_append(&b, "", 1);
	size_t value = b.len;
	for (size_t i = 0; i < (device ? 1 : n); i++) {
		if (i)
			dp_buf_puts(&b, ",");
		size_t start = b.len;
		dp_buf_puts(&b, kind);
		dp_buf_puts(&b, "=");
		dp_buf_puts(&b, device ? device : ids[i]);
		if (b.oom || add_cdi(a, c, b.data + start, b.len - start) < 0)
			return -ENOMEM;
	}
	return dp_alloc_add_annotation(a, c, b.data, b.data + value);
}

int dp_alloc_add_cdi_answer(dp_alloc *a, const char *plugin_name, const char *kind, const char *device)
{
	if (!plugin_name || !kind)
		return -EINVAL;
	for (size_t c = 0; c < a->n; c++) {
		int r = add_cdi_answer(a, c, plugin_name, kind, device);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A map entry's key and value (annotations and envs), copied. */
static int set_pair(char **ret_key, char **ret_value, const char *key, const char *value)
{
	*ret_key = strdup(key);
	*ret_value = strdup(value);
	return *ret_key && *ret_value ? 0 : -ENOMEM;
}

int dp_alloc_add_annotation(dp_alloc *a, size_t c, const char *key, const char *value)
{
	int r = 0;
	V1beta1__ContainerAllocateResponse__AnnotationsEntry *e = push_field(a, c, "annotations", &r);
	return e ? set_pair(&e->key, &e->value, key, value) : r;
}

int dp_alloc_add_env(dp_alloc *a, size_t c, const char *key, const char *value)
{
	int r = 0;
	V1beta1__ContainerAllocateResponse__EnvsEntry *e = push_field(a, c, "envs", &r);
	return e ? set_pair(&e->key, &e->value, key, value) : r;
}

int dp_alloc_add_device(dp_alloc *a, size_t c, const char *container_path, const char *host_path,
			const char *permissions)
{
	int r = 0;
	V1beta1__DeviceSpec *d = push_field(a, c, "devices", &r);
	if (!d)
		return r;
	d->container_path = strdup(container_path);
	d->host_path = strdup(host_path);
	d->permissions = strdup(permissions);
	return d->container_path && d->host_path && d->permissions ? 0 : -ENOMEM;
}

/* Send the answer of a (status OK) on its call; RESOURCE_EXHAUSTED when out of memory. */
static int send_answer(dp_alloc *a)
{
	V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
	/* an array of pointers: sizeof(*ptrs) is the size of one pointer, as meant */
	_cleanup_free_ V1beta1__ContainerAllocateResponse **ptrs = calloc(a->n, sizeof(*ptrs)); // NOLINT(bugprone-sizeof-expression)
	if (!ptrs) {
		dp_grpc_call_finish(a->call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return DP_GRPC_RESOURCE_EXHAUSTED;
	}
	for (size_t i = 0; i < a->n; i++)
		ptrs[i] = &a->resp[i];
	resp.n_container_responses = a->n;
	resp.container_responses = ptrs;
	(void)dp_grpc_call_send_pb(a->call, &resp.base);
	return DP_GRPC_OK;
}

void dp_alloc_finish(dp_alloc *a, int status, const char *message)
{
	/* what the driver answered; "CANCELLED" when the requester went away meanwhile */
	const char *said = a->call ? dp_grpc_status_name(status) : "CANCELLED";
	dp_metrics_allocate(a->ep->resource, said);
	if (a->call) {
		dp_grpc_call_set_cancel(a->call, NULL, NULL);
		if (status != DP_GRPC_OK)
			dp_grpc_call_finish(a->call, status, message);
		else if (send_answer(a) != DP_GRPC_OK) {
			said = dp_grpc_status_name(DP_GRPC_RESOURCE_EXHAUSTED);
			message = "out of memory";
		}
	}
	dp_ep_alloclog_answered(a->ep, a, said, a->call ? message : "the requester went away");
	alloc_free(a);
}

/* ---- GetPreferredAllocation: the driver's prefer hook, else dp_ep_prefer (endpoint_decode.c) ---- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* The index of a decoded ID (a pointer into the arena): offs ascends with the index. */
static size_t ep_index_of(const dp_endpoint *ep, const char *id)
{
	uint32_t off = (uint32_t)(id - ep->ids);
	const uint32_t *at = bsearch(&off, ep->offs, ep->n_devices, sizeof(off), cmp_u32);
	return (size_t)(at - ep->offs);
}

static void ep_indices(const dp_endpoint *ep, const struct dp_ep_ids *ids, size_t *out)
{
	for (size_t i = 0; i < ids->n; i++)
		out[i] = ep_index_of(ep, ids->ids[i]);
}

/* The hook's answer is what kubelet takes: only offered devices, none twice, every must-include
 * one that fits, and as many as wanted (or every offered one, when fewer). mark: one byte per
 * device, zeroed, left zeroed. */
static bool ep_prefer_valid(const dp_endpoint *ep, const struct dp_ep_container *c, const size_t *offered,
			    const size_t *out, size_t n, size_t want, uint8_t *mark)
{
	size_t n_offered = c->ids.n + c->must_include.n, distinct = 0, must = 0, must_in = 0;
	bool ok = true;
	for (size_t i = 0; i < n_offered; i++) {
		distinct += mark[offered[i]] == 0;
		mark[offered[i]] = 1;
	}
	for (size_t i = 0; i < n && ok; i++) {
		ok = out[i] < ep->n_devices && mark[out[i]] == 1;
		if (ok)
			mark[out[i]] = 2;
	}
	for (size_t i = c->ids.n; i < n_offered; i++) { /* the must-include ones */
		must++;
		must_in += mark[offered[i]] == 2;
	}
	for (size_t i = 0; i < n_offered; i++)
		mark[offered[i]] = 0;
	return ok && n == (want < distinct ? want : distinct) && must_in == (must < n ? must : n);
}

/* One container request through the driver: 0 with *ret, 1 to fall back to the default, -ENOMEM. */
static int ep_prefer_driver(dp_endpoint *ep, const struct dp_ep_container *c, char ***ret, size_t *ret_n)
{
	size_t na = c->ids.n, nm = c->must_include.n, want = c->allocation_size > 0 ? (size_t)c->allocation_size : 0;
	if (want > na + nm)
		want = na + nm;
	_cleanup_free_ size_t *idx = malloc((na + nm + want + 1) * sizeof(*idx));
	_cleanup_free_ uint8_t *mark = calloc(ep->n_devices + 1, 1);
	if (!idx || !mark)
		/* the blocks are freed by their _cleanup_ attributes, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	size_t *out = idx + na + nm;
	ep_indices(ep, &c->ids, idx);
	ep_indices(ep, &c->must_include, idx + na);
	int r = ep->driver.prefer(ep, idx, na, idx + na, nm, want, out, ep->userdata);
	if (r < 0 || (size_t)r > want || !ep_prefer_valid(ep, c, idx, out, (size_t)r, want, mark)) {
		dp_debug("driver's preferred allocation not usable, answering the default", "resource=%s error=%s",
			 ep->resource, r < 0 ? dp_errname(r) : "invalid answer");
		return r == -ENOMEM ? r : 1;
	}
	char **ids = calloc(r ? (size_t)r : 1, sizeof(char *));
	if (!ids)
		return -ENOMEM;
	for (int i = 0; i < r; i++)
		ids[i] = ep->ids + ep->offs[out[i]];
	*ret = ids;
	*ret_n = (size_t)r;
	return 0;
}

int dp_ep_prefer_answer(dp_endpoint *ep, const struct dp_ep_container *c, char ***ret, size_t *ret_n)
{
	int r = ep->driver.prefer ? ep_prefer_driver(ep, c, ret, ret_n) : 1;
	return r == 1 ? dp_ep_prefer(c, ret, ret_n) : r;
}

static void rpc_preferred(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	dp_endpoint *ep = userdata;
	_cleanup_(dp_buf_done) dp_buf b = { 0 };
	_cleanup_free_ struct dp_ep_request *req = NULL;
	int status = decode(ep, DP_EP_PREFERRED, msg, len, &req, &b);
	if (status != DP_GRPC_OK) {
		finish_buf(ep, call, status, &b);
		return;
	}
	size_t n = req->n;
	V1beta1__ContainerPreferredAllocationResponse *rs = calloc(n ? n : 1, sizeof(*rs));
	/* an array of pointers: sizeof(*ptrs) is the size of one pointer, as meant */
	V1beta1__ContainerPreferredAllocationResponse **ptrs = calloc(n ? n : 1, sizeof(*ptrs)); // NOLINT(bugprone-sizeof-expression)
	int r = rs && ptrs ? 0 : -ENOMEM;
	for (size_t i = 0; i < n && r == 0; i++) {
		v1beta1__container_preferred_allocation_response__init(&rs[i]);
		ptrs[i] = &rs[i];
		r = dp_ep_prefer_answer(ep, &req->c[i], &rs[i].deviceids, &rs[i].n_deviceids);
	}
	if (r < 0) {
		refuse(ep, call, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	} else {
		V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
		resp.n_container_responses = n;
		resp.container_responses = ptrs;
		(void)dp_grpc_call_send_pb(call, &resp.base);
	}
	for (size_t i = 0; rs && i < n; i++)
		free(rs[i].deviceids);
	free(rs);
	free(ptrs);
}

size_t dp_endpoint_methods(dp_endpoint *ep, dp_grpc_method *out)
{
	size_t n = 0;
	out[n++] = (dp_grpc_method){ "/v1beta1.DevicePlugin/GetDevicePluginOptions", DP_GRPC_METHOD_UNARY,
				     rpc_options, ep };
	out[n++] = (dp_grpc_method){ "/v1beta1.DevicePlugin/ListAndWatch", DP_GRPC_METHOD_SERVER_STREAM,
				     dp_endpoint_list_and_watch, ep };
	out[n++] = (dp_grpc_method){ "/v1beta1.DevicePlugin/Allocate", DP_GRPC_METHOD_UNARY, rpc_allocate,
				     ep };
	/* The optional methods only where the options advertise them: kubelet calls neither
	 * otherwise, and an unrouted method is UNIMPLEMENTED like any unknown one. */
	if (ep->preferred_allocation)
		out[n++] = (dp_grpc_method){ "/v1beta1.DevicePlugin/GetPreferredAllocation",
					     DP_GRPC_METHOD_UNARY, rpc_preferred, ep };
	if (ep->pre_start_required)
		out[n++] = (dp_grpc_method){ "/v1beta1.DevicePlugin/PreStartContainer", DP_GRPC_METHOD_UNARY,
					     rpc_prestart, ep };
	n += dp_health_methods(ep->health, out + n);
	return n;
}
