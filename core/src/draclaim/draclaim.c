/* SPDX-License-Identifier: Apache-2.0 */
/* draclaim: a ResourceClaim's allocation for one driver and pool, read from the API's JSON. */
#include "dp/draclaim.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>


static int fail(int err, char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(int err, char *why, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, size, fmt, ap);
	va_end(ap);
	return err;
}

/* The string at key of obj (path names it in errors): required unless opt, at most max bytes.
 * *ret NULL when optional and absent. */
static int get_str(json_t *obj, const char *key, const char *path, size_t max, bool opt, const char **ret,
		   char *why, size_t size)
{
	json_t *v = json_object_get(obj, key);
	*ret = NULL;
	if (!v || json_is_null(v)) {
		if (opt)
			return 0;
		return fail(-EBADMSG, why, size, "%s.%s: missing", path, key);
	}
	if (!json_is_string(v))
		return fail(-EBADMSG, why, size, "%s.%s: not a string", path, key);
	if (json_string_length(v) > max)
		return fail(-EBADMSG, why, size, "%s.%s: longer than %zu bytes", path, key, max);
	*ret = json_string_value(v);
	return 0;
}

/* The object at key of obj; NULL when absent (or null), -EBADMSG when not an object. */
static int get_obj(json_t *obj, const char *key, const char *path, json_t **ret, char *why, size_t size)
{
	json_t *v = json_object_get(obj, key);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return fail(-EBADMSG, why, size, "%s.%s: not an object", path, key);
	*ret = v;
	return 0;
}

static int check_kind(json_t *root, const char *uid, char *why, size_t size)
{
	const char *api, *kind, *got;
	json_t *meta;
	int r;
	if ((r = get_str(root, "apiVersion", "claim", 64, false, &api, why, size)) < 0 ||
	    (r = get_str(root, "kind", "claim", 64, false, &kind, why, size)) < 0)
		return r;
	if (strcmp(api, "resource.k8s.io/v1") != 0 || strcmp(kind, "ResourceClaim") != 0)
		return fail(-EBADMSG, why, size, "not a resource.k8s.io/v1 ResourceClaim: %s %s", api, kind);
	if ((r = get_obj(root, "metadata", "claim", &meta, why, size)) < 0)
		return r;
	if (!meta)
		return fail(-EBADMSG, why, size, "claim.metadata: missing");
	if ((r = get_str(meta, "uid", "claim.metadata", 128, false, &got, why, size)) < 0)
		return r;
	if (strcmp(got, uid) != 0)
		return fail(-ESTALE, why, size, "claim.metadata.uid is %s, not %s: deleted and made again", got, uid);
	return 0;
}

/* The allocation's results array (status.allocation.devices.results). */
static int get_results(json_t *root, json_t **ret, char *why, size_t size)
{
	json_t *status, *alloc = NULL, *devices, *results;
	int r;
	if ((r = get_obj(root, "status", "claim", &status, why, size)) < 0 ||
	    (status && (r = get_obj(status, "allocation", "claim.status", &alloc, why, size)) < 0))
		return r;
	if (!status || !alloc)
		return fail(-ENODATA, why, size, "not allocated (no status.allocation)");
	if ((r = get_obj(alloc, "devices", "claim.status.allocation", &devices, why, size)) < 0)
		return r;
	results = devices ? json_object_get(devices, "results") : NULL;
	if (results && !json_is_array(results))
		return fail(-EBADMSG, why, size, "claim.status.allocation.devices.results: not an array");
	if (!results || json_array_size(results) == 0)
		return fail(-ENODATA, why, size, "no device allocated (status.allocation.devices.results empty)");
	if (json_array_size(results) > DP_DRACLAIM_RESULTS_MAX)
		return fail(-EBADMSG, why, size, "claim.status.allocation.devices.results: more than %d",
			    DP_DRACLAIM_RESULTS_MAX);
	*ret = results;
	return 0;
}

/* Result i into out when it is driver's (1), 0 when another driver's. */
static int read_result(json_t *res, size_t i, const char *driver, const char *pool, dp_draclaim_result *out,
		       char *why, size_t size)
{
	char path[64];
	const char *drv, *pl, *req, *dev, *share;
	int r;
	snprintf(path, sizeof(path), "claim.status.allocation.devices.results[%zu]", i);
	if (!json_is_object(res))
		return fail(-EBADMSG, why, size, "%s: not an object", path);
	if ((r = get_str(res, "driver", path, 63, false, &drv, why, size)) < 0)
		return r;
	if (strcmp(drv, driver) != 0)
		return 0;
	if ((r = get_str(res, "pool", path, 253, false, &pl, why, size)) < 0 ||
	    (r = get_str(res, "request", path, DP_DRACLAIM_REQUEST_MAX, false, &req, why, size)) < 0 ||
	    (r = get_str(res, "device", path, DP_DRACLAIM_DEVICE_MAX, false, &dev, why, size)) < 0 ||
	    (r = get_str(res, "shareID", path, DP_DRACLAIM_SHARE_MAX, true, &share, why, size)) < 0)
		return r;
	if (strcmp(pl, pool) != 0)
		return fail(-EXDEV, why, size, "%s: device %s of pool %s, not this node's pool %s", path, dev, pl, pool);
	if (!req[0] || !dev[0])
		return fail(-EBADMSG, why, size, "%s: an empty request or device name", path);
	json_t *admin = json_object_get(res, "adminAccess");
	if (admin && !json_is_boolean(admin) && !json_is_null(admin))
		return fail(-EBADMSG, why, size, "%s.adminAccess: not a boolean", path);
	memcpy(out->request, req, strlen(req) + 1);
	memcpy(out->device, dev, strlen(dev) + 1);
	memcpy(out->share_id, share ? share : "", share ? strlen(share) + 1 : 1);
	out->admin_access = admin && json_is_true(admin);
	return 1;
}

int dp_draclaim_read(const char *json, size_t len, const char *uid, const char *driver, const char *pool,
		     dp_draclaim *ret, char *why, size_t why_size)
{
	json_error_t err;
	json_t *results = NULL;
	dp_draclaim c = { 0 };
	int r;

	if (len > DP_DRACLAIM_INPUT_MAX)
		return fail(-EFBIG, why, why_size, "claim of %zu bytes, over the %u-byte bound", len,
			    DP_DRACLAIM_INPUT_MAX);
	json_auto_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return fail(-EBADMSG, why, why_size, "claim: not JSON: %s (line %d, column %d)", err.text, err.line,
			    err.column);
	if (!json_is_object(root))
		return fail(-EBADMSG, why, why_size, "claim: not a JSON object");
	if ((r = check_kind(root, uid, why, why_size)) < 0 || (r = get_results(root, &results, why, why_size)) < 0)
		return r;
	for (size_t i = 0; i < json_array_size(results); i++) {
		r = read_result(json_array_get(results, i), i, driver, pool, &c.results[c.n], why, why_size);
		if (r < 0)
			return r;
		c.n += (size_t)r;
	}
	if (c.n == 0)
		return fail(-ENODATA, why, why_size, "no device of driver %s allocated", driver);
	*ret = c;
	return 0;
}
