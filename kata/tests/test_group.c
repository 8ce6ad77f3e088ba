/* SPDX-License-Identifier: Apache-2.0 */
/* kata IOMMU groups: the legacy scan of /dev/vfio/<group>, the groups of IOMMUFD devices, one
 * resource per group, the group's viability as the kernel judges it (group.c) and the CDI spec
 * of a group, on fake trees laid out as the kernel lays them out under
 * SDP_TEST_ROOT. Needs root (mknod). */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "backend.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "dp_test.h"
#include "group.h"
#include "scan.h"
#include "spec.h"
#include "table.h"

#define CDEV_MAJ 237
#define GROUP_MAJ 238

static char root[64];

/* ---- the fake tree ---- */

_printf_(1, 2) static const char *at(const char *fmt, ...)
{
	static char p[PATH_MAX];
	va_list ap;
	size_t n = (size_t)snprintf(p, sizeof(p), "%s/", root);
	va_start(ap, fmt);
	vsnprintf(p + n, sizeof(p) - n, fmt, ap);
	va_end(ap);
	return p;
}

static void mkdirs(const char *path)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s", path);
	for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		(void)mkdir(p, 0755);
		*s = '/';
	}
	(void)mkdir(p, 0755);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void relink(const char *target, const char *path)
{
	(void)unlink(path);
	assert_int_equal(symlink(target, path), 0);
}

/* bdf bound to drv (NULL: no driver). */
static void bind_to(const char *bdf, const char *drv)
{
	char target[128];
	const char *link = at("sys/devices/pci0000:00/%s/driver", bdf);
	if (!drv) {
		assert_int_equal(unlink(link), 0);
		return;
	}
	snprintf(target, sizeof(target), "../../../bus/pci/drivers/%s", drv);
	relink(target, link);
}

/* PCI function bdf (vendor, class) on numa, in group g, bound to drv. */
static void function(const char *bdf, unsigned vendor, unsigned cls, int numa, unsigned g, const char *drv)
{
	char text[32], target[128];
	mkdirs(at("sys/devices/pci0000:00/%s", bdf));
	snprintf(text, sizeof(text), "0x%04x\n", vendor);
	write_file(at("sys/devices/pci0000:00/%s/vendor", bdf), text);
	snprintf(text, sizeof(text), "0x%06x\n", cls);
	write_file(at("sys/devices/pci0000:00/%s/class", bdf), text);
	snprintf(text, sizeof(text), "%d\n", numa);
	write_file(at("sys/devices/pci0000:00/%s/numa_node", bdf), text);
	mkdirs(at("sys/kernel/iommu_groups/%u/devices", g));
	snprintf(target, sizeof(target), "../../../../devices/pci0000:00/%s", bdf);
	relink(target, at("sys/kernel/iommu_groups/%u/devices/%s", g, bdf));
	snprintf(target, sizeof(target), "../../../kernel/iommu_groups/%u", g);
	relink(target, at("sys/devices/pci0000:00/%s/iommu_group", bdf));
	if (drv)
		bind_to(bdf, drv);
}

static void gpu(const char *bdf, int numa, unsigned g)
{
	function(bdf, 0x10de, 0x030200, numa, g, "vfio-pci");
}

/* Legacy: /dev/vfio/<g> (GROUP_MAJ:g) and /sys/class/vfio/<g>/dev; the container node. */
static void group_node(unsigned g)
{
	char text[32];
	mkdirs(at("sys/class/vfio/%u", g));
	snprintf(text, sizeof(text), "%u:%u\n", GROUP_MAJ, g);
	write_file(at("sys/class/vfio/%u/dev", g), text);
	(void)mknod(at("dev/vfio/vfio"), S_IFCHR | 0600, makedev(10, 196));
	assert_int_equal(mknod(at("dev/vfio/%u", g), S_IFCHR | 0600, makedev(GROUP_MAJ, g)), 0);
}

