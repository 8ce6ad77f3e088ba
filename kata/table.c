/* SPDX-License-Identifier: Apache-2.0 */
/* table: the compile-time PCI table, one row per advertised resource (table.h). */
#include "table.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dp/cdi.h"
#include "dp/endpoint.h"
#include "kata_extra_rows.h"

/* The whole device support of the daemon; KATA_EXTRA_ROWS (kata_extra_rows.h, generated from
 * the meson option kata_extra_rows) is empty in the default build. */
const struct kata_row kata_table[] = {
	{ "nvidia.com/gpu", 0x10de, 0x030200, 0xffff00 },      /* 3D controller */
	{ "nvidia.com/nvswitch", 0x10de, 0x068000, 0xffff00 }, /* bridge: other */
	KATA_EXTRA_ROWS
};
const size_t kata_table_len = sizeof(kata_table) / sizeof(kata_table[0]);

bool kata_row_matches(const struct kata_row *r, uint16_t vendor, uint32_t pci_class)
{
	return r->vendor == vendor && (pci_class & r->class_mask) == r->class_prefix;
}

int kata_table_match(const struct kata_row *t, size_t n, uint16_t vendor, uint32_t pci_class)
{
	for (size_t i = 0; i < n; i++)
		if (kata_row_matches(&t[i], vendor, pci_class))
			return (int)i;
	return -1;
}

static bool lower_case(const char *s)
{
	for (; *s; s++)
		if (*s >= 'A' && *s <= 'Z')
			return false;
	return true;
}

static int row_error(const struct kata_row *r, size_t i, const char *why, char *err, size_t errlen)
{
	snprintf(err, errlen, "PCI table row %zu (%s): %s", i, r->resource ? r->resource : "(null)", why);
	return -EINVAL;
}

int kata_table_validate(const struct kata_row *t, size_t n, char *err, size_t errlen)
{
	if (!t || n == 0 || n > KATA_MAX_ROWS) {
		snprintf(err, errlen, "PCI table must have 1 to %d rows", KATA_MAX_ROWS);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		const struct kata_row *r = &t[i];
		if (!dp_cdi_kind_valid(r->resource) || !lower_case(r->resource))
			return row_error(r, i, "not a lower-case <vendor>/<class> name", err, errlen);
		if (strlen(r->resource) > KATA_RESOURCE_MAX)
			return row_error(r, i, "resource name longer than 53 characters", err, errlen);
		if (r->class_mask == 0 || r->class_mask > 0xffffff || (r->class_prefix & ~r->class_mask))
			return row_error(r, i, "class mask empty, wider than 24 bits or not covering the prefix",
					 err, errlen);
		for (size_t j = 0; j < i; j++)
			if (strcmp(t[j].resource, r->resource) == 0)
				return row_error(r, i, "duplicate resource name", err, errlen);
	}
	return 0;
}

/* prefix + resource with '/' replaced by '-' + suffix. */
static int derive(const char *prefix, const char *resource, const char *suffix, char *buf, size_t size)
{
	if (!resource || !strchr(resource, '/'))
		return -EINVAL;
	if (strlen(prefix) + strlen(resource) + strlen(suffix) >= size)
		return -ENAMETOOLONG;
	snprintf(buf, size, "%s%s%s", prefix, resource, suffix);
	*strchr(buf + strlen(prefix), '/') = '-';
	return 0;
}

int kata_socket_prefix(const char *resource, char *buf, size_t size)
{
	if (!resource || !strchr(resource, '/'))
		return -EINVAL;
	return dp_socket_prefix(buf, size, KATA_SOCKET_TAG, resource);
}

int kata_plugin_name(const char *resource, char *buf, size_t size)
{
	return derive("kata.", resource, "", buf, size);
}

int kata_spec_file(const char *resource, char *buf, size_t size)
{
	return derive("kata.", resource, ".yaml", buf, size);
}

int kata_dra_spec_file(const char *resource, char *buf, size_t size)
{
	return derive("kata-dra.", resource, ".yaml", buf, size);
}
