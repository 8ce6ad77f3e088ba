/* SPDX-License-Identifier: Apache-2.0 */
/* sku: the per-model resource names of RESOURCE_NAMING=sku, from the generated pci.ids table. */
#include "sku.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SUFFIX_LEN 5 /* "_1234" */

static bool alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Kept as they are; every run of other characters (an underscore too) becomes one '_'. */
static bool kept(char c)
{
	return alnum(c) || c == '-' || c == '.';
}

/* Cut buf to at most max characters and drop the trailing non-alphanumerics. */
static void cut(char *buf, size_t max)
{
	size_t n = strlen(buf);
	if (n > max)
		n = max;
	while (n > 0 && !alnum(buf[n - 1]))
		n--;
	buf[n] = '\0';
}

int kata_sku_sanitise(const char *raw, char *buf, size_t size)
{
	char out[KATA_SKU_NAME_MAX + 8] = { 0 }; /* "pci_" + up to 63 + NUL */
	size_t n = 0;
	if (size < KATA_SKU_NAME_MAX + 1)
		return -ENOBUFS;
	for (const char *p = raw; *p && n <= KATA_SKU_NAME_MAX; p++) {
		if (kept(*p)) {
			if (n > 0 || alnum(*p)) /* leading separators dropped */
				out[n++] = *p;
		} else if (n > 0 && out[n - 1] != '_') {
			out[n++] = '_';
		}
	}
	out[n] = '\0';
	cut(out, KATA_SKU_NAME_MAX);
	if (!out[0])
		return -EINVAL;
	if (out[0] >= '0' && out[0] <= '9') {
		memmove(out + 4, out, strlen(out) + 1);
		memcpy(out, "pci_", 4);
		cut(out, KATA_SKU_NAME_MAX);
	}
	memcpy(buf, out, strlen(out) + 1);
	return 0;
}

static const struct kata_sku_vendor *find_vendor(uint16_t vendor)
{
	for (size_t i = 0; i < kata_sku_vendors_len; i++)
		if (kata_sku_vendors[i].vendor == vendor)
			return &kata_sku_vendors[i];
	return NULL;
}

#define ENC_MAX 512 /* an encoded name: at most 2 bytes per byte of a name (kata/gen_sku_names.py) */
#define WORD_ESCAPE 0xff

/* Walk a vendor's front-coded names: *p at an entry, enc holding the previous encoded name. */
static void next_encoded(const char **p, char *enc)
{
	size_t keep = (unsigned char)**p;
	size_t len = strlen(*p + 1);
	if (keep + len >= ENC_MAX) /* the generator never writes this */
		len = ENC_MAX - 1 - keep;
	memcpy(enc + keep, *p + 1, len);
	enc[keep + len] = '\0';
	*p += 1 + strlen(*p + 1) + 1;
}

static const char *word(size_t i)
{
	const char *w = kata_sku_words;
	for (; i > 0; i--)
		w += strlen(w) + 1;
	return w;
}

/* An encoded name into raw (KATA_SKU_RAW_MAX bytes): byte 0x80 + i is word i, 0xff escapes the
 * next byte. */
static void decode(const char *enc, char *raw)
{
	size_t n = 0;
	for (const unsigned char *e = (const unsigned char *)enc; *e; e++) {
		const char *w = NULL;
		char lit[2] = { (char)*e, '\0' };
		if (*e == WORD_ESCAPE && e[1])
			lit[0] = (char)*++e;
		else if (*e >= 0x80)
			w = (size_t)(*e - 0x80) < kata_sku_words_len ? word(*e - 0x80) : "";
		for (const char *c = w ? w : lit; *c && n < KATA_SKU_RAW_MAX - 1; c++)
			raw[n++] = *c;
	}
	raw[n] = '\0';
}

/* The start of entry i of the blob. */
static const char *entry(size_t i)
{
	const char *p = kata_sku_names;
	for (; i > 0; i--)
		p += 1 + strlen(p + 1) + 1;
	return p;
}

bool kata_sku_lookup(uint16_t vendor, uint16_t device, char *raw)
{
	const struct kata_sku_vendor *v = find_vendor(vendor);
	char enc[ENC_MAX] = "";
	if (!v)
		return false;
	const char *p = entry(v->first);
	for (size_t i = 0; i < v->n; i++) {
		next_encoded(&p, enc);
		if (kata_sku_device_ids[v->first + i] == device) {
			decode(enc, raw);
			return true;
		}
	}
	return false;
}

/* "pci_" + 4 hex + "_" + 4 hex: the fallback's form. */
static bool fallback_form(const char *s)
{
	static const char form[] = "pci_hhhh_hhhh";
	if (strlen(s) != sizeof(form) - 1)
		return false;
	for (size_t i = 0; form[i]; i++) {
		bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F');
		if (form[i] == 'h' ? !hex : s[i] != form[i])
			return false;
	}
	return true;
}

/* Whether another device ID of the vendor sanitises to name. */
static bool shared(const struct kata_sku_vendor *v, uint16_t device, const char *name)
{
	char enc[ENC_MAX] = "", raw[KATA_SKU_RAW_MAX], other[KATA_SKU_NAME_MAX + 1];
	const char *p = entry(v->first);
	for (size_t i = 0; i < v->n; i++) {
		next_encoded(&p, enc);
		if (kata_sku_device_ids[v->first + i] == device)
			continue;
		decode(enc, raw);
		if (kata_sku_sanitise(raw, other, sizeof(other)) == 0 && strcmp(other, name) == 0)
			return true;
	}
	return false;
}

int kata_sku_name(uint16_t vendor, uint16_t device, char *buf, size_t size)
{
	char raw[KATA_SKU_RAW_MAX], name[KATA_SKU_NAME_MAX + 1];
	if (size < KATA_SKU_NAME_MAX + 1)
		return -ENOBUFS;
	if (!kata_sku_lookup(vendor, device, raw) || kata_sku_sanitise(raw, name, sizeof(name)) < 0) {
		snprintf(buf, size, "pci_%04x_%04x", vendor, device);
		return 0;
	}
	if (fallback_form(name) || shared(find_vendor(vendor), device, name)) {
		cut(name, KATA_SKU_NAME_MAX - SUFFIX_LEN);
		snprintf(buf, size, "%s_%04x", name, device);
		return 1;
	}
	memcpy(buf, name, strlen(name) + 1);
	return 1;
}
