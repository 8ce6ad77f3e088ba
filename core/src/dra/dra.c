/* SPDX-License-Identifier: Apache-2.0 */
/* dra: the DRAPlugin service (NodePrepareResources, NodeUnprepareResources) on a driver's socket. */
#include "dp/dra.h"

#include "dp/health.h"
#include "dra_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "dra.pb-c.h"
#include "requests/pbwire.h"

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device pb_device;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse pb_prepared;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse pb_prepare_resp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry pb_prepare_entry;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse pb_unprepared;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse pb_unprepare_resp;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry pb_unprepare_entry;

struct dra_call;

struct dp_dra_claim {
	struct dra_call *call;
	char ns[DP_DRA_STRING_MAX + 1], uid[DP_DRA_STRING_MAX + 1], name[DP_DRA_STRING_MAX + 1];
	bool answered;
	pb_prepared prepared;     /* the answer (prepare) */
	pb_unprepared unprepared; /* the answer (unprepare) */
};

struct dra_call {
	dp_dra *d;
	dp_grpc_call *call;
	bool prepare, dispatching;
	size_t n, pending;
	dp_dra_claim *claims;
};


static const char oom[] = "out of memory";

/* ---- answers ---- */

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static int strv_dup(const char *const *src, size_t n, char ***ret, size_t *ret_n)
{
	char **v = n ? calloc(n, sizeof(*v)) : NULL;
	if (n && !v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (!(v[i] = strdup(src[i] ? src[i] : ""))) {
			strv_free(v, i);
			return -ENOMEM;
		}
	*ret = v;
	*ret_n = n;
	return 0;
}

static void device_free(pb_device *p)
{
	if (!p)
		return;
	strv_free(p->request_names, p->n_request_names);
	strv_free(p->cdi_device_ids, p->n_cdi_device_ids);
	free(p->pool_name);
	free(p->device_name);
	if (p->share_case == K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_SHARE_ID)
		free(p->share_id);
	free(p);
}

static pb_device *device_dup(const dp_dra_device *s)
{
	pb_device *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	*p = (pb_device)K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__INIT;
	p->pool_name = strdup(s->pool ? s->pool : "");
	p->device_name = strdup(s->device ? s->device : "");
	bool ok = p->pool_name && p->device_name &&
		  strv_dup(s->requests, s->n_requests, &p->request_names, &p->n_request_names) == 0 &&
		  strv_dup(s->cdi_ids, s->n_cdi_ids, &p->cdi_device_ids, &p->n_cdi_device_ids) == 0;
	if (ok && s->share_id) {
		p->share_case = K8S__IO__KUBELET__PKG__APIS__DRA__V1__DEVICE__SHARE_SHARE_ID;
		ok = (p->share_id = strdup(s->share_id)) != NULL;
	}
	if (!ok) {
		device_free(p);
		return NULL;
	}
	return p;
}

static void answer_free(dp_dra_claim *c)
{
	for (size_t i = 0; i < c->prepared.n_devices; i++)
		device_free(c->prepared.devices[i]);
	free(c->prepared.devices);
	c->prepared.devices = NULL;
	c->prepared.n_devices = 0;
	if (c->prepared.error != protobuf_c_empty_string && c->prepared.error != oom)
		free(c->prepared.error);
	if (c->unprepared.error != protobuf_c_empty_string && c->unprepared.error != oom)
		free(c->unprepared.error);
	c->prepared.error = c->unprepared.error = (char *)protobuf_c_empty_string;
}

static int answer_set(dp_dra_claim *c, const dp_dra_device *devs, size_t n, const char *error)
{
	char **err = c->call->prepare ? &c->prepared.error : &c->unprepared.error;
	if (error && error[0])
		return (*err = strdup(error)) ? 0 : -ENOMEM;
	if (!c->call->prepare || n == 0)
		return 0;
	c->prepared.devices = calloc(n, sizeof(*c->prepared.devices)); // NOLINT(bugprone-sizeof-expression): an array of pointers
	if (!c->prepared.devices)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!(c->prepared.devices[i] = device_dup(&devs[i])))
			return -ENOMEM;
		c->prepared.n_devices++;
	}
	return 0;
}

/* ---- calls ---- */

static void call_free(struct dra_call *k)
{
	for (size_t i = 0; i < k->n; i++)
		answer_free(&k->claims[i]);
	free(k->claims);
	free(k);
}

