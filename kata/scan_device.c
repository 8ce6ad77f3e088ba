/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scan_device: one VFIO device of the scan: its sysfs class entry, the PCI device behind it and
 * the identity attributes, read bounded, resolved inside the root's /sys, cached when immutable.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/paths.h"
#include "scan_internal.h"

/* The reason of a skip (WHY_MAX bytes; cut when longer). */
void scan_whyf(char *why, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(why, WHY_MAX, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
}

/* ---- bounded reads ---- */

/* Read attribute name of dirfd into buf (ATTR_MAX + 1 bytes); *ret_n its length. shown: the
 * path for messages. 0, or negative errno with why set. */
static int read_attr(int dirfd, const char *name, const char *shown, char *buf, size_t *ret_n,
		     struct stat *ret_st, char *why)
{
	struct stat st;
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		int r = -errno;
		if (r == -ENOENT)
			scan_whyf(why, "%s/%s is missing", shown, name);
		else if (r == -ELOOP)
			scan_whyf(why, "%s/%s is a symlink", shown, name);
		else
			scan_whyf(why, "cannot open %s/%s: %s", shown, name, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		scan_whyf(why, "%s/%s is not a regular file", shown, name);
		return -EBADF;
	}
	ssize_t n = read(fd, buf, ATTR_MAX);
	if (n < 0) {
		int r = -errno;
		scan_whyf(why, "cannot read %s/%s: %s", shown, name, strerror(-r));
		return r;
	}
	if (n == ATTR_MAX) {
		scan_whyf(why, "%s/%s is longer than %d bytes", shown, name, ATTR_MAX - 1);
		return -EFBIG;
	}
	buf[n] = '\0';
	*ret_n = (size_t)n;
	if (ret_st)
		*ret_st = st;
	return 0;
}

typedef bool (*parse_fn)(const char *buf, size_t n, uint64_t *ret);

/* An immutable attribute's value: the cache's when the file is the one the previous scan read,
 * else read, parsed and given to the cache. 0; -EBADMSG when it does not parse (the caller
 * says what it expected); another negative errno with why set. */
static int attr_value(const struct ctx *c, int dirfd, const char *name, const char *shown,
		      enum kata_cache_kind kind, parse_fn parse, uint64_t *ret, char *why)
{
	char buf[ATTR_MAX + 1];
	struct stat st;
	size_t n = 0;
	kata_cache *cache = c->o->cache;
	if (cache && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    kata_cache_get(cache, &st, kind, ret))
		return 0;
	int r = read_attr(dirfd, name, shown, buf, &n, &st, why);
	if (r < 0)
		return r;
	if (!parse(buf, n, ret))
		return -EBADMSG;
	if (cache)
		kata_cache_put(cache, &st, kind, *ret);
	return 0;
}

/* ---- the quick "not in the table" ---- */

bool scan_not_in_table(const struct ctx *c, int dirfd, const char *fn, uint16_t *ret_vendor, uint32_t *ret_class)
{
	char path[PATH_MAX], why[WHY_MAX];
	uint64_t vendor, cls;
	if (dirfd < 0 || (size_t)snprintf(path, sizeof(path), "%s/vendor", fn) >= sizeof(path) ||
	    attr_value(c, dirfd, path, fn, KATA_CACHE_VENDOR, scan_parse_vendor, &vendor, why) < 0)
		return false;
	snprintf(path, sizeof(path), "%s/class", fn);
	if (attr_value(c, dirfd, path, fn, KATA_CACHE_CLASS, scan_parse_class, &cls, why) < 0 ||
	    kata_table_match(c->o->table, c->o->n_rows, (uint16_t)vendor, (uint32_t)cls) >= 0)
		return false;
	*ret_vendor = (uint16_t)vendor;
	*ret_class = (uint32_t)cls;
	return true;
}

/* ---- one device ---- */

/* The path fd is open at, as the kernel names it (/proc/self/fd/<fd>): buf (PATH_MAX). Length, or
 * negative errno. */
ssize_t scan_fd_path(const struct ctx *c, int fd, char *buf)
{
	char link[16];
	if (c->procfd < 0)
		return -c->proc_errno;
	snprintf(link, sizeof(link), "%d", fd);
	ssize_t n = readlinkat(c->procfd, link, buf, PATH_MAX);
	if (n < 0)
		return -errno;
	if (n == 0 || n >= PATH_MAX || buf[0] != '/')
		return -ENAMETOOLONG;
	buf[n] = '\0';
	return n;
}

/*
 * Resolve name (relative to dirfd) following every link, as realpath() does, and ask the kernel
 * where it led: two system calls on every rescan where realpath() makes one readlink per path
 * component. The result must lie inside the root's /sys; real (PATH_MAX) gets it. Returns an fd
 * of the directory, or negative errno with why set. When the target resolves inside but cannot
 * be opened as a directory, the fd is an O_PATH one and *open_err that open's errno, which the
 * caller reports after its own checks of the path (as an open of realpath()'s result would).
 */
static int resolve_in_sys(const struct ctx *c, int dirfd, const char *name, const char *shown,
			  char *real, int *open_err, char *why)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	*open_err = fd < 0 ? errno : 0;
	if (fd < 0) /* resolution errors are this open's too */
		fd = openat(dirfd, name, O_PATH | O_CLOEXEC);
	ssize_t r = fd < 0 ? -errno : scan_fd_path(c, fd, real);
	if (r < 0) {
		if (r == -ELOOP)
			scan_whyf(why, "symlink loop at %s", shown);
		else if (r == -ENOENT && fd < 0)
			scan_whyf(why, "%s does not resolve to an existing path", shown);
		else
			scan_whyf(why, "cannot resolve %s: %s", shown, strerror((int)-r));
		return (int)r;
	}
	size_t sl = strlen(c->sysroot);
	if (!sl || strncmp(real, c->sysroot, sl) != 0 || real[sl] != '/') {
		scan_whyf(why, "%s resolves outside %s/sys: %s", shown, dp_root(), real);
		return -EXDEV;
	}
	return TAKE_FD(fd);
}

