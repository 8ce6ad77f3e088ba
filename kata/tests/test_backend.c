/* SPDX-License-Identifier: Apache-2.0 */
/* VFIO_BACKEND (backend.c): the setting's values, and what auto chooses from the node's
 * /dev/vfio/devices under SDP_TEST_ROOT, with the reason the start log gives. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "dp/macro.h"
#include "dp/paths.h"
#include "dp_test.h"

static char root[64];

static const char *at(const char *rel)
{
	static char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	return p;
}

static int setup(void **state)
{
	(void)state;
	if (dpt_tmpdir(root, sizeof(root), "test_backend") < 0)
		return -1;
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	unsetenv(KATA_BACKEND_ENV);
	return mkdir(at("dev"), 0755) < 0 || mkdir(at("dev/vfio"), 0755) < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	unsetenv(KATA_BACKEND_ENV);
	return dpt_rmtree(root);
}

static void setting_values(void **state)
{
	(void)state;
	enum kata_backend_setting set = KATA_BACKEND_SET_LEGACY;
	char err[128];
	assert_int_equal(kata_backend_from_env(&set, err, sizeof(err)), 0); /* unset: auto */
	assert_int_equal(set, KATA_BACKEND_AUTO);
	static const char *const bad[] = { "", "Legacy", "both", "iommufd ", "vfio" };
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		setenv(KATA_BACKEND_ENV, bad[i], 1);
		set = KATA_BACKEND_SET_LEGACY;
		assert_int_equal(kata_backend_from_env(&set, err, sizeof(err)), -EINVAL);
		assert_int_equal(set, KATA_BACKEND_SET_LEGACY); /* untouched */
		assert_non_null(strstr(err, "is not auto, iommufd or legacy"));
	}
	static const struct {
		const char *v;
		enum kata_backend_setting s;
	} good[] = { { "auto", KATA_BACKEND_AUTO }, { "iommufd", KATA_BACKEND_SET_IOMMUFD },
		     { "legacy", KATA_BACKEND_SET_LEGACY } };
	for (size_t i = 0; i < DP_ELEMENTSOF(good); i++) {
		setenv(KATA_BACKEND_ENV, good[i].v, 1);
		assert_int_equal(kata_backend_from_env(&set, err, sizeof(err)), 0);
		assert_int_equal(set, good[i].s);
	}
}

static void fixed_choice(void **state)
{
	(void)state;
	char why[256];
	assert_int_equal(kata_backend_choose(KATA_BACKEND_SET_LEGACY, why, sizeof(why)), KATA_BACKEND_LEGACY);
	assert_string_equal(why, "VFIO_BACKEND=legacy");
	assert_int_equal(kata_backend_choose(KATA_BACKEND_SET_IOMMUFD, why, sizeof(why)), KATA_BACKEND_IOMMUFD);
	assert_string_equal(why, "VFIO_BACKEND=iommufd");
	assert_string_equal(kata_backend_name(KATA_BACKEND_LEGACY), "legacy");
	assert_string_equal(kata_backend_dir(KATA_BACKEND_LEGACY), "/dev/vfio");
	assert_string_equal(kata_backend_dir(KATA_BACKEND_IOMMUFD), "/dev/vfio/devices");
}

/* auto: by what the kernel gives, said in the reason */
static void auto_choice(void **state)
{
	(void)state;
	char why[256];
	assert_int_equal(kata_backend_choose(KATA_BACKEND_AUTO, why, sizeof(why)), KATA_BACKEND_LEGACY);
	assert_non_null(strstr(why, "auto: no /dev/vfio/devices (a kernel without CONFIG_IOMMUFD"));
	assert_int_equal(mkdir(at("dev/vfio/devices"), 0755), 0);
	assert_int_equal(kata_backend_choose(KATA_BACKEND_AUTO, why, sizeof(why)), KATA_BACKEND_LEGACY);
	assert_string_equal(why, "auto: /dev/vfio/devices holds no character device");
	/* a stray file or directory is no cdev: a legacy node with it still gets legacy */
	int fd = open(at("dev/vfio/devices/vfio0"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(mkdir(at("dev/vfio/devices/vfio1"), 0755), 0);
	assert_int_equal(kata_backend_choose(KATA_BACKEND_AUTO, why, sizeof(why)), KATA_BACKEND_LEGACY);
	assert_string_equal(why, "auto: /dev/vfio/devices holds no character device");
	assert_int_equal(mknod(at("dev/vfio/devices/vfio2"), S_IFCHR | 0600, makedev(237, 2)), 0);
	assert_int_equal(kata_backend_choose(KATA_BACKEND_AUTO, why, sizeof(why)), KATA_BACKEND_IOMMUFD);
	assert_string_equal(why, "auto: /dev/vfio/devices has IOMMUFD cdevs");
	dp_buf names = { 0 };
	assert_int_equal(kata_backend_cdevs(&names), 1);
	assert_string_equal(names.data, "vfio2");
	dp_buf_done(&names);
	/* unreadable: said, and legacy (root reads anything: a file in its place instead) */
	assert_int_equal(unlink(at("dev/vfio/devices/vfio0")), 0);
	assert_int_equal(rmdir(at("dev/vfio/devices/vfio1")), 0);
	assert_int_equal(unlink(at("dev/vfio/devices/vfio2")), 0);
	assert_int_equal(rmdir(at("dev/vfio/devices")), 0);
	fd = open(at("dev/vfio/devices"), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(kata_backend_choose(KATA_BACKEND_AUTO, why, sizeof(why)), KATA_BACKEND_LEGACY);
	assert_non_null(strstr(why, "auto: cannot read /dev/vfio/devices: Not a directory"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(setting_values, setup, teardown),
		cmocka_unit_test_setup_teardown(fixed_choice, setup, teardown),
		cmocka_unit_test_setup_teardown(auto_choice, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
