/* SPDX-License-Identifier: Apache-2.0 */
/* dra: kata's IOMMU groups as DRA devices (dra.h). */
#include "dra.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp/buf.h"
#include "dp/draside.h"
#include "dp/log.h"
#include "sku.h"

struct kata_dra {
	dp_draside *side;
	kata_plugin *const *plugins;
	const size_t *n_plugins;
	bool go;
};

static void str_attr(dp_buf *b, const char *name, const char *value)
{
	dp_buf_printf(b, "%s\"%s\":{\"string\":", b->data[b->len - 1] == '{' ? "" : ",", name);
	dp_buf_json_string(b, value);
	dp_buf_puts(b, "}");
}

static void int_attr(dp_buf *b, const char *name, long long value)
{
	dp_buf_printf(b, "%s\"%s\":{\"int\":%lld}", b->data[b->len - 1] == '{' ? "" : ",", name, value);
}

static void attributes(dp_buf *b, const char *resource, const struct kata_device *d, size_t n_devs)
{
	const char *slash = strchr(resource, '/');
	char hex[8], model[KATA_SKU_NAME_MAX + 1];

	dp_buf_puts(b, ",\"attributes\":{");
	if (d->pcie_root[0])
		str_attr(b, "resource.kubernetes.io/pcieRoot", d->pcie_root);
	str_attr(b, "resource.kubernetes.io/pciBusID", d->pci);
	if (d->numa_node >= 0)
		int_attr(b, "resource.kubernetes.io/numaNode", d->numa_node);
	str_attr(b, "resource", resource);
	str_attr(b, "type", slash ? slash + 1 : resource);
	snprintf(hex, sizeof(hex), "0x%04x", d->vendor);
	str_attr(b, "vendorID", hex);
	snprintf(hex, sizeof(hex), "0x%04x", d->device_id);
	str_attr(b, "deviceID", hex);
	(void)kata_sku_name(d->vendor, d->device_id, model, sizeof(model));
	str_attr(b, "model", model);
	int_attr(b, "iommuGroup", d->group);
	int_attr(b, "functions", (long long)n_devs);
	if (d->pcie_switch[0])
		str_attr(b, "pcieSwitch", d->pcie_switch);
	str_attr(b, "vfioBackend", kata_device_backend(d) == KATA_BACKEND_LEGACY ? "legacy" : "iommufd");
	dp_buf_puts(b, "}");
}

static void taint(dp_buf *b, time_t since)
{
	char at[32];
	struct tm tm;

	if (!gmtime_r(&since, &tm) || strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(at, sizeof(at), "1970-01-01T00:00:00Z"); /* not reached */
	dp_buf_printf(b, ",\"taints\":[{\"key\":\"" KATA_DRA_TAINT "\",\"effect\":\"NoSchedule\",\"timeAdded\":\"%s\"}]",
		      at);
}

void kata_dra_render(kata_plugin *const *plugins, size_t n, dp_buf *b)
{
	bool first = true;

	dp_buf_puts(b, "{\"devices\":[");
	for (size_t i = 0; i < n; i++) {
		for (size_t u = 0; u < kata_plugin_n_units(plugins[i]); u++) {
			struct kata_unit_state st;
			const struct kata_device *d = kata_plugin_unit(plugins[i], u, &st);
			dp_buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
			dp_buf_json_string(b, st.name);
			attributes(b, kata_plugin_resource(plugins[i]), d, st.n_devs);
			if (st.down)
				taint(b, st.since);
			dp_buf_puts(b, "}");
			first = false;
		}
	}
	dp_buf_puts(b, "]}\n");
}

/* Every unit's health for the kubelet. */
static void report(kata_dra *d)
{
	size_t total = 0, k = 0;
	for (size_t i = 0; i < *d->n_plugins; i++)
		total += kata_plugin_n_units(d->plugins[i]);
	if (total == 0)
		return;
	dp_draside_health *h = calloc(total, sizeof(*h));
	if (!h)
		return; /* the next check reports it */
	for (size_t i = 0; i < *d->n_plugins; i++) {
		for (size_t u = 0; u < kata_plugin_n_units(d->plugins[i]); u++) {
			struct kata_unit_state st;
			(void)kata_plugin_unit(d->plugins[i], u, &st);
			h[k++] = (dp_draside_health){ .device = st.name, .healthy = !st.down,
						      .message = st.down ? st.why : "usable" };
		}
	}
	(void)dp_draside_set_health(d->side, h, k); /* -ENOMEM: the next check reports it */
	free(h);
}

static void update(kata_dra *d)
{
	_cleanup_(dp_buf_done) dp_buf b = { 0 };

	if (!d->go)
		return;
	for (size_t i = 0; i < *d->n_plugins; i++)
		if (!kata_plugin_checked(d->plugins[i]))
			return;
	kata_dra_render(d->plugins, *d->n_plugins, &b);
	if (!b.oom)
		(void)dp_draside_publish(d->side, b.data, b.len); /* a failure is logged there */
	report(d);
}

void kata_dra_units(kata_plugin *p, void *userdata)
{
	update(userdata);
}

void kata_dra_go(kata_dra *d)
{
	d->go = true;
	update(d);
}

static int resolve(const char *device, char *cdi, size_t size, char *why, size_t why_size, void *userdata)
{
	kata_dra *d = userdata;

	for (size_t i = 0; i < *d->n_plugins; i++) {
		kata_plugin *p = d->plugins[i];
		size_t u = kata_plugin_find_unit(p, device);
		if (u == SIZE_MAX)
			continue;
		int r = kata_plugin_prepare_unit(p, u, why, why_size);
		if (r < 0)
			return r;
		snprintf(cdi, size, "%s=%s", kata_plugin_resource(p), device);
		return 0;
	}
	snprintf(why, why_size, "no such device on this node");
	return -ENODEV;
}

int kata_dra_new(dp_loop *loop, kata_plugin *const *plugins, const size_t *n_plugins, kata_dra **ret, char *why,
		 size_t why_size)
{
	_cleanup_(kata_dra_freep) kata_dra *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	d->plugins = plugins;
	d->n_plugins = n_plugins;
	/* exe NULL: sdp-kube-api beside this daemon (the image has it there) */
	if ((r = dp_draside_new_in_pod(loop, KATA_DRA_DRIVER, NULL, resolve, d, &d->side, why, why_size)) < 0)
		// cppcheck-suppress memleak ; d is freed by its _cleanup_ attribute, which the analyzers do not model
		return r; // NOLINT(clang-analyzer-unix.Malloc)
	*ret = TAKE_PTR(d);
	return 0;
}

kata_dra *kata_dra_free(kata_dra *d)
{
	if (!d)
		return NULL;
	dp_draside_free(d->side);
	free(d);
	return NULL;
}

int kata_dra_exe_fd(const kata_dra *d)
{
	return d ? dp_draside_exe_fd(d->side) : -1;
}