/* IOMMUFD: cdev vfio<n> for bdf. */
static void cdev(unsigned n, const char *bdf)
{
	char text[32], target[128];
	mkdirs(at("sys/class/vfio-dev/vfio%u", n));
	snprintf(text, sizeof(text), "%u:%u\n", CDEV_MAJ, n);
	write_file(at("sys/class/vfio-dev/vfio%u/dev", n), text);
	snprintf(target, sizeof(target), "../../../devices/pci0000:00/%s", bdf);
	relink(target, at("sys/class/vfio-dev/vfio%u/device", n));
	mkdirs(at("dev/vfio/devices"));
	assert_int_equal(mknod(at("dev/vfio/devices/vfio%u", n), S_IFCHR | 0600, makedev(CDEV_MAJ, n)), 0);
}

static int setup(void **state)
{
	if (dpt_tmpdir(root, sizeof(root), "test_group") < 0)
		return -1;
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	mkdirs(at("dev/vfio"));
	mkdirs(at("sys/devices/pci0000:00"));
	return 0;
}

static int teardown(void **state)
{
	unsetenv(KATA_BACKEND_ENV);
	return dpt_rmtree(root);
}

/* ---- scanning ---- */

static struct kata_scan_opts opts;
static struct dpt_capture cap;

/* Scan with backend b; the log it wrote. */
static const char *scan(enum kata_backend b, struct kata_scan *s)
{
	char err[256] = "";
	struct kata_scan_opts o = opts;
	o.backend = b;
	dpt_capture_start(&cap, 2);
	int r = kata_scan_run(&o, s, err, sizeof(err));
	const char *log = dpt_capture_end(&cap);
	if (r != 0)
		fprintf(stderr, "scan failed: %d %s\n%s", r, err, log);
	assert_int_equal(r, 0);
	return log;
}

/* A GPU with its audio companion in group 12, a GPU alone in group 13, two GPUs behind a
 * PCIe-to-PCI bridge sharing group 14, an NVSwitch in group 15; a GPU left on the host driver in
 * group 16; a NIC alone in group 17. All but group 16's and 17's are bound to vfio-pci. */
static void make_legacy_node(void)
{
	gpu("0000:41:00.0", 0, 12);
	function("0000:41:00.1", 0x10de, 0x040300, 0, 12, "vfio-pci");
	gpu("0000:42:00.0", 0, 13);
	gpu("0000:06:01.0", -1, 14);
	gpu("0000:06:02.0", -1, 14);
	function("0000:05:00.0", 0x10de, 0x068000, 1, 15, "vfio-pci");
	gpu("0000:81:00.0", 1, 16);
	bind_to("0000:81:00.0", "nvidia");
	function("0000:03:00.0", 0x8086, 0x020000, 0, 17, "vfio-pci");
	for (unsigned g = 12; g <= 17; g++)
		group_node(g);
}

struct want {
	const char *pci, *path;
	unsigned group;
	size_t row;
};

static void assert_devices(const struct kata_scan *s, const struct want *w, size_t n)
{
	assert_int_equal(s->n_devices, n);
	for (size_t i = 0; i < n; i++) {
		const struct kata_device *d = &s->devices[i];
		assert_string_equal(d->pci, w[i].pci);
		assert_string_equal(d->path, w[i].path);
		assert_int_equal(d->group, w[i].group);
		assert_int_equal(d->row, w[i].row);
		assert_int_equal(kata_device_backend(d), strncmp(w[i].path, "/dev/vfio/devices/", 18) == 0 ?
								 KATA_BACKEND_IOMMUFD : KATA_BACKEND_LEGACY);
	}
}

