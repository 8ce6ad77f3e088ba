/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend: VFIO_BACKEND, which kind of VFIO device node the deployment hands out.
 *
 *   iommufd: the IOMMUFD character devices /dev/vfio/devices/vfioN, one per device (kernel >= 6.6
 *            with CONFIG_IOMMUFD and CONFIG_VFIO_DEVICE_CDEV), with /dev/iommu;
 *   legacy:  the group nodes /dev/vfio/<group>, one per IOMMU group, with the container node
 *            /dev/vfio/vfio (every kernel with VFIO);
 *   auto (default): iommufd when /dev/vfio/devices holds a character device, else legacy (a stray
 *            file or directory there is no cdev).
 * One spec and one answer never mix the two: Kata breaks when it is given both for a device.
 */
#pragma once

#include <stddef.h>

#include "scan.h"

#define KATA_BACKEND_ENV "VFIO_BACKEND"

enum kata_backend_setting { KATA_BACKEND_AUTO, KATA_BACKEND_SET_IOMMUFD, KATA_BACKEND_SET_LEGACY };

/* VFIO_BACKEND: unset, "auto", "iommufd" or "legacy"; anything else (also "") is -EINVAL with err:
 * VFIO_BACKEND="x" is not auto, iommufd or legacy. ret written only on success. */
int kata_backend_from_env(enum kata_backend_setting *ret, char *err, size_t errlen);
/* The backend for setting on this node (under the root prefix), and why (reason, for the start
 * log: "VFIO_BACKEND=legacy", "auto: /dev/vfio/devices has IOMMUFD cdevs", "auto: no
 * /dev/vfio/devices (a kernel without CONFIG_VFIO_DEVICE_CDEV / CONFIG_IOMMUFD)"). */
enum kata_backend kata_backend_choose(enum kata_backend_setting setting, char *reason, size_t size);
/* The character devices of /dev/vfio/devices (under the root prefix): how many, their names
 * appended comma-separated to names (NULL: not wanted); -ENOENT without the directory, another
 * negative errno when it cannot be read. */
int kata_backend_cdevs(dp_buf *names);
/* "iommufd" or "legacy". */
const char *kata_backend_name(enum kata_backend b);
/* The directory the backend's nodes are in, watched for changes: /dev/vfio/devices or /dev/vfio. */
const char *kata_backend_dir(enum kata_backend b);
