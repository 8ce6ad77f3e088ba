/* SPDX-License-Identifier: Apache-2.0 */
#include "detect.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "dp/paths.h"

static const struct {
	const char *name;
	const char *path;
} candidates[] = {
	{ "mshv", "/dev/mshv" },
	{ "kvm", "/dev/kvm" },
};

int hl_detect(struct hl_device *ret, char *err, size_t errlen)
{
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
		struct hl_device d = { .name = candidates[i].name, .path = candidates[i].path };
		struct stat st;
		int r = dp_path(d.host_path, sizeof(d.host_path), d.path);
		if (r < 0)
			return r;
		if (stat(d.host_path, &st) < 0) {
			if (errno == ENOENT)
				continue;
			r = -errno;
			snprintf(err, errlen, "cannot stat %s: %s", d.host_path, strerror(errno));
			return r;
		}
		if (!S_ISCHR(st.st_mode)) {
			snprintf(err, errlen, "%s is not a character device", d.host_path);
			return -ENOTTY;
		}
		r = dp_path(d.host_dir, sizeof(d.host_dir), "/dev");
		if (r < 0)
			return r;
		d.rdev = st.st_rdev;
		*ret = d;
		return 0;
	}
	char kvm[PATH_MAX], mshv[PATH_MAX];
	(void)dp_path(kvm, sizeof(kvm), "/dev/kvm");
	(void)dp_path(mshv, sizeof(mshv), "/dev/mshv");
	snprintf(err, errlen, "no hypervisor device: neither %s nor %s exists", mshv, kvm);
	return -ENOENT;
}

int hl_device_verify(const struct hl_device *d, char *reason, size_t size)
{
	struct stat st;
	if (stat(d->host_path, &st) < 0) {
		int r = -errno;
		snprintf(reason, size, "%s: %s", d->host_path, strerror(errno));
		return r;
	}
	if (!S_ISCHR(st.st_mode)) {
		snprintf(reason, size, "%s is no longer a character device", d->host_path);
		return -ENOTTY;
	}
	if (st.st_rdev != d->rdev) {
		snprintf(reason, size, "%s changed device number from %u:%u to %u:%u", d->host_path,
			 major(d->rdev), minor(d->rdev), major(st.st_rdev), minor(st.st_rdev));
		return -ENODEV;
	}
	return 0;
}
