/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (e): sysfs attribute parsing and the VFIO scan over a tree generated from the
 * input, under SDP_TEST_ROOT=<private temp dir> (cleared between inputs). Needs root (mknod).
 * Up to 4 devices; for device i the input gives:
 *   flags byte: bit0 /dev/vfio/devices/vfio<i> is a cdev (else bit1: a regular file, else
 *               absent); bit2 the sysfs class link exists; bit3 the "device" link exists;
 *               bit4 the PCI directory name is taken from the input (else 0000:<b>:<d>.<f>);
 *               bit5 the cdev number in "dev" is the right one (else taken from the input);
 *               bit6 vendor/class/numa_node are FIFOs instead of files; bit7 vfio<i> is
 *               named "vfio0<i>" (not canonical)
 *   then length-prefixed strings (length byte mod 72): PCI name or bus/dev/fn bytes, then a
 *   byte: its IOMMU group (mod 4, so groups are shared), then vendor, class, numa_node, dev.
 * Checks: the scan returns 0 or -ENOMEM; every reported device has a canonical name, a PCI
 * address, a row inside the table, the tree's root complex and a switch name (DRA's attributes), and the devices are ordered by row, group (its lowest PCI
 * key), then PCI key.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/paths.h"
#include "fuzz.h"
#include "scan.h"
#include "table.h"

#define MAJ 237

struct input {
	const uint8_t *p;
	size_t n;
};

