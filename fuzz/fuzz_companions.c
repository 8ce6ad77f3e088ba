/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target: hyperlight's companion devices' environment (hyperlight/companion.c). The input
 * up to its first NUL is COMPANIONS; the bytes after that NUL (up to the next), or the same
 * string when there is no NUL, are a resource name (TUN_RESOURCE). Checks, each against a
 * reference written from companion.h's description:
 *   hl_companions_parse: success iff the list is blank (spaces and tabs only: none), or every
 *     ','-separated item, without the blanks around it, is tun, vhost-net or vhost-vsock and
 *     none repeats; the mask then has one bit per listed name (the table's index). A failure is
 *     -EINVAL, leaves the mask untouched, and its message is non-empty and NUL-terminated
 *     within the buffer, whatever the buffer's size (1, 8, 64, 512 bytes).
 *   hl_companion_check_name: accepted iff 1..63 bytes of [a-z0-9-], not starting or ending with
 *     '-', not "hypervisor" or "device-access"; a refusal has a message naming the variable.
 *   hl_companions_load with COMPANIONS and TUN_RESOURCE set: fails iff the parse fails, or tun
 *     is listed and its name is refused or is a listed companion's default resource name; on
 *     success one entry per listed companion in the table's order, with the resources and the
 *     default count; on failure the table and its length untouched.
 * Seeds: fuzz/corpus/companions/ (a list, NUL, a name).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "companion.h"
#include "fuzz.h"

#define SENTINEL 0xa5a5u

static const char *const names[HL_COMPANION_TYPES] = { "tun", "vhost-net", "vhost-vsock" };

static bool blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Reference parse: 0 with *ret_mask, or -EINVAL. */
static int reference_parse(const char *s, unsigned *ret_mask)
{
	unsigned mask = 0;
	const char *p = s;

	while (blank(*p))
		p++;
	if (!*p) {
		*ret_mask = 0;
		return 0;
	}
	for (const char *item = s;;) {
		const char *end = strchr(item, ',');
		size_t a = 0, b = end ? (size_t)(end - item) : strlen(item);
		int found = -1;

		while (a < b && blank(item[a]))
			a++;
		while (b > a && blank(item[b - 1]))
			b--;
		for (int i = 0; i < HL_COMPANION_TYPES; i++)
			if (strlen(names[i]) == b - a && memcmp(item + a, names[i], b - a) == 0)
				found = i;
		if (found < 0 || (mask & (1u << found)))
			return -EINVAL;
		mask |= 1u << found;
		if (!end)
			break;
		item = end + 1;
	}
	*ret_mask = mask;
	return 0;
}

/* Reference name check: the regular expression ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$ and not
 * one of the plugin's own resources. */
static bool reference_name(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > HL_COMPANION_NAME_MAX || s[0] == '-' || s[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return false;
	return strcmp(s, "hypervisor") != 0 && strcmp(s, "device-access") != 0;
}

/* A message was written into err[0..size): non-empty (when it has room) and NUL-terminated. */
static void check_message(const char *err, size_t size)
{
	FUZZ_CHECK(memchr(err, '\0', size) != NULL);
	if (size > 1)
		FUZZ_CHECK(err[0] != '\0');
}

static void check_parse(const char *list, int *ret_r, unsigned *ret_mask)
{
	static const size_t sizes[] = { 1, 8, 64, 512 };
	unsigned ref_mask = SENTINEL;
	int ref = reference_parse(list, &ref_mask);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char err[512 + 16];
		unsigned mask = SENTINEL;
		int r;

		memset(err, 'x', sizeof(err));
		r = hl_companions_parse(list, &mask, err, sizes[i]);
		FUZZ_CHECK(r == ref);
		/* nothing written past the buffer */
		for (size_t k = sizes[i]; k < sizeof(err); k++)
			FUZZ_CHECK(err[k] == 'x');
		if (r == 0) {
			FUZZ_CHECK(mask == ref_mask);
			FUZZ_CHECK(err[0] == 'x'); /* err untouched on success */
		} else {
			FUZZ_CHECK(r == -EINVAL);
			FUZZ_CHECK(mask == SENTINEL);
			check_message(err, sizes[i]);
		}
	}
	*ret_r = ref;
	*ret_mask = ref_mask;
}

static void check_name(const char *name)
{
	char err[512];
	bool ok;
	int r;

	memset(err, 'x', sizeof(err));
	r = hl_companion_check_name("TUN_RESOURCE", name, err, sizeof(err));
	ok = reference_name(name);
	FUZZ_CHECK(ok ? r == 0 : r == -EINVAL);
	if (!ok) {
		check_message(err, sizeof(err));
		FUZZ_CHECK(strncmp(err, "TUN_RESOURCE=", strlen("TUN_RESOURCE=")) == 0);
	}
}

/* putenv with a buffer of ours, removed (unsetenv) before it is freed: setenv would keep a copy
 * of every value it ever saw (glibc), growing a long fuzz run's memory without bound. */
static char *put(const char *var, const char *value)
{
	size_t n = strlen(var), m = strlen(value);
	char *s = malloc(n + 1 + m + 1);

	FUZZ_CHECK(s != NULL);
	memcpy(s, var, n);
	s[n] = '=';
	memcpy(s + n + 1, value, m + 1);
	FUZZ_CHECK(putenv(s) == 0);
	return s;
}

static void check_load(const char *list, const char *name, int parse_r, unsigned mask)
{
	struct hl_companion c[HL_COMPANION_TYPES], before[HL_COMPANION_TYPES];
	char err[512] = "";
	size_t n = SENTINEL;
	bool want_ok = parse_r == 0;
	char *env_list = put("COMPANIONS", list), *env_name = put("TUN_RESOURCE", name);
	int r;

	if (want_ok && (mask & 1u)) {
		want_ok = reference_name(name);
		for (int i = 1; i < HL_COMPANION_TYPES; i++)
			if ((mask & (1u << i)) && strcmp(name, names[i]) == 0)
				want_ok = false;
	}
	memset(c, 0x5a, sizeof(c));
	memcpy(before, c, sizeof(c));
	r = hl_companions_load(c, &n, err, sizeof(err));
	unsetenv("COMPANIONS");
	unsetenv("TUN_RESOURCE");
	free(env_list);
	free(env_name);
	FUZZ_CHECK(want_ok ? r == 0 : r < 0);
	if (r < 0) {
		FUZZ_CHECK(n == SENTINEL);
		FUZZ_CHECK(memcmp(c, before, sizeof(c)) == 0);
		check_message(err, sizeof(err));
		return;
	}
	FUZZ_CHECK(n == (size_t)__builtin_popcount(mask));
	for (int i = 0, k = 0; i < HL_COMPANION_TYPES; i++) {
		char want[HL_COMPANION_RESOURCE_SIZE];
		if (!(mask & (1u << i)))
			continue;
		FUZZ_CHECK(c[k].type == &hl_companion_types[i]);
		FUZZ_CHECK(strcmp(c[k].type->name, names[i]) == 0);
		strcpy(want, HL_DOMAIN "/");
		strcat(want, i == 0 ? name : names[i]);
		FUZZ_CHECK(strcmp(c[k].resource, want) == 0);
		FUZZ_CHECK(c[k].count == HL_COMPANION_DEFAULT_COUNT);
		k++;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nul = size ? memchr(data, '\0', size) : NULL;
	char *list = fuzz_string(data, size);
	char *name = nul ? fuzz_string(nul + 1, size - (size_t)(nul + 1 - data)) : fuzz_string(data, size);
	unsigned mask;
	int r;

	FUZZ_CHECK(list != NULL && name != NULL);
	check_parse(list, &r, &mask);
	check_name(name);
	check_name(list);
	check_load(list, name, r, mask);
	free(list);
	free(name);
	return 0;
}
