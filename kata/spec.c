/* SPDX-License-Identifier: Apache-2.0 */
/* spec: one kata resource's CDI spec, rendered to canonical YAML bytes (spec.h). */
#include "spec.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "dp/cdi.h"

size_t kata_units(const struct kata_device *devs, size_t n, size_t *first)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || devs[i].group != devs[i - 1].group)
			first[k++] = i;
	return k;
}

static void node(dp_buf *out, const char *path)
{
	dp_buf_puts(out, "        - path: ");
	dp_buf_yaml_string(out, path);
	dp_buf_puts(out, "\n          type: \"c\"\n");
}

void kata_unit_name(const char *resource, const struct kata_device *first, char *buf, size_t size)
{
	const char *slash = strchr(resource, '/');
	const char *cls = slash ? slash + 1 : resource;
	char raw[KATA_UNIT_NAME_MAX + 1];
	size_t k;

	snprintf(raw, sizeof(raw), "%.*s-%s", (int)(KATA_UNIT_NAME_MAX - 1 - strlen(first->pci)), cls, first->pci);
	for (k = 0; raw[k]; k++) {
		char c = (char)tolower((unsigned char)raw[k]);
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
			c = '-';
		raw[k] = c;
	}
	snprintf(buf, size, "%s", raw);
}

static void render(const char *resource, const struct kata_device *devs, size_t n, bool dra, dp_buf *out)
{
	const char *slash = strchr(resource, '/');
	dp_cdi_features f = {
		.device_name_starts_with_digit = !dra,
		.class_has_dot = slash && strchr(slash + 1, '.'),
	};
	char id[KATA_UNIT_NAME_MAX + 1];
	size_t k = 0;

	dp_buf_puts(out, "cdiVersion: ");
	dp_buf_yaml_string(out, dp_cdi_min_version(&f));
	dp_buf_puts(out, "\nkind: ");
	dp_buf_yaml_string(out, resource);
	dp_buf_puts(out, "\ndevices:\n");
	for (size_t i = 0; i < n; i++) {
		bool first = i == 0 || devs[i].group != devs[i - 1].group;
		bool last = i + 1 == n || devs[i + 1].group != devs[i].group;
		bool legacy = kata_device_backend(&devs[i]) == KATA_BACKEND_LEGACY;
		if (first) {
			if (dra)
				kata_unit_name(resource, &devs[i], id, sizeof(id));
			else
				snprintf(id, sizeof(id), "%zu", k++);
			dp_buf_puts(out, "  - name: ");
			dp_buf_yaml_string(out, id);
			dp_buf_puts(out, "\n    containerEdits:\n      deviceNodes:\n");
		}
		if (!legacy || first)
			node(out, devs[i].path);
		if (legacy && last)
			node(out, KATA_CONTAINER_NODE);
	}
}

void kata_spec_render(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out)
{
	render(resource, devs, n, false, out);
}

void kata_spec_render_dra(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out)
{
	render(resource, devs, n, true, out);
}
