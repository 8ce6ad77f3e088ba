/* SPDX-License-Identifier: Apache-2.0 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/env.h"
#include "dp/grpc.h"
#include "dp/log.h"

static size_t varint_len(size_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Bytes one Device takes inside ListAndWatchResponse (field 1, length-delimited) when its ID
 * ("hyperlight-<i>") has idlen bytes. */
static size_t device_wire_size(size_t idlen)
{
	size_t dev = 1 + varint_len(idlen) + idlen + 1 + varint_len(9) + 9; /* ID, "Unhealthy" */
	return 1 + varint_len(dev) + dev;
}

/* Every ID with the same number of decimal digits has the same size: fill the message one
 * digit count at a time (10 steps, not one snprintf per device: this runs at every start). */
uint32_t hl_device_count_ceiling(void)
{
	size_t total = 0;
	uint64_t n = 0, first = 0, end = 10;

	for (size_t digits = 1; end <= (uint64_t)UINT32_MAX + 1; digits++) {
		size_t each = device_wire_size(sizeof(HL_ID_PREFIX) - 1 + digits);
		uint64_t fit = (DP_GRPC_MAX_MESSAGE - total) / each;
		if (fit < end - first)
			return (uint32_t)(n + fit);
		total += (size_t)(end - first) * each;
		n += end - first;
		first = end;
		end *= 10;
	}
	return UINT32_MAX;
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
	r = load_host_dir(&c, err, errlen);
	if (r < 0)
		return r;
	*ret = c;
	return 0;
}