static void legacy_scan_reads_groups(void **state)
{
	static const struct want want[] = {
		{ "0000:06:01.0", "/dev/vfio/14", 14, 0 }, /* ordered by the group's lowest address */
		{ "0000:06:02.0", "/dev/vfio/14", 14, 0 },
		{ "0000:41:00.0", "/dev/vfio/12", 12, 0 },
		{ "0000:42:00.0", "/dev/vfio/13", 13, 0 },
		{ "0000:05:00.0", "/dev/vfio/15", 15, 1 },
	};
	struct kata_scan s;
	make_legacy_node();
	const char *log = scan(KATA_BACKEND_LEGACY, &s);
	assert_devices(&s, want, DP_ELEMENTSOF(want));
	assert_string_equal(s.devices[0].name, "0000:06:01.0");
	assert_int_equal(s.devices[1].unit_key, s.devices[0].pci_key);
	assert_int_equal(major(s.devices[2].rdev), GROUP_MAJ);
	assert_int_equal(minor(s.devices[2].rdev), 12);
	/* the companion and the NIC are no devices; the GPU on its host driver is skipped, saying so */
	assert_int_equal(dpt_count(log, "device=0000:41:00.1 reason=\"not in the table\" group=12"), 1);
	assert_int_equal(dpt_count(log, "device=0000:03:00.0 reason=\"not in the table\""), 1);
	assert_int_equal(dpt_count(log, "device=0000:81:00.0 reason=\"not bound to vfio-pci (driver: nvidia)\""), 1);
	assert_int_equal(dpt_count(log, "\n"), 3);
	/* one ID per group: 3 GPU IDs (groups 14, 12, 13) */
	size_t first[8];
	assert_int_equal(kata_units(s.devices, 4, first), 3);
	assert_int_equal(first[1], 2);
	kata_scan_done(&s);
}

static void legacy_hostile_group_nodes(void **state)
{
	struct kata_scan s;
	gpu("0000:41:00.0", 0, 12);
	group_node(12);
	gpu("0000:42:00.0", 0, 13);
	group_node(13);
	write_file(at("sys/class/vfio/13/dev"), "238:99\n"); /* not this node's number */
	gpu("0000:43:00.0", 0, 14);
	group_node(14);
	relink("../../../kernel/iommu_groups/12", at("sys/devices/pci0000:00/0000:43:00.0/iommu_group"));
	write_file(at("dev/vfio/15"), "");                            /* not a character device */
	assert_int_equal(mknod(at("dev/vfio/noiommu-0"), S_IFCHR | 0600, makedev(GROUP_MAJ, 200)), 0);
	const char *log = scan(KATA_BACKEND_LEGACY, &s);
	assert_int_equal(s.n_devices, 1);
	assert_string_equal(s.devices[0].pci, "0000:41:00.0");
	assert_int_equal(dpt_count(log, "device=/dev/vfio/13 reason=\"dev number mismatch"), 1);
	assert_int_equal(dpt_count(log, "device=0000:43:00.0 reason=\"listed in IOMMU group 14, but its "
					"iommu_group link names group 12\""), 1);
	assert_int_equal(dpt_count(log, "device=/dev/vfio/15 reason=\"/dev/vfio/15 is not a character device\""), 1);
	assert_int_equal(dpt_count(log, "device=/dev/vfio/noiommu-0 reason=\"VFIO no-IOMMU mode"), 1);
	assert_int_equal(dpt_count(log, "\n"), 4);
	kata_scan_done(&s);
	/* no /dev/vfio at all: nothing, said once */
	assert_int_equal(dpt_rmtree(at("dev/vfio")), 0);
	log = scan(KATA_BACKEND_LEGACY, &s);
	assert_int_equal(s.n_devices, 0);
	assert_int_equal(dpt_count(log, "msg=\"VFIO directory missing, nothing to scan\" dir=/dev/vfio"), 1);
	kata_scan_done(&s);
}

