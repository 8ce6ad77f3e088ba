/* SPDX-License-Identifier: Apache-2.0 */
/* scan_diff: which devices two scans removed, added or changed (kata_scan_diff). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scan.h"

/* iommufd names are cdevs "vfioN", compared by N; legacy names are PCI addresses
 * ("dddd:bb:dd.f", fixed width, lower-case hex), compared as strings. (Comparing the legacy
 * names by a number after "vfio" made them all equal: one device removed from the middle then
 * showed as every later device changed.) */
static int cmp_name(const char *x, const char *y)
{
	if (strncmp(x, "vfio", 4) == 0 && strncmp(y, "vfio", 4) == 0) {
		unsigned long nx = strtoul(x + 4, NULL, 10), ny = strtoul(y + 4, NULL, 10);
		if (nx != ny)
			return nx < ny ? -1 : 1;
	}
	return strcmp(x, y);
}

static int cmp_name_ptr(const void *a, const void *b)
{
	const struct kata_device *x = *(const struct kata_device *const *)a;
	const struct kata_device *y = *(const struct kata_device *const *)b;
	return cmp_name(x->name, y->name);
}

static const struct kata_device **by_name(const struct kata_scan *s)
{
	/* an array of pointers: sizeof(*v) is the size of one pointer, as meant */
	const struct kata_device **v = calloc(s->n_devices ? s->n_devices : 1, sizeof(*v)); // NOLINT(bugprone-sizeof-expression)
	if (!v)
		return NULL;
	for (size_t i = 0; i < s->n_devices; i++)
		v[i] = &s->devices[i];
	/* an array of pointers: sizeof(*v) is the size of one pointer, as meant */
	qsort(v, s->n_devices, sizeof(*v), cmp_name_ptr); // NOLINT(bugprone-sizeof-expression)
	return v;
}

static bool same_identity(const struct kata_device *a, const struct kata_device *b)
{
	return a->rdev == b->rdev && a->pci_key == b->pci_key && a->vendor == b->vendor &&
	       a->pci_class == b->pci_class && a->device_id == b->device_id && a->numa_node == b->numa_node &&
	       a->row == b->row;
}

static void add_name(dp_buf *b, const char *name)
{
	if (b->len)
		dp_buf_puts(b, ",");
	dp_buf_puts(b, name);
}

int kata_scan_diff(const struct kata_scan *old, const struct kata_scan *new, dp_buf *removed,
		   dp_buf *added, dp_buf *changed)
{
	_cleanup_free_ const struct kata_device **a = by_name(old);
	_cleanup_free_ const struct kata_device **b = by_name(new);
	size_t i = 0, j = 0;
	int n = 0;
	if (!a || !b)
		return -ENOMEM;
	while (i < old->n_devices || j < new->n_devices) {
		int c = i == old->n_devices ? 1 : j == new->n_devices ? -1 : cmp_name_ptr(&a[i], &b[j]);
		if (c < 0) {
			add_name(removed, a[i++]->name);
		} else if (c > 0) {
			add_name(added, b[j++]->name);
		} else {
			if (same_identity(a[i], b[j])) {
				i++, j++;
				continue;
			}
			add_name(changed, a[i]->name);
			i++, j++;
		}
		n++;
	}
	return removed->oom || added->oom || changed->oom ? -ENOMEM : n;
}
