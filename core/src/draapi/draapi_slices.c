/* SPDX-License-Identifier: Apache-2.0 */
/* draapi_slices: the "dra-slices" helper entry: one pool's ResourceSlices made to hold a device set. */
#include "dp/draapi.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/kubeapi.h"
#include "dp/kubeenv.h"
#include "dp/macro.h"
#include "draapi_util.h"

#define WHY_MAX 512
#define SLICES_PATH "/apis/resource.k8s.io/v1/resourceslices"
#define DESIRED_MAX (8u << 20)
#define LIST_MAX ((size_t)16 << 20)
#define SLICE_NAME_MAX 253

struct pool {
	dp_kubeapi api;
	const char *driver, *node;
	json_t *devices;  /* the desired devices */
	json_t *items;    /* the pool's slices as listed */
	size_t k;         /* slices wanted */
};

static void slice_name(const struct pool *p, size_t i, char *buf, size_t size)
{
	snprintf(buf, size, "%s-%s-%zu", p->node, p->driver, i);
}

/* The desired devices from path: {"devices":[{"name":<DNS label>,...},...]}, names unique. */
static int load_desired(const char *path, json_t **ret, char *why, size_t size)
{
	json_error_t err;
	struct stat st;

	if (stat(path, &st) < 0)
		return snprintf(why, size, "cannot read %s: %s", path, strerror(errno)), -1;
	if (st.st_size > DESIRED_MAX)
		return snprintf(why, size, "%s: over %u bytes", path, DESIRED_MAX), -1;
	json_auto_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return snprintf(why, size, "%s: not JSON: %s (line %d)", path, err.text, err.line), -1;
	json_t *devs = json_object_get(root, "devices");
	if (!json_is_array(devs) || json_array_size(devs) > DP_DRAAPI_POOL_DEVICES)
		return snprintf(why, size, "%s: devices not an array of at most %d", path, DP_DRAAPI_POOL_DEVICES), -1;
	json_auto_t *seen = json_object();
	size_t i;
	json_t *d;
	json_array_foreach (devs, i, d) {
		const char *name = json_string_value(json_object_get(d, "name"));
		if (!name || !dp_kube_dns_label(name) || json_object_get(seen, name))
			return snprintf(why, size, "%s: devices[%zu]: no name, not a DNS label, or a name twice", path, i), -1;
		json_object_set_new(seen, name, json_true());
	}
	*ret = json_incref(devs);
	return 0;
}

/* The pool's slices listed into p->items. */
static int list_slices(struct pool *p)
{
	_cleanup_free_ char *body = NULL;
	char path[700], why[WHY_MAX];
	json_error_t err;
	size_t len = 0;
	int status;

	snprintf(path, sizeof(path), SLICES_PATH "?fieldSelector=spec.nodeName%%3D%s%%2Cspec.driver%%3D%s", p->node,
		 p->driver);
	if (dp_kubeapi_call(&p->api, "GET", path, NULL, 0, LIST_MAX, &status, &body, &len, why, sizeof(why)) < 0)
		return dp_helper_reply_fail("listing ResourceSlices: %s", why), -1;
	if (status != 200)
		return dp_draapi_reply_status("listing ResourceSlices", status, body, len), -1;
	json_auto_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &err);
	json_t *items = root ? json_object_get(root, "items") : NULL;
	if (!items || (!json_is_array(items) && !json_is_null(items)))
		return dp_helper_reply_fail("listing ResourceSlices: the answer is not a list"), -1;
	p->items = json_is_array(items) ? json_incref(items) : json_array();
	return 0;
}

static const char *item_name(json_t *item)
{
	return json_string_value(json_object_get(json_object_get(item, "metadata"), "name"));
}

static json_t *item_named(const struct pool *p, const char *name)
{
	size_t i;
	json_t *it;
	json_array_foreach (p->items, i, it) {
		const char *n = item_name(it);
		if (n && strcmp(n, name) == 0)
			return it;
	}
	return NULL;
}

