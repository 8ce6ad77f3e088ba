/* SPDX-License-Identifier: Apache-2.0 */
/* draclaim: a ResourceClaim's allocation for one driver and pool, read from the API's JSON. */
#include "dp/draclaim.h"

#include "dp/claimfile.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>


/* Say why (a message into why, why_size bytes, cut to fit) and evaluate to err. */
#define FAIL(err, ...) (snprintf(why, why_size, __VA_ARGS__), (err))

/* The string at key of obj (path names it in errors): required unless opt, at most max bytes.
 * *ret NULL when optional and absent. */
static int get_str(json_t *obj, const char *key, const char *path, size_t max, bool opt, const char **ret,
		   char *why, size_t why_size)
{
	json_t *v = json_object_get(obj, key);
	*ret = NULL;
	if (!v || json_is_null(v)) {
		if (opt)
			return 0;
		return FAIL(-EBADMSG, "%s.%s: missing", path, key);
	}
	const char *s = json_string_value(v); /* NULL when v is not a string */
	if (!s)
		return FAIL(-EBADMSG, "%s.%s: not a string", path, key);
	if (json_string_length(v) > max)
		return FAIL(-EBADMSG, "%s.%s: longer than %zu bytes", path, key, max);
	*ret = s;
	return 0;
}

/* The object at key of obj; NULL when absent (or null), -EBADMSG when not an object. */
static int get_obj(json_t *obj, const char *key, const char *path, json_t **ret, char *why, size_t why_size)
{
	json_t *v = json_object_get(obj, key);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return FAIL(-EBADMSG, "%s.%s: not an object", path, key);
	*ret = v;
	return 0;
}

static int check_kind(json_t *root, const char *uid, char *why, size_t why_size)
{
	const char *api, *kind, *got;
	json_t *meta;
	int r;
	if ((r = get_str(root, "apiVersion", "claim", 64, false, &api, why, why_size)) < 0 ||
	    (r = get_str(root, "kind", "claim", 64, false, &kind, why, why_size)) < 0)
		return r;
	if (strcmp(api, "resource.k8s.io/v1") != 0 || strcmp(kind, "ResourceClaim") != 0)
		return FAIL(-EBADMSG, "not a resource.k8s.io/v1 ResourceClaim: %s %s", api, kind);
	if ((r = get_obj(root, "metadata", "claim", &meta, why, why_size)) < 0)
		return r;
	if (!meta)
		return FAIL(-EBADMSG, "claim.metadata: missing");
	if ((r = get_str(meta, "uid", "claim.metadata", 128, false, &got, why, why_size)) < 0)
		return r;
	if (strcmp(got, uid) != 0)
		return FAIL(-ESTALE, "claim.metadata.uid is %s, not %s: deleted and made again", got, uid);
	return 0;
}

/* The allocation's results array (status.allocation.devices.results). */
static int get_results(json_t *root, json_t **ret, char *why, size_t why_size)
{
	json_t *status, *alloc = NULL, *devices, *results;
	int r;
	if ((r = get_obj(root, "status", "claim", &status, why, why_size)) < 0 ||
	    (status && (r = get_obj(status, "allocation", "claim.status", &alloc, why, why_size)) < 0))
		return r;
	if (!status || !alloc)
		return FAIL(-ENODATA, "not allocated (no status.allocation)");
	if ((r = get_obj(alloc, "devices", "claim.status.allocation", &devices, why, why_size)) < 0)
		return r;
	results = devices ? json_object_get(devices, "results") : NULL;
	if (results && !json_is_array(results))
		return FAIL(-EBADMSG, "claim.status.allocation.devices.results: not an array");
	if (!results || json_array_size(results) == 0)
		return FAIL(-ENODATA, "no device allocated (status.allocation.devices.results empty)");
	if (json_array_size(results) > DP_DRACLAIM_RESULTS_MAX)
		return FAIL(-EBADMSG, "claim.status.allocation.devices.results: more than %d",
			    DP_DRACLAIM_RESULTS_MAX);
	*ret = results;
	return 0;
}

/* Result i into out when it is driver's (1), 0 when another driver's. */
static int read_result(json_t *res, size_t i, const char *driver, const char *pool, dp_draclaim_result *out,
		       char *why, size_t why_size)
{
	char path[64];
	const char *drv, *pl, *req, *dev, *share;
	int r;
	snprintf(path, sizeof(path), "claim.status.allocation.devices.results[%zu]", i);
	if (!json_is_object(res))
		return FAIL(-EBADMSG, "%s: not an object", path);
	if ((r = get_str(res, "driver", path, 63, false, &drv, why, why_size)) < 0)
		return r;
	if (strcmp(drv, driver) != 0)
		return 0;
	if ((r = get_str(res, "pool", path, 253, false, &pl, why, why_size)) < 0 ||
	    (r = get_str(res, "request", path, DP_DRACLAIM_REQUEST_MAX, false, &req, why, why_size)) < 0 ||
	    (r = get_str(res, "device", path, DP_DRACLAIM_DEVICE_MAX, false, &dev, why, why_size)) < 0 ||
	    (r = get_str(res, "shareID", path, DP_DRACLAIM_SHARE_MAX, true, &share, why, why_size)) < 0)
		return r;
	if (strcmp(pl, pool) != 0)
		return FAIL(-EXDEV, "%s: device %s of pool %s, not this node's pool %s", path, dev, pl, pool);
	if (!req[0] || !dev[0])
		return FAIL(-EBADMSG, "%s: an empty request or device name", path);
	json_t *admin = json_object_get(res, "adminAccess");
	if (admin && !json_is_boolean(admin) && !json_is_null(admin))
		return FAIL(-EBADMSG, "%s.adminAccess: not a boolean", path);
	memcpy(out->request, req, strlen(req) + 1);
	memcpy(out->device, dev, strlen(dev) + 1);
	memcpy(out->share_id, share ? share : "", share ? strlen(share) + 1 : 1);
	out->admin_access = admin && json_is_true(admin);
	char w[160];
	if (!dp_claimfile_result_valid(out, w, sizeof(w)))
		return FAIL(-EBADMSG, "%s: %s", path, w);
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
		return FAIL(-EFBIG, "claim of %zu bytes, over the %u-byte bound", len,
			    DP_DRACLAIM_INPUT_MAX);
	json_auto_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
	if (!root)
		return FAIL(-EBADMSG, "claim: not JSON: %s (line %d, column %d)", err.text, err.line,
			    err.column);
	if (!json_is_object(root))
		return FAIL(-EBADMSG, "claim: not a JSON object");
	if ((r = check_kind(root, uid, why, why_size)) < 0 || (r = get_results(root, &results, why, why_size)) < 0)
		return r;
	for (size_t i = 0; i < json_array_size(results); i++) {
		r = read_result(json_array_get(results, i), i, driver, pool, &c.results[c.n], why, why_size);
		if (r < 0)
			return r;
		c.n += (size_t)r;
	}
	if (c.n == 0)
		return FAIL(-ENODATA, "no device of driver %s allocated", driver);
	*ret = c;
	return 0;
}