static int open_failed(int open_err, const char *shown, char *why)
{
	scan_whyf(why, "cannot open %s: %s", shown, strerror(open_err));
	return -open_err;
}

/* The class entry <c->class_dir>/<entry>: its dev number must match the node's (d->rdev, d->path).
 * Returns the entry's fd. */
int scan_open_class_entry(const struct ctx *c, const char *entry, const struct kata_device *d, char *why)
{
	char path[PATH_MAX], real[PATH_MAX], shown[64];
	struct stat st;
	uint64_t v;
	dev_t devno;
	int r, open_err;

	snprintf(shown, sizeof(shown), "%s/%s", c->class_dir, entry);
	r = dp_path(path, sizeof(path), shown);
	if (r < 0) {
		scan_whyf(why, "invalid root prefix");
		return r;
	}
	/* through the class directory opened once per scan, else by path */
	int dirfd = c->classfd >= 0 ? c->classfd : AT_FDCWD;
	const char *name = c->classfd >= 0 ? entry : path;
	_cleanup_close_ int fd = resolve_in_sys(c, dirfd, name, shown, real, &open_err, why);
	if (fd == -ENOENT && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		scan_whyf(why, "%s without sysfs: %s is missing",
			  c->o->backend == KATA_BACKEND_LEGACY ? "group node" : "cdev", shown);
		return -ENOENT;
	}
	if (fd < 0)
		return fd;
	if (open_err)
		return open_failed(open_err, shown, why);
	r = attr_value(c, fd, "dev", shown, KATA_CACHE_DEV, scan_parse_devno, &v, why);
	if (r == -EBADMSG) {
		scan_whyf(why, "%s/dev is not \"MAJ:MIN\\n\"", shown);
		return -EINVAL;
	}
	if (r < 0)
		return r;
	devno = (dev_t)v;
	if (devno != d->rdev) {
		scan_whyf(why, "dev number mismatch: %s is %u:%u but %s/dev says %u:%u", d->path,
		     major(d->rdev), minor(d->rdev), shown, major(devno), minor(devno));
		return -EXDEV;
	}
	return TAKE_FD(fd);
}

/* The PCI function name resolves to from dirfd (every link followed from its real location, as
 * the kernel does). Returns its directory fd; dir (PATH_MAX) gets its path without the root. */
static int open_function(const struct ctx *c, int dirfd, const char *name, const char *shown,
			 struct kata_device *d, char *dir, char *why)
{
	char real[PATH_MAX];
	int open_err;
	_cleanup_close_ int fd = resolve_in_sys(c, dirfd, name, shown, real, &open_err, why);
	if (fd < 0)
		return fd;
	const char *base = strrchr(real, '/') + 1;
	snprintf(dir, PATH_MAX, "%s", real + strlen(dp_root()));
	if (!scan_parse_pci(base, &d->pci_key)) {
		scan_whyf(why, "%s does not name a PCI device: %s", shown, dir);
		return -EINVAL;
	}
	snprintf(d->pci, sizeof(d->pci), "%s", base);
	return open_err ? open_failed(open_err, dir, why) : TAKE_FD(fd);
}

