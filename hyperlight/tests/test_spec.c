/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hyperlight's CDI spec (spec.c) to its exact bytes: the device node's owner (DEVICE_UID,
 * DEVICE_GID) and its permission bits (DEVICE_MODE) as "fileMode", a decimal number as Go's
 * os.FileMode marshals (0660 is 432), with cdiVersion 0.3.0 (fileMode needs nothing newer). And
 * the spec as a JSON parser reads it: fileMode a number whose octal value is the mode.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "detect.h"
#include "dp_test.h"
#include "spec.h"

static const char kvm_default[] = "{\n"
				  "  \"cdiVersion\": \"0.3.0\",\n"
				  "  \"kind\": \"hyperlight.dev/hypervisor\",\n"
				  "  \"devices\": [\n"
				  "    {\n"
				  "      \"name\": \"kvm\",\n"
				  "      \"containerEdits\": {\n"
				  "        \"deviceNodes\": [\n"
				  "          {\n"
				  "            \"path\": \"/dev/kvm\",\n"
				  "            \"type\": \"c\",\n"
				  "            \"permissions\": \"rw\",\n"
				  "            \"fileMode\": 432,\n"
				  "            \"uid\": 65534,\n"
				  "            \"gid\": 65534\n"
				  "          }\n"
				  "        ],\n"
				  "        \"env\": [\n"
				  "          \"HYPERLIGHT_HYPERVISOR=kvm\",\n"
				  "          \"HYPERLIGHT_DEVICE_PATH=/dev/kvm\"\n"
				  "        ]\n"
				  "      }\n"
				  "    }\n"
				  "  ]\n"
				  "}\n";

static const char mshv_other[] = "{\n"
				 "  \"cdiVersion\": \"0.3.0\",\n"
				 "  \"kind\": \"hyperlight.dev/hypervisor\",\n"
				 "  \"devices\": [\n"
				 "    {\n"
				 "      \"name\": \"mshv\",\n"
				 "      \"containerEdits\": {\n"
				 "        \"deviceNodes\": [\n"
				 "          {\n"
				 "            \"path\": \"/dev/mshv\",\n"
				 "            \"type\": \"c\",\n"
				 "            \"permissions\": \"rw\",\n"
				 "            \"fileMode\": 384,\n"
				 "            \"uid\": 1000,\n"
				 "            \"gid\": 4294967295\n"
				 "          }\n"
				 "        ],\n"
				 "        \"env\": [\n"
				 "          \"HYPERLIGHT_HYPERVISOR=mshv\",\n"
				 "          \"HYPERLIGHT_DEVICE_PATH=/dev/mshv\"\n"
				 "        ]\n"
				 "      }\n"
				 "    }\n"
				 "  ]\n"
				 "}\n";

static struct hl_device dev(const char *name, const char *path)
{
	struct hl_device d = { .name = name, .path = path };
	return d;
}

static void render(const struct hl_device *d, uint32_t uid, uint32_t gid, uint32_t mode, char *out, size_t size)
{
	dp_buf b = { 0 };
	hl_spec_render(d, uid, gid, mode, &b);
	assert_false(b.oom);
	assert_true(b.len < size);
	memcpy(out, b.data, b.len);
	out[b.len] = '\0';
	dp_buf_done(&b);
}

static void exact_bytes(void **state)
{
	(void)state;
	char out[4096];
	struct hl_device kvm = dev("kvm", "/dev/kvm"), mshv = dev("mshv", "/dev/mshv");
	render(&kvm, HL_DEFAULT_ID, HL_DEFAULT_ID, HL_DEFAULT_MODE, out, sizeof(out));
	assert_string_equal(out, kvm_default);
	render(&mshv, 1000, UINT32_MAX, 0600, out, sizeof(out));
	assert_string_equal(out, mshv_other);
}

/* Every valid mode is its decimal number, and nothing else in the spec moves. */
static void file_mode_values(void **state)
{
	(void)state;
	static const struct {
		uint32_t mode;
		const char *line;
	} cases[] = {
		{ 0660, "\"fileMode\": 432,\n" }, { 0600, "\"fileMode\": 384,\n" }, { 0666, "\"fileMode\": 438,\n" },
		{ 0640, "\"fileMode\": 416,\n" }, { 0777, "\"fileMode\": 511,\n" }, { 0, "\"fileMode\": 0,\n" },
	};
	struct hl_device kvm = dev("kvm", "/dev/kvm");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[4096], want[4096];
		render(&kvm, HL_DEFAULT_ID, HL_DEFAULT_ID, cases[i].mode, out, sizeof(out));
		const char *at = strstr(kvm_default, "\"fileMode\": 432,\n");
		assert_non_null(at);
		snprintf(want, sizeof(want), "%.*s%s%s", (int)(at - kvm_default), kvm_default, cases[i].line,
			 at + strlen("\"fileMode\": 432,\n"));
		assert_string_equal(out, want);
	}
}

/* As a JSON parser (Python's json, as strict as Go's about numbers) reads it: fileMode an integer
 * whose octal form is the mode, beside the owner. */
static void parses_as_json(void **state)
{
	(void)state;
	char dir[128], path[256], cmd[1024], out[256] = "";
	struct hl_device kvm = dev("kvm", "/dev/kvm");
	dp_buf b = { 0 };
	assert_int_equal(dpt_tmpdir(dir, sizeof(dir), "hl-spec"), 0);
	snprintf(path, sizeof(path), "%s/hyperlight.json", dir);
	hl_spec_render(&kvm, 1000, 1001, 0660, &b);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
	assert_int_equal(fclose(f), 0);
	dp_buf_done(&b);
	snprintf(cmd, sizeof(cmd),
		 "python3 -c 'import json, sys\n"
		 "n = json.load(open(sys.argv[1]))[\"devices\"][0][\"containerEdits\"][\"deviceNodes\"][0]\n"
		 "assert type(n[\"fileMode\"]) is int\n"
		 "print(sorted(n), oct(n[\"fileMode\"]), n[\"uid\"], n[\"gid\"])' %s",
		 path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_string_equal(out, "['fileMode', 'gid', 'path', 'permissions', 'type', 'uid'] 0o660 1000 1001\n");
	assert_int_equal(dpt_rmtree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exact_bytes),
		cmocka_unit_test(file_mode_values),
		cmocka_unit_test(parses_as_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
