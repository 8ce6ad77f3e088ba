/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scan_group: the IOMMU group side of the VFIO scan: a function's group, switch and driver, the
 * legacy walk over /dev/vfio/<group>, and one resource per group.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/paths.h"
#include "group.h"
#include "scan_internal.h"

/* ---- one function ---- */

/* The last component of the link name of dirfd into out (size); "" when there is no link. */
static int link_base(int dirfd, const char *name, char *out, size_t size)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(dirfd, name, target, sizeof(target) - 1);
	if (n < 0) {
		out[0] = '\0';
		return -errno;
	}
	target[n] = '\0';
	const char *slash = strrchr(target, '/');
	if ((size_t)snprintf(out, size, "%s", slash ? slash + 1 : target) >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* A canonical decimal 0..UINT32_MAX (no sign, no leading zero). */
static bool parse_group(const char *s, unsigned *ret)
{
	unsigned long long v = 0;
	if (!*s || (s[0] == '0' && s[1]) || strlen(s) > 10)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return false;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v > UINT32_MAX)
		return false;
	*ret = (unsigned)v;
	return true;
}

/* FNV-1a of the first len bytes of s. */
static uint64_t hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
	return h;
}

/* The component of dir that ends at end: "<...>/<this>" */
static void base_of(const char *dir, const char *end, char *buf, size_t size)
{
	const char *p = end;
	while (p > dir && p[-1] != '/')
		p--;
	snprintf(buf, size, "%.*s", (int)(end - p), p);
}

/*
 * The switch a function sits under, from its sysfs path ".../<up>/<port>/<function>": the bridge
 * two levels up (a PCIe switch's upstream port, above the downstream port the function hangs
 * from), or the host bridge ("pciDDDD:BB") when the function's parent is not a PCI function (on
 * a root bus) or its grandparent is the host bridge (under a root port: the root complex is the
 * switch). Its key is the hash of the bridge's path, its name the path's last component.
 */
static void switch_of(const char *dir, struct kata_device *d)
{
	uint64_t ignored;
	const char *end = strrchr(dir, '/');
	size_t len;
	if (!end || end == dir) {
		d->switch_key = hash(dir, strlen(dir));
		snprintf(d->pcie_switch, sizeof(d->pcie_switch), "%s", "");
		return;
	}
	const char *p = end - 1;
	while (p > dir && *p != '/')
		p--;
	char parent[32];
	snprintf(parent, sizeof(parent), "%.*s", (int)(end - p - 1), p + 1);
	len = scan_parse_pci(parent, &ignored) ? (size_t)(p - dir) /* the bridge above the port */
					       : (size_t)(end - dir); /* on a root bus: the host bridge */
	d->switch_key = hash(dir, len);
	base_of(dir, dir + len, d->pcie_switch, sizeof(d->pcie_switch));
}

/* "pci" + 4 to 8 hex digits + ":" + 2 hex digits: a host bridge's directory. */
static bool host_bridge(const char *s, size_t len)
{
	size_t colon = 0;
	if (len < 10 || strncmp(s, "pci", 3) != 0)
		return false;
	for (size_t i = 3; i < len; i++) {
		if (s[i] == ':' && !colon)
			colon = i;
		else if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	}
	return colon >= 7 && colon <= 11 && len - colon == 3;
}

/* The first host bridge component of dir ("/sys/devices/pci0000:00/..." on x86; under a
 * platform device on many arm64 hosts). */
static void root_of(const char *dir, struct kata_device *d)
{
	d->pcie_root[0] = '\0';
	for (const char *s = dir; *s;) {
		while (*s == '/')
			s++;
		size_t len = strcspn(s, "/");
		if (host_bridge(s, len) && len < sizeof(d->pcie_root)) {
			snprintf(d->pcie_root, sizeof(d->pcie_root), "%.*s", (int)len, s);
			return;
		}
		s += len;
	}
}

