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

#include "companion.h"
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

/* A companion's spec (hl_spec_render_companion): no "env", kind its resource. */
static const char tun_default[] = "{\n"
				  "  \"cdiVersion\": \"0.3.0\",\n"
				  "  \"kind\": \"hyperlight.dev/tun\",\n"
				  "  \"devices\": [\n"
				  "    {\n"
				  "      \"name\": \"tun\",\n"
				  "      \"containerEdits\": {\n"
				  "        \"deviceNodes\": [\n"
				  "          {\n"
				  "            \"path\": \"/dev/net/tun\",\n"
				  "            \"type\": \"c\",\n"
				  "            \"permissions\": \"rw\",\n"
				  "            \"fileMode\": 432,\n"
				  "            \"uid\": 65534,\n"
				  "            \"gid\": 65534\n"
				  "          }\n"
				  "        ]\n"
				  "      }\n"
				  "    }\n"
				  "  ]\n"
				  "}\n";

/* VHOST_VSOCK_RESOURCE=vsock-2, another owner and mode: the kind follows the resource, the
 * device keeps the companion's name and node (the workload asks for
 * hyperlight.dev/vsock-2=vhost-vsock). */
static const char vsock_renamed[] = "{\n"
				    "  \"cdiVersion\": \"0.3.0\",\n"
				    "  \"kind\": \"hyperlight.dev/vsock-2\",\n"
				    "  \"devices\": [\n"
				    "    {\n"
				    "      \"name\": \"vhost-vsock\",\n"
				    "      \"containerEdits\": {\n"
				    "        \"deviceNodes\": [\n"
				    "          {\n"
				    "            \"path\": \"/dev/vhost-vsock\",\n"
				    "            \"type\": \"c\",\n"
				    "            \"permissions\": \"rw\",\n"
				    "            \"fileMode\": 384,\n"
				    "            \"uid\": 1000,\n"
				    "            \"gid\": 1001\n"
				    "          }\n"
				    "        ]\n"
				    "      }\n"
				    "    }\n"
				    "  ]\n"
				    "}\n";

static struct hl_companion companion(const char *name, const char *resource)
{
	struct hl_companion c = { .type = hl_companion_type(name), .count = HL_COMPANION_DEFAULT_COUNT };
	assert_non_null(c.type);
	snprintf(c.resource, sizeof(c.resource), "%s", resource);
	return c;
}

static void render_companion(const struct hl_companion *c, uint32_t uid, uint32_t gid, uint32_t mode, char *out,
			     size_t size)
{
	dp_buf b = { 0 };
	hl_spec_render_companion(c, uid, gid, mode, &b);
	assert_false(b.oom);
	assert_true(b.len < size);
	memcpy(out, b.data, b.len);
	out[b.len] = '\0';
	dp_buf_done(&b);
}

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

static void companion_exact_bytes(void **state)
{
	(void)state;
	char out[4096];
	struct hl_companion tun = companion("tun", "hyperlight.dev/tun");
	struct hl_companion vsock = companion("vhost-vsock", "hyperlight.dev/vsock-2");
	render_companion(&tun, HL_DEFAULT_ID, HL_DEFAULT_ID, HL_DEFAULT_MODE, out, sizeof(out));
	assert_string_equal(out, tun_default);
	render_companion(&vsock, 1000, 1001, 0600, out, sizeof(out));
	assert_string_equal(out, vsock_renamed);
	/* renamed tun: only the kind moves */
	char want[4096];
	struct hl_companion tap = companion("tun", "hyperlight.dev/tap");
	render_companion(&tap, HL_DEFAULT_ID, HL_DEFAULT_ID, HL_DEFAULT_MODE, out, sizeof(out));
	const char *at = strstr(tun_default, "hyperlight.dev/tun");
	assert_non_null(at);
	snprintf(want, sizeof(want), "%.*shyperlight.dev/tap%s", (int)(at - tun_default), tun_default,
		 at + strlen("hyperlight.dev/tun"));
	assert_string_equal(out, want);
	/* the hypervisor's spec beside it is what it was (exact_bytes has its full bytes) */
	struct hl_device kvm = dev("kvm", "/dev/kvm");
	render(&kvm, HL_DEFAULT_ID, HL_DEFAULT_ID, HL_DEFAULT_MODE, out, sizeof(out));
	assert_string_equal(out, kvm_default);
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

/* The spec in b (freed here) as a Python program reads it: written to a file, the program run
 * with the file as sys.argv[1], its output into out. */
static void python_reads(dp_buf *b, const char *program, char *out, size_t size)
{
	char dir[128], path[256], cmd[2048];
	assert_int_equal(dpt_tmpdir(dir, sizeof(dir), "hl-spec"), 0);
	snprintf(path, sizeof(path), "%s/spec.json", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
	assert_int_equal(fclose(f), 0);
	dp_buf_done(b);
	snprintf(cmd, sizeof(cmd), "python3 -c '%s' %s", program, path);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t got = fread(out, 1, size - 1, p);
	out[got] = '\0';
	assert_int_equal(pclose(p), 0);
	assert_int_equal(dpt_rmtree(dir), 0);
}

/* As a JSON parser (Python's json, as strict as Go's about numbers) reads it: fileMode an integer
 * whose octal form is the mode, beside the owner. */
static void parses_as_json(void **state)
{
	(void)state;
	char out[256] = "";
	struct hl_device kvm = dev("kvm", "/dev/kvm");
	dp_buf b = { 0 };
	hl_spec_render(&kvm, 1000, 1001, 0660, &b);
	python_reads(&b,
		     "import json, sys\n"
		     "n = json.load(open(sys.argv[1]))[\"devices\"][0][\"containerEdits\"][\"deviceNodes\"][0]\n"
		     "assert type(n[\"fileMode\"]) is int\n"
		     "print(sorted(n), oct(n[\"fileMode\"]), n[\"uid\"], n[\"gid\"])",
		     out, sizeof(out));
	assert_string_equal(out, "['fileMode', 'gid', 'path', 'permissions', 'type', 'uid'] 0o660 1000 1001\n");
}

/* A companion's spec as a JSON parser reads it: kind, the one device's name, its node with the
 * owner and fileMode, and no env at all. */
static void companion_parses_as_json(void **state)
{
	(void)state;
	char out[512] = "";
	struct hl_companion tap = companion("tun", "hyperlight.dev/tap");
	dp_buf b = { 0 };
	hl_spec_render_companion(&tap, 1000, 1001, 0660, &b);
	python_reads(&b,
		     "import json, sys\n"
		     "s = json.load(open(sys.argv[1]))\n"
		     "assert len(s[\"devices\"]) == 1\n"
		     "d = s[\"devices\"][0]\n"
		     "e = d[\"containerEdits\"]\n"
		     "n = e[\"deviceNodes\"][0]\n"
		     "assert type(n[\"fileMode\"]) is int\n"
		     "print(s[\"cdiVersion\"], s[\"kind\"], d[\"name\"], sorted(e), n[\"path\"], n[\"type\"], "
		     "n[\"permissions\"], oct(n[\"fileMode\"]), n[\"uid\"], n[\"gid\"])",
		     out, sizeof(out));
	assert_string_equal(out, "0.3.0 hyperlight.dev/tap tun ['deviceNodes'] /dev/net/tun c rw 0o660 1000 1001\n");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(exact_bytes),
		cmocka_unit_test(file_mode_values),
		cmocka_unit_test(parses_as_json),
		cmocka_unit_test(companion_exact_bytes),
		cmocka_unit_test(companion_parses_as_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
