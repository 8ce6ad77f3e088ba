/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group: an IOMMU group as the kernel judges it, for the health of the devices in it.
 *
 * Members are the entries of /sys/kernel/iommu_groups/<N>/devices (under the root prefix), each
 * named by its PCI address; a member's driver is the last component of its "driver" link (none:
 * no link). Since Linux 5.19, VFIO takes a group only when no member is bound to a driver that
 * uses the kernel's DMA API for itself: binding such a driver makes the device a kernel DMA
 * owner (iommu_device_use_default_domain, called from the bus's dma_configure unless the driver
 * sets driver_managed_dma: commit 512881eacfa7), and iommu_group_claim_dma_owner then fails
 * with -EPERM, which
 * VFIO_GROUP_SET_CONTAINER returns (and VFIO_GROUP_GET_STATUS does not report the group viable).
 * The drivers that set driver_managed_dma are vfio-pci and its variant drivers (named
 * "<x>_vfio_pci" or "<x>-vfio-pci"), pci-stub and pcieport; a member without a driver is
 * accepted. Sources: docs/kata.md, "IOMMU groups".
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* vfio-pci or one of its variant drivers ("mlx5_vfio_pci", "nvgrace_gpu_vfio_pci", ...). */
bool kata_driver_is_vfio(const char *drv);
/* A driver VFIO accepts on another member of the group: "" (none), a VFIO driver, pci-stub,
 * pcieport. */
bool kata_driver_dma_ok(const char *drv);

#define KATA_GROUP_REASON_MAX 320
#define KATA_DRIVER_MAX 64 /* a driver's name and its NUL, at most (the kernel's are far shorter) */

struct kata_group_verdict {
	char member[NAME_MAX + 1]; /* the member that makes the group unusable ("" when viable) */
	char driver[KATA_DRIVER_MAX]; /* its driver ("" when none) */
	char reason[KATA_GROUP_REASON_MAX];
};

/*
 * Whether the devices pcis[0..n-1] (PCI addresses) can be used through group: each is still a
 * member bound to a VFIO driver, and no member is bound to a driver VFIO refuses. 0 when so;
 * -EPERM when a member makes the group not viable (ret: the member, its driver and "IOMMU group
 * 12 is not viable: member 0000:41:00.1 is bound to snd_hda_intel"); -ENODEV when a device is
 * no longer a member bound to a VFIO driver (the reason says which and to what); another
 * negative errno when the group cannot be read (the reason says so). ret is always written.
 */
int kata_group_check(unsigned group, const char *const *pcis, size_t n, struct kata_group_verdict *ret);
