/* SPDX-License-Identifier: Apache-2.0 */
/* kata RESOURCE_NAMING=sku (kata/sku.c, kata/naming.c) on a name table of its own (this file
 * defines the generated symbols): the sanitiser's rules, the front-coded lookup, the fallback,
 * the disambiguation of names two device IDs share; the grouping of scanned devices into one
 * resource per model with their derived names; and the RESOURCE_NAMING values. The generated
 * table itself is checked in test_kata_sku_table.c. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "naming.h"
#include "sku.h"

/* ---- the table under test: pci.ids names as the generator stores them ---- */

const char kata_sku_ids_version[] = "test";
const struct kata_sku_vendor kata_sku_vendors[] = {
	{ 0x1234, 9, 0 },
	{ 0x5678, 1, 9 },
};
const size_t kata_sku_vendors_len = 2;
const uint16_t kata_sku_device_ids[] = { 0x0001, 0x0002, 0x0003, 0x0004, 0x0005, 0x0006, 0x0007, 0x2330, 0x2331, 0x0001 };
/* words: byte 0x80 + i */
const char kata_sku_words[] = "GH100\000" "SXM5\000";
const size_t kata_sku_words_len = 2;
/* shared-prefix byte, the rest, NUL */
const char kata_sku_names[] = "\000" "Foo" "\000"              /* 1234:0001 Foo */
			      "\003" "\000"                    /* 1234:0002 Foo (3 bytes shared) */
			      "\000" "Bar [X]" "\000"          /* 1234:0003 */
			      "\000" "pci_1234_0009" "\000"    /* 1234:0004: the fallback's form */
			      "\000" "[??]" "\000"             /* 1234:0005: nothing left */
			      "\000" "Foo/" "\000"             /* 1234:0006: "Foo" too */
			      "\000" "9 Series" "\000"         /* 1234:0007: starts with a digit */
			      "\000" "\200" "[H100 " "\201" " 80GB]" "\000" /* 1234:2330: two words */
			      "\000" "Tesla" "\377\302" "\377\256" " K80" "\000" /* 1234:2331: "Tesla\u00ae K80" */
			      "\000" "Foo" "\000";             /* 5678:0001: another vendor */

/* ---- the sanitiser ---- */

static void expect_sanitised(const char *raw, const char *want)
{
	char buf[KATA_SKU_NAME_MAX + 1];
	assert_int_equal(kata_sku_sanitise(raw, buf, sizeof(buf)), 0);
	assert_string_equal(buf, want);
}

static void sanitiser_rules(void **state)
{
	(void)state;
	expect_sanitised("GH100[H100 SXM5 80GB]", "GH100_H100_SXM5_80GB");
	expect_sanitised("GA100 [A100 SXM4 40GB]", "GA100_A100_SXM4_40GB");
	expect_sanitised("GA100 [A100 NVSwitch]", "GA100_A100_NVSwitch");
	expect_sanitised("AD102GL [L40S]", "AD102GL_L40S");
	/* '-' and '.' are kept; any other run (underscores too) is one '_' */
	expect_sanitised("A100-SXM4.40GB_x", "A100-SXM4.40GB_x");
	expect_sanitised("a__b", "a_b");
	expect_sanitised("a / b  (c)", "a_b_c");
	expect_sanitised("x _ y", "x_y");
	/* ends trimmed of everything but letters and digits */
	expect_sanitised("  [x]  ", "x");
	expect_sanitised("-.x._", "x");
	/* bytes outside ASCII are other characters */
	expect_sanitised("Tesla\xc2\xae K80", "Tesla_K80");
	/* a leading digit: "pci_" in front (a CDI class starts with a letter) */
	expect_sanitised("9 Series", "pci_9_Series");
}