static void iommufd_devices_have_groups(void **state)
{
	static const struct want want[] = {
		{ "0000:41:00.0", "/dev/vfio/devices/vfio1", 12, 0 },
		{ "0000:41:00.2", "/dev/vfio/devices/vfio3", 12, 0 },
		{ "0000:42:00.0", "/dev/vfio/devices/vfio2", 13, 0 },
	};
	struct kata_scan s;
	gpu("0000:41:00.0", 0, 12);
	gpu("0000:41:00.2", 0, 12);
	gpu("0000:42:00.0", 0, 13);
	function("0000:41:00.1", 0x10de, 0x068000, 0, 12, "vfio-pci"); /* an NVSwitch in the GPUs' group */
	gpu("0000:43:00.0", 0, 14);
	cdev(1, "0000:41:00.0");
	cdev(2, "0000:42:00.0");
	cdev(3, "0000:41:00.2");
	cdev(4, "0000:41:00.1");
	cdev(5, "0000:43:00.0");
	assert_int_equal(unlink(at("sys/devices/pci0000:00/0000:43:00.0/iommu_group")), 0);
	const char *log = scan(KATA_BACKEND_IOMMUFD, &s);
	assert_devices(&s, want, DP_ELEMENTSOF(want));
	assert_int_equal(dpt_count(log, "device=vfio4 reason=\"shares IOMMU group 12 with 0000:41:00.0, which "
					"another resource advertises"), 1);
	assert_int_equal(dpt_count(log, "device=vfio5 reason=\"/sys/devices/pci0000:00/0000:43:00.0 has no "
					"iommu_group link"), 1);
	assert_int_equal(dpt_count(log, "\n"), 2);
	kata_scan_done(&s);
}

/* ---- viability ---- */

static int check(unsigned g, const char *pci, struct kata_group_verdict *v);

/* ---- large and hostile trees (issue 27): every entry looked at, nothing failing open ---- */

/* The root on a tmpfs of its own (in this test's mount namespace): tmpfs lists a directory
 * newest first, so what a test creates first is read last, past any count a walk might keep. */
static int setup_tmpfs(void **state)
{
	if (setup(state) < 0 || mount("sdp-test", root, "tmpfs", 0, "mode=0755") < 0)
		return -1;
	mkdirs(at("dev/vfio"));
	mkdirs(at("sys/devices/pci0000:00"));
	return 0;
}

static int teardown_tmpfs(void **state)
{
	(void)umount2(root, MNT_DETACH);
	return teardown(state);
}

