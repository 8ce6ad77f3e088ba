/* SPDX-License-Identifier: Apache-2.0 */
/* spec: one kata resource's CDI spec, rendered to canonical YAML bytes (spec.h). */
#include "spec.h"

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

void kata_spec_render(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out)
{
	const char *slash = strchr(resource, '/');
	dp_cdi_features f = {
		.device_name_starts_with_digit = true,
		.class_has_dot = slash && strchr(slash + 1, '.'),
	};
	char id[24];
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
