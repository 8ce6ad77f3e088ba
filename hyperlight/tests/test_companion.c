/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The companion devices' environment (companion.c): COMPANIONS as an operator writes it (any
 * order, blanks around the items, empty = none) and each way it is wrong (an empty, unknown,
 * upper-case, repeated or overlong item: refused with a message naming it and the valid names,
 * the mask untouched); the resource names <ENV>_RESOURCE takes; the table hl_companions_load
 * builds from the environment (defaults, renamed resources, counts and their errors, two
 * companions under one name); and the CDI spec file each one gets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "companion.h"
#include "dp/endpoint.h"
#include "dp/macro.h"

#define VALID "(valid: tun, vhost-net, vhost-vsock)"
#define MASK_ALL 7u
#define UNTOUCHED 0xdeadu

static const char *const vars[] = {
	"COMPANIONS",	     "TUN_RESOURCE",	     "VHOST_NET_RESOURCE", "VHOST_VSOCK_RESOURCE",
	"TUN_COUNT",	     "VHOST_NET_COUNT",	     "VHOST_VSOCK_COUNT",
};

static int clean_env(void **state)
{
	(void)state;
	for (size_t i = 0; i < DP_ELEMENTSOF(vars); i++)
		unsetenv(vars[i]);
	return 0;
}

