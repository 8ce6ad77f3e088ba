/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hyperlight's environment (config.c): DEVICE_MODE, the device node's permission bits in the
 * workload (the spec's fileMode). Valid: 3 or 4 octal digits, at most 0777; anything else keeps
 * the default 0660 with one warning, as an invalid DEVICE_UID/DEVICE_GID does.
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
#include <unistd.h>

#include "config.h"
#include "dp/log.h"
#include "dp_test.h"

static const char *const vars[] = { "DEVICE_COUNT", "DEVICE_UID", "DEVICE_GID", "DEVICE_MODE", "HOST_DEVICE_DIR",
				    "PLUGIN_API", "COMPANIONS", "TUN_RESOURCE", "TUN_COUNT", "VHOST_NET_RESOURCE",
				    "VHOST_NET_COUNT", "VHOST_VSOCK_RESOURCE", "VHOST_VSOCK_COUNT" };

static int clean_env(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	return 0;
}

/* hl_config_load with the log captured: its return value, the config, the log in log. */
static int load(struct hl_config *c, char *log, size_t size)
{
	struct dpt_capture cap;
	char err[512] = "";
	dpt_capture_start(&cap, STDERR_FILENO);
	int r = hl_config_load(c, err, sizeof(err));
	snprintf(log, size, "%s", dpt_capture_end(&cap));
	return r;
}

static void mode_default(void **state)
{
	(void)state;
	struct hl_config c;
	char log[4096];
	assert_int_equal(load(&c, log, sizeof(log)), 0);
	assert_int_equal(c.mode, 0660);
	assert_int_equal(c.uid, 65534);
	assert_int_equal(c.gid, 65534);
	assert_string_equal(log, "");
}

static void mode_valid(void **state)
{
	(void)state;
	static const struct {
		const char *value;
		uint32_t mode;
	} cases[] = {
		{ "660", 0660 },  { "0660", 0660 }, { "0600", 0600 }, { "600", 0600 }, { "0666", 0666 },
		{ "666", 0666 },  { "0640", 0640 }, { "0777", 0777 }, { "777", 0777 }, { "000", 0 },
		{ "0000", 0 },    { "0066", 066 },  { "432", 0432 }, /* octal, never decimal */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hl_config c;
		char log[4096];
		setenv("DEVICE_MODE", cases[i].value, 1);
		assert_int_equal(load(&c, log, sizeof(log)), 0);
		if (c.mode != cases[i].mode)
			fail_msg("DEVICE_MODE=%s: mode 0%o, want 0%o", cases[i].value, c.mode, cases[i].mode);
		assert_string_equal(log, "");
		/* The parser alone. */
		uint32_t m = 12345;
		char err[256] = "untouched";
		assert_int_equal(hl_parse_mode("DEVICE_MODE", cases[i].value, &m, err, sizeof(err)), 0);
		assert_int_equal(m, cases[i].mode);
		assert_string_equal(err, "untouched");
	}
}

/* Each kind of invalid value: the parser's error and return, and hl_config_load's single warning
 * (the msg and default of an invalid DEVICE_UID's), the default kept, the daemon not stopped. */
static void mode_invalid(void **state)
{
	(void)state;
	static const struct {
		const char *value;
		int r;
		const char *error; /* as logged: logfmt-quoted */
	} cases[] = {
		/* empty, as an empty DEVICE_UID */
		{ "", -EINVAL, "\"DEVICE_MODE=\\\"\\\" is not an octal mode of 3 or 4 digits\"" },
		/* too few or too many digits */
		{ "66", -EINVAL, "\"DEVICE_MODE=\\\"66\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "6", -EINVAL, "\"DEVICE_MODE=\\\"6\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "00660", -EINVAL, "\"DEVICE_MODE=\\\"00660\\\" is not an octal mode of 3 or 4 digits\"" },
		/* not octal digits */
		{ "680", -EINVAL, "\"DEVICE_MODE=\\\"680\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "0669", -EINVAL, "\"DEVICE_MODE=\\\"0669\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "0o660", -EINVAL, "\"DEVICE_MODE=\\\"0o660\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "0x1b0", -EINVAL, "\"DEVICE_MODE=\\\"0x1b0\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "rw-rw----", -EINVAL, "\"DEVICE_MODE=\\\"rw-rw----\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "ug=rw", -EINVAL, "\"DEVICE_MODE=\\\"ug=rw\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "+660", -EINVAL, "\"DEVICE_MODE=\\\"+660\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "-660", -EINVAL, "\"DEVICE_MODE=\\\"-660\\\" is not an octal mode of 3 or 4 digits\"" },
		{ " 660", -EINVAL, "\"DEVICE_MODE=\\\" 660\\\" is not an octal mode of 3 or 4 digits\"" },
		{ "660\n", -EINVAL, "\"DEVICE_MODE=\\\"660\\\\n\\\" is not an octal mode of 3 or 4 digits\"" },
		/* setuid, setgid, sticky: above 0777 */
		{ "4660", -ERANGE, "\"DEVICE_MODE=4660 is out of range 0000..0777 (no setuid, setgid or sticky bit)\"" },
		{ "2660", -ERANGE, "\"DEVICE_MODE=2660 is out of range 0000..0777 (no setuid, setgid or sticky bit)\"" },
		{ "1666", -ERANGE, "\"DEVICE_MODE=1666 is out of range 0000..0777 (no setuid, setgid or sticky bit)\"" },
		{ "7777", -ERANGE, "\"DEVICE_MODE=7777 is out of range 0000..0777 (no setuid, setgid or sticky bit)\"" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hl_config c;
		char log[4096], want[1024];
		setenv("DEVICE_MODE", cases[i].value, 1);
		assert_int_equal(load(&c, log, sizeof(log)), 0);
		assert_int_equal(c.mode, 0660);
		assert_int_equal(c.uid, 65534);
		assert_int_equal(c.gid, 65534);
		snprintf(want, sizeof(want),
			 " level=warn msg=\"invalid value ignored, default kept\" error=%s default=0660\n",
			 cases[i].error);
		const char *line = strstr(log, " level=");
		if (!line || strcmp(line, want) != 0 || dpt_count(log, "\n") != 1 || strncmp(log, "time=", 5) != 0)
			fail_msg("DEVICE_MODE=\"%s\": log\n%s\nwant one line ending\n%s", cases[i].value, log, want);
		/* The parser alone: *ret untouched. */
		uint32_t m = 12345;
		char err[256];
		assert_int_equal(hl_parse_mode("DEVICE_MODE", cases[i].value, &m, err, sizeof(err)), cases[i].r);
		assert_int_equal(m, 12345);
	}
}

/* A value too long to show is cut, and the message stays one line. */
static void mode_long_value(void **state)
{
	(void)state;
	struct hl_config c;
	char value[200], log[4096];
	memset(value, '6', sizeof(value) - 1);
	value[sizeof(value) - 1] = '\0';
	setenv("DEVICE_MODE", value, 1);
	assert_int_equal(load(&c, log, sizeof(log)), 0);
	assert_int_equal(c.mode, 0660);
	assert_int_equal(dpt_count(log, "\n"), 1);
	assert_non_null(strstr(log, "66...\\\" is not an octal mode of 3 or 4 digits\" default=0660\n"));
}

/* DEVICE_MODE beside DEVICE_UID/DEVICE_GID: each read on its own, each invalid one warned once. */
static void mode_with_owner(void **state)
{
	(void)state;
	struct hl_config c;
	char log[4096];
	setenv("DEVICE_UID", "1000", 1);
	setenv("DEVICE_GID", "1001", 1);
	setenv("DEVICE_MODE", "0600", 1);
	assert_int_equal(load(&c, log, sizeof(log)), 0);
	assert_int_equal(c.uid, 1000);
	assert_int_equal(c.gid, 1001);
	assert_int_equal(c.mode, 0600);
	assert_string_equal(log, "");

	setenv("DEVICE_UID", "abc", 1);
	setenv("DEVICE_MODE", "4660", 1);
	assert_int_equal(load(&c, log, sizeof(log)), 0);
	assert_int_equal(c.uid, 65534);
	assert_int_equal(c.gid, 1001);
	assert_int_equal(c.mode, 0660);
	assert_int_equal(dpt_count(log, "\n"), 2);
	assert_int_equal(dpt_count(log, "msg=\"invalid value ignored, default kept\""), 2);
	assert_int_equal(dpt_count(log, "error=\"DEVICE_UID=\\\"abc\\\" is not a decimal integer\" default=65534\n"), 1);
	assert_int_equal(dpt_count(log, "error=\"DEVICE_MODE=4660 is out of range"), 1);
}

/* hl_config_load with its error message: the return value; err holds the message. */
static int load_err(struct hl_config *c, char *err, size_t size)
{
	struct dpt_capture cap;
	err[0] = '\0';
	dpt_capture_start(&cap, STDERR_FILENO);
	int r = hl_config_load(c, err, size);
	const char *log = dpt_capture_end(&cap);
	if (*log)
		fail_msg("unexpected log: %s", log);
	return r;
}

/* No COMPANIONS: none, the hypervisor alone (what every existing deployment gets). */
static void companions_default(void **state)
{
	(void)state;
	struct hl_config c;
	char err[512];
	assert_int_equal(load_err(&c, err, sizeof(err)), 0);
	assert_int_equal(c.n_companions, 0);
	setenv("COMPANIONS", "", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), 0);
	assert_int_equal(c.n_companions, 0);
}

static void companions_valid(void **state)
{
	(void)state;
	struct hl_config c;
	char err[512];
	setenv("COMPANIONS", "vhost-vsock,tun", 1);
	setenv("TUN_RESOURCE", "tap", 1);
	setenv("VHOST_VSOCK_COUNT", "16", 1);
	setenv("DEVICE_COUNT", "7", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), 0);
	assert_int_equal(c.device_count, 7);
	assert_false(c.dra);
	assert_int_equal(c.n_companions, 2);
	assert_string_equal(c.companions[0].type->name, "tun");
	assert_string_equal(c.companions[0].resource, "hyperlight.dev/tap");
	assert_int_equal(c.companions[0].count, 2000);
	assert_string_equal(c.companions[1].type->name, "vhost-vsock");
	assert_string_equal(c.companions[1].resource, "hyperlight.dev/vhost-vsock");
	assert_int_equal(c.companions[1].count, 16);
	/* explicitly the device-plugin API: the same */
	setenv("PLUGIN_API", "device-plugin", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), 0);
	assert_int_equal(c.n_companions, 2);
}