static int send_prepare(struct dra_call *k)
{
	pb_prepare_resp resp = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
	pb_prepare_entry *entries = calloc(k->n ? k->n : 1, sizeof(*entries));
	pb_prepare_entry **ptrs = calloc(k->n ? k->n : 1, sizeof(*ptrs)); // NOLINT(bugprone-sizeof-expression): pointers
	int r = -ENOMEM;
	if (entries && ptrs) {
		for (size_t i = 0; i < k->n; i++) {
			entries[i] = (pb_prepare_entry)K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT;
			entries[i].key = k->claims[i].uid;
			entries[i].value = &k->claims[i].prepared;
			ptrs[i] = &entries[i];
		}
		resp.n_claims = k->n;
		resp.claims = ptrs;
		r = dp_grpc_call_send_pb(k->call, &resp.base);
	}
	free(entries);
	free(ptrs);
	return r;
}

static int send_unprepare(struct dra_call *k)
{
	pb_unprepare_resp resp = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
	pb_unprepare_entry *entries = calloc(k->n ? k->n : 1, sizeof(*entries));
	pb_unprepare_entry **ptrs = calloc(k->n ? k->n : 1, sizeof(*ptrs)); // NOLINT(bugprone-sizeof-expression): pointers
	int r = -ENOMEM;
	if (entries && ptrs) {
		for (size_t i = 0; i < k->n; i++) {
			entries[i] = (pb_unprepare_entry)K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__CLAIMS_ENTRY__INIT;
			entries[i].key = k->claims[i].uid;
			entries[i].value = &k->claims[i].unprepared;
			ptrs[i] = &entries[i];
		}
		resp.n_claims = k->n;
		resp.claims = ptrs;
		r = dp_grpc_call_send_pb(k->call, &resp.base);
	}
	free(entries);
	free(ptrs);
	return r;
}

/* Every claim answered: the call's answer, then the call is gone. */
static void call_answer(struct dra_call *k)
{
	dp_grpc_call_set_cancel(k->call, NULL, NULL);
	int r = k->prepare ? send_prepare(k) : send_unprepare(k);
	if (r == -ENOMEM)
		dp_grpc_call_finish(k->call, DP_GRPC_RESOURCE_EXHAUSTED, oom);
	call_free(k);
}

static void on_cancel(dp_grpc_call *call, int status, void *userdata)
{
	struct dra_call *k = userdata;
	for (size_t i = 0; i < k->n; i++)
		if (!k->claims[i].answered) {
			k->claims[i].answered = true;
			k->d->drv.cancel(&k->claims[i], k->d->userdata);
		}
	call_free(k);
}

int dp_dra_done(dp_dra_claim *c, const dp_dra_device *devices, size_t n, const char *error)
{
	struct dra_call *k = c->call;
	int r = answer_set(c, devices, n, error);
	if (r < 0) {
		answer_free(c);
		if (k->prepare)
			c->prepared.error = (char *)oom;
		else
			c->unprepared.error = (char *)oom;
	}
	c->answered = true;
	if (--k->pending == 0 && !k->dispatching)
		call_answer(k);
	return r;
}

/* ---- requests ---- */

/* One Claim message into c: its three strings, each required, at most DP_DRA_STRING_MAX bytes,
 * no NUL (the last of a repeated field wins, as protobuf). NULL, or why it is refused. */
static const char *decode_claim(const uint8_t *msg, size_t len, dp_dra_claim *c)
{
	char *fields[] = { c->ns, c->uid, c->name };
	dp_pbreader rd;
	dp_pbfield f;
	int k;
	dp_pb_reader_init(&rd, msg, len);
	while ((k = dp_pb_next(&rd, &f)) > 0) {
		if (f.number < 1 || f.number > 3)
			continue;
		if (f.wire != DP_PB_LEN)
			return "cannot decode Claim";
		if (f.len > DP_DRA_STRING_MAX)
			return "a claim's namespace, UID or name is longer than 253 bytes";
		if (memchr(f.data, '\0', f.len))
			return "a claim's namespace, UID or name holds a NUL byte";
		memcpy(fields[f.number - 1], f.data, f.len);
		fields[f.number - 1][f.len] = '\0';
	}
	if (k < 0)
		return "cannot decode Claim";
	if (!c->ns[0] || !c->uid[0] || !c->name[0])
		return "a claim without its namespace, UID or name";
	return NULL;
}

