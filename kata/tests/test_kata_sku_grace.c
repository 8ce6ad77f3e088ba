/* SPDX-License-Identifier: Apache-2.0 */
/* kata RESOURCE_NAMING=sku on a node of Grace superchips, with the name table generated (by
 * kata/gen_sku_names.py, as the build does) from an excerpt of a newer pci.ids than Debian 12's
 * (kata/tests/pci.ids.grace: Debian 13's, 2025.06.09): a build with -Dpci_ids=<that file> names
 * GH200 and GB200 GPUs by model; IDs the file does not have keep the fallback name. What Debian
 * 12's pci.ids gives the same IDs is checked in test_kata_sku_table.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sku.h"

static void grace_names(void **state)
{
	static const struct {
		uint16_t device;
		const char *raw, *name;
	} want[] = {
		{ 0x2342, "GH100 [GH200 120GB / 480GB]", "GH100_GH200_120GB_480GB" },
		{ 0x2348, "GH100 [GH200 144G HBM3e]", "GH100_GH200_144G_HBM3e" },
		{ 0x2941, "GB100 [HGX GB200]", "GB100_HGX_GB200" },
		{ 0x2335, "GH100 [H200 SXM 141GB]", "GH100_H200_SXM_141GB" },
		{ 0x2901, "GB100 [B200]", "GB100_B200" },
		{ 0x2330, "GH100 [H100 SXM5 80GB]", "GH100_H100_SXM5_80GB" },
	};
	char raw[KATA_SKU_RAW_MAX], buf[KATA_SKU_NAME_MAX + 1];
	(void)state;
	assert_string_equal(kata_sku_ids_version, "2025.06.09");
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (!kata_sku_lookup(0x10de, want[i].device, raw))
			fail_msg("10de:%04x is not in the table", want[i].device);
		assert_string_equal(raw, want[i].raw);
		assert_int_equal(kata_sku_name(0x10de, want[i].device, buf, sizeof(buf)), 1);
		assert_string_equal(buf, want[i].name);
	}
}

/* A model the file does not have (here GB200's sibling 10de:2940, and one of another vendor)
 * keeps the fallback form. */
static void not_in_file(void **state)
{
	char raw[KATA_SKU_RAW_MAX], buf[KATA_SKU_NAME_MAX + 1];
	(void)state;
	assert_false(kata_sku_lookup(0x10de, 0x2940, raw));
	assert_int_equal(kata_sku_name(0x10de, 0x2940, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "pci_10de_2940");
	assert_int_equal(kata_sku_name(0x10df, 0x2941, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "pci_10df_2941");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grace_names),
		cmocka_unit_test(not_in_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
