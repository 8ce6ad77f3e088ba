/* SPDX-License-Identifier: Apache-2.0 */
#include "scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/paths.h"

#define ATTR_MAX 64 /* bytes read from one attribute, at most */
#define WHY_MAX 768

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

/* ---- logging ---- */

/* The reason of a skip (WHY_MAX bytes; cut when longer). */
_printf_(2, 3) static void whyf(char *why, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(why, WHY_MAX, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
}

static void skip(const struct ctx *c, enum dp_log_level lvl, const char *name, const char *why)
{
	char qn[64], qw[WHY_MAX + 64];
	dp_log(c->o->verbose ? lvl : DP_LOG_DEBUG, "skipping VFIO device", "device=%s reason=%s",
	       dp_logq(qn, sizeof(qn), name), dp_logq(qw, sizeof(qw), why));
}

/* ---- parsers: buf holds exactly n bytes (may contain NULs) ---- */

static int hex_digit(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* "0x" + exactly digits hex digits + "\n". */
static bool parse_hex(const char *buf, size_t n, size_t digits, uint32_t *ret)
{
	uint32_t v = 0;
	if (n != digits + 3 || buf[0] != '0' || buf[1] != 'x' || buf[n - 1] != '\n')
		return false;
	for (size_t i = 2; i < n - 1; i++) {
		int d = hex_digit(buf[i]);
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
static bool parse_numa(const char *buf, size_t n, int *ret)
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
	return ch >= 'A' && ch <= 'F' ? -1 : hex_digit(ch);
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
static bool parse_pci(const char *s, uint64_t *ret)
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
static bool parse_name(const char *name, unsigned *ret)
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
			whyf(why, "%s/%s is missing", shown, name);
		else if (r == -ELOOP)
			whyf(why, "%s/%s is a symlink", shown, name);
		else
			whyf(why, "cannot open %s/%s: %s", shown, name, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		whyf(why, "%s/%s is not a regular file", shown, name);
		return -EBADF;
	}
	ssize_t n = read(fd, buf, ATTR_MAX);
	if (n < 0) {
		int r = -errno;
		whyf(why, "cannot read %s/%s: %s", shown, name, strerror(-r));
		return r;
	}
	if (n == ATTR_MAX) {
		whyf(why, "%s/%s is longer than %d bytes", shown, name, ATTR_MAX - 1);
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

static bool parse_devno_u64(const char *buf, size_t n, uint64_t *ret)
{
	dev_t d;
	if (!parse_devno(buf, n, &d))
		return false;
	*ret = (uint64_t)d;
	return true;
}

static bool parse_vendor(const char *buf, size_t n, uint64_t *ret)
{
	uint32_t v;
	if (!parse_hex(buf, n, 4, &v))
		return false;
	*ret = v;
	return true;
}

static bool parse_class(const char *buf, size_t n, uint64_t *ret)
{
	uint32_t v;
	if (!parse_hex(buf, n, 6, &v))
		return false;
	*ret = v;
	return true;
}

/* ---- one device ---- */

/* The path fd is open at, as the kernel names it (/proc/self/fd/<fd>): buf (PATH_MAX). Length, or
 * negative errno. */
static ssize_t fd_path(const struct ctx *c, int fd, char *buf)
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
	ssize_t r = fd < 0 ? -errno : fd_path(c, fd, real);
	if (r < 0) {
		if (r == -ELOOP)
			whyf(why, "symlink loop at %s", shown);
		else if (r == -ENOENT && fd < 0)
			whyf(why, "%s does not resolve to an existing path", shown);
		else
			whyf(why, "cannot resolve %s: %s", shown, strerror((int)-r));
		return (int)r;
	}
	size_t sl = strlen(c->sysroot);
	if (!sl || strncmp(real, c->sysroot, sl) != 0 || real[sl] != '/') {
		whyf(why, "%s resolves outside %s/sys: %s", shown, dp_root(), real);
		return -EXDEV;
	}
	return TAKE_FD(fd);
}

static int open_failed(int open_err, const char *shown, char *why)
{
	whyf(why, "cannot open %s: %s", shown, strerror(open_err));
	return -open_err;
}

/* /sys/class/vfio-dev/<name>: its dev number must match the cdev's. Returns the entry's fd. */
static int open_class_entry(const struct ctx *c, struct kata_device *d, char *why)
{
	char path[PATH_MAX], real[PATH_MAX], shown[64];
	struct stat st;
	uint64_t v;
	dev_t devno;
	int r, open_err;

	snprintf(shown, sizeof(shown), KATA_SYSFS_DIR "/%s", d->name);
	r = dp_path(path, sizeof(path), shown);
	if (r < 0) {
		whyf(why, "invalid root prefix");
		return r;
	}
	/* through the class directory opened once per scan, else by path */
	int dirfd = c->classfd >= 0 ? c->classfd : AT_FDCWD;
	const char *name = c->classfd >= 0 ? d->name : path;
	_cleanup_close_ int fd = resolve_in_sys(c, dirfd, name, shown, real, &open_err, why);
	if (fd == -ENOENT && fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
		whyf(why, "cdev without sysfs: %s is missing", shown);
		return -ENOENT;
	}
	if (fd < 0)
		return fd;
	if (open_err)
		return open_failed(open_err, shown, why);
	r = attr_value(c, fd, "dev", shown, KATA_CACHE_DEV, parse_devno_u64, &v, why);
	if (r == -EBADMSG) {
		whyf(why, "%s/dev is not \"MAJ:MIN\\n\"", shown);
		return -EINVAL;
	}
	if (r < 0)
		return r;
	devno = (dev_t)v;
	if (devno != d->rdev) {
		whyf(why, "dev number mismatch: %s is %u:%u but %s/dev says %u:%u", d->path,
		     major(d->rdev), minor(d->rdev), shown, major(devno), minor(devno));
		return -EXDEV;
	}
	return TAKE_FD(fd);
}

/* The PCI device behind the entry's "device" link, resolved from the entry's real location (as
 * the kernel does). Returns its directory fd; dir (PATH_MAX) gets its path without the root. */
static int open_pci_device(const struct ctx *c, int entry_fd, struct kata_device *d, char *dir, char *why)
{
	char real[PATH_MAX], shown[64];
	struct stat st;
	int r, open_err;

	snprintf(shown, sizeof(shown), KATA_SYSFS_DIR "/%s/device", d->name);
	if (fstatat(entry_fd, "device", &st, AT_SYMLINK_NOFOLLOW) < 0) {
		r = -errno;
		if (r == -ENOENT)
			whyf(why, "%s is missing", shown);
		else
			whyf(why, "cannot stat %s: %s", shown, strerror(-r));
		return r;
	}
	if (!S_ISLNK(st.st_mode)) {
		whyf(why, "%s is not a symlink", shown);
		return -EINVAL;
	}
	_cleanup_close_ int fd = resolve_in_sys(c, entry_fd, "device", shown, real, &open_err, why);
	if (fd < 0)
		return fd;
	const char *base = strrchr(real, '/') + 1;
	snprintf(dir, PATH_MAX, "%s", real + strlen(dp_root()));
	if (!parse_pci(base, &d->pci_key)) {
		whyf(why, "%s does not name a PCI device: %s", shown, dir);
		return -EINVAL;
	}
	snprintf(d->pci, sizeof(d->pci), "%s", base);
	return open_err ? open_failed(open_err, dir, why) : TAKE_FD(fd);
}

static void read_numa(const struct ctx *c, int fd, struct kata_device *d, const char *dir)
{
	char buf[ATTR_MAX + 1], why[WHY_MAX], q[WHY_MAX + 64];
	size_t n = 0;

	d->numa_node = -1;
	if (read_attr(fd, "numa_node", dir, buf, &n, NULL, why) == 0) {
		if (parse_numa(buf, n, &d->numa_node))
			return;
		whyf(why, "%s/numa_node is not \"-1\\n\" or a node number + newline", dir);
	}
	dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "NUMA node unknown, advertising without topology",
	       "device=%s pci=%s reason=%s", d->name, d->pci, dp_logq(q, sizeof(q), why));
}

/* One identity attribute: "0x" + digits hex digits + newline; a malformed one says so in why. */
static int read_hex_attr(const struct ctx *c, int fd, const char *attr, const char *dir,
			 enum kata_cache_kind cache, parse_fn parse, int digits, uint64_t *ret, char *why)
{
	int r = attr_value(c, fd, attr, dir, cache, parse, ret, why);

	if (r == -EBADMSG) {
		whyf(why, "%s/%s is not \"0x\" + %d hex digits + newline", dir, attr, digits);
		return -EINVAL;
	}
	return r;
}

static int read_identity(const struct ctx *c, int fd, struct kata_device *d, const char *dir, char *why)
{
	uint64_t v;
	int r;

	r = read_hex_attr(c, fd, "vendor", dir, KATA_CACHE_VENDOR, parse_vendor, 4, &v, why);
	if (r < 0)
		return r;
	d->vendor = (uint16_t)v;
	r = read_hex_attr(c, fd, "class", dir, KATA_CACHE_CLASS, parse_class, 6, &v, why);
	if (r < 0)
		return r;
	d->pci_class = (uint32_t)v;
	if (c->o->read_device_id) {
		r = read_hex_attr(c, fd, "device", dir, KATA_CACHE_DEVICE, parse_vendor, 4, &v, why);
		if (r < 0)
			return r;
		d->device_id = (uint16_t)v;
	}
	read_numa(c, fd, d, dir);
	return 0;
}

/* Fill d for the cdev; 0 when it is a well-formed VFIO PCI device (matching or not), else
 * negative errno with why. */
static int inspect(const struct ctx *c, struct kata_device *d, char *why)
{
	_cleanup_close_ int entry = open_class_entry(c, d, why);
	if (entry < 0)
		return entry;
	char dir[PATH_MAX];
	_cleanup_close_ int pci = open_pci_device(c, entry, d, dir, why);
	if (pci < 0)
		return pci;
	return read_identity(c, pci, d, dir, why);
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

static void consider(struct ctx *c, int dfd, const char *name)
{
	struct kata_device d = { 0 };
	char why[WHY_MAX], q[64];
	struct stat st;
	unsigned num;

	if (!parse_name(name, &num)) {
		skip(c, DP_LOG_WARN, name, "name is not vfio<N> (N decimal without leading zeros)");
		return;
	}
	d.num = num;
	snprintf(d.name, sizeof(d.name), "%.15s", name); /* parse_name: at most 13 characters */
	snprintf(d.path, sizeof(d.path), KATA_DEV_DIR "/%.15s", name);
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		whyf(why, "cannot stat %s: %s", d.path, strerror(errno));
		skip(c, DP_LOG_WARN, name, why);
		return;
	}
	if (!S_ISCHR(st.st_mode)) {
		whyf(why, "%s is not a character device", d.path);
		skip(c, DP_LOG_WARN, name, why);
		return;
	}
	d.rdev = st.st_rdev;
	if (inspect(c, &d, why) < 0) {
		skip(c, DP_LOG_WARN, name, why);
		return;
	}
	int row = kata_table_match(c->o->table, c->o->n_rows, d.vendor, d.pci_class);
	if (row < 0) {
		dp_log(c->o->verbose ? DP_LOG_INFO : DP_LOG_DEBUG, "skipping VFIO device",
		       "device=%s reason=%s pci=%s vendor=0x%04x class=0x%06x", dp_logq(q, sizeof(q), name),
		       "\"not in the table\"", d.pci, d.vendor, d.pci_class);
		return;
	}
	d.row = (size_t)row;
	if (c->n == c->cap && !make_room(c))
		return;
	c->devs[c->n++] = d;
	c->matched++;
}

static bool dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* A directory read with getdents64 into a buffer of its own: opendir() allocates one on every
 * rescan (musl: an mmap and a munmap of 8 KiB, and the page fault between). */
struct dir_iter {
	int fd;
	size_t pos, len;
	_Alignas(8) char buf[4096];
};

/* The next name other than "." and "..", or NULL at the end (or on a read error, as readdir). */
static const char *dir_next(struct dir_iter *it)
{
	for (;;) {
		if (it->pos >= it->len) {
			ssize_t n = getdents64(it->fd, (void *)it->buf, sizeof(it->buf));
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

static void too_many(const struct ctx *c, struct dir_iter *it, const char *shown)
{
	size_t total = c->max + 1;
	while (dir_next(it))
		total++;
	dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "too many entries, ignoring the rest",
	       "dir=%s entries=%zu considered=%zu", shown, total, c->max);
}

/* No KATA_DEV_DIR: say which directory is missing (/dev/vfio itself, or only its devices/) and
 * what that usually means; once at start (warn), at debug on the rescans. */
static void log_missing_dev_dir(const struct ctx *c)
{
	char parent[PATH_MAX];
	struct stat st;
	bool no_vfio = dp_path(parent, sizeof(parent), KATA_VFIO_DIR) == 0 && stat(parent, &st) < 0 &&
		       errno == ENOENT;

	dp_log(c->o->verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "VFIO directory missing, nothing to scan",
	       "dir=%s reason=\"the vfio-pci and iommufd modules are not loaded, no device is bound to "
	       "vfio-pci, or the hostPath " KATA_VFIO_DIR " is not mounted\"",
	       no_vfio ? KATA_VFIO_DIR : KATA_DEV_DIR);
}

static int walk_dev(struct ctx *c, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct dir_iter it = { 0 };
	const char *name;
	int r = dp_path(path, sizeof(path), KATA_DEV_DIR);
	if (r < 0) {
		snprintf(err, errlen, "invalid %s", DP_TEST_ROOT_ENV);
		return r;
	}
	_cleanup_close_ int fd = it.fd = openat(AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			log_missing_dev_dir(c);
			return 0;
		}
		r = -errno;
		snprintf(err, errlen, "cannot read %s: %s", KATA_DEV_DIR, strerror(-r));
		return r;
	}
	while ((name = dir_next(&it)))
		consider(c, fd, name); /* every entry: which are kept is decided by PCI address */
	return 0;
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
	char cdev[PATH_MAX], why[WHY_MAX];
	struct dir_iter it = { 0 };
	const char *name;
	struct stat st;
	size_t k = 0;
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
	while ((name = dir_next(&it))) {
		if (k++ == c->max) {
			too_many(c, &it, KATA_SYSFS_DIR);
			break;
		}
		if (!parse_name(name, &num)) {
			dp_debug("ignoring sysfs entry", "dir=%s name=%s", KATA_SYSFS_DIR, name);
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
		whyf(why, "sysfs entry without cdev: " KATA_SYSFS_DIR "/%s exists, " KATA_DEV_DIR "/%s does not",
		     name, name);
		skip(c, DP_LOG_WARN, name, why);
	}
}

static int cmp_pci(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->pci_key != y->pci_key)
		return x->pci_key < y->pci_key ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_row_pci(const void *a, const void *b)
{
	const struct kata_device *x = a, *y = b;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
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
		whyf(why, "PCI device %s is also claimed by %s", c->devs[i].pci, other->name);
		skip(c, DP_LOG_WARN, c->devs[i].name, why);
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
	if (fd < 0 || fd_path(c, fd, c->sysroot) < 0)
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
	if (dp_path(path, sizeof(path), KATA_SYSFS_DIR) < 0)
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
	else
		r = walk_dev(&c, err, errlen);
	if (r >= 0 && c.oom) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
	}
	if (r >= 0)
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

/* ---- comparing two scans ---- */

static int cmp_name_ptr(const void *a, const void *b)
{
	const struct kata_device *x = *(const struct kata_device *const *)a;
	const struct kata_device *y = *(const struct kata_device *const *)b;
	unsigned nx = (unsigned)strtoul(x->name + 4, NULL, 10), ny = (unsigned)strtoul(y->name + 4, NULL, 10);
	return nx < ny ? -1 : nx > ny;
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
