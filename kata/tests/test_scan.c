/* SPDX-License-Identifier: Apache-2.0 */
/* kata scan: fake /dev/vfio/devices + sysfs trees (mknod'ed cdevs, relative device links) under
 * SDP_TEST_ROOT; classification, order, NUMA, every hostile case skipped with exactly one log
 * line, the entry bound, the set comparison, the device-set watch, and the CDI spec as PyYAML
 * reads it. Needs root (mknod) and python3 with PyYAML. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/log.h"
#include "dp/paths.h"
#include "dp_test.h"
#include "scan.h"
#include "spec.h"
#include "table.h"
#include "watch.h"

#define MAJ 237

static char root[64];

/* ---- the fake tree ---- */

_printf_(3, 0) static void pathf(char *buf, size_t size, const char *fmt, va_list ap)
{
	size_t n = (size_t)snprintf(buf, size, "%s/", root);
	vsnprintf(buf + n, size - n, fmt, ap);
}

static void mkdirs(const char *path)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			(void)mkdir(p, 0755);
			*s = '/';
		}
	(void)mkdir(p, 0755);
}

_printf_(1, 2) static void dir(const char *fmt, ...)
{
	char p[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	pathf(p, sizeof(p), fmt, ap);
	va_end(ap);
	mkdirs(p);
}

/* Write len bytes (a string's length when len is (size_t)-1) to root/<rel>. */
static void put(const char *rel, const char *data, size_t len)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	if (len == (size_t)-1)
		len = strlen(data);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

_printf_(2, 3) static void link_to(const char *target, const char *fmt, ...)
{
	char p[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	pathf(p, sizeof(p), fmt, ap);
	va_end(ap);
	assert_int_equal(symlink(target, p), 0);
}

_printf_(2, 3) static void rm(bool dir_too, const char *fmt, ...)
{
	char p[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	pathf(p, sizeof(p), fmt, ap);
	va_end(ap);
	assert_int_equal(dir_too ? rmdir(p) : unlink(p), 0);
}

static void cdev(const char *name, unsigned minor_no)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/dev/vfio/devices/%s", root, name);
	assert_int_equal(mknod(p, S_IFCHR | 0600, makedev(MAJ, minor_no)), 0);
}

/* bdf in IOMMU group g (the group's entry and the function's iommu_group link), bound to drv
 * (NULL: no driver link). */
static void member(unsigned g, const char *bdf, const char *drv)
{
	char target[256];
	dir("sys/kernel/iommu_groups/%u/devices", g);
	snprintf(target, sizeof(target), "../../../../devices/pci0000:00/%s", bdf);
	link_to(target, "sys/kernel/iommu_groups/%u/devices/%s", g, bdf);
	snprintf(target, sizeof(target), "../../../kernel/iommu_groups/%u", g);
	link_to(target, "sys/devices/pci0000:00/%s/iommu_group", bdf);
	if (drv) {
		snprintf(target, sizeof(target), "../../../bus/pci/drivers/%s", drv);
		link_to(target, "sys/devices/pci0000:00/%s/driver", bdf);
	}
}

static unsigned next_group = 100; /* pci_dev: a group of its own for each function */

static void pci_dev(const char *bdf, const char *vendor, const char *cls, const char *numa)
{
	char rel[256];
	dir("sys/devices/pci0000:00/%s", bdf);
	member(next_group++, bdf, "vfio-pci");
	snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s/vendor", bdf);
	put(rel, vendor, (size_t)-1);
	snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s/class", bdf);
	put(rel, cls, (size_t)-1);
	if (numa) {
		snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s/numa_node", bdf);
		put(rel, numa, (size_t)-1);
	}
}

/* sysfs class entry vfio<n> with "dev" = devstr (NULL: none) and device -> the PCI dir. */
static void class_entry(unsigned n, const char *devstr, const char *bdf)
{
	char rel[256], target[256];
	dir("sys/class/vfio-dev/vfio%u", n);
	if (devstr) {
		snprintf(rel, sizeof(rel), "sys/class/vfio-dev/vfio%u/dev", n);
		put(rel, devstr, (size_t)-1);
	}
	if (bdf) {
		snprintf(target, sizeof(target), "../../../devices/pci0000:00/%s", bdf);
		link_to(target, "sys/class/vfio-dev/vfio%u/device", n);
	}
}

/* A complete, consistent VFIO device vfio<n> (cdev MAJ:n). */
static void device(unsigned n, const char *bdf, const char *vendor, const char *cls, const char *numa)
{
	char name[32], devstr[32];
	snprintf(name, sizeof(name), "vfio%u", n);
	snprintf(devstr, sizeof(devstr), "%u:%u\n", MAJ, n);
	pci_dev(bdf, vendor, cls, numa);
	class_entry(n, devstr, bdf);
	cdev(name, n);
}

static void gpu(unsigned n, const char *bdf, const char *numa)
{
	device(n, bdf, "0x10de\n", "0x030200\n", numa);
}

static int setup(void **state)
{
	if (dpt_tmpdir(root, sizeof(root), "test_scan") < 0)
		return -1;
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	dir("dev/vfio/devices");
	dir("sys/class/vfio-dev");
	dir("sys/devices/pci0000:00");
	return 0;
}

static int teardown(void **state)
{
	return dpt_rmtree(root);
}

/* ---- log capture: dp_log writes each line with one write(2) to fd 2 ---- */

static int saved_stderr = -1;

static void capture_start(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/log", root);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	saved_stderr = dup(2);
	assert_true(saved_stderr >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	close(fd);
}

/* The captured text (malloc'd). */
static char *capture_end(void)
{
	char p[PATH_MAX];
	dup2(saved_stderr, 2);
	close(saved_stderr);
	snprintf(p, sizeof(p), "%s/log", root);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	char *text = calloc(1, 1 << 20);
	assert_non_null(text);
	size_t n = fread(text, 1, (1 << 20) - 1, f);
	text[n] = '\0';
	fclose(f);
	return text;
}

/* Lines holding a (and b, when given). */
static int count_lines(const char *log, const char *a, const char *b)
{
	int n = 0;
	for (const char *l = log; *l;) {
		const char *e = strchr(l, '\n');
		size_t len = e ? (size_t)(e - l) : strlen(l);
		char *line = strndup(l, len);
		if (strstr(line, a) && (!b || strstr(line, b)))
			n++;
		free(line);
		l += len + (e ? 1 : 0);
	}
	return n;
}

static int count_all(const char *log)
{
	int n = 0;
	for (; *log; log++)
		n += *log == '\n';
	return n;
}

/* ---- scanning ---- */

/* The compiled-in table, as the daemon passes it (set in main). */
static struct kata_scan_opts opts;

static char *scan_logged(const struct kata_scan_opts *o, struct kata_scan *s)
{
	char err[256] = "";
	capture_start();
	int r = kata_scan_run(o, s, err, sizeof(err));
	char *log = capture_end();
	if (r != 0)
		fprintf(stderr, "scan failed: %d %s\n", r, err);
	assert_int_equal(r, 0);
	return log;
}

struct want {
	const char *name, *pci;
	int numa;
};

static void assert_row(const struct kata_scan *s, size_t row, const struct want *w, size_t n)
{
	size_t first;
	assert_int_equal(kata_scan_row(s, row, &first), n);
	for (size_t i = 0; i < n; i++) {
		const struct kata_device *d = &s->devices[first + i];
		assert_string_equal(d->name, w[i].name);
		assert_string_equal(d->pci, w[i].pci);
		assert_int_equal(d->numa_node, w[i].numa);
		assert_int_equal(d->row, row);
		char path[64];
		snprintf(path, sizeof(path), "/dev/vfio/devices/%s", w[i].name);
		assert_string_equal(d->path, path);
		assert_int_equal(major(d->rdev), MAJ);
		assert_int_equal(minor(d->rdev), (unsigned)atoi(w[i].name + 4));
	}
}

/* 4 GPUs on two NUMA nodes + 2 NVSwitches + 1 NIC, created out of order. */
static void make_node(void)
{
	gpu(5, "0000:c1:00.0", "1\n");
	device(9, "0000:05:00.0", "0x10de\n", "0x068000\n", "0\n");
	gpu(3, "0000:41:00.0", "0\n");
	device(2, "0000:03:00.0", "0x8086\n", "0x020000\n", "0\n");
	gpu(7, "0000:81:00.0", "1\n");
	device(8, "0000:04:00.0", "0x10de\n", "0x068000\n", "-1\n");
	gpu(4, "0000:42:00.0", "0\n");
}

static const struct want node_gpus[] = {
	{ "vfio3", "0000:41:00.0", 0 },
	{ "vfio4", "0000:42:00.0", 0 },
	{ "vfio7", "0000:81:00.0", 1 },
	{ "vfio5", "0000:c1:00.0", 1 },
};
static const struct want node_switches[] = {
	{ "vfio8", "0000:04:00.0", -1 },
	{ "vfio9", "0000:05:00.0", 0 },
};

static void gpus_switches_and_a_nic(void **state)
{
	struct kata_scan s;
	make_node();
	char *log = scan_logged(&opts, &s);
	assert_int_equal(s.n_devices, 6);
	assert_row(&s, 0, node_gpus, 4);
	assert_row(&s, 1, node_switches, 2);
	/* The NIC: one info line; nothing else is logged. */
	assert_int_equal(count_lines(log, "device=vfio2 ", "reason=\"not in the table\""), 1);
	assert_int_equal(count_lines(log, "level=info", "vendor=0x8086 class=0x020000"), 1);
	assert_int_equal(count_all(log), 1);
	free(log);
	kata_scan_done(&s);
}

struct hostile {
	const char *name; /* the entry logged */
	const char *why;  /* a piece of its reason */
};

static void broken_class(unsigned n, const char *data, size_t len)
{
	char bdf[32], rel[128];
	snprintf(bdf, sizeof(bdf), "0000:%02u:00.0", n);
	gpu(n, bdf, "0\n");
	snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s/class", bdf);
	if (data)
		put(rel, data, len);
	else
		rm(false, "%s", rel);
}

static void broken_vendor(unsigned n, const char *data)
{
	char bdf[32], rel[128];
	snprintf(bdf, sizeof(bdf), "0000:%02u:00.0", n);
	gpu(n, bdf, "0\n");
	snprintf(rel, sizeof(rel), "sys/devices/pci0000:00/%s/vendor", bdf);
	if (data)
		put(rel, data, (size_t)-1);
	else
		rm(false, "%s", rel);
}

/* A GPU whose device link is replaced by target (NULL: removed; "" : a plain directory). */
static void broken_link(unsigned n, const char *target)
{
	char bdf[32];
	snprintf(bdf, sizeof(bdf), "0000:%02u:00.0", n);
	gpu(n, bdf, "0\n");
	rm(false, "sys/class/vfio-dev/vfio%u/device", n);
	if (target && !*target)
		dir("sys/class/vfio-dev/vfio%u/device", n);
	else if (target)
		link_to(target, "sys/class/vfio-dev/vfio%u/device", n);
}

static void make_hostile(void)
{
	char big[100], bin[] = { '\0', 1, (char)0xff, '\n', 'x', '\n' };
	memset(big, '0', sizeof(big));
	broken_class(10, NULL, 0);
	broken_class(11, "0xzz0200\n", (size_t)-1);
	broken_class(12, "0x0302000\n", (size_t)-1);
	broken_class(13, "0x030200", (size_t)-1);
	broken_class(14, "", 0);
	broken_class(15, bin, sizeof(bin));
	broken_class(16, big, sizeof(big));
	broken_vendor(17, "0x10dg\n");
	broken_vendor(18, NULL);
	broken_link(19, "device"); /* points at itself */
	broken_link(20, "/sys/devices");
	broken_link(21, "../../../../../../../../../../../../tmp");
	dir("sys/devices/platform/serial8250");
	broken_link(22, "../../../devices/platform/serial8250");
	cdev("vfio23", 23); /* no sysfs */
	pci_dev("0000:24:00.0", "0x10de\n", "0x030200\n", "0\n");
	class_entry(24, "237:24\n", "0000:24:00.0"); /* no cdev */
	pci_dev("0000:25:00.0", "0x10de\n", "0x030200\n", "0\n");
	class_entry(25, "237:25\n", "0000:25:00.0");
	cdev("vfio25", 99); /* number mismatch */
	put("dev/vfio/devices/vfio26", "x", 1);
	dir("dev/vfio/devices/vfio27");
	link_to("vfio1", "dev/vfio/devices/vfio28");
	put("dev/vfio/devices/vfio", "", 0);
	put("dev/vfio/devices/vfioX", "", 0);
	cdev("vfio01", 1);
	cdev("vfio1234567890", 2);
	gpu(29, "0000:29:00.0", "0\n");
	put("sys/class/vfio-dev/vfio29/dev", "abc\n", (size_t)-1);
	gpu(30, "0000:30:00.0", "0\n");
	rm(false, "sys/class/vfio-dev/vfio30/dev");
	broken_link(31, "");
	broken_link(32, NULL);
	broken_class(33, NULL, 0);
	char fifo[PATH_MAX];
	snprintf(fifo, sizeof(fifo), "%s/sys/devices/pci0000:00/0000:33:00.0/class", root);
	assert_int_equal(mkfifo(fifo, 0644), 0);
	gpu(34, "0000:34:00.0", "0\n");
	class_entry(35, "237:35\n", "0000:34:00.0"); /* claims vfio34's PCI device */
	cdev("vfio35", 35);
	broken_link(36, "../../../devices/pci0000:00/0000:99:00.0"); /* dangling */
	pci_dev("0000:37:00.0", "0x10de\n", "0x030200\n", "0\n");
	link_to("vfio37", "sys/class/vfio-dev/vfio37"); /* class entry loops */
	cdev("vfio37", 37);
	broken_class(38, NULL, 0);
	link_to("vendor", "sys/devices/pci0000:00/0000:38:00.0/class");
	broken_link(39, "../../../../dev"); /* inside the root, outside /sys */
	put("sys/class/vfio-dev/vfio42", "x", 1); /* a file where the class entry should be */
	cdev("vfio42", 42);
	put("sys/devices/pci0000:00/0000:4a:00.0", "x", 1); /* resolves inside, to a file */
	broken_link(43, "../../../devices/pci0000:00/0000:4a:00.0");
}

static const struct hostile hostile[] = {
	{ "vfio10", "0000:10:00.0/class is missing" },
	{ "vfio11", "/class is not \\\"0x\\\" + 6 hex digits" },
	{ "vfio12", "/class is not" },
	{ "vfio13", "/class is not" },
	{ "vfio14", "/class is not" },
	{ "vfio15", "/class is not" },
	{ "vfio16", "/class is longer than 63 bytes" },
	{ "vfio17", "/vendor is not \\\"0x\\\" + 4 hex digits" },
	{ "vfio18", "/vendor is missing" },
	{ "vfio19", "symlink loop at /sys/class/vfio-dev/vfio19/device" },
	{ "vfio20", "/sys/class/vfio-dev/vfio20/device resolves outside" },
	{ "vfio21", "/sys/class/vfio-dev/vfio21/device resolves outside" },
	{ "vfio22", "does not name a PCI device: /sys/devices/platform/serial8250" },
	{ "vfio23", "cdev without sysfs" },
	{ "vfio24", "sysfs entry without cdev" },
	{ "vfio25", "dev number mismatch: /dev/vfio/devices/vfio25 is 237:99 but /sys/class/vfio-dev/vfio25/dev says 237:25" },
	{ "vfio26", "/dev/vfio/devices/vfio26 is not a character device" },
	{ "vfio27", "/dev/vfio/devices/vfio27 is not a character device" },
	{ "vfio28", "/dev/vfio/devices/vfio28 is not a character device" },
	{ "vfio", "name is not vfio<N>" },
	{ "vfioX", "name is not vfio<N>" },
	{ "vfio01", "name is not vfio<N>" },
	{ "vfio1234567890", "name is not vfio<N>" },
	{ "vfio29", "/sys/class/vfio-dev/vfio29/dev is not \\\"MAJ:MIN" },
	{ "vfio30", "/sys/class/vfio-dev/vfio30/dev is missing" },
	{ "vfio31", "/sys/class/vfio-dev/vfio31/device is not a symlink" },
	{ "vfio32", "/sys/class/vfio-dev/vfio32/device is missing" },
	{ "vfio33", "/class is not a regular file" },
	{ "vfio34", "PCI device 0000:34:00.0 is also claimed by vfio35" },
	{ "vfio35", "PCI device 0000:34:00.0 is also claimed by vfio34" },
	{ "vfio36", "/sys/class/vfio-dev/vfio36/device does not resolve" },
	{ "vfio37", "symlink loop at /sys/class/vfio-dev/vfio37" },
	{ "vfio38", "/class is a symlink" },
	{ "vfio39", "resolves outside" },
	{ "vfio42", "cannot open /sys/class/vfio-dev/vfio42: Not a directory" },
	{ "vfio43", "cannot open /sys/devices/pci0000:00/0000:4a:00.0: Not a directory" },
};

static int backdate_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	const struct timespec t[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = time(NULL) - 3600 } };
	(void)st, (void)ftw;
	if (type == FTW_F)
		assert_int_equal(utimensat(AT_FDCWD, path, t, AT_SYMLINK_NOFOLLOW), 0);
	return 0;
}

/* Every file of the tree last modified an hour ago: old enough for the cache to keep. */
static void backdate(void)
{
	assert_int_equal(nftw(root, backdate_one, 16, FTW_PHYS), 0);
}

static void assert_hostile_scan(const char *log, const struct kata_scan *s)
{
	static const struct want good[] = {
		{ "vfio1", "0000:01:00.0", 0 },
		{ "vfio2", "0000:02:00.0", 1 },
		{ "vfio40", "0000:40:00.0", -1 },
		{ "vfio41", "0000:41:00.0", -1 },
	};
	assert_row(s, 0, good, 4);
	assert_int_equal(s->n_devices, 4);
	for (size_t i = 0; i < DP_ELEMENTSOF(hostile); i++) {
		char needle[64];
		snprintf(needle, sizeof(needle), "device=%s ", hostile[i].name);
		if (count_lines(log, needle, hostile[i].why) != 1 || count_lines(log, needle, NULL) != 1)
			fprintf(stderr, "%s: want one line with %s\n%s", hostile[i].name, hostile[i].why, log);
		assert_int_equal(count_lines(log, needle, hostile[i].why), 1);
		assert_int_equal(count_lines(log, needle, "level=warn msg=\"skipping VFIO device\""), 1);
		assert_int_equal(count_lines(log, needle, NULL), 1);
	}
	assert_int_equal(count_lines(log, "device=vfio40 ", "msg=\"NUMA node unknown"), 1);
	assert_int_equal(count_lines(log, "device=vfio41 ", "numa_node is missing"), 1);
	assert_int_equal(count_lines(log, "device=vfio1 ", NULL), 0);
	assert_int_equal(count_lines(log, "device=vfio2 ", NULL), 0);
	assert_int_equal(count_all(log), (int)DP_ELEMENTSOF(hostile) + 2);
}

/* Every hostile entry: skipped, exactly one warn line naming it and why; the good ones intact. */
static void hostile_entries_are_skipped(void **state)
{
	struct kata_scan s;
	gpu(2, "0000:02:00.0", "1\n");
	gpu(1, "0000:01:00.0", "0\n");
	gpu(40, "0000:40:00.0", "node1\n"); /* kept, without topology, one warning */
	gpu(41, "0000:41:00.0", NULL);      /* kept, without topology, one warning */
	make_hostile();

	char *log = scan_logged(&opts, &s);
	assert_hostile_scan(log, &s);
	free(log);
	kata_scan_done(&s);
}

/* With the cache a rescan keeps: the same devices and the same reasons, scan after scan, the
 * files old enough to be kept (a file that is no well-formed attribute is never kept: its
 * reason is given on every scan). */
static void hostile_entries_with_a_cache(void **state)
{
	_cleanup_(kata_cache_freep) kata_cache *cache = NULL;
	struct kata_scan_opts o = opts;
	assert_int_equal(kata_cache_new(&cache), 0);
	o.cache = cache;
	gpu(2, "0000:02:00.0", "1\n");
	gpu(1, "0000:01:00.0", "0\n");
	gpu(40, "0000:40:00.0", "node1\n");
	gpu(41, "0000:41:00.0", NULL);
	make_hostile();
	backdate();
	for (int i = 0; i < 3; i++) {
		struct kata_scan s;
		char *log = scan_logged(&o, &s);
		assert_hostile_scan(log, &s);
		free(log);
		kata_scan_done(&s);
	}
}


/* The periodic rescans are quiet: skip lines at debug only. */
static void rescans_are_quiet(void **state)
{
	struct kata_scan s;
	struct kata_scan_opts quiet = opts;
	quiet.verbose = false;
	gpu(1, "0000:01:00.0", "0\n");
	make_hostile();
	dp_log_set_level(DP_LOG_INFO);
	char *log = scan_logged(&quiet, &s);
	assert_int_equal(s.n_devices, 1);
	assert_string_equal(log, "");
	free(log);
	kata_scan_done(&s);
}

static void rewrite(const char *rel, const char *data)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	int fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC); /* in place: the same inode */
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
	close(fd);
}

