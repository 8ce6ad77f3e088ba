/* SPDX-License-Identifier: Apache-2.0 */
/* scan_internal.h: what the files of the VFIO scan share (scan.c, scan_device.c, scan_parse.c). */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dp/macro.h"
#include "scan.h"

#define ATTR_MAX 64 /* bytes read from one attribute, at most */
#define WHY_MAX 768

/* One scan's state. */
struct ctx {
	const struct kata_scan_opts *o;
	size_t max;
	char sysroot[PATH_MAX]; /* the canonical path of <root>/sys; "" when unknown */
	int procfd;             /* /proc/self/fd (O_PATH), or -1 with proc_errno */
	int proc_errno;
	bool procfd_cached;     /* procfd and sysroot came from (and procfd belongs to) the cache */
	int classfd;            /* <root>/sys/class/vfio-dev, or -1 with class_errno */
	int class_errno;
	struct kata_device *devs;
	size_t n, cap;
	size_t matched; /* devices a table row matched, kept or not */
	bool oom;
};

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
/* Fill d (name, path, rdev set) for its cdev; 0 when it is a well-formed VFIO PCI device
 * (matching or not), else negative errno with why. */
int scan_inspect(const struct ctx *c, struct kata_device *d, char *why);
