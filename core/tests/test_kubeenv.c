/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kubeenv: what a daemon reads of its pod's environment to reach the API server: each thing
 * missing says "not in a cluster" (1) and names it, each invalid value says "invalid" (2) and
 * names it, nothing is written then; a complete environment gives the node, the API server's
 * base URL (an IPv6 host bracketed) and the service account's files under the test root.
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
#include <sys/stat.h>

#include "dp/kubeenv.h"
#include "dp/paths.h"
#include "dp_test.h"

static char root[128];

static void write_file(const char *rel)
{
	char p[512];
	snprintf(p, sizeof(p), "%s%s", root, rel);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs("x\n", f);
	fclose(f);
}

static int setup(void **state)
{
	char d[512];
	assert_int_equal(dpt_tmpdir(root, sizeof(root), "kubeenv"), 0);
	snprintf(d, sizeof(d), "mkdir -p %s%s", root, DP_KUBE_SA_DIR);
	assert_int_equal(system(d), 0);
	write_file(DP_KUBE_SA_DIR "/token");
	write_file(DP_KUBE_SA_DIR "/ca.crt");
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	setenv("NODE_NAME", "node-a.example", 1);
	setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "443", 1);
	return 0;
}

static int teardown(void **state)
{
	unsetenv(DP_TEST_ROOT_ENV);
	dp_paths_reset();
	dpt_rmtree(root);
	return 0;
}

/* dp_kubeenv_load's result; on non-zero *e untouched and why holds needle */
static int load(dp_kubeenv *e, const char *needle)
{
	char why[256] = "";
	memset(e, 0x5a, sizeof(*e));
	int r = dp_kubeenv_load(e, why, sizeof(why));
	if (r != 0) {
		assert_int_equal(((unsigned char *)e)[0], 0x5a);
		if (needle && !strstr(why, needle))
			fail_msg("why \"%s\" lacks \"%s\"", why, needle);
	}
	return r;
}

static void test_complete(void **state)
{
	dp_kubeenv e;
	char want[512];
	assert_int_equal(load(&e, NULL), 0);
	assert_string_equal(e.node, "node-a.example");
	assert_string_equal(e.api, "https://10.96.0.1:443");
	snprintf(want, sizeof(want), "%s%s/token", root, DP_KUBE_SA_DIR);
	assert_string_equal(e.token_path, want);
	snprintf(want, sizeof(want), "%s%s/ca.crt", root, DP_KUBE_SA_DIR);
	assert_string_equal(e.ca_path, want);
	setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
	setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
	assert_int_equal(load(&e, NULL), 0);
	assert_string_equal(e.api, "https://[fd00::1]:6443");
}

static void test_not_in_cluster(void **state)
{
	dp_kubeenv e;
	char p[512];
	unsetenv("NODE_NAME");
	assert_int_equal(load(&e, "NODE_NAME is not set"), 1);
	setenv("NODE_NAME", "", 1);
	assert_int_equal(load(&e, "NODE_NAME is not set"), 1);
	setenv("NODE_NAME", "n", 1);
	unsetenv("KUBERNETES_SERVICE_PORT");
	assert_int_equal(load(&e, "KUBERNETES_SERVICE_PORT is not set"), 1);
	setenv("KUBERNETES_SERVICE_PORT", "443", 1);
	snprintf(p, sizeof(p), "%s%s/ca.crt", root, DP_KUBE_SA_DIR);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(load(&e, "ca.crt missing"), 1);
	assert_int_equal(mkdir(p, 0700), 0); /* not a regular file */
	assert_int_equal(load(&e, "ca.crt missing"), 1);
}

static void test_invalid(void **state)
{
	dp_kubeenv e;
	const char *nodes[] = { "Node-A", "-a", "a..b", "a_b", "a/b" };
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		setenv("NODE_NAME", nodes[i], 1);
		assert_int_equal(load(&e, "NODE_NAME is not a valid node name"), 2);
	}
	setenv("NODE_NAME", "n", 1);
	setenv("KUBERNETES_SERVICE_HOST", "a b", 1);
	assert_int_equal(load(&e, "KUBERNETES_SERVICE_HOST is not"), 2);
	setenv("KUBERNETES_SERVICE_HOST", "api.local", 1);
	const char *ports[] = { "0", "65536", "08", "x", "123456" };
	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		setenv("KUBERNETES_SERVICE_PORT", ports[i], 1);
		assert_int_equal(load(&e, "KUBERNETES_SERVICE_PORT is not a port"), 2);
	}
}

static void test_dns_names(void **state)
{
	char long_label[65], long_name[256];
	memset(long_label, 'a', 64);
	long_label[64] = '\0';
	memset(long_name, 'a', 255);
	long_name[255] = '\0';
	for (int i = 63; i < 255; i += 64)
		long_name[i] = '.';
	assert_true(dp_kube_dns_label("gpu-0"));
	assert_false(dp_kube_dns_label("gpu.0"));
	assert_false(dp_kube_dns_label(long_label));
	long_label[63] = '\0';
	assert_true(dp_kube_dns_label(long_label));
	assert_false(dp_kube_dns_label(""));
	assert_false(dp_kube_dns_label(NULL));
	assert_true(dp_kube_dns_subdomain("kata.sandbox.dev"));
	assert_false(dp_kube_dns_subdomain(long_name)); /* 255 bytes */
	long_name[253] = '\0';
	assert_true(dp_kube_dns_subdomain(long_name));
	assert_false(dp_kube_dns_subdomain("a-.b"));
	assert_true(dp_kube_uid("4c4f7717-0afc-4c3b-bb4b-90c3c807c89f", 128));
	assert_false(dp_kube_uid("", 128));
	assert_false(dp_kube_uid(NULL, 128));
	assert_false(dp_kube_uid("../x", 128));
	assert_false(dp_kube_uid("a b", 128));
	assert_false(dp_kube_uid("abcd", 3));
	assert_true(dp_kube_uid("abc", 3));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_complete, setup, teardown),
		cmocka_unit_test_setup_teardown(test_not_in_cluster, setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid, setup, teardown),
		cmocka_unit_test(test_dns_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
