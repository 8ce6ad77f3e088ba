/* SPDX-License-Identifier: Apache-2.0 */
/* cdi: cdiVersion and the validation of names (dp/cdi.h), apart from the owned file's code. */
#include <stdbool.h>
#include <string.h>

#include "dp/cdi.h"

/* ---- cdiVersion and names ---- */

const char *dp_cdi_min_version(const dp_cdi_features *f)
{
	if (!f)
		return "0.3.0";
	if (f->net_devices || f->intel_rdt_schemata)
		return "1.1.0";
	if (f->additional_gids || f->intel_rdt)
		return "0.7.0";
	if (f->annotations || f->class_has_dot)
		return "0.6.0";
	if (f->device_node_host_path || f->device_name_starts_with_digit)
		return "0.5.0";
	if (f->mount_type)
		return "0.4.0";
	return "0.3.0";
}

static bool is_letter(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool is_alnum(char c)
{
	return is_letter(c) || (c >= '0' && c <= '9');
}

/* s[0..n): first char accepted by first(), last alnum, the others alnum or in extra. */
static bool name_chars_valid(const char *s, size_t n, bool (*first)(char), const char *extra)
{
	if (n == 0 || !first(s[0]) || !is_alnum(s[n - 1]))
		return false;
	for (size_t i = 1; i + 1 < n; i++)
		if (!is_alnum(s[i]) && !strchr(extra, s[i]))
			return false;
	return true;
}

bool dp_cdi_kind_valid(const char *kind)
{
	const char *slash = kind ? strchr(kind, '/') : NULL;

	if (!slash)
		return false;
	/* A second '/' lands in the class and fails the character check there. */
	return name_chars_valid(kind, (size_t)(slash - kind), is_letter, "_.-") &&
	       name_chars_valid(slash + 1, strlen(slash + 1), is_letter, "_.-");
}

bool dp_cdi_device_name_valid(const char *name)
{
	return name && name_chars_valid(name, strlen(name), is_alnum, "_.:-");
}