static uint32_t scanned_class(const struct kata_scan_opts *o)
{
	struct kata_scan s;
	char *log = scan_logged(o, &s);
	free(log);
	assert_int_equal(s.n_devices, 1);
	uint32_t c = s.devices[0].pci_class;
	kata_scan_done(&s);
	return c;
}

/* A rescan with the cache sees an attribute rewritten in place: after the value was kept (the
 * file's times change), right after it was read (it was not kept: too recent), and with its
 * modification time set back to what it was (its change time moved). */
static void cache_sees_files_rewritten_in_place(void **state)
{
	_cleanup_(kata_cache_freep) kata_cache *cache = NULL;
	struct kata_scan_opts o = opts;
	const char *cls = "sys/devices/pci0000:00/0000:01:00.0/class";
	char p[PATH_MAX];
	struct stat st;
	assert_int_equal(kata_cache_new(&cache), 0);
	o.cache = cache;
	gpu(1, "0000:01:00.0", "0\n");

	assert_int_equal(scanned_class(&o), 0x030200);
	rewrite(cls, "0x068000\n"); /* within the file system's timestamp granularity, likely */
	assert_int_equal(scanned_class(&o), 0x068000);

	backdate();
	assert_int_equal(scanned_class(&o), 0x068000);
	assert_int_equal(scanned_class(&o), 0x068000); /* kept */
	rewrite(cls, "0x030200\n");
	assert_int_equal(scanned_class(&o), 0x030200);

	backdate();
	assert_int_equal(scanned_class(&o), 0x030200);
	snprintf(p, sizeof(p), "%s/%s", root, cls);
	assert_int_equal(stat(p, &st), 0);
	rewrite(cls, "0x068000\n");
	const struct timespec t[2] = { { .tv_nsec = UTIME_OMIT }, st.st_mtim };
	assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
	assert_int_equal(scanned_class(&o), 0x068000);
}

