/* SPDX-License-Identifier: Apache-2.0 */
/* group: an IOMMU group's viability and its devices' binding, read from sysfs (group.h). */
#include "group.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dp/macro.h"
#include "dp/paths.h"
#include "scan_internal.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n > k && strcmp(s + n - k, suffix) == 0;
}

bool kata_driver_is_vfio(const char *drv)
{
	return strcmp(drv, "vfio-pci") == 0 || ends_with(drv, "_vfio_pci") || ends_with(drv, "-vfio-pci");
}

bool kata_driver_dma_ok(const char *drv)
{
	return !drv[0] || kata_driver_is_vfio(drv) || strcmp(drv, "pci-stub") == 0 || strcmp(drv, "pcieport") == 0;
}

/* The driver of member name of the group directory gfd into drv (KATA_DRIVER_MAX bytes; "" for
 * none). A name is never cut: a link not found because its name was cut would read as "no
 * driver", which VFIO accepts. -ENAMETOOLONG for a driver name that does not fit. */
static int member_driver(int gfd, const char *name, char *drv)
{
	char link[NAME_MAX + sizeof("/driver")], target[PATH_MAX];
	drv[0] = '\0';
	if ((size_t)snprintf(link, sizeof(link), "%s/driver", name) >= sizeof(link))
		return -ENAMETOOLONG;
	ssize_t n = readlinkat(gfd, link, target, sizeof(target) - 1);
	if (n < 0)
		return errno == ENOENT ? 0 : -errno;
	target[n] = '\0';
	const char *slash = strrchr(target, '/');
	const char *base = slash ? slash + 1 : target;
	if (strlen(base) >= KATA_DRIVER_MAX)
		return -ENAMETOOLONG;
	memcpy(drv, base, strlen(base) + 1);
	return 0;
}

static int verdict(struct kata_group_verdict *v, int r, const char *member, const char *drv, const char *fmt, ...)
	_printf_(5, 6);

static int verdict(struct kata_group_verdict *v, int r, const char *member, const char *drv, const char *fmt, ...)
{
	va_list ap;
	snprintf(v->member, sizeof(v->member), "%s", member);
	snprintf(v->driver, sizeof(v->driver), "%s", drv);
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(v->reason, sizeof(v->reason), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	return r;
}

/* Every member's driver is one VFIO accepts (the directory read with getdents64, as the scan
 * reads its own: no opendir allocation, no dup). */
static int members_ok(int gfd, unsigned group, struct kata_group_verdict *v)
{
	struct dir_iter it = { .fd = openat(gfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC) };
	_cleanup_close_ int fd = it.fd;
	const char *name;
	char drv[KATA_DRIVER_MAX] = "";
	if (fd < 0)
		return verdict(v, -errno, "", "", "cannot read IOMMU group %u: %s", group, strerror(errno));
	while ((name = scan_dir_next(&it))) { /* every member: any one can make the group unusable */
		int e = member_driver(gfd, name, drv);
		if (e < 0)
			return verdict(v, e, name, "", "IOMMU group %u: cannot read the driver of member %s: %s", group,
				       name, strerror(-e));
		if (!kata_driver_dma_ok(drv))
			return verdict(v, -EPERM, name, drv,
				       "IOMMU group %u is not viable: member %s is bound to %s (a host driver; "
				       "bind it to vfio-pci or unbind it)", group, name, drv);
	}
	if (it.err) /* a member not seen could be the one VFIO refuses */
		return verdict(v, -it.err, "", "", "cannot read IOMMU group %u: %s", group, strerror(it.err));
	return 0;
}

int kata_group_check(unsigned group, const char *const *pcis, size_t n, struct kata_group_verdict *ret)
{
	char rel[64], path[PATH_MAX], drv[KATA_DRIVER_MAX] = "";
	*ret = (struct kata_group_verdict){ 0 };
	snprintf(rel, sizeof(rel), KATA_GROUPS_DIR "/%u/devices", group);
	if (dp_path(path, sizeof(path), rel) < 0)
		return verdict(ret, -EINVAL, "", "", "invalid root prefix");
	_cleanup_close_ int gfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (gfd < 0)
		return verdict(ret, errno == ENOENT ? -ENODEV : -errno, "", "", "cannot read %s: %s", rel,
			       strerror(errno));
	for (size_t i = 0; i < n; i++) {
		int e = faccessat(gfd, pcis[i], F_OK, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : member_driver(gfd, pcis[i], drv);
		if (e == -ENOENT)
			return verdict(ret, -ENODEV, pcis[i], "", "%s is no longer in IOMMU group %u", pcis[i], group);
		if (e < 0)
			return verdict(ret, e, pcis[i], "", "IOMMU group %u: cannot read %s: %s", group, pcis[i],
				       strerror(-e));
		if (!kata_driver_is_vfio(drv))
			return verdict(ret, -ENODEV, pcis[i], drv, "%s is no longer bound to vfio-pci (driver: %s)",
				       pcis[i], drv[0] ? drv : "none");
	}
	return members_ok(gfd, group, ret);
}
