/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sku: the per-model names of RESOURCE_NAMING=sku. A PCI device (vendor, device ID) is named
 * from the pci.ids name generated into the binary at build time (kata/gen_sku_names.py: the
 * table's vendors only; frequent words as one byte, then front-coded), sanitised to the part after the domain of a Kubernetes
 * resource name (a qualified name: [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63
 * characters) that is also a CDI class (first character a letter):
 *
 *   - every run of characters outside [A-Za-z0-9.-] (underscores included) becomes one '_';
 *   - leading and trailing characters other than letters and digits are removed;
 *   - cut to 63 characters, then trailing characters other than letters and digits removed;
 *   - a name that starts with a digit gets "pci_" in front (cut again as above).
 *   "GH100[H100 SXM5 80GB]" -> "GH100_H100_SXM5_80GB", "GA100 [A100 SXM4 40GB]" ->
 *   "GA100_A100_SXM4_40GB".
 *
 * Disambiguation: when two device IDs of one vendor sanitise to the same name, or a name has
 * the fallback's form "pci_<4 hex>_<4 hex>", each of them gets "_<device ID, 4 lower-case hex
 * digits>" appended (the name cut first to 58 characters, then trimmed as above), so the result
 * depends only on pci.ids, not on its order: two "Foo" at 0x1234 and 0x1235 are "Foo_1234" and
 * "Foo_1235".
 * Fallback: a device ID missing from the table (or whose name sanitises to nothing) is
 * "pci_<vendor>_<device>" in lower-case hex: "pci_10de_2331".
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KATA_SKU_NAME_MAX 63 /* characters */
#define KATA_SKU_RAW_MAX 256 /* a pci.ids name with its NUL, at most (longer ones are cut) */

/* The generated table (sku_names.c, built from pci.ids). */
struct kata_sku_vendor {
	uint16_t vendor;
	uint16_t n;     /* its device IDs */
	uint32_t first; /* index of its first entry in kata_sku_device_ids and kata_sku_names */
};
extern const struct kata_sku_vendor kata_sku_vendors[];
extern const size_t kata_sku_vendors_len;
extern const uint16_t kata_sku_device_ids[]; /* per vendor, ascending */
extern const char kata_sku_names[];          /* front-coded: shared-prefix byte, rest, NUL */
extern const char kata_sku_words[];          /* word i (NUL-terminated) is byte 0x80 + i */
extern const size_t kata_sku_words_len;
extern const char kata_sku_ids_version[];    /* "2023.04.11": pci.ids' Version line */

/* Sanitise raw as above into buf (at least KATA_SKU_NAME_MAX + 1 bytes). 0, or -EINVAL when
 * nothing is left (buf untouched), -ENOBUFS for a smaller buf. */
int kata_sku_sanitise(const char *raw, char *buf, size_t size);

/* The pci.ids name of (vendor, device) into raw (KATA_SKU_RAW_MAX bytes): true if the table
 * has it. */
bool kata_sku_lookup(uint16_t vendor, uint16_t device, char *raw);

/* The final name (disambiguated, or the fallback) into buf (at least KATA_SKU_NAME_MAX + 1
 * bytes). 1 when it comes from pci.ids, 0 for the fallback, -ENOBUFS for a smaller buf. */
int kata_sku_name(uint16_t vendor, uint16_t device, char *buf, size_t size);