/* An invalid COMPANIONS (or a companion's variable) stops the daemon: an error, not a warning. */
static void companions_invalid(void **state)
{
	(void)state;
	struct hl_config c;
	char err[512];
	c.n_companions = 99;
	setenv("COMPANIONS", "tun,tap", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "COMPANIONS: \"tap\" is not a companion device (valid: tun, vhost-net, vhost-vsock)");
	assert_int_equal(c.n_companions, 99); /* untouched */
	setenv("COMPANIONS", "tun", 1);
	setenv("TUN_COUNT", "0", 1);
	assert_true(load_err(&c, err, sizeof(err)) < 0);
	assert_non_null(strstr(err, "TUN_COUNT=0 is out of range 1.."));
	assert_int_equal(c.n_companions, 99);
}

/* Companions are device-plugin resources only: with PLUGIN_API=dra the daemon refuses to start
 * rather than serve half of what was asked. */
static void companions_with_dra(void **state)
{
	(void)state;
	struct hl_config c;
	char err[512];
	setenv("PLUGIN_API", "dra", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), 0); /* DRA alone is fine */
	assert_true(c.dra);
	assert_int_equal(c.n_companions, 0);
	c.n_companions = 99;
	setenv("COMPANIONS", "tun", 1);
	assert_int_equal(load_err(&c, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "COMPANIONS is served through the device-plugin API only, not with PLUGIN_API=dra: "
				 "unset one of them");
	assert_int_equal(c.n_companions, 99);
	setenv("COMPANIONS", " ", 1); /* blank: none, so DRA is fine */
	assert_int_equal(load_err(&c, err, sizeof(err)), 0);
	assert_int_equal(c.n_companions, 0);
}

int main(void)
{
	dp_log_set_level(DP_LOG_INFO);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(mode_default, clean_env),
		cmocka_unit_test_setup(mode_valid, clean_env),
		cmocka_unit_test_setup(mode_invalid, clean_env),
		cmocka_unit_test_setup(mode_long_value, clean_env),
		cmocka_unit_test_setup(mode_with_owner, clean_env),
		cmocka_unit_test_setup(companions_default, clean_env),
		cmocka_unit_test_setup(companions_valid, clean_env),
		cmocka_unit_test_setup(companions_invalid, clean_env),
		cmocka_unit_test_setup(companions_with_dra, clean_env),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
