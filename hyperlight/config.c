/* SPDX-License-Identifier: Apache-2.0 */
/* config: the hyperlight daemon's environment, read once at start (config.h). */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/env.h"
#include "dp/log.h"

/* The encoder owns the wire size (dp_endpoint_max_devices); the count is a uint32_t. */
uint32_t hl_device_count_ceiling(void)
{
	size_t n = dp_endpoint_max_devices(HL_ID_PREFIX);
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

void hl_device_id(uint32_t i, char *buf, size_t size)
{
	snprintf(buf, size, HL_ID_PREFIX "%u", i);
}

static void load_id(const char *name, uint32_t *ret)
{
	char err[256];
	if (dp_env_u32(name, HL_DEFAULT_ID, 0, UINT32_MAX, ret, err, sizeof(err)) < 0) {
		char q[300];
		dp_warn("invalid value ignored, default kept", "error=%s default=%u",
			dp_logq(q, sizeof(q), err), HL_DEFAULT_ID);
		*ret = HL_DEFAULT_ID;
	}
}

int hl_parse_mode(const char *name, const char *value, uint32_t *ret, char *err, size_t errlen)
{
	size_t n = strlen(value);
	bool octal = n == 3 || n == 4;
	uint32_t v = 0;

	for (size_t i = 0; octal && i < n; i++) {
		if (value[i] < '0' || value[i] > '7')
			octal = false;
		else
			v = v * 8 + (uint32_t)(value[i] - '0');
	}
	if (!octal) {
		char q[DP_ENV_QUOTED_SIZE];
		dp_env_quote(q, sizeof(q), value);
		snprintf(err, errlen, "%s=%s is not an octal mode of 3 or 4 digits", name, q);
		return -EINVAL;
	}
	if (v > HL_MODE_MAX) {
		snprintf(err, errlen, "%s=%s is out of range 0000..0777 (no setuid, setgid or sticky bit)", name,
			 value);
		return -ERANGE;
	}
	*ret = v;
	return 0;
}

static void load_mode(uint32_t *ret)
{
	const char *v = getenv("DEVICE_MODE");
	char err[DP_ENV_QUOTED_SIZE + 64];
	*ret = HL_DEFAULT_MODE;
	if (v && hl_parse_mode("DEVICE_MODE", v, ret, err, sizeof(err)) < 0) {
		char q[sizeof(err) * 2];
		dp_warn("invalid value ignored, default kept", "error=%s default=%04o",
			dp_logq(q, sizeof(q), err), HL_DEFAULT_MODE);
	}
}

static int load_host_dir(struct hl_config *c, char *err, size_t errlen)
{
	const char *v = getenv("HOST_DEVICE_DIR");
	c->host_device_dir[0] = '\0';
	if (!v || !v[0])
		return 0;
	if (v[0] != '/' || strlen(v) >= sizeof(c->host_device_dir) - 64) {
		snprintf(err, errlen, "HOST_DEVICE_DIR=\"%.200s\" must be an absolute path", v);
		return -EINVAL;
	}
	snprintf(c->host_device_dir, sizeof(c->host_device_dir), "%s", v);
	return 0;
}

int hl_config_load(struct hl_config *ret, char *err, size_t errlen)
{
	struct hl_config c;
	int r = dp_env_u32("DEVICE_COUNT", HL_DEFAULT_COUNT, 1, hl_device_count_ceiling(), &c.device_count,
			   err, errlen);
	if (r < 0)
		return r;
	load_id("DEVICE_UID", &c.uid);
	load_id("DEVICE_GID", &c.gid);
	load_mode(&c.mode);
	r = load_host_dir(&c, err, errlen);
	if (r >= 0)
		r = dp_env_plugin_api(&c.dra, err, errlen);
	if (r >= 0)
		r = hl_companions_load(c.companions, &c.n_companions, err, errlen);
	if (r >= 0 && c.dra && c.n_companions) {
		snprintf(err, errlen, "COMPANIONS is served through the device-plugin API only, not with "
			 "PLUGIN_API=dra: unset one of them");
		r = -EINVAL;
	}
	if (r < 0)
		return r;
	*ret = c;
	return 0;
}
