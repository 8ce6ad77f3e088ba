/* SPDX-License-Identifier: Apache-2.0 */
/* spec: the CDI specs of the hypervisor device and of the companions, rendered to their exact bytes (spec.h). */
#include "spec.h"

#include <stdio.h>

#include "config.h"

/* One device node, with the environment variables env[0..n_env) (none: no "env" key). */
static void render(const char *kind, const char *name, const char *path, const char *const *env, size_t n_env,
		   uint32_t uid, uint32_t gid, uint32_t mode, dp_buf *out)
{
	dp_cdi_features f = { 0 }; /* a plain device node, a letter-first name: nothing newer */

	dp_buf_puts(out, "{\n  \"cdiVersion\": ");
	dp_buf_json_string(out, dp_cdi_min_version(&f));
	dp_buf_puts(out, ",\n  \"kind\": ");
	dp_buf_json_string(out, kind);
	dp_buf_puts(out, ",\n  \"devices\": [\n    {\n      \"name\": ");
	dp_buf_json_string(out, name);
	dp_buf_puts(out, ",\n      \"containerEdits\": {\n        \"deviceNodes\": [\n          {\n"
			 "            \"path\": ");
	dp_buf_json_string(out, path);
	dp_buf_puts(out, ",\n            \"type\": \"c\",\n            \"permissions\": \"rw\",\n");
	dp_buf_printf(out, "            \"fileMode\": %u,\n", mode);
	dp_buf_printf(out, "            \"uid\": %u,\n            \"gid\": %u\n          }\n        ]%s\n",
		      uid, gid, n_env ? "," : "");
	for (size_t i = 0; i < n_env; i++) {
		dp_buf_puts(out, i ? ",\n          " : "        \"env\": [\n          ");
		dp_buf_json_string(out, env[i]);
	}
	if (n_env)
		dp_buf_puts(out, "\n        ]\n");
	dp_buf_puts(out, "      }\n    }\n  ]\n}\n");
}

void hl_spec_render(const struct hl_device *d, uint32_t uid, uint32_t gid, uint32_t mode, dp_buf *out)
{
	char hv[256], dev[256];
	const char *const env[] = { hv, dev };

	snprintf(hv, sizeof(hv), "HYPERLIGHT_HYPERVISOR=%s", d->name);
	snprintf(dev, sizeof(dev), "HYPERLIGHT_DEVICE_PATH=%s", d->path);
	render(HL_RESOURCE, d->name, d->path, env, 2, uid, gid, mode, out);
}

void hl_spec_render_companion(const struct hl_companion *c, uint32_t uid, uint32_t gid, uint32_t mode,
			      dp_buf *out)
{
	render(c->resource, c->type->name, c->type->path, NULL, 0, uid, gid, mode, out);
}