int scan_read_topology(const struct ctx *c, int pcifd, struct kata_device *d, const char *dir, char *drv,
		       char *why)
{
	char name[32];
	int r = link_base(pcifd, "iommu_group", name, sizeof(name));
	if (r == -ENOENT) {
		scan_whyf(why, "%s has no iommu_group link (no IOMMU, or VFIO's no-IOMMU mode: not isolated)", dir);
		return r;
	}
	if (r < 0 || !parse_group(name, &d->group)) {
		scan_whyf(why, "%s/iommu_group does not name an IOMMU group", dir);
		return r < 0 ? r : -EINVAL;
	}
	switch_of(dir, d);
	root_of(dir, d);
	r = link_base(pcifd, "driver", drv, 64);
	if (r < 0 && r != -ENOENT) {
		scan_whyf(why, "cannot read %s/driver: %s", dir, strerror(-r));
		return r;
	}
	(void)c;
	return 0;
}

/* ---- legacy: /dev/vfio/<group> ---- */

/* The member name of group d->group is no device: said at info at start (its driver read for
 * the line only then, or at debug), at debug on the rescans. */
static void not_in_table(const struct ctx *c, int gfd, const char *name, const struct kata_device *d)
{
	/* the level the line below is logged at (the docs check reads it there) */
	enum dp_log_level lvl = c->o->verbose ? DP_LOG_INFO : DP_LOG_DEBUG;
	char link[NAME_MAX + sizeof("/driver")], drv[64], q[64], qd[200];
	if (!dp_log_enabled(lvl))
		return;
	snprintf(link, sizeof(link), "%s/driver", name);
	int r = link_base(gfd, link, drv, sizeof(drv));
	if (r < 0)
		snprintf(drv, sizeof(drv), "%s", r == -ENOENT ? "none" : "unknown");
	dp_log(c->o->verbose ? DP_LOG_INFO : DP_LOG_DEBUG, "skipping VFIO device",
	       "device=%s reason=%s group=%u vendor=0x%04x class=0x%06x driver=%s",
	       dp_logq(q, sizeof(q), name), "\"not in the table\"", d->group, d->vendor, d->pci_class,
	       dp_logq(qd, sizeof(qd), drv));
}

/* Member name of group g's directory gfd (shown: its path): kept when a table row matches it
 * and it is bound to a VFIO driver. The kernel names a member by the address of the function it
 * links to: a member that links elsewhere is skipped (its health check would look for it by its
 * own name). */
