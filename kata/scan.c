/* SPDX-License-Identifier: Apache-2.0 */
/* scan: the VFIO scan's walks (/dev/vfio/devices, /sys/class/vfio-dev), the devices kept, their order. */
#include "scan.h"

#include <dirent.h>
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
#include "scan_internal.h"

/* ---- logging ---- */

void scan_skip(const struct ctx *c, enum dp_log_level lvl, const char *name, const char *why)
{
	char qn[64], qw[WHY_MAX + 64];
	dp_log(c->o->verbose ? lvl : DP_LOG_DEBUG, "skipping VFIO device", "device=%s reason=%s",
	       dp_logq(qn, sizeof(qn), name), dp_logq(qw, sizeof(qw), why));
}

/* ---- the walks ---- */

static int cmp_pci(const void *a, const void *b);

/* More than max devices: keep the first max by PCI address, and those sharing the last one's
 * address (drop_duplicates must see a device claimed twice whole). Which devices are kept does
 * not depend on the order the directory lists them in. */
static void keep_first(struct ctx *c)
{
	qsort(c->devs, c->n, sizeof(*c->devs), cmp_pci);
	size_t keep = c->max;
	while (keep < c->n && c->devs[keep].pci_key == c->devs[c->max - 1].pci_key)
		keep++;
	c->n = keep < c->cap ? keep : c->max; /* all tied (pathological): cut at max */
}

/* Room for one more device: grown as found, up to 2 x max (a full-size array would be a fresh
 * mmap on every rescan), then the first max by PCI address kept. */
static bool make_room(struct ctx *c)
{
	if (c->cap == 2 * c->max) {
		keep_first(c);
		return true;
	}
	size_t cap = c->cap ? c->cap * 2 : 8;
	cap = cap < 2 * c->max ? cap : 2 * c->max;
	struct kata_device *v = reallocarray(c->devs, cap, sizeof(*v));
	if (!v) {
		c->oom = true;
		return false;
	}
	c->devs = v;
	c->cap = cap;
	return true;
}

/* The cdev name is no device: said at info at start, at debug on the rescans; the PCI address
 * (d->pci, or its "device" link's last component) read for the line only when it is logged. */
static void not_in_table(const struct ctx *c, const char *name, const struct kata_device *d)
{
	/* the level the line below is logged at (the docs check reads it there) */
	enum dp_log_level lvl = c->o->verbose ? DP_LOG_INFO : DP_LOG_DEBUG;
	char link[32], target[PATH_MAX], q[64], qp[96];
	if (!dp_log_enabled(lvl))
		return;
	const char *pci = d->pci;
	if (!pci[0]) {
		snprintf(link, sizeof(link), "%.15s/device", name);
		ssize_t n = c->classfd >= 0 ? readlinkat(c->classfd, link, target, sizeof(target) - 1) : -1;
		target[n > 0 ? n : 0] = '\0';
		const char *slash = strrchr(target, '/');
		pci = n > 0 ? (slash ? slash + 1 : target) : "unknown";
	}
	dp_log(c->o->verbose ? DP_LOG_INFO : DP_LOG_DEBUG, "skipping VFIO device",
	       "device=%s reason=%s pci=%s vendor=0x%04x class=0x%06x",
	       dp_logq(q, sizeof(q), name), "\"not in the table\"", dp_logq(qp, sizeof(qp), pci), d->vendor,
	       d->pci_class);
}