/* One cache across two roots: each scan sees its own tree. */
static void cache_follows_the_root(void **state)
{
	_cleanup_(kata_cache_freep) kata_cache *cache = NULL;
	struct kata_scan_opts o = opts;
	char first[sizeof(root)];
	assert_int_equal(kata_cache_new(&cache), 0);
	o.cache = cache;
	gpu(1, "0000:01:00.0", "0\n");
	backdate();
	assert_int_equal(scanned_class(&o), 0x030200);
	snprintf(first, sizeof(first), "%s", root);
	assert_int_equal(setup(state), 0); /* a new root, now the prefix */
	device(1, "0000:01:00.0", "0x10de\n", "0x068000\n", "0\n");
	backdate();
	assert_int_equal(scanned_class(&o), 0x068000);
	assert_int_equal(teardown(state), 0);
	snprintf(root, sizeof(root), "%s", first);
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	assert_int_equal(scanned_class(&o), 0x030200);
}

/* More GPUs than max_entries: the first by PCI address are kept, whatever order the directory
 * lists them in (names and creation order scrambled against the addresses), logged once. */
static void entries_are_bounded(void **state)
{
	struct kata_scan s;
	struct kata_scan_opts small = opts;
	small.max_entries = 4;
	/* vfio<i> gets bus (i * 7) % 13 + 1: 12 distinct buses, 8 of them beyond the first four */
	for (unsigned i = 1; i <= 12; i++) {
		char bdf[32];
		snprintf(bdf, sizeof(bdf), "0000:%02x:00.0", (i * 7) % 13 + 1);
		gpu(i, bdf, "0\n");
	}
	char *log = scan_logged(&small, &s);
	static const struct want first[] = {
		{ "vfio2", "0000:02:00.0", 0 }, /* (2 * 7) % 13 + 1 */
		{ "vfio4", "0000:03:00.0", 0 },
		{ "vfio6", "0000:04:00.0", 0 },
		{ "vfio8", "0000:05:00.0", 0 },
	};
	assert_row(&s, 0, first, 4);
	assert_int_equal(s.n_devices, 4);
	assert_int_equal(count_lines(log, "too many VFIO devices, advertising the first by PCI address",
				     "devices=12 advertised=4 last=0000:05:00.0"), 1);
	assert_int_equal(count_all(log), 1); /* every sysfs entry was looked at, none reported */
	free(log);
	kata_scan_done(&s);
}

