/* SPDX-License-Identifier: Apache-2.0 */
/* companion: the micro-VM sandbox's devices beside the hypervisor and their environment (companion.h). */
#include "companion.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/env.h"
#include "dp/macro.h"

const struct hl_companion_type hl_companion_types[HL_COMPANION_TYPES] = {
	{ "tun", "/dev/net/tun", "TUN", "tun-", 10, 200 },
	{ "vhost-net", "/dev/vhost-net", "VHOST_NET", "vhost-net-", 10, 238 },
	{ "vhost-vsock", "/dev/vhost-vsock", "VHOST_VSOCK", "vhost-vsock-", 10, 241 },
};

#define NAMES "tun, vhost-net, vhost-vsock"

const struct hl_companion_type *hl_companion_type(const char *name)
{
	for (size_t i = 0; name && i < HL_COMPANION_TYPES; i++)
		if (strcmp(hl_companion_types[i].name, name) == 0)
			return &hl_companion_types[i];
	return NULL;
}

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* One item list[start, end) without its blanks: its table index, or -EINVAL with err. */
static int parse_item(const char *list, size_t start, size_t end, char *err, size_t errlen)
{
	char item[DP_ENV_QUOTED_SIZE], q[DP_ENV_QUOTED_SIZE];
	const struct hl_companion_type *t;

	while (start < end && blank(list[start]))
		start++;
	while (end > start && blank(list[end - 1]))
		end--;
	if (end == start) {
		dp_env_quote(q, sizeof(q), list);
		snprintf(err, errlen, "COMPANIONS=%s has an empty item (valid: " NAMES ")", q);
		return -EINVAL;
	}
	snprintf(item, sizeof(item), "%.*s", (int)(end - start), list + start);
	t = end - start < sizeof(item) ? hl_companion_type(item) : NULL;
	if (!t) {
		dp_env_quote(q, sizeof(q), item);
		snprintf(err, errlen, "COMPANIONS: %s is not a companion device (valid: " NAMES ")", q);
		return -EINVAL;
	}
	return (int)(t - hl_companion_types);
}

static bool only_blanks(const char *s)
{
	while (blank(*s))
		s++;
	return *s == '\0';
}

int hl_companions_parse(const char *list, unsigned *ret_mask, char *err, size_t errlen)
{
	unsigned mask = 0;
	size_t len = list ? strlen(list) : 0;

	if (!list || only_blanks(list)) {
		*ret_mask = 0;
		return 0;
	}
	for (size_t start = 0; start <= len;) {
		const char *comma = memchr(list + start, ',', len - start);
		size_t end = comma ? (size_t)(comma - list) : len;
		int i = parse_item(list, start, end, err, errlen);
		if (i < 0)
			return i;
		if (mask & (1u << i)) {
			snprintf(err, errlen, "COMPANIONS: %s is listed twice", hl_companion_types[i].name);
			return -EINVAL;
		}
		mask |= 1u << i;
		start = end + 1;
	}
	*ret_mask = mask;
	return 0;
}

static bool name_char(char c, bool edge)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (!edge && c == '-');
}

int hl_companion_check_name(const char *var, const char *name, char *err, size_t errlen)
{
	/* The name is also the companion's node label's (labels.h): neither may be taken. */
	static const struct {
		const char *name, *what;
	} taken[] = {
		{ "hypervisor", "the plugin's own resource and node label" },
		{ "device-access", "the plugin's own resource" },
		{ "enabled", "the plugin's node label for the hypervisor" },
		{ "device-plugin", "the operator's node label that opts a node in" },
	};
	size_t n = strlen(name);
	bool ok = n >= 1 && n <= HL_COMPANION_NAME_MAX;
	char q[DP_ENV_QUOTED_SIZE];

	for (size_t i = 0; ok && i < n; i++)
		ok = name_char(name[i], i == 0 || i == n - 1);
	dp_env_quote(q, sizeof(q), name);
	if (!ok) {
		snprintf(err, errlen,
			 "%s=%s is not a resource name: 1..63 of a-z, 0-9 and '-', a letter or digit at "
			 "each end",
			 var, q);
		return -EINVAL;
	}
	for (size_t i = 0; i < DP_ELEMENTSOF(taken); i++)
		if (strcmp(name, taken[i].name) == 0) {
			snprintf(err, errlen, "%s=%s: " HL_DOMAIN "/%s is %s", var, q, name, taken[i].what);
			return -EINVAL;
		}
	return 0;
}

static int load_one(const struct hl_companion_type *t, struct hl_companion *ret, char *err, size_t errlen)
{
	char var[32];
	const char *name;
	struct hl_companion c = { .type = t };
	int r;

	snprintf(var, sizeof(var), "%s_RESOURCE", t->env);
	name = getenv(var);
	if (!name)
		name = t->name;
	r = hl_companion_check_name(var, name, err, errlen);
	if (r < 0)
		return r;
	snprintf(c.resource, sizeof(c.resource), HL_DOMAIN "/%s", name);
	snprintf(var, sizeof(var), "%s_COUNT", t->env);
	size_t max = dp_endpoint_max_devices(t->id_prefix);
	r = dp_env_u32(var, HL_COMPANION_DEFAULT_COUNT, 1, max > UINT32_MAX ? UINT32_MAX : (uint32_t)max,
		       &c.count, err, errlen);
	if (r < 0)
		return r;
	*ret = c;
	return 0;
}

/* Two listed companions under one resource name. */
static int check_unique(const struct hl_companion *c, size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			if (strcmp(c[i].resource, c[j].resource) == 0) {
				snprintf(err, errlen, "%s and %s are both advertised as %s: give them different "
					 "%s_RESOURCE and %s_RESOURCE", c[i].type->name, c[j].type->name,
					 c[i].resource, c[i].type->env, c[j].type->env);
				return -EINVAL;
			}
	return 0;
}

int hl_companions_load(struct hl_companion ret[HL_COMPANION_TYPES], size_t *ret_n, char *err, size_t errlen)
{
	struct hl_companion c[HL_COMPANION_TYPES];
	unsigned mask;
	size_t n = 0;
	int r = hl_companions_parse(getenv("COMPANIONS"), &mask, err, errlen);

	for (size_t i = 0; r >= 0 && i < HL_COMPANION_TYPES; i++)
		if (mask & (1u << i))
			r = load_one(&hl_companion_types[i], &c[n++], err, errlen);
	if (r >= 0)
		r = check_unique(c, n, err, errlen);
	if (r < 0)
		return r;
	memcpy(ret, c, n * sizeof(c[0]));
	*ret_n = n;
	return 0;
}

void hl_companion_cdi_file(const struct hl_companion *c, char *buf, size_t size)
{
	snprintf(buf, size, "hyperlight-%s.json", c->resource + sizeof(HL_DOMAIN "/") - 1);
}
