/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dp/paths.h"

static void set_root(const char *v)
{
	if (v)
		setenv(DP_TEST_ROOT_ENV, v, 1);
	else
		unsetenv(DP_TEST_ROOT_ENV);
	dp_paths_reset();
}

static int teardown(void **state)
{
	set_root(NULL);
	return 0;
}

static void test_production_root(void **state)
{
	char buf[PATH_MAX];

	set_root(NULL);
	assert_string_equal(dp_root(), "");
	assert_int_equal(dp_path(buf, sizeof(buf), DP_KUBELET_DIR), 0);
	assert_string_equal(buf, "/var/lib/kubelet/device-plugins");

	set_root(""); /* empty counts as unset */
	assert_string_equal(dp_root(), "");
	assert_int_equal(dp_path(buf, sizeof(buf), "/dev/kvm"), 0);
	assert_string_equal(buf, "/dev/kvm");

	set_root("/"); /* the real root, spelled out */
	assert_string_equal(dp_root(), "");
	assert_int_equal(dp_path(buf, sizeof(buf), "/dev/kvm"), 0);
	assert_string_equal(buf, "/dev/kvm");
}

static void test_test_root(void **state)
{
	char buf[PATH_MAX];

	set_root("/tmp/sdp-root");
	assert_string_equal(dp_root(), "/tmp/sdp-root");
	assert_int_equal(dp_path(buf, sizeof(buf), DP_CDI_DIR), 0);
	assert_string_equal(buf, "/tmp/sdp-root/var/run/cdi");

	set_root("/tmp/sdp-root//"); /* trailing slashes stripped */
	assert_string_equal(dp_root(), "/tmp/sdp-root");
	assert_int_equal(dp_path(buf, sizeof(buf), "/sys/bus/pci"), 0);
	assert_string_equal(buf, "/tmp/sdp-root/sys/bus/pci");
}

static void test_cached_until_reset(void **state)
{
	set_root("/tmp/a");
	assert_string_equal(dp_root(), "/tmp/a");
	setenv(DP_TEST_ROOT_ENV, "/tmp/b", 1);
	assert_string_equal(dp_root(), "/tmp/a"); /* read once */
	dp_paths_reset();
	assert_string_equal(dp_root(), "/tmp/b");
}

static void test_relative_root_refused(void **state)
{
	char buf[64] = "untouched";

	set_root("tmp/relative");
	assert_string_equal(dp_root(), "");
	assert_int_equal(dp_path(buf, sizeof(buf), "/dev/kvm"), -EINVAL);
	assert_string_equal(buf, "untouched");
	set_root("./x");
	assert_int_equal(dp_path(buf, sizeof(buf), "/dev/kvm"), -EINVAL);
	assert_string_equal(buf, "untouched");
}

static void test_too_long_root(void **state)
{
	static char longroot[PATH_MAX + 10];
	char buf[64];

	memset(longroot, 'r', sizeof(longroot) - 1);
	longroot[0] = '/';
	longroot[sizeof(longroot) - 1] = '\0';
	set_root(longroot);
	assert_int_equal(dp_path(buf, sizeof(buf), "/dev"), -ENAMETOOLONG);
}

static void test_bad_arguments(void **state)
{
	char buf[20] = "untouched";

	set_root("/tmp/root");
	assert_int_equal(dp_path(buf, sizeof(buf), "dev/kvm"), -EINVAL);
	assert_int_equal(dp_path(buf, sizeof(buf), ""), -EINVAL);
	assert_int_equal(dp_path(buf, sizeof(buf), NULL), -EINVAL);
	assert_string_equal(buf, "untouched");

	/* "/tmp/root" + "/dev/kvm" = 17 bytes + NUL: fits in 18, not in 17. */
	assert_int_equal(dp_path(buf, 17, "/dev/kvm"), -ENAMETOOLONG);
	assert_string_equal(buf, "untouched");
	assert_int_equal(dp_path(buf, 18, "/dev/kvm"), 0);
	assert_string_equal(buf, "/tmp/root/dev/kvm");
	assert_int_equal(dp_path(buf, 0, "/dev/kvm"), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_production_root, teardown),
		cmocka_unit_test_teardown(test_test_root, teardown),
		cmocka_unit_test_teardown(test_cached_until_reset, teardown),
		cmocka_unit_test_teardown(test_relative_root_refused, teardown),
		cmocka_unit_test_teardown(test_too_long_root, teardown),
		cmocka_unit_test_teardown(test_bad_arguments, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