/* A GPU group read after hundreds of NIC groups on vfio-pci (a host with many VFs): advertised. */
static void legacy_scan_reads_every_group(void **state)
{
	struct kata_scan s;
	char err[256];
	struct kata_scan_opts o = opts;
	o.backend = KATA_BACKEND_LEGACY;
	o.max_entries = 2; /* the kept devices; no bound on the entries looked at */
	o.verbose = false;
	gpu("0000:c1:00.0", 1, 9000);
	group_node(9000);
	for (unsigned g = 100; g < 400; g++) {
		char bdf[32];
		snprintf(bdf, sizeof(bdf), "0000:%02x:%02x.%u", 0x10 + g / 256, (g / 8) % 32, g % 8);
		function(bdf, 0x8086, 0x020000, 0, g, "vfio-pci");
		group_node(g);
	}
	assert_int_equal(kata_scan_run(&o, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n_devices, 1);
	assert_string_equal(s.devices[0].pci, "0000:c1:00.0");
	kata_scan_done(&s);
}

/* A group with thousands of members: the GPU read last is found, and a companion on a host
 * driver read last makes the group not viable. */
static void group_members_all_read(void **state)
{
	struct kata_scan s;
	struct kata_group_verdict v;
	char err[256];
	struct kata_scan_opts o = opts;
	o.backend = KATA_BACKEND_LEGACY;
	o.max_entries = 2;
	o.verbose = false;
	function("0000:41:00.1", 0x10de, 0x040300, 0, 12, "snd_hda_intel"); /* read last */
	gpu("0000:41:00.0", 0, 12);
	for (unsigned i = 0; i < 5000; i++) { /* functions without a driver: VFIO accepts them */
		char bdf[32];
		snprintf(bdf, sizeof(bdf), "0001:%02x:%02x.%u", i / 256, (i / 8) % 32, i % 8);
		function(bdf, 0x1234, 0x058000, -1, 12, NULL);
	}
	group_node(12);
	assert_int_equal(kata_scan_run(&o, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n_devices, 1);
	assert_string_equal(s.devices[0].pci, "0000:41:00.0");
	kata_scan_done(&s);
	assert_int_equal(check(12, "0000:41:00.0", &v), -EPERM);
	assert_string_equal(v.member, "0000:41:00.1");
	assert_string_equal(v.driver, "snd_hda_intel");
}

/* A member whose name is longer than any PCI address, on a host driver: its driver is read
 * whole, and the group is not viable (a cut name would find no driver link: "no driver"). */
static void long_member_name_read_whole(void **state)
{
	static const char longname[] = "platform-device-with-a-name-longer-than-forty-bytes.0";
	struct kata_group_verdict v;
	gpu("0000:41:00.0", 0, 12);
	mkdirs(at("sys/devices/platform/%s", longname));
	relink("../../../bus/platform/drivers/host-dma-engine", at("sys/devices/platform/%s/driver", longname));
	relink("../../../../devices/platform/platform-device-with-a-name-longer-than-forty-bytes.0",
	       at("sys/kernel/iommu_groups/12/devices/%s", longname));
	assert_int_equal(check(12, "0000:41:00.0", &v), -EPERM);
	assert_string_equal(v.member, longname);
	assert_string_equal(v.driver, "host-dma-engine");
	/* a driver name too long to hold is not taken for "none" either */
	char drv[200];
	memset(drv, 'd', sizeof(drv) - 1);
	drv[sizeof(drv) - 1] = '\0';
	char target[256];
	snprintf(target, sizeof(target), "../../../bus/platform/drivers/%s", drv);
	relink(target, at("sys/devices/platform/%s/driver", longname));
	assert_true(check(12, "0000:41:00.0", &v) < 0);
	assert_non_null(strstr(v.reason, "cannot read the driver of member"));
}

/* A member named by one address that links to another function: skipped, saying so (the health
 * check looks a member up by its name); the function it links to is advertised once, and no
 * line says a device is claimed by itself. */
static void member_linking_elsewhere_skipped(void **state)
{
	struct kata_scan s;
	gpu("0000:41:00.0", 0, 12);
	relink("../../../../devices/pci0000:00/0000:41:00.0", at("sys/kernel/iommu_groups/12/devices/0000:41:00.1"));
	group_node(12);
	const char *log = scan(KATA_BACKEND_LEGACY, &s);
	assert_int_equal(s.n_devices, 1);
	assert_string_equal(s.devices[0].pci, "0000:41:00.0");
	assert_int_equal(dpt_count(log, "device=0000:41:00.1 reason=\"/sys/kernel/iommu_groups/12/devices/0000:41:00.1 "
					"links to PCI device 0000:41:00.0, not to its own address\""), 1);
	assert_int_equal(dpt_count(log, "claimed by"), 0);
	assert_int_equal(dpt_count(log, "\n"), 1);
	kata_scan_done(&s);
}

/* numa_node 65535 (a firmware's "none") is no NUMA node; the line names the device. */
static void numa_node_out_of_range(void **state)
{
	struct kata_scan s;
	gpu("0000:41:00.0", 0, 12);
	write_file(at("sys/devices/pci0000:00/0000:41:00.0/numa_node"), "65535\n");
	gpu("0000:42:00.0", 0, 13);
	write_file(at("sys/devices/pci0000:00/0000:42:00.0/numa_node"), "one\n");
	gpu("0000:43:00.0", 1023, 14);
	group_node(12);
	group_node(13);
	group_node(14);
	const char *log = scan(KATA_BACKEND_LEGACY, &s);
	assert_int_equal(s.n_devices, 3);
	assert_int_equal(s.devices[0].numa_node, -1);
	assert_int_equal(s.devices[1].numa_node, -1);
	assert_int_equal(s.devices[2].numa_node, 1023);
	assert_int_equal(dpt_count(log, "msg=\"NUMA node unknown, advertising without topology\" device=0000:41:00.0 "
					"pci=0000:41:00.0 reason=\"/sys/devices/pci0000:00/0000:41:00.0/numa_node is 65535, "
					"above the highest node number a kernel can have (1023)\""), 1);
	assert_int_equal(dpt_count(log, "device=0000:42:00.0 pci=0000:42:00.0 reason="), 1);
	assert_int_equal(dpt_count(log, "device= "), 0);
	kata_scan_done(&s);
}

/* Names from the host never forge a log record: a driver name holding a newline is quoted. */
static void host_names_quoted(void **state)
{
	struct kata_scan s;
	function("0000:03:00.0", 0x8086, 0x020000, 0, 17, "evil\nlevel=error msg=forged");
	group_node(17);
	const char *log = scan(KATA_BACKEND_LEGACY, &s);
	assert_int_equal(s.n_devices, 0);
	assert_int_equal(dpt_count(log, "\nlevel=error msg=forged"), 0);
	assert_int_equal(dpt_count(log, "driver=\"evil\\nlevel=error msg=forged\""), 1);
	assert_int_equal(dpt_count(log, "\n"), 1);
	kata_scan_done(&s);
}


static int check(unsigned g, const char *pci, struct kata_group_verdict *v)
{
	const char *pcis[] = { pci };
	return kata_group_check(g, pcis, 1, v);
}

static void group_viability(void **state)
{
	struct kata_group_verdict v;
	gpu("0000:41:00.0", 0, 12);
	function("0000:41:00.1", 0x10de, 0x040300, 0, 12, NULL); /* no driver: accepted */
	function("0000:40:01.0", 0x8086, 0x060400, 0, 12, "pcieport");
	assert_int_equal(check(12, "0000:41:00.0", &v), 0);
	assert_string_equal(v.reason, "");
	bind_to("0000:41:00.1", "pci-stub");
	assert_int_equal(check(12, "0000:41:00.0", &v), 0);
	bind_to("0000:41:00.1", "mlx5_vfio_pci");
	assert_int_equal(check(12, "0000:41:00.0", &v), 0);
	/* a host driver on the companion: the kernel refuses the group */
	bind_to("0000:41:00.1", "snd_hda_intel");
	assert_int_equal(check(12, "0000:41:00.0", &v), -EPERM);
	assert_string_equal(v.member, "0000:41:00.1");
	assert_string_equal(v.driver, "snd_hda_intel");
	assert_non_null(strstr(v.reason, "IOMMU group 12 is not viable: member 0000:41:00.1 is bound to snd_hda_intel"));
	bind_to("0000:41:00.1", "vfio-pci");
	assert_int_equal(check(12, "0000:41:00.0", &v), 0);
	/* the device itself unbound, or moved to a host driver, or gone from the group */
	bind_to("0000:41:00.0", NULL);
	assert_int_equal(check(12, "0000:41:00.0", &v), -ENODEV);
	assert_string_equal(v.reason, "0000:41:00.0 is no longer bound to vfio-pci (driver: none)");
	bind_to("0000:41:00.0", "nvidia");
	assert_int_equal(check(12, "0000:41:00.0", &v), -ENODEV);
	assert_string_equal(v.reason, "0000:41:00.0 is no longer bound to vfio-pci (driver: nvidia)");
	assert_int_equal(check(12, "0000:99:00.0", &v), -ENODEV);
	assert_string_equal(v.reason, "0000:99:00.0 is no longer in IOMMU group 12");
	assert_int_equal(check(77, "0000:41:00.0", &v), -ENODEV);
	assert_non_null(strstr(v.reason, "cannot read /sys/kernel/iommu_groups/77/devices"));
}

static void driver_rules(void **state)
{
	static const char *const vfio[] = { "vfio-pci", "mlx5_vfio_pci", "nvgrace_gpu_vfio_pci", "nvgrace_vfio_pci", "xe-vfio-pci" };
	static const char *const host[] = { "nvidia", "snd_hda_intel", "vfio", "vfio-pci-x", "nouveau", "xhci_hcd" };
	for (size_t i = 0; i < DP_ELEMENTSOF(vfio); i++)
		assert_true(kata_driver_is_vfio(vfio[i]) && kata_driver_dma_ok(vfio[i]));
	for (size_t i = 0; i < DP_ELEMENTSOF(host); i++)
		assert_false(kata_driver_is_vfio(host[i]) || kata_driver_dma_ok(host[i]));
	assert_true(kata_driver_dma_ok("") && kata_driver_dma_ok("pci-stub") && kata_driver_dma_ok("pcieport"));
	assert_false(kata_driver_is_vfio("") || kata_driver_is_vfio("pci-stub") || kata_driver_is_vfio("pcieport"));
}

/* ---- VFIO_BACKEND ---- */

/* ---- the CDI spec: one device per group, never both kinds of node ---- */

static void spec_per_group(void **state)
{
	static const char legacy[] =
		"cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n"
		"  - name: \"0\"\n    containerEdits:\n      deviceNodes:\n"
		"        - path: \"/dev/vfio/14\"\n          type: \"c\"\n"
		"        - path: \"/dev/vfio/vfio\"\n          type: \"c\"\n"
		"  - name: \"1\"\n    containerEdits:\n      deviceNodes:\n"
		"        - path: \"/dev/vfio/12\"\n          type: \"c\"\n"
		"        - path: \"/dev/vfio/vfio\"\n          type: \"c\"\n";
	static const char iommufd[] =
		"cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n"
		"  - name: \"0\"\n    containerEdits:\n      deviceNodes:\n"
		"        - path: \"/dev/vfio/devices/vfio1\"\n          type: \"c\"\n"
		"        - path: \"/dev/vfio/devices/vfio3\"\n          type: \"c\"\n";
	struct kata_scan s;
	dp_buf spec = { 0 };
	make_legacy_node();
	scan(KATA_BACKEND_LEGACY, &s);
	kata_spec_render("nvidia.com/gpu", s.devices, 3, &spec);
	assert_false(spec.oom);
	assert_string_equal(spec.data, legacy);
	dp_buf_done(&spec);
	kata_scan_done(&s);
	cdev(1, "0000:41:00.0");
	gpu("0000:41:00.2", 0, 12);
	cdev(3, "0000:41:00.2");
	scan(KATA_BACKEND_IOMMUFD, &s);
	assert_int_equal(s.n_devices, 2);
	kata_spec_render("nvidia.com/gpu", s.devices, 2, &spec);
	assert_string_equal(spec.data, iommufd);
	dp_buf_done(&spec);
	kata_scan_done(&s);
}

int main(void)
{
	/* a mount namespace of this test's own, for the tmpfs roots */
	if (unshare(CLONE_NEWNS) < 0 || mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0) {
		perror("test_group: a private mount namespace (needs root)");
		return 1;
	}
	opts = (struct kata_scan_opts){ .table = kata_table, .n_rows = kata_table_len, .verbose = true };
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(legacy_scan_reads_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(legacy_hostile_group_nodes, setup, teardown),
		cmocka_unit_test_setup_teardown(iommufd_devices_have_groups, setup, teardown),
		cmocka_unit_test_setup_teardown(group_viability, setup, teardown),
		cmocka_unit_test(driver_rules),
		cmocka_unit_test_setup_teardown(spec_per_group, setup, teardown),
		cmocka_unit_test_setup_teardown(legacy_scan_reads_every_group, setup_tmpfs, teardown_tmpfs),
		cmocka_unit_test_setup_teardown(group_members_all_read, setup_tmpfs, teardown_tmpfs),
		cmocka_unit_test_setup_teardown(long_member_name_read_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(member_linking_elsewhere_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(numa_node_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(host_names_quoted, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