/* Devices [i * 128, ...) of the desired set: a new array. */
static json_t *chunk(const struct pool *p, size_t i)
{
	json_t *a = json_array();
	size_t n = json_array_size(p->devices);
	for (size_t j = i * DP_DRAAPI_SLICE_DEVICES; a && j < n && j < (i + 1) * DP_DRAAPI_SLICE_DEVICES; j++)
		json_array_append(a, json_array_get(p->devices, j));
	return a;
}

/* The generation the listed slices hold, when they are exactly the desired ones; else -1. */
static json_int_t unchanged(const struct pool *p)
{
	json_int_t gen = -1;
	char name[SLICE_NAME_MAX + 32];

	if (json_array_size(p->items) != p->k)
		return -1;
	for (size_t i = 0; i < p->k; i++) {
		slice_name(p, i, name, sizeof(name));
		json_t *spec = json_object_get(item_named(p, name), "spec"), *pl = json_object_get(spec, "pool");
		json_t *devs = json_object_get(spec, "devices");
		json_auto_t *want = chunk(p, i);
		json_auto_t *none = json_array();
		json_int_t g = json_integer_value(json_object_get(pl, "generation"));
		const char *pname = json_string_value(json_object_get(pl, "name"));
		if (!spec || !pname || strcmp(pname, p->node) != 0 || (i > 0 && g != gen) ||
		    json_integer_value(json_object_get(pl, "resourceSliceCount")) != (json_int_t)p->k ||
		    !json_equal(devs ? devs : none, want))
			return -1;
		gen = g;
	}
	return gen;
}

static json_int_t next_generation(const struct pool *p)
{
	json_int_t g = 0;
	size_t i;
	json_t *it;
	json_array_foreach (p->items, i, it) {
		json_int_t x = json_integer_value(json_object_get(json_object_get(json_object_get(it, "spec"), "pool"), "generation"));
		if (x >= g)
			g = x + 1;
	}
	return g;
}

/* Slice i with generation g: PUT over the listed one, or POST. */
static int write_slice(struct pool *p, size_t i, json_int_t g)
{
	char name[SLICE_NAME_MAX + 32], path[SLICE_NAME_MAX + 128], why[WHY_MAX];
	_cleanup_free_ char *body = NULL, *text = NULL;
	size_t len = 0;
	int status;

	slice_name(p, i, name, sizeof(name));
	json_t *old = item_named(p, name);
	json_t *rv = json_object_get(json_object_get(old, "metadata"), "resourceVersion");
	json_auto_t *slice = json_pack("{s:s, s:s, s:{s:s, s:O*}, s:{s:s, s:s, s:{s:s, s:I, s:I}, s:o}}",
				       "apiVersion", "resource.k8s.io/v1", "kind", "ResourceSlice", "metadata", "name",
				       name, "resourceVersion", rv, "spec", "driver", p->driver, "nodeName", p->node,
				       "pool", "name", p->node, "generation", g, "resourceSliceCount", (json_int_t)p->k,
				       "devices", chunk(p, i));
	if (!slice || !(text = json_dumps(slice, JSON_COMPACT)))
		return dp_helper_reply_fail("out of memory"), -1;
	/* Strict: a field the API server does not know is refused, not dropped with a warning */
	snprintf(path, sizeof(path), "%s%s%s?fieldValidation=Strict", SLICES_PATH, old ? "/" : "", old ? name : "");
	if (dp_kubeapi_call(&p->api, old ? "PUT" : "POST", path, text, strlen(text), LIST_MAX, &status, &body, &len,
			    why, sizeof(why)) < 0)
		return dp_helper_reply_fail("writing ResourceSlice %s: %s", name, why), -1;
	if (status != 200 && status != 201) {
		char what[SLICE_NAME_MAX + 64];
		snprintf(what, sizeof(what), "%s ResourceSlice %s", old ? "updating" : "creating", name);
		return dp_draapi_reply_status(what, status, body, len), -1;
	}
	return 0;
}