static void set(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

/* ---------------------------------------------------------------- hl_companions_parse */

static unsigned parse_ok(const char *list)
{
	char err[512] = "untouched";
	unsigned mask = UNTOUCHED;
	int r = hl_companions_parse(list, &mask, err, sizeof(err));

	if (r != 0)
		fail_msg("COMPANIONS=\"%s\": %d (%s), want success", list ? list : "(null)", r, err);
	assert_string_equal(err, "untouched");
	return mask;
}

static void parse_valid(void **state)
{
	(void)state;
	static const struct {
		const char *list;
		unsigned mask;
	} cases[] = {
		{ "tun", 1u },
		{ "vhost-net", 2u },
		{ "vhost-vsock", 4u },
		{ "tun,vhost-net,vhost-vsock", MASK_ALL },
		{ "vhost-vsock,tun,vhost-net", MASK_ALL }, /* any order */
		{ "vhost-vsock,tun", 5u },
		{ " tun , vhost-net\t", 3u }, /* blanks around the items */
		{ "\t vhost-vsock \t,\ttun", 5u },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		unsigned mask = parse_ok(cases[i].list);
		if (mask != cases[i].mask)
			fail_msg("COMPANIONS=\"%s\": mask %#x, want %#x", cases[i].list, mask, cases[i].mask);
	}
}

/* Unset, empty or only blanks: no companion (the default), not an error. */
static void parse_none(void **state)
{
	(void)state;
	assert_int_equal(parse_ok(NULL), 0);
	assert_int_equal(parse_ok(""), 0);
	assert_int_equal(parse_ok(" "), 0);
	assert_int_equal(parse_ok(" \t "), 0);
}

static void parse_invalid(void **state)
{
	(void)state;
	char long_item[301], long_list[320], long_want[256];
	memset(long_item, 'x', 300);
	long_item[300] = '\0';
	snprintf(long_list, sizeof(long_list), "tun,%s", long_item);
	/* quoted as dp_env_quote does: cut after 64 bytes */
	snprintf(long_want, sizeof(long_want), "COMPANIONS: \"%.64s...\" is not a companion device " VALID,
		 long_item);
	const struct {
		const char *list;
		const char *error;
	} cases[] = {
		{ "tun,,vhost-net", "COMPANIONS=\"tun,,vhost-net\" has an empty item " VALID },
		{ "tun,", "COMPANIONS=\"tun,\" has an empty item " VALID },
		{ ",tun", "COMPANIONS=\",tun\" has an empty item " VALID },
		{ "tun, ,vhost-net", "COMPANIONS=\"tun, ,vhost-net\" has an empty item " VALID },
		{ ",", "COMPANIONS=\",\" has an empty item " VALID },
		{ "tap", "COMPANIONS: \"tap\" is not a companion device " VALID },
		{ "tun,vhost", "COMPANIONS: \"vhost\" is not a companion device " VALID },
		{ "TUN", "COMPANIONS: \"TUN\" is not a companion device " VALID },
		{ "vhost-net,Vhost-Vsock", "COMPANIONS: \"Vhost-Vsock\" is not a companion device " VALID },
		{ "vhost_net", "COMPANIONS: \"vhost_net\" is not a companion device " VALID },
		{ "tun vhost-net", "COMPANIONS: \"tun vhost-net\" is not a companion device " VALID },
		{ "tun;vhost-net", "COMPANIONS: \"tun;vhost-net\" is not a companion device " VALID },
		{ "tun\n", "COMPANIONS: \"tun\\n\" is not a companion device " VALID },
		{ "tun,tun", "COMPANIONS: tun is listed twice" },
		{ "vhost-net, tun ,vhost-net", "COMPANIONS: vhost-net is listed twice" },
		{ long_item, long_want },
		{ long_list, long_want },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		char err[512] = "";
		unsigned mask = UNTOUCHED;
		int r = hl_companions_parse(cases[i].list, &mask, err, sizeof(err));
		if (r != -EINVAL)
			fail_msg("COMPANIONS=\"%s\": %d, want -EINVAL", cases[i].list, r);
		if (mask != UNTOUCHED)
			fail_msg("COMPANIONS=\"%s\": mask changed to %#x", cases[i].list, mask);
		if (strcmp(err, cases[i].error) != 0)
			fail_msg("COMPANIONS=\"%s\":\n got  %s\n want %s", cases[i].list, err, cases[i].error);
	}
}

/* A message longer than the buffer is cut, never overrun. */
static void parse_small_buffer(void **state)
{
	(void)state;
	char err[12];
	unsigned mask = UNTOUCHED;
	memset(err, 'x', sizeof(err));
	assert_int_equal(hl_companions_parse("nope", &mask, err, 8), -EINVAL);
	assert_string_equal(err, "COMPANI");
	assert_int_equal(err[8], 'x');
	assert_int_equal(mask, UNTOUCHED);
}

/* ---------------------------------------------------------------- hl_companion_check_name */

static void check_name_valid(void **state)
{
	(void)state;
	char longest[HL_COMPANION_NAME_MAX + 1];
	memset(longest, 'a', HL_COMPANION_NAME_MAX);
	longest[HL_COMPANION_NAME_MAX] = '\0';
	const char *names[] = { "tun", "tap", "t", "0", "vhost-net", "net-2", "9lives", "a-b-c", "a--b", longest };
	for (size_t i = 0; i < DP_ELEMENTSOF(names); i++) {
		char err[512] = "untouched";
		if (hl_companion_check_name("TUN_RESOURCE", names[i], err, sizeof(err)) != 0)
			fail_msg("TUN_RESOURCE=%s refused: %s", names[i], err);
		assert_string_equal(err, "untouched");
	}
}

static void check_name_invalid(void **state)
{
	(void)state;
	char too_long[HL_COMPANION_NAME_MAX + 2], too_long_want[512];
	memset(too_long, 'a', HL_COMPANION_NAME_MAX + 1); /* 64 bytes */
	too_long[HL_COMPANION_NAME_MAX + 1] = '\0';
#define SHAPE "is not a resource name: 1..63 of a-z, 0-9 and '-', a letter or digit at each end"
	snprintf(too_long_want, sizeof(too_long_want), "TUN_RESOURCE=\"%s\" " SHAPE, too_long);
	const struct {
		const char *name;
		const char *error;
	} cases[] = {
		{ "", "TUN_RESOURCE=\"\" " SHAPE },
		{ too_long, too_long_want },
		{ "Tap", "TUN_RESOURCE=\"Tap\" " SHAPE },
		{ "TAP", "TUN_RESOURCE=\"TAP\" " SHAPE },
		{ "-tap", "TUN_RESOURCE=\"-tap\" " SHAPE },
		{ "tap-", "TUN_RESOURCE=\"tap-\" " SHAPE },
		{ "-", "TUN_RESOURCE=\"-\" " SHAPE },
		{ "tap/1", "TUN_RESOURCE=\"tap/1\" " SHAPE },
		{ "hyperlight.dev/tap", "TUN_RESOURCE=\"hyperlight.dev/tap\" " SHAPE },
		{ "tap.1", "TUN_RESOURCE=\"tap.1\" " SHAPE },
		{ "tap_1", "TUN_RESOURCE=\"tap_1\" " SHAPE },
		{ " tap", "TUN_RESOURCE=\" tap\" " SHAPE },
		{ "tap\n", "TUN_RESOURCE=\"tap\\n\" " SHAPE },
		{ "hypervisor",
		  "TUN_RESOURCE=\"hypervisor\": hyperlight.dev/hypervisor is the plugin's own resource and node label" },
		{ "device-access",
		  "TUN_RESOURCE=\"device-access\": hyperlight.dev/device-access is the plugin's own resource" },
		/* the companion's node label would be these */
		{ "enabled", "TUN_RESOURCE=\"enabled\": hyperlight.dev/enabled is the plugin's node label for the hypervisor" },
		{ "device-plugin",
		  "TUN_RESOURCE=\"device-plugin\": hyperlight.dev/device-plugin is the operator's node label that opts a node in" },
	};
#undef SHAPE
	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		char err[512] = "";
		int r = hl_companion_check_name("TUN_RESOURCE", cases[i].name, err, sizeof(err));
		if (r != -EINVAL)
			fail_msg("TUN_RESOURCE=\"%s\": %d, want -EINVAL", cases[i].name, r);
		if (strcmp(err, cases[i].error) != 0)
			fail_msg("TUN_RESOURCE=\"%s\":\n got  %s\n want %s", cases[i].name, err, cases[i].error);
	}
}