static void sanitiser_lengths(void **state)
{
	char buf[KATA_SKU_NAME_MAX + 1] = "keep", raw[200], want[80];
	(void)state;
	memset(raw, 'A', 100);
	raw[100] = '\0';
	memset(want, 'A', 63);
	want[63] = '\0';
	expect_sanitised(raw, want); /* cut to 63 */
	/* the cut would end on a separator: dropped */
	memset(raw, 'A', 62);
	strcpy(raw + 62, " [B]");
	want[62] = '\0';
	expect_sanitised(raw, want);
	/* the prefix counts: 63 in all */
	raw[0] = '1';
	memset(raw + 1, 'b', 80);
	raw[81] = '\0';
	strcpy(want, "pci_1");
	memset(want + 5, 'b', 58);
	want[63] = '\0';
	expect_sanitised(raw, want);
	/* nothing left: -EINVAL, buf untouched */
	assert_int_equal(kata_sku_sanitise("[?] / ()", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(kata_sku_sanitise("", buf, sizeof(buf)), -EINVAL);
	assert_string_equal(buf, "keep");
	assert_int_equal(kata_sku_sanitise("x", buf, KATA_SKU_NAME_MAX), -ENOBUFS);
	assert_string_equal(buf, "keep");
}

/* ---- lookup, fallback, disambiguation ---- */

static void expect_name(uint16_t vendor, uint16_t device, int ret, const char *want)
{
	char buf[KATA_SKU_NAME_MAX + 1];
	assert_int_equal(kata_sku_name(vendor, device, buf, sizeof(buf)), ret);
	assert_string_equal(buf, want);
}

static void lookup_front_coded(void **state)
{
	char raw[KATA_SKU_RAW_MAX];
	(void)state;
	assert_true(kata_sku_lookup(0x1234, 0x0002, raw));
	assert_string_equal(raw, "Foo");
	assert_true(kata_sku_lookup(0x1234, 0x2330, raw));
	assert_string_equal(raw, "GH100[H100 SXM5 80GB]");
	assert_true(kata_sku_lookup(0x1234, 0x2331, raw));
	assert_string_equal(raw, "Tesla\xc2\xae K80");
	assert_true(kata_sku_lookup(0x5678, 0x0001, raw));
	assert_string_equal(raw, "Foo");
	assert_false(kata_sku_lookup(0x1234, 0x0008, raw));
	assert_false(kata_sku_lookup(0x9999, 0x0001, raw));
}

static void names_and_fallback(void **state)
{
	static const struct {
		uint16_t vendor, device;
		int ret;
		const char *want;
	} cases[] = {
		{ 0x1234, 0x2330, 1, "GH100_H100_SXM5_80GB" },
		{ 0x1234, 0x2331, 1, "Tesla_K80" },
		{ 0x1234, 0x0003, 1, "Bar_X" },
		{ 0x1234, 0x0007, 1, "pci_9_Series" },
		/* three device IDs share "Foo": each gets its ID; the other vendor's "Foo" does not */
		{ 0x1234, 0x0001, 1, "Foo_0001" },
		{ 0x1234, 0x0002, 1, "Foo_0002" },
		{ 0x1234, 0x0006, 1, "Foo_0006" },
		{ 0x5678, 0x0001, 1, "Foo" },
		/* a name of the fallback's form cannot pass for another device's fallback */
		{ 0x1234, 0x0004, 1, "pci_1234_0009_0004" },
		/* fallback: not in the table, nothing left of the name, a vendor not in the table */
		{ 0x1234, 0x0008, 0, "pci_1234_0008" },
		{ 0x1234, 0x0005, 0, "pci_1234_0005" },
		{ 0x9999, 0xabcd, 0, "pci_9999_abcd" },
	};
	char small[KATA_SKU_NAME_MAX] = "keep";
	(void)state;
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++)
		expect_name(cases[i].vendor, cases[i].device, cases[i].ret, cases[i].want);
	assert_int_equal(kata_sku_name(0x1234, 0x2330, small, sizeof(small)), -ENOBUFS);
	assert_string_equal(small, "keep");
}

/* ---- grouping the scan ---- */

static const struct kata_row rows[] = {
	{ "example.com/gpu", 0x1234, 0x030200, 0xffff00 },
	{ "example.com/switch", 0x1234, 0x068000, 0xffff00 },
};

static struct kata_device dev(const char *name, const char *pci, uint64_t key, uint16_t id, size_t row)
{
	struct kata_device d = { .pci_key = key, .vendor = 0x1234, .device_id = id, .row = row };
	strcpy(d.name, name);
	strcpy(d.pci, pci);
	return d;
}

/* As the scan orders them: by row, then PCI address. */
static struct kata_device scanned[5];

static void fill_scan(struct kata_scan *s)
{
	scanned[0] = dev("vfio4", "0000:05:00.0", 0x0500, 0x2330, 0);
	scanned[1] = dev("vfio1", "0000:41:00.0", 0x4100, 0x0003, 0);
	scanned[2] = dev("vfio0", "0000:42:00.0", 0x4200, 0x2330, 0);
	scanned[3] = dev("vfio3", "0000:06:00.0", 0x0600, 0x0008, 1);
	scanned[4] = dev("vfio2", "0000:07:00.0", 0x0700, 0x0008, 1);
	*s = (struct kata_scan){ .devices = scanned, .n_devices = 5 };
}

static void sku_resources(void **state)
{
	struct kata_scan s;
	struct kata_resources r = { 0 };
	(void)state;
	fill_scan(&s);
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &r), 0);
	/* one per model, by device ID; devices by PCI address within */
	assert_int_equal(r.n, 3);
	assert_string_equal(r.v[0].name, "example.com/Bar_X");
	assert_int_equal(r.v[0].n, 1);
	assert_string_equal(r.v[0].devs[0].name, "vfio1");
	assert_string_equal(r.v[1].name, "example.com/pci_1234_0008");
	assert_int_equal(r.v[1].n, 2);
	assert_string_equal(r.v[1].devs[0].name, "vfio3");
	assert_string_equal(r.v[1].devs[1].name, "vfio2");
	assert_string_equal(r.v[2].name, "example.com/GH100_H100_SXM5_80GB");
	assert_int_equal(r.v[2].n, 2);
	assert_string_equal(r.v[2].devs[0].pci, "0000:05:00.0");
	assert_string_equal(r.v[2].devs[1].pci, "0000:42:00.0");
	/* derived names */
	assert_string_equal(r.v[2].socket_prefix, "kata-cin8gp"); /* shared: the hash of "sku" */
	assert_string_equal(r.v[1].socket_prefix, "kata-cin8gp");
	assert_string_equal(r.v[2].plugin_name, "kata.sku-1234-2330");
	assert_string_equal(r.v[2].spec_file, "kata.example.com-GH100_H100_SXM5_80GB.yaml");
	assert_string_equal(r.v[1].spec_file, "kata.example.com-pci_1234_0008.yaml");
	/* the scan itself is not reordered */
	assert_string_equal(s.devices[0].name, "vfio4");
	kata_resources_done(&r);
	assert_null(r.v);
}