static void consider(struct ctx *c, int dfd, const char *name)
{
	struct kata_device d = { 0 };
	char why[WHY_MAX];
	struct stat st;
	unsigned num;

	if (!scan_parse_name(name, &num)) {
		scan_skip(c, DP_LOG_WARN, name, "name is not vfio<N> (N decimal without leading zeros)");
		return;
	}
	d.num = num;
	snprintf(d.name, sizeof(d.name), "%.15s", name); /* parse_name: at most 13 characters */
	snprintf(d.path, sizeof(d.path), KATA_DEV_DIR "/%.15s", name);
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		scan_whyf(why, "cannot stat %s: %s", d.path, strerror(errno));
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	if (!S_ISCHR(st.st_mode)) {
		scan_whyf(why, "%s is not a character device", d.path);
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	d.rdev = st.st_rdev;
	snprintf(why, sizeof(why), "%s/device", name);
	if (scan_not_in_table(c, c->classfd, why, &d.vendor, &d.pci_class)) {
		not_in_table(c, name, &d);
		return;
	}
	if (scan_inspect(c, &d, why) < 0) {
		scan_skip(c, DP_LOG_WARN, name, why);
		return;
	}
	int row = kata_table_match(c->o->table, c->o->n_rows, d.vendor, d.pci_class);
	if (row < 0) { /* the quick read could not decide it: it can now */
		not_in_table(c, name, &d);
		return;
	}
	d.row = (size_t)row;
	scan_keep(c, &d);
}

void scan_keep(struct ctx *c, const struct kata_device *d)
{
	if (c->n == c->cap && !make_room(c))
		return;
	c->devs[c->n++] = *d;
	c->matched++;
}

static bool dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* The next name other than "." and "..", or NULL at the end or on a read error (it->err). */
const char *scan_dir_next(struct dir_iter *it)
{
	for (;;) {
		if (it->pos >= it->len) {
			ssize_t n = getdents64(it->fd, (void *)it->buf, sizeof(it->buf));
			it->err = n < 0 ? errno : 0;
			if (n <= 0)
				return NULL;
			it->pos = 0;
			it->len = (size_t)n;
		}
		const struct dirent64 *de = (const struct dirent64 *)(void *)(it->buf + it->pos);
		it->pos += de->d_reclen;
		if (!dot(de->d_name))
			return de->d_name;
	}
}

/* No KATA_DEV_DIR: say which directory is missing (/dev/vfio itself, or only its devices/) and
 * what that usually means; once at start (warn), at debug on the rescans. */
static void log_missing_dev_dir(const struct ctx *c)
{
	char parent[PATH_MAX];
	struct stat st;
	bool no_vfio = dp_path(parent, sizeof(parent), KATA_VFIO_DIR) == 0 && stat(parent, &st) < 0 &&
		       errno == ENOENT;

	if (no_vfio)
		dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "VFIO directory missing, nothing to scan",
		       "dir=%s reason=\"the vfio-pci and iommufd modules are not loaded, no device is bound to "
		       "vfio-pci, or the hostPath " KATA_VFIO_DIR " is not mounted\"", KATA_VFIO_DIR);
	else
		dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "VFIO directory missing, nothing to scan",
		       "dir=%s reason=\"no IOMMUFD cdevs: a kernel without CONFIG_IOMMUFD and "
		       "CONFIG_VFIO_DEVICE_CDEV (every Debian kernel; use VFIO_BACKEND=legacy or auto), or no "
		       "device is bound to vfio-pci\"", KATA_DEV_DIR);
}

int scan_open_dir(const char *dir, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int r = dp_path(path, sizeof(path), dir);
	if (r < 0) {
		snprintf(err, errlen, "invalid %s", DP_TEST_ROOT_ENV);
		return r;
	}
	int fd = openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 || errno == ENOENT)
		return fd >= 0 ? fd : -ENOENT;
	r = -errno;
	snprintf(err, errlen, "cannot read %s: %s", dir, strerror(-r));
	return r;
}

static int walk_dev(struct ctx *c, char *err, size_t errlen)
{
	struct dir_iter it = { 0 };
	const char *name;
	_cleanup_close_ int fd = it.fd = scan_open_dir(KATA_DEV_DIR, err, errlen);
	if (fd == -ENOENT) {
		log_missing_dev_dir(c);
		return 0;
	}
	if (fd < 0)
		return fd;
	while ((name = scan_dir_next(&it)))
		consider(c, fd, name); /* every entry: which are kept is decided by PCI address */
	return scan_dir_failed(&it, KATA_DEV_DIR, err, errlen);
}