static void missing_or_unreadable_directory(void **state)
{
	struct kata_scan s = { 0 };
	char err[256] = "";
	gpu(1, "0000:01:00.0", "0\n");
	rm(false, "dev/vfio/devices/vfio1");
	rm(true, "dev/vfio/devices");
	/* No cdev directory at all: an empty set (the sysfs entry is reported). */
	char *log = scan_logged(&opts, &s);
	assert_int_equal(s.n_devices, 0);
	assert_int_equal(count_lines(log, "device=vfio1 ", "sysfs entry without cdev"), 1);
	free(log);
	kata_scan_done(&s);
	/* Not a directory: a startup error that says what. */
	put("dev/vfio/devices", "", 0);
	s.n_devices = 77;
	assert_int_equal(kata_scan_run(&opts, &s, err, sizeof(err)), -ENOTDIR);
	assert_string_equal(err, "cannot read /dev/vfio/devices: Not a directory");
	assert_int_equal(s.n_devices, 77); /* untouched */
}

/* ---- comparing scans ---- */

static void diff_names_what_changed(void **state)
{
	struct kata_scan a, b;
	dp_buf removed = { 0 }, added = { 0 }, changed = { 0 };
	make_node();
	free(scan_logged(&opts, &a));
	free(scan_logged(&opts, &b));
	assert_int_equal(kata_scan_diff(&a, &b, &removed, &added, &changed), 0);
	kata_scan_done(&b);

	rm(false, "dev/vfio/devices/vfio7");                                 /* removed */
	gpu(11, "0000:e1:00.0", "1\n");                                      /* added */
	put("sys/devices/pci0000:00/0000:05:00.0/numa_node", "1\n", (size_t)-1); /* changed */
	device(12, "0000:e2:00.0", "0x8086\n", "0x020000\n", "0\n");         /* not ours: no change */
	free(scan_logged(&opts, &b));
	assert_int_equal(kata_scan_diff(&a, &b, &removed, &added, &changed), 3);
	assert_string_equal(removed.data, "vfio7");
	assert_string_equal(added.data, "vfio11");
	assert_string_equal(changed.data, "vfio9");
	dp_buf_done(&removed);
	dp_buf_done(&added);
	dp_buf_done(&changed);
	kata_scan_done(&a);
	kata_scan_done(&b);
}