/* What may be served beside the running resources: new models only, the others unchanged. */
static void only_added(void **state)
{
	struct kata_scan s;
	struct kata_resources old = { 0 }, grown = { 0 };
	(void)state;
	fill_scan(&s);
	s.n_devices = 3; /* the two H100 and the 0003 */
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &old), 0);
	s.n_devices = 5; /* a new model (0008, two devices) */
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &grown), 0);
	assert_true(kata_resources_only_added(&old, &grown));
	assert_non_null(kata_resources_find(&grown, "example.com/pci_1234_0008"));
	assert_null(kata_resources_find(&old, "example.com/pci_1234_0008"));
	assert_false(kata_resources_only_added(&old, &old)); /* nothing new */
	assert_false(kata_resources_only_added(&grown, &old)); /* a model gone */
	kata_resources_done(&grown);
	/* one more H100: its IDs would change */
	scanned[3] = dev("vfio3", "0000:06:00.0", 0x0600, 0x2330, 0);
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &grown), 0);
	assert_false(kata_resources_only_added(&old, &grown));
	kata_resources_done(&grown);
	/* a device of a served model with another NUMA node */
	fill_scan(&s);
	scanned[0].numa_node = 1;
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &grown), 0);
	assert_false(kata_resources_only_added(&old, &grown));
	kata_resources_done(&grown);
	kata_resources_done(&old);
}

