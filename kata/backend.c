/* SPDX-License-Identifier: Apache-2.0 */
/* backend: VFIO_BACKEND and the auto choice between IOMMUFD cdevs and legacy groups (backend.h). */
#include "backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/log.h"
#include "dp/paths.h"

int kata_backend_from_env(enum kata_backend_setting *ret, char *err, size_t errlen)
{
	static const char *const names[] = { "auto", "iommufd", "legacy" };
	const char *v = getenv(KATA_BACKEND_ENV);
	char q[96];
	if (!v) {
		*ret = KATA_BACKEND_AUTO;
		return 0;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(v, names[i]) == 0) {
			*ret = (enum kata_backend_setting)i;
			return 0;
		}
	snprintf(err, errlen, KATA_BACKEND_ENV "=%s is not auto, iommufd or legacy", dp_logq(q, sizeof(q), v));
	return -EINVAL;
}

int kata_backend_cdevs(dp_buf *names)
{
	char path[PATH_MAX];
	struct stat st;
	const struct dirent *de;
	int n = 0;
	if (dp_path(path, sizeof(path), KATA_DEV_DIR) < 0)
		return -EINVAL;
	DIR *d = opendir(path);
	if (!d)
		return -errno;
	errno = 0;
	while ((de = readdir(d))) {
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISCHR(st.st_mode))
			continue; /* ".", "..", a stray file or directory, or gone meanwhile */
		if (names)
			dp_buf_printf(names, "%s%s", names->len ? "," : "", de->d_name);
		n++;
		errno = 0;
	}
	int r = errno ? -errno : n;
	closedir(d);
	return r;
}

enum kata_backend kata_backend_choose(enum kata_backend_setting setting, char *reason, size_t size)
{
	if (setting != KATA_BACKEND_AUTO) {
		snprintf(reason, size, KATA_BACKEND_ENV "=%s",
			 setting == KATA_BACKEND_SET_LEGACY ? "legacy" : "iommufd");
		return setting == KATA_BACKEND_SET_LEGACY ? KATA_BACKEND_LEGACY : KATA_BACKEND_IOMMUFD;
	}
	int n = kata_backend_cdevs(NULL);
	if (n > 0) {
		snprintf(reason, size, "auto: " KATA_DEV_DIR " has IOMMUFD cdevs");
		return KATA_BACKEND_IOMMUFD;
	}
	if (n == -ENOENT)
		snprintf(reason, size, "auto: no " KATA_DEV_DIR " (a kernel without CONFIG_IOMMUFD and "
			 "CONFIG_VFIO_DEVICE_CDEV, as Debian's, or no device bound to vfio-pci)");
	else if (n < 0)
		snprintf(reason, size, "auto: cannot read " KATA_DEV_DIR ": %s", strerror(-n));
	else
		snprintf(reason, size, "auto: " KATA_DEV_DIR " holds no character device");
	return KATA_BACKEND_LEGACY;
}

const char *kata_backend_name(enum kata_backend b)
{
	return b == KATA_BACKEND_LEGACY ? "legacy" : "iommufd";
}

const char *kata_backend_dir(enum kata_backend b)
{
	return b == KATA_BACKEND_LEGACY ? KATA_VFIO_DIR : KATA_DEV_DIR;
}