/* ---------------------------------------------------------------- hl_companions_load */

/* hl_companions_load into a table pre-filled with a marker; its return, *n (UNTOUCHED when
 * not written), and err. */
static int load(struct hl_companion c[HL_COMPANION_TYPES], size_t *n, char *err, size_t errlen)
{
	memset(c, 0x5a, sizeof(struct hl_companion) * HL_COMPANION_TYPES);
	*n = UNTOUCHED;
	err[0] = '\0';
	return hl_companions_load(c, n, err, errlen);
}

static void expect_entry(const struct hl_companion *c, const char *name, const char *resource, uint32_t count)
{
	assert_non_null(c->type);
	assert_string_equal(c->type->name, name);
	assert_ptr_equal(c->type, hl_companion_type(name));
	assert_string_equal(c->resource, resource);
	assert_int_equal(c->count, count);
}

static void load_error(const char *error)
{
	struct hl_companion c[HL_COMPANION_TYPES], before[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	int r = load(c, &n, err, sizeof(err));

	memset(before, 0x5a, sizeof(before));
	if (r >= 0)
		fail_msg("loaded %zu companions, want the error \"%s\"", n, error);
	assert_int_equal(n, UNTOUCHED);
	assert_memory_equal(c, before, sizeof(c));
	if (strcmp(err, error) != 0)
		fail_msg("got  %s\nwant %s", err, error);
}

static void load_unset(void **state)
{
	(void)state;
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 0);
	set("COMPANIONS", " ");
	set("TUN_COUNT", "abc"); /* tun is not listed: its variables are not read */
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 0);
}