/* Every listed slice not among the k wanted, deleted. */
static int delete_rest(struct pool *p)
{
	char name[SLICE_NAME_MAX + 32], path[SLICE_NAME_MAX + 64 + 300], why[WHY_MAX];
	size_t i;
	json_t *it;

	json_array_foreach (p->items, i, it) {
		const char *n = item_name(it);
		bool keep = false;
		for (size_t j = 0; n && j < p->k && !keep; j++) {
			slice_name(p, j, name, sizeof(name));
			keep = strcmp(n, name) == 0;
		}
		if (keep || !n || !dp_kube_dns_subdomain(n))
			continue;
		_cleanup_free_ char *body = NULL;
		size_t len = 0;
		int status;
		snprintf(path, sizeof(path), SLICES_PATH "/%s", n);
		if (dp_kubeapi_call(&p->api, "DELETE", path, NULL, 0, LIST_MAX, &status, &body, &len, why, sizeof(why)) < 0)
			return dp_helper_reply_fail("deleting ResourceSlice %s: %s", n, why), -1;
		if (status != 200 && status != 202 && status != 404)
			return dp_draapi_reply_status("deleting ResourceSlice", status, body, len), -1;
	}
	return 0;
}

static void sync_pool(struct pool *p)
{
	char detail[128];
	json_int_t g;

	if (list_slices(p) < 0)
		return;
	if ((g = unchanged(p)) >= 0) {
		snprintf(detail, sizeof(detail), "unchanged generation=%lld slices=%zu", (long long)g, p->k);
		dp_helper_reply_ok(detail);
		return;
	}
	g = next_generation(p);
	for (size_t i = 0; i < p->k; i++)
		if (write_slice(p, i, g) < 0)
			return;
	if (delete_rest(p) < 0)
		return;
	snprintf(detail, sizeof(detail), "published generation=%lld slices=%zu devices=%zu", (long long)g, p->k,
		 json_array_size(p->devices));
	dp_helper_reply_ok(detail);
}

/* dra-slices <api> <token> <ca> <driver> <node> <desired> */
static void entry_slices(int argc, char **argv)
{
	struct pool p = { 0 };
	char why[WHY_MAX], name[SLICE_NAME_MAX + 32];

	if (argc != 7 || !dp_kube_dns_subdomain(argv[4]) || !dp_kube_dns_subdomain(argv[5]) || argv[6][0] != '/') {
		dp_helper_reply_fail("invalid " DP_DRAAPI_SLICES " arguments: <api> <token> <ca> <driver> <node> <desired>");
		return;
	}
	p.driver = argv[4];
	p.node = argv[5];
	slice_name(&p, DP_DRAAPI_POOL_DEVICES / DP_DRAAPI_SLICE_DEVICES, name, sizeof(name));
	if (strlen(name) > SLICE_NAME_MAX) {
		dp_helper_reply_fail("slice names \"%s-%s-<n>\" would be over %d bytes", p.node, p.driver, SLICE_NAME_MAX);
		return;
	}
	if (load_desired(argv[6], &p.devices, why, sizeof(why)) < 0) {
		dp_helper_reply_fail("%s", why);
		return;
	}
	size_t n = json_array_size(p.devices);
	p.k = n ? (n + DP_DRAAPI_SLICE_DEVICES - 1) / DP_DRAAPI_SLICE_DEVICES : 1;
	if (dp_draapi_open(&p.api, argv) == 0) {
		sync_pool(&p);
		dp_kubeapi_done(&p.api);
	}
	json_decref(p.items);
	json_decref(p.devices);
}

const dp_helper_entry dp_draapi_slices_entry = { DP_DRAAPI_SLICES, entry_slices };