/* Legacy devices are named by their PCI address: the diff pairs them by it (a group node removed
 * takes its members away, nothing else), and cdevs by number. */
static void diff_legacy_names(void **state)
{
	(void)state;
	struct kata_device before[4] = { 0 }, after[3] = { 0 };
	const char *names[] = { "0000:05:00.0", "0000:41:00.0", "0000:c1:00.0", "0000:c1:01.0" };
	for (size_t i = 0; i < 4; i++) {
		snprintf(before[i].name, sizeof(before[i].name), "%s", names[i]);
		before[i].pci_key = i + 1;
	}
	after[0] = before[1]; /* listed in another order: the diff sorts */
	after[1] = before[0];
	after[2] = before[3];
	after[2].numa_node = 1;
	struct kata_scan a = { before, 4 }, b = { after, 3 };
	dp_buf removed = { 0 }, added = { 0 }, changed = { 0 };
	assert_int_equal(kata_scan_diff(&a, &b, &removed, &added, &changed), 2);
	assert_string_equal(removed.data, "0000:c1:00.0");
	assert_null(added.data);
	assert_string_equal(changed.data, "0000:c1:01.0");
	dp_buf_done(&removed);
	dp_buf_done(&changed);
	struct kata_device v[2] = { 0 };
	snprintf(v[0].name, sizeof(v[0].name), "vfio10");
	snprintf(v[1].name, sizeof(v[1].name), "vfio9");
	struct kata_scan c = { v, 2 }, d = { v + 1, 1 };
	assert_int_equal(kata_scan_diff(&c, &d, &removed, &added, &changed), 1);
	assert_string_equal(removed.data, "vfio10");
	dp_buf_done(&removed);
}

