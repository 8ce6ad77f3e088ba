/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scan: which VFIO-bound PCI devices the node declares, classified by the PCI table.
 *
 * For every entry of /dev/vfio/devices (under the root prefix) named "vfio<N>" (N canonical
 * decimal: "0" or no leading zero, at most 9 digits) that is a character device (lstat: a
 * symlink, regular file or directory of that name is skipped):
 *   /sys/class/vfio-dev/vfioN must resolve inside <root>/sys to a directory whose "dev" reads
 *   "MAJ:MIN\n" equal to the cdev's number; its "device" must be a symlink that resolves
 *   (every link followed, relative to the entry's real location, as the kernel does; a loop is
 *   ELOOP) inside <root>/sys to a directory named by a PCI address "dddd:bb:dd.f" (lower-case hex,
 *   4 to 8 domain digits, device <= 0x1f, function <= 7) holding "vendor" = "0x" + 4 hex digits
 *   + "\n" and "class" = "0x" + 6 hex digits + "\n"; "numa_node" = "-1\n" or a decimal 0..65535
 *   + "\n" (missing or malformed: -1, logged; the device is kept); with read_device_id also
 *   "device" = "0x" + 4 hex digits + "\n" (the PCI device ID, for RESOURCE_NAMING=sku).
 * Every attribute is opened O_RDONLY|O_CLOEXEC|O_NOFOLLOW|O_NONBLOCK (a FIFO never blocks),
 * must be a regular file, and is read once, at most 64 bytes (64 bytes read = too long). With a
 * cache, "dev", "vendor" and "class" are first stat'ed and, when the file is the one the
 * previous scan read, not read again (scan_cache.h).
 * /sys/class/vfio-dev entries without a /dev entry of the same name are reported too.
 * "Resolves to" is the path the kernel gives for the opened directory (/proc/self/fd): the
 * canonical path realpath() computes with one readlink per component, in two system calls
 * (the scan runs every 30 s); without /proc nothing resolves (each entry skipped, saying why).
 * Every entry of /dev/vfio/devices is considered; of the devices a table row matches, the first
 * max_entries by PCI address are kept (over all rows; those sharing the last one's address are
 * seen whole by the duplicate check), whatever order the directory lists them in, with one
 * warning "too many VFIO devices, advertising the first by PCI address" devices=<matched>
 * advertised=<max> last=<the last PCI address kept>; at most 2 x max_entries are held during the
 * walk. At most max_entries entries of /sys/class/vfio-dev are looked at for the report of
 * entries without a cdev (one warning "too many entries" when there are more). Two cdevs
 * claiming the same PCI device are both skipped.
 *
 * Every skipped entry gets exactly one log line "skipping VFIO device" device=<name>
 * reason=<why>: warn, except a device no table row matches (info, reason="not in the table").
 * With verbose false (the periodic rescans) those lines are at debug level.
 *
 * The matched devices are ordered by table row, then by PCI address (numerically, which for the
 * canonical 4-digit-domain form is the string order); a row's devices get IDs "0".."n-1" in
 * that order.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dp/buf.h"
#include "scan_cache.h"
#include "table.h"

#define KATA_VFIO_DIR "/dev/vfio"
#define KATA_DEV_DIR KATA_VFIO_DIR "/devices"
#define KATA_SYSFS_DIR "/sys/class/vfio-dev"
#define KATA_GROUP_CLASS_DIR "/sys/class/vfio"     /* legacy group devices: <N>/dev */
#define KATA_GROUPS_DIR "/sys/kernel/iommu_groups" /* <N>/devices/<PCI address> */
#define KATA_CONTAINER_NODE KATA_VFIO_DIR "/vfio"  /* legacy: the container node */
#define KATA_IOMMU_NODE "/dev/iommu"               /* iommufd: the IOMMUFD node */
#define KATA_MAX_ENTRIES 4096

/* Which VFIO device nodes a deployment hands out (backend.h chooses): never both kinds. */
enum kata_backend {
	KATA_BACKEND_IOMMUFD, /* /dev/vfio/devices/vfioN, one per device */
	KATA_BACKEND_LEGACY,  /* /dev/vfio/<group>, one per IOMMU group */
};

struct kata_device {
	char name[24];   /* iommufd: the cdev "vfio3"; legacy: the PCI address */
	char path[48];   /* "/dev/vfio/devices/vfio3" or "/dev/vfio/12": in the container and on the host */
	char pci[24];    /* "0000:41:00.0" */
	uint64_t pci_key; /* domain, bus, device, function: the order */
	uint64_t unit_key; /* the lowest pci_key of the devices of its IOMMU group in its resource */
	uint64_t switch_key; /* hash of its upstream bridge's sysfs path (the PCIe switch above it) */
	char pcie_switch[24]; /* that bridge's name: the switch's upstream port "0000:10:00.0", or
			       * the host bridge "pci0000:00" (a root port or root bus: the root complex) */
	char pcie_root[24];   /* the first "pci<domain>:<bus>" component of its sysfs path (the PCIe
			       * root complex, Kubernetes' resource.kubernetes.io/pcieRoot); "" if none */
	dev_t rdev;
	uint16_t vendor;
	uint16_t device_id; /* PCI device ID: read only with read_device_id, else 0 */
	uint32_t pci_class;
	int numa_node; /* -1: unknown */
	unsigned group; /* IOMMU group number */
	size_t row;    /* index of the matching table row */
	unsigned num;  /* iommufd: N of vfioN; legacy: the group number */
};

/* The backend a scanned device came from (by its node's path). */
enum kata_backend kata_device_backend(const struct kata_device *d);

struct kata_scan_opts {
	const struct kata_row *table;
	size_t n_rows;
	size_t max_entries; /* devices kept (see above); 0: KATA_MAX_ENTRIES */
	bool verbose;       /* skip lines at warn/info (else debug) */
	bool read_device_id; /* also "device" ("0x" + 4 hex digits + "\n", cached like vendor; a
			      * missing or malformed one skips the entry): RESOURCE_NAMING=sku */
	kata_cache *cache;  /* what the previous scan left (scan_cache.h); NULL: none */
	enum kata_backend backend;
};

struct kata_scan {
	struct kata_device *devices; /* ordered by row, then unit_key, then PCI address */
	size_t n_devices;
};

/* Scan the tree under the root prefix. A missing /dev/vfio/devices is an empty set. Returns 0,
 * or -ENOMEM, or the negative errno of opening /dev/vfio/devices (err says so: "cannot read
 * /dev/vfio/devices: Permission denied"), or -EINVAL for a bad root prefix. ret is written only
 * on success. */
int kata_scan_run(const struct kata_scan_opts *o, struct kata_scan *ret, char *err, size_t errlen);
void kata_scan_done(struct kata_scan *s);

/* The devices of one row: returns how many, *ret_first their index in s->devices. */
size_t kata_scan_row(const struct kata_scan *s, size_t row, size_t *ret_first);

/* Compare two sets by cdev name: a name only in old is removed, only in new added, in both
 * with any difference (number, PCI address, vendor, class, NUMA node, row) changed. The names
 * are appended to the buffers comma-separated. Returns the number of differences (-ENOMEM). */
int kata_scan_diff(const struct kata_scan *old, const struct kata_scan *new, dp_buf *removed,
		   dp_buf *added, dp_buf *changed);