static void table_resources(void **state)
{
	struct kata_scan s;
	struct kata_resources r = { 0 };
	(void)state;
	fill_scan(&s);
	s.n_devices = 3; /* no switch */
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_TABLE, &r), 0);
	assert_int_equal(r.n, 2);
	assert_string_equal(r.v[0].name, "example.com/gpu");
	assert_int_equal(r.v[0].n, 3);
	assert_string_equal(r.v[0].devs[2].name, "vfio0");
	assert_string_equal(r.v[0].socket_prefix, "kata-8o5trb"); /* the hash of "example.com/gpu" */
	assert_string_equal(r.v[0].plugin_name, "kata.example.com-gpu");
	assert_string_equal(r.v[0].spec_file, "kata.example.com-gpu.yaml");
	assert_string_equal(r.v[1].name, "example.com/switch");
	assert_int_equal(r.v[1].n, 0); /* listed, not registered */
	kata_resources_done(&r);
}

static void sku_too_many_models(void **state)
{
	enum { N = KATA_MAX_ROWS + 3 };
	struct kata_device *d = calloc(N, sizeof(*d));
	struct kata_resources r = { 0 };
	(void)state;
	assert_non_null(d);
	for (size_t i = 0; i < N; i++)
		d[N - 1 - i] = dev("vfio1", "0000:01:00.0", i, (uint16_t)(0x100 + i), 0);
	struct kata_scan s = { .devices = d, .n_devices = N };
	assert_int_equal(kata_resources_build(&s, rows, 2, KATA_NAMING_SKU, &r), 0);
	assert_int_equal(r.n, KATA_MAX_ROWS); /* the lowest device IDs */
	assert_string_equal(r.v[0].name, "example.com/pci_1234_0100");
	assert_int_equal(r.v[KATA_MAX_ROWS - 1].devs[0].device_id, 0x100 + KATA_MAX_ROWS - 1);
	kata_resources_done(&r);
	free(d);
}

static void naming_env(void **state)
{
	enum kata_naming m = KATA_NAMING_SKU;
	char err[128] = "";
	(void)state;
	unsetenv(KATA_NAMING_ENV);
	assert_int_equal(kata_naming_from_env(&m, err, sizeof(err)), 0);
	assert_int_equal(m, KATA_NAMING_TABLE);
	setenv(KATA_NAMING_ENV, "sku", 1);
	assert_int_equal(kata_naming_from_env(&m, err, sizeof(err)), 0);
	assert_int_equal(m, KATA_NAMING_SKU);
	setenv(KATA_NAMING_ENV, "table", 1);
	assert_int_equal(kata_naming_from_env(&m, err, sizeof(err)), 0);
	assert_int_equal(m, KATA_NAMING_TABLE);
	static const char *const bad[] = { "", "SKU", "sku ", "tables", "per-sku" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		m = KATA_NAMING_SKU;
		setenv(KATA_NAMING_ENV, bad[i], 1);
		assert_int_equal(kata_naming_from_env(&m, err, sizeof(err)), -EINVAL);
		assert_int_equal(m, KATA_NAMING_SKU); /* untouched */
		assert_non_null(strstr(err, "is not table or sku"));
	}
	setenv(KATA_NAMING_ENV, "bad value", 1);
	assert_int_equal(kata_naming_from_env(&m, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "RESOURCE_NAMING=\"bad value\" is not table or sku");
	unsetenv(KATA_NAMING_ENV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sanitiser_rules),
		cmocka_unit_test(sanitiser_lengths),
		cmocka_unit_test(lookup_front_coded),
		cmocka_unit_test(names_and_fallback),
		cmocka_unit_test(sku_resources),
		cmocka_unit_test(only_added),
		cmocka_unit_test(table_resources),
		cmocka_unit_test(sku_too_many_models),
		cmocka_unit_test(naming_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