static uint8_t take_byte(struct input *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static size_t take_str(struct input *in, char *buf, size_t size)
{
	size_t len = take_byte(in) % 72;
	if (len > in->n)
		len = in->n;
	if (len > size - 1)
		len = size - 1;
	memcpy(buf, in->p, len);
	buf[len] = '\0';
	in->p += len;
	in->n -= len;
	return len;
}

_printf_(3, 0) static void pathf_v(char *buf, size_t size, const char *fmt, va_list ap)
{
	int n = snprintf(buf, size, "%s/", fuzz_tmpdir());
	vsnprintf(buf + n, size - (size_t)n, fmt, ap);
}

_printf_(3, 4) static void pathf(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	pathf_v(buf, size, fmt, ap);
	va_end(ap);
}

static void put_file(const char *path, const char *content, size_t len, bool fifo)
{
	if (fifo) {
		(void)mkfifo(path, 0644);
		return;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
	if (fd < 0)
		return; /* a FIFO made for another device sharing this PCI directory: left as is */
	if (len && write(fd, content, len) < 0)
		(void)0;
	close(fd);
}

static void make_device(struct input *in, unsigned i)
{
	char name[16], pci[80], path[512], target[256], s[80];
	uint8_t flags = take_byte(in);
	snprintf(name, sizeof(name), (flags & 0x80) ? "vfio0%u" : "vfio%u", i);
	if (flags & 0x10) {
		take_str(in, pci, sizeof(pci));
		if (!pci[0] || strchr(pci, '/') || strcmp(pci, ".") == 0 || strcmp(pci, "..") == 0)
			snprintf(pci, sizeof(pci), "0000:00:00.0");
	} else {
		uint8_t b = take_byte(in), d = take_byte(in), f = take_byte(in);
		snprintf(pci, sizeof(pci), "0000:%02x:%02x.%x", b, d & 0x1f, f & 7);
	}
	pathf(path, sizeof(path), "dev/vfio/devices/%s", name);
	if (flags & 1)
		(void)mknod(path, S_IFCHR | 0600, makedev(MAJ, i));
	else if (flags & 2)
		put_file(path, "", 0, false);

	pathf(path, sizeof(path), "sys/devices/pci0000:00/%s", pci);
	(void)mkdir(path, 0755);
	pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/vfio-dev", pci);
	(void)mkdir(path, 0755);
	pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/vfio-dev/%s", pci, name);
	(void)mkdir(path, 0755);
	/* its IOMMU group: one of four, so that groups are shared */
	pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/iommu_group", pci);
	snprintf(target, sizeof(target), "../../../kernel/iommu_groups/%u", take_byte(in) & 3);
	(void)symlink(target, path);
	static const char *const attrs[] = { "vendor", "class", "numa_node" };
	for (size_t a = 0; a < 3; a++) {
		size_t len = take_str(in, s, sizeof(s));
		pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/%s", pci, attrs[a]);
		put_file(path, s, len, flags & 0x40);
	}
	size_t len = take_str(in, s, sizeof(s));
	if (flags & 0x20)
		len = (size_t)snprintf(s, sizeof(s), "%d:%u\n", MAJ, i);
	char vdir[200];
	snprintf(vdir, sizeof(vdir), "%s/vfio-dev/%s", pci, name);
	pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/dev", vdir);
	put_file(path, s, len, false);
	if (flags & 8) {
		pathf(path, sizeof(path), "sys/devices/pci0000:00/%s/device", vdir);
		(void)symlink("../..", path);
	}
	if (flags & 4) {
		snprintf(target, sizeof(target), "../../devices/pci0000:00/%s", vdir);
		pathf(path, sizeof(path), "sys/class/vfio-dev/%s", name);
		(void)symlink(target, path);
	}
}

static void check(const struct kata_scan *sc)
{
	for (size_t i = 0; i < sc->n_devices; i++) {
		const struct kata_device *d = &sc->devices[i];
		FUZZ_CHECK(d->row < kata_table_len);
		FUZZ_CHECK(strncmp(d->name, "vfio", 4) == 0 && d->name[4] != '\0');
		FUZZ_CHECK(d->name[4] != '0' || d->name[5] == '\0');
		FUZZ_CHECK(kata_row_matches(&kata_table[d->row], d->vendor, d->pci_class));
		FUZZ_CHECK(d->numa_node >= -1 && d->numa_node <= 65535);
		/* the DRA attributes: the tree's host bridge, and a switch name, NUL-terminated */
		FUZZ_CHECK(memchr(d->pcie_root, '\0', sizeof(d->pcie_root)) && memchr(d->pcie_switch, '\0', sizeof(d->pcie_switch)));
		FUZZ_CHECK(strcmp(d->pcie_root, "pci0000:00") == 0 && d->pcie_switch[0]);
		if (i) {
			const struct kata_device *p = &sc->devices[i - 1];
			FUZZ_CHECK(p->row < d->row || (p->row == d->row && (p->unit_key < d->unit_key ||
				   (p->unit_key == d->unit_key && p->group == d->group && p->pci_key <= d->pci_key))));
		}
	}
	for (size_t r = 0; r < kata_table_len; r++) {
		size_t first = 0, n = kata_scan_row(sc, r, &first);
		FUZZ_CHECK(n == 0 || first + n <= sc->n_devices);
	}
}

static void setup(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	FUZZ_CHECK(setenv("SDP_TEST_ROOT", fuzz_tmpdir(), 1) == 0);
	dp_paths_reset();
	if (!getenv("FUZZ_VERBOSE"))
		dp_log_set_level(DP_LOG_ERROR);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[512];
	struct input in = { data, size };
	setup();
	fuzz_clear_dir(fuzz_tmpdir());
	static const char *const dirs[] = { "dev", "dev/vfio", "dev/vfio/devices", "sys",
					    "sys/class", "sys/class/vfio-dev", "sys/devices",
					    "sys/devices/pci0000:00" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		pathf(path, sizeof(path), "%s", dirs[i]);
		FUZZ_CHECK(mkdir(path, 0755) == 0);
	}
	for (unsigned i = 0; i < 4 && in.n; i++)
		make_device(&in, i);

	/* One cache for every input, as the daemon keeps one for its life: the tree is new each
	 * time (nothing settled to keep), so the scans take its stat-then-read path and reuse the
	 * root it keeps. */
	static kata_cache *cache;
	if (!cache)
		FUZZ_CHECK(kata_cache_new(&cache) == 0);
	struct kata_scan_opts o = { .table = kata_table, .n_rows = kata_table_len,
				    .max_entries = 3, .verbose = true, .cache = cache };
	struct kata_scan sc;
	char err[256];
	int r = kata_scan_run(&o, &sc, err, sizeof(err));
	FUZZ_CHECK(r == 0 || r == -ENOMEM);
	if (r == 0) {
		check(&sc);
		struct kata_scan again;
		if (kata_scan_run(&o, &again, err, sizeof(err)) == 0) {
			dp_buf rm = { 0 }, add = { 0 }, ch = { 0 };
			FUZZ_CHECK(kata_scan_diff(&sc, &again, &rm, &add, &ch) == 0);
			dp_buf_done(&rm);
			dp_buf_done(&add);
			dp_buf_done(&ch);
			kata_scan_done(&again);
		}
		kata_scan_done(&sc);
	}
	return 0;
}