/* ---- the watch (inotify; the period is far away) ---- */

struct seen {
	int calls;
	char removed[64], added[64], changed[64];
};

static void on_changed(const char *removed, const char *added, const char *changed, void *userdata)
{
	struct seen *s = userdata;
	s->calls++;
	snprintf(s->removed, sizeof(s->removed), "%s", removed);
	snprintf(s->added, sizeof(s->added), "%s", added);
	snprintf(s->changed, sizeof(s->changed), "%s", changed);
}

/* Run the loop until the callback ran or 5 s passed. */
static void wait_changed(dp_loop *loop, struct seen *s)
{
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;
	while (s->calls == 0 && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
}

static void watch_sees_a_removed_cdev(void **state)
{
	struct kata_scan initial;
	struct seen seen = { 0 };
	dp_loop *loop = NULL;
	kata_watch *w = NULL;
	make_node();
	free(scan_logged(&opts, &initial));
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(kata_watch_new(loop, &opts, &initial, 600 * DP_USEC_PER_SEC, on_changed, &seen, &w), 0);
	/* The first rescan (at once) and unrelated events change nothing. */
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	put("dev/vfio/devices/README", "", 0);
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	assert_int_equal(seen.calls, 0);
	rm(false, "dev/vfio/devices/vfio4");
	wait_changed(loop, &seen);
	assert_int_equal(seen.calls, 1);
	assert_string_equal(seen.removed, "vfio4");
	assert_string_equal(seen.added, "");
	assert_string_equal(seen.changed, "");
	/* Called once only. */
	rm(false, "dev/vfio/devices/vfio3");
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	assert_int_equal(seen.calls, 1);
	kata_watch_free(w);
	dp_loop_free(loop);
	kata_scan_done(&initial);
}

/* No /dev/vfio at all at start: the directory appearing with a GPU is a change. */
static void watch_sees_the_directory_appear(void **state)
{
	struct kata_scan initial;
	struct seen seen = { 0 };
	dp_loop *loop = NULL;
	kata_watch *w = NULL;
	rm(true, "dev/vfio/devices");
	rm(true, "dev/vfio");
	free(scan_logged(&opts, &initial));
	assert_int_equal(initial.n_devices, 0);
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(kata_watch_new(loop, &opts, &initial, 600 * DP_USEC_PER_SEC, on_changed, &seen, &w), 0);
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	dir("dev/vfio");
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	dir("dev/vfio/devices");
	for (int i = 0; i < 5; i++)
		dp_loop_run_once(loop, 10);
	assert_int_equal(seen.calls, 0);
	gpu(6, "0000:06:00.0", "0\n");
	wait_changed(loop, &seen);
	assert_int_equal(seen.calls, 1);
	assert_string_equal(seen.added, "vfio6");
	kata_watch_free(w);
	dp_loop_free(loop);
	kata_scan_done(&initial);
}

static void count_removed(const char *removed, void *userdata)
{
	(*(int *)userdata)++;
}

/* Recreate root/rel (a file) in a loop for usec, in a child process; returns its pid. */
static pid_t flood_child(const char *rel, uint64_t usec)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/%s", root, rel);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid > 0)
		return pid;
	for (uint64_t end = dp_now_usec() + usec; dp_now_usec() < end;)
		if (mknod(p, S_IFREG | 0600, 0) < 0 || unlink(p) < 0)
			_exit(1);
	_exit(0);
}

