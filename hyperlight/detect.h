/* SPDX-License-Identifier: Apache-2.0 */
/* detect: find the hypervisor device node (/dev/mshv, then /dev/kvm) under the root prefix. */
#pragma once

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

struct hl_device {
	const char *name;      /* "kvm" or "mshv": the CDI device name and HYPERLIGHT_HYPERVISOR */
	const char *path;      /* "/dev/kvm": the path inside containers and on the host */
	char host_path[PATH_MAX]; /* path resolved under the root prefix */
	char host_dir[PATH_MAX];  /* its directory (watched) */
	dev_t rdev;
};

/* -ENOENT: neither exists; -ENOTTY: the path exists but is not a character device (err says
 * which); other negative errno from stat. */
int hl_detect(struct hl_device *ret, char *err, size_t errlen);
/* 0 when host_path is still a character device with the same number; else -errno and reason. */
int hl_device_verify(const struct hl_device *d, char *reason, size_t size);