static void load_defaults(void **state)
{
	(void)state;
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	set("COMPANIONS", "vhost-vsock, tun,vhost-net");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	/* the table's order, whatever COMPANIONS' */
	expect_entry(&c[0], "tun", "hyperlight.dev/tun", HL_COMPANION_DEFAULT_COUNT);
	expect_entry(&c[1], "vhost-net", "hyperlight.dev/vhost-net", 2000);
	expect_entry(&c[2], "vhost-vsock", "hyperlight.dev/vhost-vsock", 2000);
	assert_string_equal(c[0].type->path, "/dev/net/tun");
	assert_string_equal(c[1].type->path, "/dev/vhost-net");
	assert_string_equal(c[2].type->path, "/dev/vhost-vsock");

	set("COMPANIONS", "vhost-vsock,tun");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	expect_entry(&c[0], "tun", "hyperlight.dev/tun", 2000);
	expect_entry(&c[1], "vhost-vsock", "hyperlight.dev/vhost-vsock", 2000);
}

/* The device numbers are the kernel's misc minors: another number is not the device. */
static void types_table(void **state)
{
	(void)state;
	const struct hl_companion_type *t = hl_companion_type("tun");
	assert_non_null(t);
	assert_int_equal(t->major, 10);
	assert_int_equal(t->minor, 200);
	t = hl_companion_type("vhost-net");
	assert_non_null(t);
	assert_int_equal(t->minor, 238);
	t = hl_companion_type("vhost-vsock");
	assert_non_null(t);
	assert_int_equal(t->minor, 241);
	assert_null(hl_companion_type("TUN"));
	assert_null(hl_companion_type(""));
	assert_null(hl_companion_type(NULL));
}

static void load_renamed(void **state)
{
	(void)state;
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	set("COMPANIONS", "tun,vhost-net");
	set("TUN_RESOURCE", "tap");
	set("TUN_COUNT", "10");
	set("VHOST_NET_COUNT", "1");
	set("VHOST_VSOCK_RESOURCE", "Not A Name!"); /* vhost-vsock is not listed: ignored */
	set("VHOST_VSOCK_COUNT", "0");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	expect_entry(&c[0], "tun", "hyperlight.dev/tap", 10);
	expect_entry(&c[1], "vhost-net", "hyperlight.dev/vhost-net", 1);
	/* the longest name fills the resource buffer exactly */
	char longest[HL_COMPANION_NAME_MAX + 1], want[128];
	memset(longest, 'z', HL_COMPANION_NAME_MAX);
	longest[HL_COMPANION_NAME_MAX] = '\0';
	set("TUN_RESOURCE", longest);
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	snprintf(want, sizeof(want), "hyperlight.dev/%s", longest);
	assert_string_equal(c[0].resource, want);
}

static void load_bad_count(void **state)
{
	(void)state;
	uint32_t max = (uint32_t)dp_endpoint_max_devices("tun-");
	char over[32], want[128];
	set("COMPANIONS", "tun");
	set("TUN_COUNT", "0");
	snprintf(want, sizeof(want), "TUN_COUNT=0 is out of range 1..%u", max);
	load_error(want);
	set("TUN_COUNT", "abc");
	load_error("TUN_COUNT=\"abc\" is not a decimal integer");
	set("TUN_COUNT", "");
	load_error("TUN_COUNT=\"\" is not a decimal integer");
	snprintf(over, sizeof(over), "%u", max + 1);
	set("TUN_COUNT", over);
	snprintf(want, sizeof(want), "TUN_COUNT=%u is out of range 1..%u", max + 1, max);
	load_error(want);
	/* the ceiling itself is taken */
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	snprintf(over, sizeof(over), "%u", max);
	set("TUN_COUNT", over);
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 1);
	assert_int_equal(c[0].count, max);
	/* the other companions' counts are named as theirs */
	set("COMPANIONS", "tun,vhost-vsock");
	set("VHOST_VSOCK_COUNT", "-1");
	snprintf(want, sizeof(want), "VHOST_VSOCK_COUNT=-1 is negative: out of range 1..%u",
		 (uint32_t)dp_endpoint_max_devices("vhost-vsock-"));
	load_error(want);
}