/* The entry's "device" must be a symlink. */
static int check_device_link(int entry_fd, const char *shown, char *why)
{
	struct stat st;
	if (fstatat(entry_fd, "device", &st, AT_SYMLINK_NOFOLLOW) < 0) {
		int r = -errno;
		if (r == -ENOENT)
			scan_whyf(why, "%s is missing", shown);
		else
			scan_whyf(why, "cannot stat %s: %s", shown, strerror(-r));
		return r;
	}
	if (!S_ISLNK(st.st_mode)) {
		scan_whyf(why, "%s is not a symlink", shown);
		return -EINVAL;
	}
	return 0;
}

static void read_numa(const struct ctx *c, int fd, struct kata_device *d, const char *dir)
{
	char buf[ATTR_MAX + 1], why[WHY_MAX], q[WHY_MAX + 64], qn[64];
	size_t n = 0;
	int node;

	d->numa_node = -1;
	if (read_attr(fd, "numa_node", dir, buf, &n, NULL, why) == 0) {
		if (!scan_parse_numa(buf, n, &node))
			scan_whyf(why, "%s/numa_node is not \"-1\\n\" or a node number + newline", dir);
		else if (node > KATA_NUMA_NODE_MAX)
			scan_whyf(why, "%s/numa_node is %d, above the highest node number a kernel can have (%d)", dir,
				  node, KATA_NUMA_NODE_MAX);
		else {
			d->numa_node = node;
			return;
		}
	}
	dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "NUMA node unknown, advertising without topology",
	       "device=%s pci=%s reason=%s", dp_logq(qn, sizeof(qn), d->name), d->pci, dp_logq(q, sizeof(q), why));
}

/* One identity attribute: "0x" + digits hex digits + newline; a malformed one says so in why. */
static int read_hex_attr(const struct ctx *c, int fd, const char *attr, const char *dir,
			 enum kata_cache_kind cache, parse_fn parse, int digits, uint64_t *ret, char *why)
{
	int r = attr_value(c, fd, attr, dir, cache, parse, ret, why);

	if (r == -EBADMSG) {
		scan_whyf(why, "%s/%s is not \"0x\" + %d hex digits + newline", dir, attr, digits);
		return -EINVAL;
	}
	return r;
}

static int read_identity(const struct ctx *c, int fd, struct kata_device *d, const char *dir, char *why)
{
	uint64_t v;
	int r;

	r = read_hex_attr(c, fd, "vendor", dir, KATA_CACHE_VENDOR, scan_parse_vendor, 4, &v, why);
	if (r < 0)
		return r;
	d->vendor = (uint16_t)v;
	r = read_hex_attr(c, fd, "class", dir, KATA_CACHE_CLASS, scan_parse_class, 6, &v, why);
	if (r < 0)
		return r;
	d->pci_class = (uint32_t)v;
	if (c->o->read_device_id) {
		r = read_hex_attr(c, fd, "device", dir, KATA_CACHE_DEVICE, scan_parse_vendor, 4, &v, why);
		if (r < 0)
			return r;
		d->device_id = (uint16_t)v;
	}
	read_numa(c, fd, d, dir);
	return 0;
}

int scan_read_function(const struct ctx *c, int dirfd, const char *name, const char *shown,
		       struct kata_device *d, char *drv, char *why)
{
	char dir[PATH_MAX];
	_cleanup_close_ int pci = open_function(c, dirfd, name, shown, d, dir, why);
	if (pci < 0)
		return pci;
	int r = read_identity(c, pci, d, dir, why);
	return r < 0 ? r : scan_read_topology(c, pci, d, dir, drv, why);
}

/* Fill d for the cdev; 0 when it is a well-formed VFIO PCI device (matching or not), else
 * negative errno with why. */
int scan_inspect(const struct ctx *c, struct kata_device *d, char *why)
{
	char shown[64], drv[64];
	_cleanup_close_ int entry = scan_open_class_entry(c, d->name, d, why);
	if (entry < 0)
		return entry;
	snprintf(shown, sizeof(shown), KATA_SYSFS_DIR "/%s/device", d->name);
	int r = check_device_link(entry, shown, why);
	return r < 0 ? r : scan_read_function(c, entry, "device", shown, d, drv, why);
}