static void consider_member(struct ctx *c, int gfd, const char *name, const struct kata_device *g)
{
	struct kata_device d = *g;
	char shown[96], why[WHY_MAX], drv[64];
	uint64_t key;

	if (!scan_parse_pci(name, &key)) {
		scan_whyf(why, "IOMMU group %u: member not named by a PCI address", g->group);
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	if (scan_not_in_table(c, gfd, name, &d.vendor, &d.pci_class)) {
		not_in_table(c, gfd, name, &d);
		return;
	}
	snprintf(shown, sizeof(shown), KATA_GROUPS_DIR "/%u/devices/%s", g->group, name);
	snprintf(d.name, sizeof(d.name), "%s", name); /* parse_pci: at most 16 characters */
	if (scan_read_function(c, gfd, name, shown, &d, drv, why) < 0) {
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	if (strcmp(d.pci, name) != 0) {
		scan_whyf(why, "%s links to PCI device %s, not to its own address", shown, d.pci);
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	if (d.group != g->group) {
		scan_whyf(why, "listed in IOMMU group %u, but its iommu_group link names group %u", g->group, d.group);
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	int row = kata_table_match(c->o->table, c->o->n_rows, d.vendor, d.pci_class);
	if (row < 0) { /* the quick read could not decide it: it can now */
		not_in_table(c, gfd, name, &d);
		return;
	}
	if (!kata_driver_is_vfio(drv)) {
		scan_whyf(why, "not bound to vfio-pci (driver: %s)", drv[0] ? drv : "none");
		scan_skip(c, DP_LOG_INFO, name, why);
		return;
	}
	d.row = (size_t)row;
	scan_keep(c, &d);
}

/* The devices of g's group found so far are not advertised (why: the reason, logged once). */
static void drop_group(struct ctx *c, const struct kata_device *g, const char *why)
{
	size_t o = 0;
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->devs[i].path, g->path) != 0)
			c->devs[o++] = c->devs[i];
	c->matched -= c->n - o;
	c->n = o;
	scan_skip(c, DP_LOG_WARN, g->path, why);
}

/* Every member of g's group: a member past any count could be the one that makes the group
 * unusable. */
static void walk_members(struct ctx *c, const struct kata_device *g)
{
	char rel[64], why[WHY_MAX];
	struct dir_iter it = { 0 };
	const char *name;

	snprintf(rel, sizeof(rel), KATA_GROUPS_DIR "/%u/devices", g->group);
	_cleanup_close_ int fd = it.fd = scan_open_dir(rel, why, sizeof(why));
	if (fd < 0) {
		if (fd == -ENOENT)
			scan_whyf(why, "cannot read %s: %s", rel, strerror(ENOENT));
		scan_skip(c, DP_LOG_WARN, g->path, why);
		return;
	}
	while ((name = scan_dir_next(&it)))
		consider_member(c, fd, name, g);
	if (it.err) { /* a member not seen could be the one VFIO refuses */
		scan_whyf(why, "cannot read every member of %s: %s", rel, strerror(it.err));
		drop_group(c, g, why);
	}
}

/* /dev/vfio/<name>: a group node (char device, numbered as its sysfs class entry says). */
static void consider_group(struct ctx *c, int dfd, const char *name)
{
	struct kata_device g = { 0 };
	char why[WHY_MAX];
	struct stat st;

	snprintf(g.path, sizeof(g.path), KATA_VFIO_DIR "/%.20s", name);
	if (strcmp(name, "vfio") == 0 || strcmp(name, "devices") == 0)
		return; /* the container node; the cdevs' directory */
	if (strncmp(name, "noiommu-", 8) == 0) {
		scan_skip(c, DP_LOG_WARN, g.path, "VFIO no-IOMMU mode: the device is not isolated");
		return;
	}
	if (!parse_group(name, &g.group)) {
		char q[NAME_MAX * 4 + 3];
		dp_debug("ignoring entry", "dir=%s name=%s", KATA_VFIO_DIR, dp_logq(q, sizeof(q), name));
		return;
	}
	g.num = g.group;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISCHR(st.st_mode)) {
		scan_whyf(why, "%s is not a character device", g.path);
		scan_skip(c, DP_LOG_WARN, g.path, why);
		return;
	}
	g.rdev = st.st_rdev;
	size_t matched = c->matched;
	walk_members(c, &g);
	if (c->matched == matched)
		return; /* no device (a NIC VF's group): its node need not be checked */
	_cleanup_close_ int entry = scan_open_class_entry(c, name, &g, why);
	if (entry < 0)
		drop_group(c, &g, why);
}

int scan_walk_groups(struct ctx *c, char *err, size_t errlen)
{
	struct dir_iter it = { 0 };
	const char *name;
	_cleanup_close_ int fd = it.fd = scan_open_dir(KATA_VFIO_DIR, err, errlen);
	if (fd == -ENOENT) {
		dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "VFIO directory missing, nothing to scan",
		       "dir=%s reason=\"the vfio-pci module is not loaded, no device is bound to vfio-pci, "
		       "or the hostPath " KATA_VFIO_DIR " is not mounted\"", KATA_VFIO_DIR);
		return 0;
	}
	if (fd < 0)
		return fd;
	while ((name = scan_dir_next(&it))) /* every entry: a count would drop groups silently */
		consider_group(c, fd, name);
	return scan_dir_failed(&it, KATA_VFIO_DIR, err, errlen);
}

/* ---- one resource per group ---- */

static int cmp_group_pci(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->group != y->group)
		return x->group < y->group ? -1 : 1;
	return x->pci_key < y->pci_key ? -1 : x->pci_key > y->pci_key;
}

void scan_split_groups(struct ctx *c)
{
	char why[WHY_MAX];
	size_t o = 0, owner = 0;
	if (c->n > 1)
		qsort(c->devs, c->n, sizeof(*c->devs), cmp_group_pci);
	for (size_t i = 0; i < c->n; i++) {
		struct kata_device d = c->devs[i];
		if (o == 0 || d.group != c->devs[owner].group) { /* the group's lowest PCI address */
			owner = o;
			d.unit_key = d.pci_key;
			c->devs[o++] = d;
			continue;
		}
		const struct kata_device *w = &c->devs[owner];
		if (d.row != w->row || d.device_id != w->device_id) {
			scan_whyf(why, "shares IOMMU group %u with %s, which another resource advertises (a group is "
				  "never split between resources)", d.group, w->pci);
			scan_skip(c, DP_LOG_WARN, d.name, why);
			continue;
		}
		d.unit_key = w->pci_key;
		c->devs[o++] = d;
	}
	c->n = o;
}
