/* SPDX-License-Identifier: Apache-2.0 */
/* scan_parse: the strict parsers of the sysfs values and names the VFIO scan reads. */
#include <string.h>
#include <sys/sysmacros.h>

#include "dp/env.h"
#include "scan_internal.h"

/* "0x" + exactly digits hex digits + "\n". */
static bool parse_hex(const char *buf, size_t n, size_t digits, uint32_t *ret)
{
	uint32_t v = 0;
	if (n != digits + 3 || buf[0] != '0' || buf[1] != 'x' || buf[n - 1] != '\n')
		return false;
	for (size_t i = 2; i < n - 1; i++) {
		int d = dp_hex_digit(buf[i]);
		if (d < 0)
			return false;
		v = v << 4 | (uint32_t)d;
	}
	*ret = v;
	return true;
}

/* Decimal digits (1..max_digits) at *p, advancing it; no sign, value <= max. */
static bool parse_dec(const char **p, const char *end, size_t max_digits, uint64_t max, uint64_t *ret)
{
	uint64_t v = 0;
	size_t k = 0;
	while (*p < end && **p >= '0' && **p <= '9') {
		if (++k > max_digits)
			return false;
		v = v * 10 + (uint64_t)(**p - '0');
		(*p)++;
	}
	if (k == 0 || v > max)
		return false;
	*ret = v;
	return true;
}

/* "MAJ:MIN\n" */
static bool parse_devno(const char *buf, size_t n, dev_t *ret)
{
	const char *p = buf, *end = buf + n;
	uint64_t ma, mi;
	if (!parse_dec(&p, end, 10, UINT32_MAX, &ma) || p == end || *p++ != ':' ||
	    !parse_dec(&p, end, 10, UINT32_MAX, &mi) || p == end || *p++ != '\n' || p != end)
		return false;
	*ret = makedev((unsigned)ma, (unsigned)mi);
	return true;
}

/* "-1\n" or a canonical decimal 0..65535 + "\n". */
bool scan_parse_numa(const char *buf, size_t n, int *ret)
{
	const char *p = buf, *end = buf + n;
	uint64_t v;
	if (n == 3 && memcmp(buf, "-1\n", 3) == 0) {
		*ret = -1;
		return true;
	}
	if (n < 2 || (buf[0] == '0' && n != 2) || !parse_dec(&p, end, 5, 65535, &v) || p + 1 != end ||
	    *p != '\n')
		return false;
	*ret = (int)v;
	return true;
}

static int lower_hex(char ch)
{
	return ch >= 'A' && ch <= 'F' ? -1 : dp_hex_digit(ch);
}

/* k lower-case hex digits at s into *v. */
static bool hex_field(const char *s, size_t k, uint64_t *v)
{
	*v = 0;
	for (size_t i = 0; i < k; i++) {
		int d = lower_hex(s[i]);
		if (d < 0)
			return false;
		*v = *v << 4 | (uint64_t)d;
	}
	return true;
}

/* "dddd:bb:dd.f" (domain 4..8 digits). */
bool scan_parse_pci(const char *s, uint64_t *ret)
{
	size_t len = strlen(s);
	uint64_t dom, bus, dev;
	if (len < 12 || len > 16)
		return false;
	size_t dl = len - 8; /* ":bb:dd.f" */
	const char *t = s + dl;
	if (t[0] != ':' || t[3] != ':' || t[6] != '.' || t[7] < '0' || t[7] > '7')
		return false;
	if (!hex_field(s, dl, &dom) || !hex_field(t + 1, 2, &bus) || !hex_field(t + 4, 2, &dev) || dev > 0x1f)
		return false;
	*ret = dom << 16 | bus << 8 | dev << 3 | (uint64_t)(t[7] - '0');
	return true;
}

/* "vfio" + "0" or [1-9][0-9]{0,8} */
bool scan_parse_name(const char *name, unsigned *ret)
{
	const char *p = name + 4, *end;
	uint64_t v;
	if (strncmp(name, "vfio", 4) != 0 || (p[0] == '0' && p[1] != '\0'))
		return false;
	end = p + strlen(p);
	if (!parse_dec(&p, end, 9, UINT32_MAX, &v) || p != end)
		return false;
	*ret = (unsigned)v;
	return true;
}

bool scan_parse_devno(const char *buf, size_t n, uint64_t *ret)
{
	dev_t d;
	if (!parse_devno(buf, n, &d))
		return false;
	*ret = (uint64_t)d;
	return true;
}

bool scan_parse_vendor(const char *buf, size_t n, uint64_t *ret)
{
	uint32_t v;
	if (!parse_hex(buf, n, 4, &v))
		return false;
	*ret = v;
	return true;
}

bool scan_parse_class(const char *buf, size_t n, uint64_t *ret)
{
	uint32_t v;
	if (!parse_hex(buf, n, 6, &v))
		return false;
	*ret = v;
	return true;
}
