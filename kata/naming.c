/* SPDX-License-Identifier: Apache-2.0 */
/* naming: RESOURCE_NAMING and the resources the scanned devices are advertised as (naming.h). */
#include "naming.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/buf.h"
#include "dp/endpoint.h"
#include "dp/log.h"
#include "dp/macro.h"
#include "sku.h"

int kata_naming_from_env(enum kata_naming *ret, char *err, size_t errlen)
{
	const char *v = getenv(KATA_NAMING_ENV);
	char q[96];
	if (!v || strcmp(v, "table") == 0) {
		*ret = KATA_NAMING_TABLE;
		return 0;
	}
	if (strcmp(v, "sku") == 0) {
		*ret = KATA_NAMING_SKU;
		return 0;
	}
	snprintf(err, errlen, KATA_NAMING_ENV "=%s is not table or sku", dp_logq(q, sizeof(q), v));
	return -EINVAL;
}

static int set_names(struct kata_resource *r, const char *socket_prefix, const char *plugin_name)
{
	int n = snprintf(r->socket_prefix, sizeof(r->socket_prefix), "%s", socket_prefix);
	if (n < 0 || (size_t)n >= sizeof(r->socket_prefix))
		return -ENAMETOOLONG;
	n = snprintf(r->plugin_name, sizeof(r->plugin_name), "%s", plugin_name);
	if (n < 0 || (size_t)n >= sizeof(r->plugin_name))
		return -ENAMETOOLONG;
	return kata_spec_file(r->name, r->spec_file, sizeof(r->spec_file));
}

static int build_table(const struct kata_scan *s, const struct kata_row *t, size_t n_rows, struct kata_resources *out)
{
	char prefix[KATA_NAME_MAX], plugin[KATA_NAME_MAX];
	out->v = calloc(n_rows ? n_rows : 1, sizeof(*out->v));
	if (!out->v)
		return -ENOMEM;
	for (size_t row = 0; row < n_rows; row++) {
		struct kata_resource *r = &out->v[out->n++];
		size_t first;
		r->n = kata_scan_row(s, row, &first);
		r->devs = &out->devs[first];
		if ((size_t)snprintf(r->name, sizeof(r->name), "%s", t[row].resource) >= sizeof(r->name))
			return -ENAMETOOLONG;
		int e = kata_socket_prefix(r->name, prefix, sizeof(prefix));
		if (e >= 0)
			e = kata_plugin_name(r->name, plugin, sizeof(plugin));
		if (e >= 0)
			e = set_names(r, prefix, plugin);
		if (e < 0)
			return e;
	}
	return 0;
}

/* By model, then as the scan ordered them (row, PCI address). */
static int cmp_model(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->vendor != y->vendor)
		return x->vendor < y->vendor ? -1 : 1;
	if (x->device_id != y->device_id)
		return x->device_id < y->device_id ? -1 : 1;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return x->pci_key < y->pci_key ? -1 : x->pci_key > y->pci_key;
}

static int sku_resource(struct kata_resource *r, const struct kata_row *t, const struct kata_device *d)
{
	char sku[KATA_SKU_NAME_MAX + 1], plugin[KATA_NAME_MAX], prefix[DP_SOCKET_PREFIX_MAX + 1];
	const char *res = t[d->row].resource;
	int dom = (int)(strchr(res, '/') - res);
	(void)kata_sku_name(d->vendor, d->device_id, sku, sizeof(sku));
	if ((size_t)snprintf(r->name, sizeof(r->name), "%.*s/%s", dom, res, sku) >= sizeof(r->name))
		return -ENAMETOOLONG;
	snprintf(plugin, sizeof(plugin), "kata.sku-%04x-%04x", d->vendor, d->device_id);
	int e = dp_socket_prefix(prefix, sizeof(prefix), KATA_SOCKET_TAG, KATA_SKU_SOCKET_KEY);
	return e < 0 ? e : set_names(r, prefix, plugin);
}

/* More models than endpoints: the first KATA_MAX_ROWS (by vendor, device ID) are served. */
static void too_many_models(const struct kata_resources *out, size_t n_devs, size_t i)
{
	size_t models = out->n;
	for (; i < n_devs; i++)
		models += out->devs[i].vendor != out->devs[i - 1].vendor ||
			  out->devs[i].device_id != out->devs[i - 1].device_id;
	dp_warn("too many PCI models, advertising the first by vendor and device ID", "models=%zu advertised=%d",
		models, KATA_MAX_ROWS);
}

