/* SPDX-License-Identifier: Apache-2.0 */
/* scan_internal.h: what the files of the VFIO scan share (scan.c, scan_device.c, scan_parse.c). */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dp/log.h"
#include "dp/macro.h"
#include "scan.h"

#define ATTR_MAX 64 /* bytes read from one attribute, at most */
#define WHY_MAX 768
/* The highest NUMA node number a kernel can have: MAX_NUMNODES is 1 << CONFIG_NODES_SHIFT, and
 * NODES_SHIFT is at most 10 on x86 and arm64 (arch/x86/Kconfig, arch/arm64/Kconfig: range 1 10).
 * A larger numa_node (65535: a firmware's "none") is no node. */
#define KATA_NUMA_NODE_MAX 1023

/* One scan's state. */
struct ctx {
	const struct kata_scan_opts *o;
	size_t max;
	char sysroot[PATH_MAX]; /* the canonical path of <root>/sys; "" when unknown */
	int procfd;             /* /proc/self/fd (O_PATH), or -1 with proc_errno */
	int proc_errno;
	bool procfd_cached;     /* procfd and sysroot came from (and procfd belongs to) the cache */
	const char *class_dir;  /* KATA_SYSFS_DIR (iommufd) or KATA_GROUP_CLASS_DIR (legacy) */
	int classfd;            /* <root><class_dir>, or -1 with class_errno */
	int class_errno;
	struct kata_device *devs;
	size_t n, cap;
	size_t matched; /* devices a table row matched, kept or not */
	bool oom;
};

/* A directory read with getdents64 into a buffer of its own: opendir() allocates one on every
 * rescan (musl: an mmap and a munmap of 8 KiB, and the page fault between). */
struct dir_iter {
	int fd;
	int err; /* the read error that ended the walk (positive errno), 0 at the end */
	size_t pos, len;
	_Alignas(8) char buf[4096];
};

/* scan.c */
/* The next name other than "." and "..", or NULL at the end or on a read error (it->err). */
const char *scan_dir_next(struct dir_iter *it);
/* Open dir (under the root prefix) to read it: its fd; -ENOENT (err untouched) when it does not
 * exist; another negative errno with err ("cannot read <dir>: <reason>"). */
int scan_open_dir(const char *dir, char *err, size_t errlen);
/* 0 when the walk of dir read it to its end; else its negative errno, with err saying so. */
int scan_dir_failed(const struct dir_iter *it, const char *dir, char *err, size_t errlen);
/* One "skipping VFIO device" line for name (verbose: at lvl, else debug). */
void scan_skip(const struct ctx *c, enum dp_log_level lvl, const char *name, const char *why);
/* Keep d (a table row matched it): c->oom when memory is short. */
void scan_keep(struct ctx *c, const struct kata_device *d);

/* The reason of a skip into why (WHY_MAX bytes; cut when longer). */
void scan_whyf(char *why, const char *fmt, ...) _printf_(2, 3);

/* scan_parse.c: buf holds exactly n bytes (may contain NULs); false when malformed. */
/* "MAJ:MIN\n" as a dev_t. */
bool scan_parse_devno(const char *buf, size_t n, uint64_t *ret);
/* "0x" + 4 hex digits + "\n" (vendor and device IDs). */
bool scan_parse_vendor(const char *buf, size_t n, uint64_t *ret);
/* "0x" + 6 hex digits + "\n". */
bool scan_parse_class(const char *buf, size_t n, uint64_t *ret);
/* "-1\n" or a canonical decimal 0..65535 + "\n". */
bool scan_parse_numa(const char *buf, size_t n, int *ret);
/* A NUL-terminated "dddd:bb:dd.f" (domain 4..8 lower-case hex digits) as a sortable key. */
bool scan_parse_pci(const char *s, uint64_t *ret);
/* A NUL-terminated "vfio" + "0" or [1-9][0-9]{0,8}: N. */
bool scan_parse_name(const char *name, unsigned *ret);

/* scan_device.c */
/* The path fd is open at, as the kernel names it (/proc/self/fd/<fd>): buf (PATH_MAX). Length,
 * or negative errno. */
ssize_t scan_fd_path(const struct ctx *c, int fd, char *buf);
/* The class entry <class_dir>/<entry> of the node d describes (d->rdev, d->path): its "dev"
 * must be d->rdev. Its fd, or negative errno with why. */
int scan_open_class_entry(const struct ctx *c, const char *entry, const struct kata_device *d, char *why);
/* Resolve name (relative to dirfd) inside the root's /sys, read the PCI function there: pci,
 * pci_key, identity, NUMA node, IOMMU group and switch key of d; drv (64 bytes) gets its
 * driver's name ("" for none). 0, or negative errno with why. */
int scan_read_function(const struct ctx *c, int dirfd, const char *name, const char *shown,
		       struct kata_device *d, char *drv, char *why);
/* scan_group.c */
/* The function's IOMMU group (its "iommu_group" link: ".../kernel/iommu_groups/<N>"), switch key
 * (from dir, its sysfs path) and driver (its "driver" link's last component, "" for none; drv:
 * 64 bytes). 0, or negative errno with why (no or malformed iommu_group link). */
int scan_read_topology(const struct ctx *c, int pcifd, struct kata_device *d, const char *dir, char *drv,
		       char *why);
/* Legacy: every group node /dev/vfio/<N> and the table-matched members of its group that are
 * bound to a VFIO driver. 0, or negative errno with err (cannot read /dev/vfio). */
int scan_walk_groups(struct ctx *c, char *err, size_t errlen);
/* A group's devices belong to one resource: the row (and with read_device_id the model) of its
 * lowest PCI address; the other members are skipped, saying so. Sets every kept device's
 * unit_key. */
void scan_split_groups(struct ctx *c);

/* Whether the PCI function fn (relative to dirfd, every link followed) has a vendor and class
 * that no table row matches, read as the full read does (through the cache): most functions of a
 * host with thousands of VFs are not devices, and need no more than these two. False when they
 * cannot be read or parsed, or a row matches: the full read decides, and says why. */
bool scan_not_in_table(const struct ctx *c, int dirfd, const char *fn, uint16_t *ret_vendor, uint32_t *ret_class);
/* Fill d (name, path, rdev set) for its cdev; 0 when it is a well-formed VFIO PCI device
 * (matching or not), else negative errno with why. */
int scan_inspect(const struct ctx *c, struct kata_device *d, char *why);