int scan_dir_failed(const struct dir_iter *it, const char *dir, char *err, size_t errlen)
{
	if (!it->err)
		return 0;
	snprintf(err, errlen, "cannot read %s: %s", dir, strerror(it->err));
	return -it->err;
}

static int cmp_num(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	return x->num < y->num ? -1 : x->num > y->num;
}

/* Whether walk_dev found vfio<num> (c->devs sorted by number): its cdev needs no second stat. */
static bool found(const struct ctx *c, unsigned num)
{
	size_t lo = 0, hi = c->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->devs[mid].num == num)
			return true;
		if (c->devs[mid].num < num)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* sysfs entries whose name has no entry (of any type) in /dev/vfio/devices. */
static void walk_sysfs(struct ctx *c)
{
	char cdev[PATH_MAX], why[WHY_MAX], q[NAME_MAX * 4 + 3];
	struct dir_iter it = { 0 };
	const char *name;
	struct stat st;
	unsigned num;

	if (dp_path(cdev, sizeof(cdev), KATA_DEV_DIR) < 0)
		return;
	it.fd = c->classfd;
	if (it.fd < 0) {
		if (c->class_errno != ENOENT)
			dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "cannot read VFIO sysfs class",
			       "dir=%s error=%s", KATA_SYSFS_DIR, strerror(c->class_errno));
		return;
	}
	_cleanup_close_ int dfd = -2; /* opened for the first name walk_dev did not find */
	if (c->n > 1)
		qsort(c->devs, c->n, sizeof(*c->devs), cmp_num);
	while ((name = scan_dir_next(&it))) {
		if (!scan_parse_name(name, &num)) {
			dp_debug("ignoring sysfs entry", "dir=%s name=%s", KATA_SYSFS_DIR, dp_logq(q, sizeof(q), name));
			continue;
		}
		if (found(c, num))
			continue;
		if (dfd == -2)
			dfd = openat(AT_FDCWD, cdev, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0 && fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		if (dfd >= 0 && errno != ENOENT)
			continue; /* unknowable: say nothing rather than something wrong */
		scan_whyf(why, "sysfs entry without cdev: " KATA_SYSFS_DIR "/%s exists, " KATA_DEV_DIR "/%s does not",
		     name, name);
		scan_skip(c, DP_LOG_WARN, name, why);
	}
}

