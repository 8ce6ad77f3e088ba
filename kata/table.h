/* SPDX-License-Identifier: Apache-2.0 */
/*
 * table: the compile-time PCI table. One row per advertised resource: a VFIO-bound PCI device
 * belongs to the first row whose vendor equals its vendor and whose class prefix equals its
 * class under the row's mask. Supporting a new device type is one row in table.c and no other
 * change: every name (socket prefix, CDI file, CDI kind, annotation key) is derived from the
 * resource name here. The scan and the daemon take the table as a pointer and a count so that
 * tests can inject their own.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kata_row {
	const char *resource;  /* "nvidia.com/gpu": kubelet resource name and CDI kind */
	uint16_t vendor;       /* PCI vendor ID, e.g. 0x10de */
	uint32_t class_prefix; /* 24-bit PCI class with the unmasked bits zero, e.g. 0x030200 */
	uint32_t class_mask;   /* bits of the class that must equal class_prefix, e.g. 0xffff00 */
};

extern const struct kata_row kata_table[];
extern const size_t kata_table_len;

/* The longest resource name a row may have: "kata.<vendor>-<class>_<ID>" (the annotation name)
 * must stay within 63 characters for IDs up to 4 digits. */
#define KATA_RESOURCE_MAX 53
/* The most rows a table may have. */
#define KATA_MAX_ROWS 64
/* Buffers for the derived names. */
#define KATA_NAME_MAX 128

bool kata_row_matches(const struct kata_row *r, uint16_t vendor, uint32_t pci_class);
/* Index of the first matching row, or -1 (a device of another vendor or class). */
int kata_table_match(const struct kata_row *t, size_t n, uint16_t vendor, uint32_t pci_class);

/* Check every row: the resource is a valid CDI kind "<vendor>/<class>" in lower case, at most
 * KATA_RESOURCE_MAX characters, and unique; at most KATA_MAX_ROWS rows; the mask is non-zero, within 24 bits, and covers the
 * prefix; at least one row. 0, or -EINVAL with a message naming the row in err. */
int kata_table_validate(const struct kata_row *t, size_t n, char *err, size_t errlen);

/* Derived names (buf of at least KATA_NAME_MAX bytes; -ENAMETOOLONG, -EINVAL for a resource
 * without '/'):
 *   socket prefix  "kata-<hash of the resource>" (dp_socket_prefix with KATA_SOCKET_TAG: the
 *                                                 endpoint's "<prefix>-<n>.sock", 23 bytes)
 *   plugin name    "kata.nvidia.com-gpu"        (CDI file "<name>.yaml", annotation
 *                                                 "cdi.k8s.io/<name>_<first ID>") */
int kata_socket_prefix(const char *resource, char *buf, size_t size);
int kata_plugin_name(const char *resource, char *buf, size_t size);
int kata_spec_file(const char *resource, char *buf, size_t size);
/* PLUGIN_API=dra's CDI spec: "kata-dra.nvidia.com-gpu.yaml" (spec.h). */
int kata_dra_spec_file(const char *resource, char *buf, size_t size);

/* The tag of every socket name of kata, and the key of the idle health server's (no device
 * matches the table): its prefix is dp_socket_prefix(KATA_SOCKET_TAG, KATA_IDLE_SOCKET_KEY). */
#define KATA_SOCKET_TAG "kata"
#define KATA_IDLE_SOCKET_KEY "idle"