/* The request's claims (field 1) into k->claims; NULL or why the call is refused. */
static const char *decode_claims(const uint8_t *msg, size_t len, struct dra_call *k)
{
	dp_pbreader rd;
	dp_pbfield f;
	int r;
	size_t n = 0;
	dp_pb_reader_init(&rd, msg, len);
	while ((r = dp_pb_next(&rd, &f)) > 0)
		n += f.number == 1;
	if (r < 0)
		return "cannot decode the request";
	if (n > DP_DRA_CLAIMS_MAX)
		return "more than 256 claims in one call";
	k->claims = calloc(n ? n : 1, sizeof(*k->claims));
	if (!k->claims)
		return oom;
	dp_pb_reader_init(&rd, msg, len);
	while (dp_pb_next(&rd, &f) > 0) {
		if (f.number != 1)
			continue;
		dp_dra_claim *c = &k->claims[k->n];
		if (f.wire != DP_PB_LEN)
			return "cannot decode the request";
		*c = (dp_dra_claim){ .call = k,
				     .prepared = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCE_RESPONSE__INIT,
				     .unprepared = K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCE_RESPONSE__INIT };
		k->n++;
		const char *why = decode_claim(f.data, f.len, c);
		if (why)
			return why;
		for (size_t i = 0; i + 1 < k->n; i++)
			if (strcmp(k->claims[i].uid, c->uid) == 0)
				return "two claims with one UID";
	}
	return NULL;
}

static void serve_call(dp_grpc_call *call, const uint8_t *msg, size_t len, dp_dra *d, bool prepare)
{
	struct dra_call *k = calloc(1, sizeof(*k));
	if (!k) {
		dp_grpc_call_finish(call, DP_GRPC_RESOURCE_EXHAUSTED, oom);
		return;
	}
	k->d = d;
	k->call = call;
	k->prepare = prepare;
	const char *why = decode_claims(msg, len, k);
	if (why) {
		dp_grpc_call_finish(call, why == oom ? DP_GRPC_RESOURCE_EXHAUSTED : DP_GRPC_INVALID_ARGUMENT, why);
		call_free(k);
		return;
	}
	dp_grpc_call_set_cancel(call, on_cancel, k);
	k->pending = k->n;
	k->dispatching = true;
	for (size_t i = 0; i < k->n; i++)
		(prepare ? d->drv.prepare : d->drv.unprepare)(&k->claims[i], d->userdata);
	k->dispatching = false;
	if (k->pending == 0)
		call_answer(k);
}

static void rpc_prepare(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	serve_call(call, msg, len, userdata, true);
}

static void rpc_unprepare(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	serve_call(call, msg, len, userdata, false);
}

/* ---- the service ---- */

int dp_dra_new(dp_loop *loop, const char *socket_path, const dp_dra_driver *driver, void *userdata,
	       dp_dra **ret)
{
	if (!loop || !socket_path || !driver || !driver->prepare || !driver->unprepare || !driver->cancel)
		return -EINVAL;
	_cleanup_(dp_dra_freep) dp_dra *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->drv = *driver;
	d->userdata = userdata;
	dp_grpc_method methods[5] = {
		{ DP_DRA_PREPARE_PATH, DP_GRPC_METHOD_UNARY, rpc_prepare, d },
		{ DP_DRA_UNPREPARE_PATH, DP_GRPC_METHOD_UNARY, rpc_unprepare, d },
		{ DP_DRA_HEALTH_WATCH_PATH, DP_GRPC_METHOD_SERVER_STREAM, dp_dra_rpc_watch, d },
	};
	size_t n = 3;
	if (driver->health)
		n += dp_health_methods(driver->health, methods + 3);
	int r = dp_grpc_server_new(loop, socket_path, methods, n, NULL, &d->server);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(d);
	return 0;
}

dp_dra *dp_dra_free(dp_dra *d)
{
	if (!d)
		return NULL;
	d->server = dp_grpc_server_free(d->server); /* cancels every call still out (on_cancel) */
	free(d->health_msg);
	free(d);
	return NULL;
}

const char *dp_dra_claim_namespace(const dp_dra_claim *c) { return c->ns; }
const char *dp_dra_claim_uid(const dp_dra_claim *c) { return c->uid; }
const char *dp_dra_claim_name(const dp_dra_claim *c) { return c->name; }
bool dp_dra_claim_preparing(const dp_dra_claim *c) { return c->call->prepare; }
