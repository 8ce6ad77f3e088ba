/* SPDX-License-Identifier: Apache-2.0 */
/* kata RESOURCE_NAMING=sku: the name table generated from this machine's pci.ids at build time
 * (build/kata/sku_names.c). Every device ID of every vendor gets a name kubelet and the CDI
 * library accept, unique within its vendor; the examples of docs/kata.md hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dp/cdi.h"
#include "sku.h"

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Kubernetes' qualified name (the part after the domain): [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?,
 * at most 63 characters. */
static bool qualified_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63 || !alnum(s[0]) || !alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!alnum(s[i]) && !strchr("-_.", s[i]))
			return false;
	return true;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void every_name_valid_and_unique(void **state)
{
	(void)state;
	assert_true(kata_sku_vendors_len >= 1);
	for (size_t v = 0; v < kata_sku_vendors_len; v++) {
		const struct kata_sku_vendor *sv = &kata_sku_vendors[v];
		char(*names)[KATA_SKU_NAME_MAX + 1] = calloc(sv->n, sizeof(*names));
		char kind[128];
		size_t from_ids = 0;
		assert_non_null(names);
		assert_true(sv->n > 100); /* a real pci.ids, not an empty table */
		for (size_t i = 0; i < sv->n; i++) {
			uint16_t id = kata_sku_device_ids[sv->first + i];
			if (i > 0)
				assert_true(id > kata_sku_device_ids[sv->first + i - 1]);
			int r = kata_sku_name(sv->vendor, id, names[i], sizeof(names[i]));
			assert_true(r == 0 || r == 1);
			from_ids += (size_t)r;
			if (!qualified_name(names[i]))
				fail_msg("%04x:%04x: \"%s\" is not a qualified name", sv->vendor, id, names[i]);
			snprintf(kind, sizeof(kind), "example.com/%s", names[i]);
			if (!dp_cdi_kind_valid(kind))
				fail_msg("%04x:%04x: \"%s\" is not a CDI kind", sv->vendor, id, kind);
		}
		assert_true(from_ids > sv->n / 2);
		qsort(names, sv->n, sizeof(*names), cmp_str);
		for (size_t i = 1; i < sv->n; i++)
			if (strcmp(names[i - 1], names[i]) == 0)
				fail_msg("vendor %04x: two device IDs named \"%s\"", sv->vendor, names[i]);
		free(names);
	}
}

/* Every device line of the table's vendors in pci.ids (the build's input, PCI_IDS) reads back
 * exactly from the compressed table, and nothing else is in it. */
static void round_trip(void **state)
{
	FILE *f = fopen(PCI_IDS, "re");
	char line[1024], raw[KATA_SKU_RAW_MAX];
	size_t seen = 0, total = 0;
	int vendor = -1;
	(void)state;
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned id;
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '#' || !line[0])
			continue;
		if (line[0] != '\t') {
			vendor = sscanf(line, "%4x  ", &id) == 1 && strlen(line) > 6 && line[4] == ' ' ? (int)id : -1;
			continue;
		}
		if (line[1] == '\t' || vendor < 0 || sscanf(line + 1, "%4x", &id) != 1 || strncmp(line + 5, "  ", 2) != 0)
			continue;
		bool listed = false;
		for (size_t v = 0; v < kata_sku_vendors_len; v++)
			listed |= kata_sku_vendors[v].vendor == vendor;
		if (!listed)
			continue;
		char *name = line + 7;
		size_t n = strlen(name);
		while (n > 0 && (name[n - 1] == ' ' || name[n - 1] == '\t'))
			name[--n] = '\0';
		if (n > KATA_SKU_RAW_MAX - 1)
			name[KATA_SKU_RAW_MAX - 1] = '\0';
		if (!kata_sku_lookup((uint16_t)vendor, (uint16_t)id, raw))
			fail_msg("%04x:%04x \"%s\" is not in the table", vendor, id, name);
		if (strcmp(raw, name) != 0)
			fail_msg("%04x:%04x reads back as \"%s\", pci.ids has \"%s\"", vendor, id, raw, name);
		seen++;
	}
	fclose(f);
	for (size_t v = 0; v < kata_sku_vendors_len; v++)
		total += kata_sku_vendors[v].n;
	assert_int_equal(seen, total);
}

