/* SPDX-License-Identifier: Apache-2.0 */
/* spec: one kata resource's CDI spec, rendered to canonical YAML bytes (spec.h). */
#include "spec.h"

#include <stdio.h>
#include <string.h>

#include "dp/cdi.h"

void kata_spec_render(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out)
{
	const char *slash = strchr(resource, '/');
	dp_cdi_features f = {
		.device_name_starts_with_digit = true,
		.class_has_dot = slash && strchr(slash + 1, '.'),
	};
	char id[24];

	dp_buf_puts(out, "cdiVersion: ");
	dp_buf_yaml_string(out, dp_cdi_min_version(&f));
	dp_buf_puts(out, "\nkind: ");
	dp_buf_yaml_string(out, resource);
	dp_buf_puts(out, "\ndevices:\n");
	for (size_t i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "%zu", i);
		dp_buf_puts(out, "  - name: ");
		dp_buf_yaml_string(out, id);
		dp_buf_puts(out, "\n    containerEdits:\n      deviceNodes:\n        - path: ");
		dp_buf_yaml_string(out, devs[i].path);
		dp_buf_puts(out, "\n          type: \"c\"\n");
	}
}