static int cmp_pci(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->pci_key != y->pci_key)
		return x->pci_key < y->pci_key ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* By row, then group (the group's lowest PCI address), then PCI address. */
static int cmp_row_pci(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	if (x->unit_key != y->unit_key)
		return x->unit_key < y->unit_key ? -1 : 1;
	return cmp_pci(a, b);
}

/* Two cdevs resolving to one PCI device: neither can be trusted. */
static void drop_duplicates(struct ctx *c)
{
	char why[WHY_MAX];
	size_t o = 0;
	if (c->n > 1)
		qsort(c->devs, c->n, sizeof(*c->devs), cmp_pci);
	for (size_t i = 0; i < c->n; i++) {
		bool dup_prev = i > 0 && c->devs[i - 1].pci_key == c->devs[i].pci_key;
		bool dup_next = i + 1 < c->n && c->devs[i + 1].pci_key == c->devs[i].pci_key;
		if (!dup_prev && !dup_next) {
			c->devs[o++] = c->devs[i];
			continue;
		}
		const struct kata_device *other = &c->devs[dup_next ? i + 1 : i - 1];
		scan_whyf(why, "PCI device %s is also claimed by %s", c->devs[i].pci, other->name);
		scan_skip(c, DP_LOG_WARN, c->devs[i].name, why);
	}
	c->n = o;
}

/* /proc/self/fd and the canonical <root>/sys as an earlier scan under the same root found them. */
static bool cached_root(struct ctx *c)
{
	const char *sysroot;
	if (!c->o->cache || !kata_cache_root(c->o->cache, dp_root(), &c->procfd, &sysroot))
		return false;
	snprintf(c->sysroot, sizeof(c->sysroot), "%s", sysroot);
	c->procfd_cached = true;
	return true;
}

/* Open /proc/self/fd and resolve sys (the root's /sys); found, they go to the cache. */
static void find_root(struct ctx *c, const char *sys)
{
	c->procfd = openat(AT_FDCWD, "/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	c->proc_errno = c->procfd < 0 ? errno : 0;
	_cleanup_close_ int fd = openat(AT_FDCWD, sys, O_PATH | O_CLOEXEC);
	if (fd < 0 || scan_fd_path(c, fd, c->sysroot) < 0)
		c->sysroot[0] = '\0'; /* nothing resolves inside */
	else if (c->o->cache && kata_cache_set_root(c->o->cache, dp_root(), c->procfd, c->sysroot) == 0)
		c->procfd_cached = true;
}

static int init_ctx(struct ctx *c, const struct kata_scan_opts *o)
{
	char path[PATH_MAX];
	c->o = o;
	c->max = o->max_entries ? o->max_entries : KATA_MAX_ENTRIES;
	int r = dp_path(path, sizeof(path), "/sys");
	if (r < 0)
		return r;
	if (o->cache)
		kata_cache_begin(o->cache);
	if (!cached_root(c))
		find_root(c, path);
	c->class_dir = o->backend == KATA_BACKEND_LEGACY ? KATA_GROUP_CLASS_DIR : KATA_SYSFS_DIR;
	if (dp_path(path, sizeof(path), c->class_dir) < 0)
		return -EINVAL;
	c->classfd = openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	c->class_errno = c->classfd < 0 ? errno : 0;
	return 0;
}

static void ctx_close(struct ctx *c)
{
	if (c->procfd >= 0 && !c->procfd_cached)
		close(c->procfd);
	if (c->classfd >= 0)
		close(c->classfd);
}

int kata_scan_run(const struct kata_scan_opts *o, struct kata_scan *ret, char *err, size_t errlen)
{
	struct ctx c = { .procfd = -1, .classfd = -1 };
	int r = init_ctx(&c, o);
	if (r < 0)
		snprintf(err, errlen, "invalid " DP_TEST_ROOT_ENV " (not an absolute path, or too long)");
	else if (o->backend == KATA_BACKEND_LEGACY)
		r = scan_walk_groups(&c, err, errlen);
	else
		r = walk_dev(&c, err, errlen);
	if (r >= 0 && c.oom) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (r >= 0 && o->backend == KATA_BACKEND_IOMMUFD)
		walk_sysfs(&c);
	ctx_close(&c);
	if (r < 0) {
		free(c.devs);
		return r;
	}
	if (o->cache)
		kata_cache_end(o->cache);
	drop_duplicates(&c);
	if (c.n > c.max) {
		dp_log(o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG,
		       "too many VFIO devices, advertising the first by PCI address",
		       "devices=%zu advertised=%zu last=%s", c.matched, c.max, c.devs[c.max - 1].pci);
		c.n = c.max;
	}
	scan_split_groups(&c);
	if (c.n > 1)
		qsort(c.devs, c.n, sizeof(*c.devs), cmp_row_pci);
	/* Keep only what was found (never NULL, even for none). */
	struct kata_device *fit = realloc(c.devs, (c.n ? c.n : 1) * sizeof(*c.devs));
	if (fit)
		c.devs = fit;
	*ret = (struct kata_scan){ .devices = c.devs, .n_devices = c.n };
	return 0;
}

void kata_scan_done(struct kata_scan *s)
{
	free(s->devices);
	*s = (struct kata_scan){ 0 };
}

size_t kata_scan_row(const struct kata_scan *s, size_t row, size_t *ret_first)
{
	size_t first = 0, n = 0;
	while (first < s->n_devices && s->devices[first].row < row)
		first++;
	while (first + n < s->n_devices && s->devices[first + n].row == row)
		n++;
	*ret_first = first;
	return n;
}

enum kata_backend kata_device_backend(const struct kata_device *d)
{
	return strncmp(d->path, KATA_DEV_DIR "/", sizeof(KATA_DEV_DIR)) == 0 ? KATA_BACKEND_IOMMUFD
										 : KATA_BACKEND_LEGACY;
}