static int build_sku(const struct kata_row *t, struct kata_resources *out, size_t n_devs)
{
	if (n_devs > 1)
		qsort(out->devs, n_devs, sizeof(*out->devs), cmp_model);
	out->v = calloc(n_devs ? n_devs : 1, sizeof(*out->v));
	if (!out->v)
		return -ENOMEM;
	for (size_t i = 0; i < n_devs; i++) {
		const struct kata_device *d = &out->devs[i];
		if (out->n == KATA_MAX_ROWS && !(d->vendor == d[-1].vendor && d->device_id == d[-1].device_id)) {
			too_many_models(out, n_devs, i);
			break;
		}
		if (i > 0 && d->vendor == d[-1].vendor && d->device_id == d[-1].device_id) {
			out->v[out->n - 1].n++;
			continue;
		}
		struct kata_resource *r = &out->v[out->n++];
		r->devs = d;
		r->n = 1;
		int e = sku_resource(r, t, d);
		if (e < 0)
			return e;
	}
	return 0;
}

int kata_resources_build(const struct kata_scan *s, const struct kata_row *t, size_t n_rows, enum kata_naming m,
			 struct kata_resources *ret)
{
	struct kata_resources out = { 0 };
	out.devs = calloc(s->n_devices ? s->n_devices : 1, sizeof(*out.devs));
	if (!out.devs)
		return -ENOMEM;
	if (s->n_devices)
		memcpy(out.devs, s->devices, s->n_devices * sizeof(*out.devs));
	int r = m == KATA_NAMING_SKU ? build_sku(t, &out, s->n_devices) : build_table(s, t, n_rows, &out);
	if (r < 0) {
		kata_resources_done(&out);
		return r;
	}
	*ret = out;
	return 0;
}

void kata_resources_done(struct kata_resources *r)
{
	free(r->v);
	free(r->devs);
	*r = (struct kata_resources){ 0 };
}

/* The models named by the fallback (pci_<vendor>_<device>): "10de:2941 10de:2342", or "". */
static void fallback_models(const struct kata_resources *r, dp_buf *out)
{
	char raw[KATA_SKU_RAW_MAX];
	for (size_t i = 0; i < r->n; i++) {
		const struct kata_device *d = r->v[i].devs;
		if (r->v[i].n && !kata_sku_lookup(d->vendor, d->device_id, raw))
			dp_buf_printf(out, "%s%04x:%04x", out->len ? " " : "", d->vendor, d->device_id);
	}
}

void kata_resources_log(const struct kata_resources *r, enum kata_naming m)
{
	_cleanup_(dp_buf_done) dp_buf list = { 0 };
	_cleanup_(dp_buf_done) dp_buf unnamed = { 0 };
	char q[4096], u[1024], extra[1100] = "";
	if (m != KATA_NAMING_SKU)
		return;
	for (size_t i = 0; i < r->n; i++)
		dp_buf_printf(&list, "%s%s=%zu", i ? " " : "", r->v[i].name, r->v[i].n);
	fallback_models(r, &unnamed);
	if (unnamed.len && !unnamed.oom)
		snprintf(extra, sizeof(extra), " not_in_pci_ids=%s", dp_logq(u, sizeof(u), unnamed.data));
	dp_info("resource naming", "naming=sku pci_ids=%s resources=%s%s", kata_sku_ids_version,
		dp_logq(q, sizeof(q), list.oom ? "(out of memory)" : list.data ? list.data : ""), extra);
}

const struct kata_resource *kata_resources_find(const struct kata_resources *r, const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->v[i].name, name) == 0)
			return &r->v[i];
	return NULL;
}

static bool same_devices(const struct kata_resource *a, const struct kata_resource *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->devs[i].name, b->devs[i].name) != 0 || a->devs[i].pci_key != b->devs[i].pci_key ||
		    a->devs[i].rdev != b->devs[i].rdev || a->devs[i].numa_node != b->devs[i].numa_node)
			return false;
	return true;
}

bool kata_resources_only_added(const struct kata_resources *old, const struct kata_resources *new)
{
	size_t kept = 0;
	for (size_t i = 0; i < old->n; i++) {
		if (old->v[i].n == 0)
			continue;
		const struct kata_resource *r = kata_resources_find(new, old->v[i].name);
		if (!r || !same_devices(&old->v[i], r))
			return false;
		kept++;
	}
	size_t present = 0;
	for (size_t i = 0; i < new->n; i++)
		present += new->v[i].n > 0;
	return present > kept;
}