static void load_bad_resource(void **state)
{
	(void)state;
	set("COMPANIONS", "tun,vhost-net");
	set("VHOST_NET_RESOURCE", "Net");
	load_error("VHOST_NET_RESOURCE=\"Net\" is not a resource name: 1..63 of a-z, 0-9 and '-', a letter or "
		   "digit at each end");
	set("VHOST_NET_RESOURCE", "");
	load_error("VHOST_NET_RESOURCE=\"\" is not a resource name: 1..63 of a-z, 0-9 and '-', a letter or "
		   "digit at each end");
	set("VHOST_NET_RESOURCE", "hypervisor");
	load_error("VHOST_NET_RESOURCE=\"hypervisor\": hyperlight.dev/hypervisor is the plugin's own resource and node label");
	/* COMPANIONS itself invalid: its message */
	set("COMPANIONS", "tun,tun");
	load_error("COMPANIONS: tun is listed twice");
}

/* Two listed companions under one resource: refused, naming both and their variables. */
static void load_same_resource(void **state)
{
	(void)state;
	set("COMPANIONS", "tun,vhost-net");
	set("TUN_RESOURCE", "net");
	set("VHOST_NET_RESOURCE", "net");
	load_error("tun and vhost-net are both advertised as hyperlight.dev/net: give them different "
		   "TUN_RESOURCE and VHOST_NET_RESOURCE");
	/* a rename onto another companion's default name */
	unsetenv("VHOST_NET_RESOURCE");
	set("TUN_RESOURCE", "vhost-net");
	load_error("tun and vhost-net are both advertised as hyperlight.dev/vhost-net: give them different "
		   "TUN_RESOURCE and VHOST_NET_RESOURCE");
	set("COMPANIONS", "vhost-vsock,vhost-net");
	set("VHOST_VSOCK_RESOURCE", "vhost-net");
	load_error("vhost-net and vhost-vsock are both advertised as hyperlight.dev/vhost-net: give them "
		   "different VHOST_NET_RESOURCE and VHOST_VSOCK_RESOURCE");
	/* the same name is fine when the other companion is not listed */
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512];
	size_t n;
	set("COMPANIONS", "tun");
	set("TUN_RESOURCE", "vhost-net");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 1);
	expect_entry(&c[0], "tun", "hyperlight.dev/vhost-net", 2000);
}

/* ---------------------------------------------------------------- hl_companion_cdi_file */

static void cdi_file(void **state)
{
	(void)state;
	struct hl_companion c[HL_COMPANION_TYPES];
	char err[512], file[128];
	size_t n;
	set("COMPANIONS", "tun,vhost-net,vhost-vsock");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	hl_companion_cdi_file(&c[0], file, sizeof(file));
	assert_string_equal(file, "hyperlight-tun.json");
	hl_companion_cdi_file(&c[1], file, sizeof(file));
	assert_string_equal(file, "hyperlight-vhost-net.json");
	hl_companion_cdi_file(&c[2], file, sizeof(file));
	assert_string_equal(file, "hyperlight-vhost-vsock.json");
	/* named after the resource, not the device */
	set("TUN_RESOURCE", "tap");
	assert_int_equal(load(c, &n, err, sizeof(err)), 0);
	hl_companion_cdi_file(&c[0], file, sizeof(file));
	assert_string_equal(file, "hyperlight-tap.json");
	/* a small buffer: cut, NUL-terminated */
	memset(file, 'x', sizeof(file));
	hl_companion_cdi_file(&c[0], file, 8);
	assert_string_equal(file, "hyperli");
	assert_int_equal(file[8], 'x');
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, clean_env, clean_env)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(parse_valid),	       T(parse_none),	      T(parse_invalid),	  T(parse_small_buffer),
		T(check_name_valid),   T(check_name_invalid), T(types_table),	  T(load_unset),
		T(load_defaults),      T(load_renamed),	      T(load_bad_count),  T(load_bad_resource),
		T(load_same_resource), T(cdi_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
