/* SPDX-License-Identifier: Apache-2.0 */
/* spec: the CDI spec of the hypervisor device, rendered to its exact bytes (spec.h). */
#include "spec.h"

#include <stdio.h>

#include "config.h"

void hl_spec_render(const struct hl_device *d, uint32_t uid, uint32_t gid, uint32_t mode, dp_buf *out)
{
	dp_cdi_features f = { 0 }; /* a plain device node, a letter-first name: nothing newer */
	char env[256];

	dp_buf_puts(out, "{\n  \"cdiVersion\": ");
	dp_buf_json_string(out, dp_cdi_min_version(&f));
	dp_buf_puts(out, ",\n  \"kind\": ");
	dp_buf_json_string(out, HL_RESOURCE);
	dp_buf_puts(out, ",\n  \"devices\": [\n    {\n      \"name\": ");
	dp_buf_json_string(out, d->name);
	dp_buf_puts(out, ",\n      \"containerEdits\": {\n        \"deviceNodes\": [\n          {\n"
			 "            \"path\": ");
	dp_buf_json_string(out, d->path);
	dp_buf_puts(out, ",\n            \"type\": \"c\",\n            \"permissions\": \"rw\",\n");
	dp_buf_printf(out, "            \"fileMode\": %u,\n", mode);
	dp_buf_printf(out, "            \"uid\": %u,\n            \"gid\": %u\n          }\n        ],\n",
		      uid, gid);
	dp_buf_puts(out, "        \"env\": [\n          ");
	snprintf(env, sizeof(env), "HYPERLIGHT_HYPERVISOR=%s", d->name);
	dp_buf_json_string(out, env);
	dp_buf_puts(out, ",\n          ");
	snprintf(env, sizeof(env), "HYPERLIGHT_DEVICE_PATH=%s", d->path);
	dp_buf_json_string(out, env);
	dp_buf_puts(out, "\n        ]\n      }\n    }\n  ]\n}\n");
}