/* A flood in the watched directory (a child recreating one entry in a loop) asks for a rescan
 * per event: they run KATA_RESCAN_GAP_USEC apart at most (each reports the removed cdev again,
 * so they are counted), not one per turn of the loop. */
static void watch_flood_spaces_rescans(void **state)
{
	struct kata_scan initial;
	struct seen seen = { 0 };
	dp_loop *loop = NULL;
	kata_watch *w = NULL;
	int removed = 0, status;
	make_node();
	free(scan_logged(&opts, &initial));
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(kata_watch_new(loop, &opts, &initial, 600 * DP_USEC_PER_SEC, on_changed, &seen, &w), 0);
	kata_watch_set_removed(w, count_removed, &removed);
	rm(false, "dev/vfio/devices/vfio4");
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;
	while (removed == 0 && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
	assert_int_equal(removed, 1); /* the first event: at once */

	removed = 0;
	uint64_t start = dp_now_usec();
	pid_t pid = flood_child("dev/vfio/devices/flood", 500 * DP_USEC_PER_MSEC);
	while (waitpid(pid, &status, WNOHANG) == 0)
		dp_loop_run_once(loop, 10);
	uint64_t took = dp_now_usec() - start;
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(removed >= 1);
	assert_in_range(removed, 1, took / KATA_RESCAN_GAP_USEC + 1);
	assert_int_equal(seen.calls, 0);
	kata_watch_free(w);
	dp_loop_free(loop);
	kata_scan_done(&initial);
}

/* ---- the CDI spec, as PyYAML reads it ---- */

static const char yaml_check[] =
	"import sys, yaml\n"
	"d = yaml.safe_load(open(sys.argv[1]))\n"
	"print('keys', ','.join(sorted(d)))\n"
	"print('version', d['cdiVersion'])\n"
	"print('kind', d['kind'])\n"
	"for dev in d['devices']:\n"
	"    e = dev['containerEdits']\n"
	"    for n in e['deviceNodes']:\n"
	"        print('device', repr(dev['name']), ','.join(sorted(dev)), ','.join(sorted(e)),\n"
	"              n['path'], n['type'], ','.join(sorted(n)))\n";

static void spec_parses_as_cdi(void **state)
{
	struct kata_scan s;
	dp_buf spec = { 0 };
	char cmd[2 * PATH_MAX], out[4096] = "", want[4096];
	size_t first, o = 0;
	make_node();
	free(scan_logged(&opts, &s));
	size_t n = kata_scan_row(&s, 0, &first);
	kata_spec_render("nvidia.com/gpu", &s.devices[first], n, &spec);
	assert_false(spec.oom);
	assert_true(spec.len > 0 && spec.data[spec.len - 1] == '\n');
	put("spec.yaml", spec.data, spec.len);
	put("check.py", yaml_check, (size_t)-1);
	snprintf(cmd, sizeof(cmd), "python3 %s/check.py %s/spec.yaml", root, root);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	assert_int_equal(pclose(p), 0);

	o += (size_t)snprintf(want + o, sizeof(want) - o,
			      "keys cdiVersion,devices,kind\nversion 0.5.0\nkind nvidia.com/gpu\n");
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(want + o, sizeof(want) - o,
				      "device '%zu' containerEdits,name deviceNodes /dev/vfio/devices/%s c path,type\n",
				      i, node_gpus[i].name);
	assert_string_equal(out, want);
	/* A class with a dot needs 0.6.0. */
	dp_buf_done(&spec);
	kata_spec_render("example.com/a.b", &s.devices[first], 1, &spec);
	assert_non_null(strstr(spec.data, "cdiVersion: \"0.6.0\"\nkind: \"example.com/a.b\"\n"));
	dp_buf_done(&spec);
	kata_scan_done(&s);
}

int main(void)
{
	opts = (struct kata_scan_opts){ .table = kata_table, .n_rows = kata_table_len, .verbose = true };
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(gpus_switches_and_a_nic, setup, teardown),
		cmocka_unit_test_setup_teardown(hostile_entries_are_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(hostile_entries_with_a_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(rescans_are_quiet, setup, teardown),
		cmocka_unit_test_setup_teardown(cache_sees_files_rewritten_in_place, setup, teardown),
		cmocka_unit_test_setup_teardown(cache_follows_the_root, setup, teardown),
		cmocka_unit_test_setup_teardown(entries_are_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(missing_or_unreadable_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(diff_names_what_changed, setup, teardown),
		cmocka_unit_test(diff_legacy_names),
		cmocka_unit_test_setup_teardown(watch_sees_a_removed_cdev, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_sees_the_directory_appear, setup, teardown),
		cmocka_unit_test_setup_teardown(watch_flood_spaces_rescans, setup, teardown),
		cmocka_unit_test_setup_teardown(spec_parses_as_cdi, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