static void documented_examples(void **state)
{
	char buf[KATA_SKU_NAME_MAX + 1], want[32];
	(void)state;
	assert_int_equal(kata_sku_name(0x10de, 0x2330, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "GH100_H100_SXM5_80GB");
	assert_int_equal(kata_sku_name(0x10de, 0x20b0, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "GA100_A100_SXM4_40GB");
	assert_int_equal(kata_sku_name(0x10de, 0x1af1, buf, sizeof(buf)), 1);
	assert_string_equal(buf, "GA100_A100_NVSwitch");
	/* the first NVIDIA device ID pci.ids does not have: the fallback */
	char raw[KATA_SKU_RAW_MAX];
	unsigned id = 0;
	while (id < 0xffff && kata_sku_lookup(0x10de, (uint16_t)id, raw))
		id++;
	assert_int_equal(kata_sku_name(0x10de, (uint16_t)id, buf, sizeof(buf)), 0);
	snprintf(want, sizeof(want), "pci_10de_%04x", id);
	assert_string_equal(buf, want);
	/* a vendor the table does not have */
	assert_int_equal(kata_sku_name(0x8086, 0x1234, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "pci_8086_1234");
	assert_true(strlen(kata_sku_ids_version) > 0);
}

/* Does PCI_IDS (the build's pci.ids) have a device line for vendor:device? */
static bool ids_file_has(unsigned vendor, unsigned device)
{
	FILE *f = fopen(PCI_IDS, "re");
	char line[1024], want_vendor[8], want_device[8];
	bool in_vendor = false, found = false;
	assert_non_null(f);
	snprintf(want_vendor, sizeof(want_vendor), "%04x  ", vendor);
	snprintf(want_device, sizeof(want_device), "\t%04x ", device);
	while (!found && fgets(line, sizeof(line), f)) {
		if (line[0] != '\t' && line[0] != '#')
			in_vendor = strncmp(line, want_vendor, 6) == 0;
		else if (in_vendor)
			found = strncmp(line, want_device, 6) == 0;
	}
	fclose(f);
	return found;
}

/* The Grace superchips' GPUs (GH200 10de:2342 and 10de:2348, GB200 10de:2941): named by model
 * where the build's pci.ids has them (Debian 13's does: test_kata_sku_grace), the fallback
 * pci_10de_<device> where it does not (Debian 12's 2023.04.10): what docs/kata.md "Grace" says a
 * node gets. */
static void grace_ids(void **state)
{
	static const struct {
		unsigned device;
		const char *name;
	} grace[] = {
		{ 0x2342, "GH100_GH200_120GB_480GB" },
		{ 0x2348, "GH100_GH200_144G_HBM3e" },
		{ 0x2941, "GB100_HGX_GB200" },
	};
	char buf[KATA_SKU_NAME_MAX + 1], fallback[32];
	(void)state;
	for (size_t i = 0; i < sizeof(grace) / sizeof(grace[0]); i++) {
		bool named = ids_file_has(0x10de, grace[i].device);
		snprintf(fallback, sizeof(fallback), "pci_10de_%04x", grace[i].device);
		assert_int_equal(kata_sku_name(0x10de, (uint16_t)grace[i].device, buf, sizeof(buf)), named ? 1 : 0);
		assert_string_equal(buf, named ? grace[i].name : fallback);
	}
	if (strcmp(kata_sku_ids_version, "2023.04.10") == 0) /* Debian 12's: none of them */
		assert_false(ids_file_has(0x10de, 0x2342) || ids_file_has(0x10de, 0x2348) || ids_file_has(0x10de, 0x2941));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_name_valid_and_unique),
		cmocka_unit_test(round_trip),
		cmocka_unit_test(documented_examples),
		cmocka_unit_test(grace_ids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
