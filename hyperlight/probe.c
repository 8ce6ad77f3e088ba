/* SPDX-License-Identifier: Apache-2.0 */
/* probe: the hypervisor usability probe, run in the core's helper child (probe.h). */
#include "probe.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <linux/types.h>
#include <linux/vhost.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dp/env.h"
#include "dp/macro.h"
#include "dp/seccomp.h"

static_assert(KVM_GET_API_VERSION == 0xAE00, "KVM_GET_API_VERSION is _IO(0xAE, 0x00)");
static_assert(KVM_CREATE_VM == 0xAE01, "KVM_CREATE_VM is _IO(0xAE, 0x01)");
static_assert(KVM_CHECK_EXTENSION == 0xAE03, "KVM_CHECK_EXTENSION is _IO(0xAE, 0x03)");
static_assert(KVM_CAP_ARM_VM_IPA_SIZE == 165, "KVM_CAP_ARM_VM_IPA_SIZE is 165");
static_assert(TUNGETFEATURES == 0x800454cf, "TUNGETFEATURES is _IOR('T', 207, unsigned int)");
static_assert(VHOST_GET_FEATURES == 0x8008af00, "VHOST_GET_FEATURES is _IOR(0xAF, 0x00, __u64)");

/*
 * Upstream <linux/mshv.h> (6.15+), not shipped by Debian 12's linux-libc-dev. The ioctl number
 * is computed from this 16-byte struct; newer kernels read a longer struct only when pt_flags
 * bit 3 (MSHV_PT_BIT_CPU_AND_XSAVE_FEATURES) is set, so these arguments are accepted by every
 * kernel with the upstream ABI.
 */
struct hl_mshv_create_partition {
	__u64 pt_flags;
	__u64 pt_isolation;
};
#define HL_MSHV_IOCTL 0xB8
#define HL_MSHV_CREATE_PARTITION _IOW(HL_MSHV_IOCTL, 0x00, struct hl_mshv_create_partition)
#define HL_MSHV_PT_ISOLATION_NONE 0
static_assert(sizeof(struct hl_mshv_create_partition) == 16, "16-byte MSHV v1 arguments");
static_assert(HL_MSHV_CREATE_PARTITION == 0x4010B800, "MSHV_CREATE_PARTITION is 0x4010B800");

/*
 * pt_flags = 0: no optional partition features. Bit 3 clear means the kernel's default CPU and
 * XSAVE features (what the seed asks for). We also leave LAPIC (bit 0) clear: the probe asks
 * the hypervisor for the least it can, so that it checks "a partition can be created" rather
 * than one VMM's feature set; the flag mask of every upstream kernel accepts 0, and a LAPIC is
 * a choice the workload's own VMM makes when it creates its partitions.
 */
#define HL_MSHV_PROBE_FLAGS 0ULL

#define MAJOR_MAX 0xfffu
#define MINOR_MAX 0xfffffu

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	static char buf[32];

	if (n)
		return n;
	snprintf(buf, sizeof(buf), "errno %d", e);
	return buf;
}

static bool args_ok(const char *path, const char *reason, size_t size)
{
	return path && reason && size > 0;
}

/* -errno of open, reason "EACCES opening <path>". */
static int open_device(const char *path, char *reason, size_t size)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		int e = errno;
		snprintf(reason, size, "%s opening %s", errname(e), path);
		return -e;
	}
	return fd;
}

/* A companion's node: never through a symlink; a node without its driver says which module. */
static int open_companion(const char *path, const char *module, char *reason, size_t size)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0) {
		int e = errno;
		if (e == ENODEV || e == ENXIO)
			snprintf(reason, size, "%s opening %s (no driver: module %s not loaded?)", errname(e),
				 path, module);
		else if (e == ELOOP)
			snprintf(reason, size, "ELOOP opening %s (a symbolic link, not the device node)", path);
		else
			snprintf(reason, size, "%s opening %s", errname(e), path);
		return -e;
	}
	return fd;
}

unsigned long hl_kvm_vm_type(int ipa_limit)
{
	if (ipa_limit <= 0 || ipa_limit >= HL_KVM_DEFAULT_IPA_BITS)
		return 0;
	return KVM_VM_TYPE_ARM_IPA_SIZE((unsigned long)ipa_limit);
}

/* arm64: the host's IPA limit in bits (KVM_CAP_ARM_VM_IPA_SIZE; 0 when the kernel lacks the
 * capability), or -errno with the reason. Elsewhere 0: KVM_CREATE_VM's argument is no IPA size. */
static int kvm_ipa_limit(int fd, char *reason, size_t size)
{
#if defined(__aarch64__)
	int limit = ioctl(fd, KVM_CHECK_EXTENSION, KVM_CAP_ARM_VM_IPA_SIZE);

	if (limit < 0) {
		int e = errno;
		snprintf(reason, size, "KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE): %s", errname(e));
		return -e;
	}
	return limit;
#else
	(void)fd;
	(void)reason;
	(void)size;
	return 0;
#endif
}

/* KVM_CREATE_VM with the type the host takes (hl_kvm_vm_type), the VM closed again: 0 with the
 * success detail in reason, or -errno with the reason. */
static int kvm_create_vm(int fd, int version, char *reason, size_t size)
{
	_cleanup_close_ int vm = -1;
	int ipa = kvm_ipa_limit(fd, reason, size);
	unsigned long type;

	if (ipa < 0)
		return ipa;
	type = hl_kvm_vm_type(ipa);
	vm = ioctl(fd, KVM_CREATE_VM, type);
	if (vm < 0) {
		int e = errno;
		if (type)
			snprintf(reason, size, "KVM_CREATE_VM(IPA %d bits): %s", ipa, errname(e));
		else
			snprintf(reason, size, "KVM_CREATE_VM: %s", errname(e));
		return -e;
	}
	if (type)
		snprintf(reason, size, "KVM API version %d, VM created (IPA %d bits, the host's limit)",
			 version, ipa);
	else
		snprintf(reason, size, "KVM API version %d, VM created", version);
	return 0;
}

int hl_probe_kvm(const char *path, char *reason, size_t size)
{
	_cleanup_close_ int fd = -1;
	int version;

	if (!args_ok(path, reason, size))
		return -EINVAL;
	fd = open_device(path, reason, size);
	if (fd < 0)
		return fd;
	version = ioctl(fd, KVM_GET_API_VERSION, 0);
	if (version < 0) {
		int e = errno;
		snprintf(reason, size, "KVM_GET_API_VERSION: %s", errname(e));
		return -e;
	}
	if (version != HL_KVM_API_VERSION) {
		snprintf(reason, size, "API version %d", version);
		return -EPROTO;
	}
	return kvm_create_vm(fd, version, reason, size);
}

int hl_probe_mshv(const char *path, char *reason, size_t size)
{
	struct hl_mshv_create_partition args = {
		.pt_flags = HL_MSHV_PROBE_FLAGS,
		.pt_isolation = HL_MSHV_PT_ISOLATION_NONE,
	};
	_cleanup_close_ int fd = -1, partition = -1;

	if (!args_ok(path, reason, size))
		return -EINVAL;
	fd = open_device(path, reason, size);
	if (fd < 0)
		return fd;
	/* The partition is closed uninitialised: no memory, no vCPU, nothing runs. */
	partition = ioctl(fd, HL_MSHV_CREATE_PARTITION, &args);
	if (partition < 0) {
		int e = errno;
		snprintf(reason, size, "MSHV_CREATE_PARTITION: %s", errname(e));
		return -e;
	}
	snprintf(reason, size, "MSHV partition created");
	return 0;
}

static const struct {
	unsigned flag;
	const char *name;
} tun_flags[] = {
	{ IFF_TAP, "tap" },		{ IFF_TUN, "tun" },		  { IFF_NO_PI, "no_pi" },
	{ IFF_VNET_HDR, "vnet_hdr" }, { IFF_MULTI_QUEUE, "multi_queue" },
};

int hl_probe_tun(const char *path, char *reason, size_t size)
{
	_cleanup_close_ int fd = -1;
	unsigned features = 0;
	size_t n;

	if (!args_ok(path, reason, size))
		return -EINVAL;
	fd = open_companion(path, "tun", reason, size);
	if (fd < 0)
		return fd;
	if (ioctl(fd, TUNGETFEATURES, &features) < 0) {
		int e = errno;
		snprintf(reason, size, "TUNGETFEATURES: %s", errname(e));
		return -e;
	}
	if (!(features & IFF_TAP)) {
		snprintf(reason, size, "tun features 0x%x: no tap devices (IFF_TAP)", features);
		return -EPROTO;
	}
	n = (size_t)snprintf(reason, size, "tun features 0x%x (", features);
	for (size_t i = 0, k = 0; i < DP_ELEMENTSOF(tun_flags) && n < size; i++)
		if (features & tun_flags[i].flag)
			n += (size_t)snprintf(reason + n, size - n, "%s%s", k++ ? ", " : "", tun_flags[i].name);
	if (n < size)
		snprintf(reason + n, size - n, ")");
	return 0;
}

/* vhost-net and vhost-vsock: open, VHOST_GET_FEATURES (no owner needed), close. */
static int probe_vhost(const char *path, const char *what, const char *module, char *reason, size_t size)
{
	_cleanup_close_ int fd = -1;
	__u64 features = 0;

	if (!args_ok(path, reason, size))
		return -EINVAL;
	fd = open_companion(path, module, reason, size);
	if (fd < 0)
		return fd;
	if (ioctl(fd, VHOST_GET_FEATURES, &features) < 0) {
		int e = errno;
		snprintf(reason, size, "VHOST_GET_FEATURES: %s", errname(e));
		return -e;
	}
	snprintf(reason, size, "%s features 0x%llx", what, (unsigned long long)features);
	return 0;
}

int hl_probe_vhost_net(const char *path, char *reason, size_t size)
{
	return probe_vhost(path, "vhost-net", "vhost_net", reason, size);
}

int hl_probe_vhost_vsock(const char *path, char *reason, size_t size)
{
	return probe_vhost(path, "vhost-vsock", "vhost_vsock", reason, size);
}

int hl_probe_host_node(const char *path, unsigned maj, unsigned min, bool nofollow, char *reason, size_t size)
{
	struct stat st;

	if (!args_ok(path, reason, size))
		return -EINVAL;
	if ((nofollow ? lstat(path, &st) : stat(path, &st)) < 0) {
		int e = errno;
		if (e == ENOENT)
			snprintf(reason, size, "host device %s missing", path);
		else
			snprintf(reason, size, "host device %s: %s", path, errname(e));
		return -e;
	}
	if (S_ISLNK(st.st_mode)) {
		snprintf(reason, size, "host device %s is a symbolic link, not the device node", path);
		return -ELOOP;
	}
	if (!S_ISCHR(st.st_mode)) {
		snprintf(reason, size, "host device %s is not a character device", path);
		return -ENOTTY;
	}
	if (major(st.st_rdev) != maj || minor(st.st_rdev) != min) {
		snprintf(reason, size, "host device %s has device number %u:%u, expected %u:%u", path,
			 major(st.st_rdev), minor(st.st_rdev), maj, min);
		return -ENODEV;
	}
	snprintf(reason, size, "host device %s is %u:%u", path, maj, min);
	return 0;
}

/* ---------------------------------------------------------------- confinement */

#define IOCTL_CMD(cmd) DP_SC_ARG("ioctl", 1, 0xffffffffu, (cmd))
#if defined(__aarch64__)
/* the host's IPA limit, read before KVM_CREATE_VM (hl_kvm_vm_type) */
#define IOCTL_CMDS_ARCH IOCTL_CMD(KVM_CHECK_EXTENSION),
#else
#define IOCTL_CMDS_ARCH
#endif
#define IOCTL_CMDS                                                                                 \
	IOCTL_CMD(KVM_GET_API_VERSION), IOCTL_CMD(KVM_CREATE_VM), IOCTL_CMDS_ARCH                  \
	IOCTL_CMD(HL_MSHV_CREATE_PARTITION)
/* The companions' (companion.h): in the daemon's list only when COMPANIONS names one. */
#define COMPANION_IOCTL_CMDS IOCTL_CMD(TUNGETFEATURES), IOCTL_CMD(VHOST_GET_FEATURES)

/* The probe helper's own filter, on top of the daemon's: open the device, stat the host node,
 * the hypervisor ioctls (three; four on arm64), close, write the result line, exit. */
static const dp_seccomp_rule probe_rules[] = {
	DP_SC("openat"), DP_SC("newfstatat"), DP_SC("fstat"), DP_SC("close"), DP_SC_MUSL_LEGACY
	IOCTL_CMDS, COMPANION_IOCTL_CMDS,
	DP_SC("write"), DP_SC("exit_group"), DP_SC("exit"),
	/* the C library's memory and a failing assertion's abort(), so a bug still ends as a
	 * crash the daemon reports ("helper killed by signal 6") */
	DP_SC("brk"), DP_SC("mmap"), DP_SC("munmap"), DP_SC("rt_sigprocmask"), DP_SC("rt_sigaction"),
	DP_SC("getpid"), DP_SC("gettid"), DP_SC("tgkill"),
	/* tests/fakes/hvshim.c stands in for the kernel in the tests (open's permission check, a
	 * hang, a slow ioctl, its state file, its fake device fds). Allowed in every build so the
	 * tests run the filter that ships; none reaches anything the helper does not hold already.
	 * The daemon's own filter allows them too (a call must pass both). */
	DP_SC("faccessat2"), DP_SC("read"), DP_SC("pipe2"), DP_SC("nanosleep"),
	DP_SC("clock_nanosleep"), DP_SC("prlimit64"),
#ifndef __GLIBC__
	/* musl's open(O_CLOEXEC) sets FD_CLOEXEC again with fcntl; its raise() and abort() signal
	 * with tkill */
	DP_SC("fcntl"), DP_SC("tkill"),
#endif
};

/* The daemon's filter must allow these too: the probe helper inherits it (a call must pass
 * both filters). With the hypervisor shim (tests) no ioctl reaches the kernel; with a real
 * /dev/kvm (make test-runtime, make test-live-kvm) the daemon's list refused them (EPERM). */
const dp_seccomp_rule hl_probe_ioctl_rules[] = {
	IOCTL_CMDS,
};
const size_t hl_probe_n_ioctl_rules = DP_ELEMENTSOF(hl_probe_ioctl_rules);
const dp_seccomp_rule hl_probe_companion_ioctl_rules[] = {
	COMPANION_IOCTL_CMDS,
};
const size_t hl_probe_n_companion_ioctl_rules = DP_ELEMENTSOF(hl_probe_companion_ioctl_rules);

/* Confine the helper before it touches the device; false (a reply written) on failure. The
 * mode follows SDP_SECCOMP like the daemon's (off: no filter). */
static bool confine(void)
{
	const dp_seccomp_rule *lists[] = { probe_rules };
	size_t counts[] = { DP_ELEMENTSOF(probe_rules) };
	dp_seccomp_mode mode;
	int r;

	(void)dp_seccomp_mode_from_env(&mode, NULL, 0);
	r = dp_seccomp_install(lists, counts, 1, mode, NULL);
	if (r < 0) {
		dp_helper_reply_fail("cannot confine the probe helper: %s", errname(-r));
		return false;
	}
	return true;
}

/* ---------------------------------------------------------------- helper entries */

typedef int (*probe_fn)(const char *path, char *reason, size_t size);

static void reply(int r, const char *reason)
{
	if (r < 0)
		dp_helper_reply_fail("%s", reason);
	else
		dp_helper_reply_ok(reason);
}

/* "<major> <minor>" from argv strings; false with a reply written on bad input. */
static bool parse_devnum(const char *smaj, const char *smin, unsigned *ret_maj, unsigned *ret_min)
{
	uint64_t maj, min;

	if (dp_parse_u64(smaj, 0, MAJOR_MAX, &maj) < 0 || dp_parse_u64(smin, 0, MINOR_MAX, &min) < 0) {
		dp_helper_reply_fail("invalid probe arguments: device number \"%.16s:%.16s\"", smaj, smin);
		return false;
	}
	*ret_maj = (unsigned)maj;
	*ret_min = (unsigned)min;
	return true;
}

static void run_probe(probe_fn fn, int argc, char **argv)
{
	char reason[DP_HELPER_REASON_MAX];

	if (!confine())
		return;
	if (argc != 2) {
		dp_helper_reply_fail("invalid probe arguments: %s takes <device path>", argv[0]);
		return;
	}
	reply(fn(argv[1], reason, sizeof(reason)), reason);
}

static void entry_probe_kvm(int argc, char **argv)
{
	run_probe(hl_probe_kvm, argc, argv);
}

static void entry_probe_mshv(int argc, char **argv)
{
	run_probe(hl_probe_mshv, argc, argv);
}

/* The host check of argv[0..2]; true when it passed (nothing written), else replies. A
 * companion's host node must be the node itself (nofollow). */
static bool host_check(char **argv, bool nofollow)
{
	char reason[DP_HELPER_REASON_MAX];
	unsigned maj, min;

	if (!parse_devnum(argv[1], argv[2], &maj, &min))
		return false;
	if (hl_probe_host_node(argv[0], maj, min, nofollow, reason, sizeof(reason)) < 0) {
		dp_helper_reply_fail("%s", reason);
		return false;
	}
	return true;
}

static void entry_check_host(int argc, char **argv)
{
	if (!confine())
		return;
	if (argc != 4) {
		dp_helper_reply_fail("invalid probe arguments: check-host takes <path> <major> <minor>");
		return;
	}
	if (host_check(argv + 1, false))
		dp_helper_reply_ok("host device matches");
}

static const struct {
	const char *kind;
	probe_fn fn;
	bool companion; /* the host node must not be a symlink */
} kinds[] = {
	{ "kvm", hl_probe_kvm, false },
	{ "mshv", hl_probe_mshv, false },
	{ "tun", hl_probe_tun, true },
	{ "vhost-net", hl_probe_vhost_net, true },
	{ "vhost-vsock", hl_probe_vhost_vsock, true },
};

static void entry_probe(int argc, char **argv)
{
	char reason[DP_HELPER_REASON_MAX];
	size_t k = DP_ELEMENTSOF(kinds);

	if (!confine())
		return;
	if (argc == 3 || argc == 6)
		for (k = 0; k < DP_ELEMENTSOF(kinds) && strcmp(argv[1], kinds[k].kind) != 0; k++)
			;
	if (k == DP_ELEMENTSOF(kinds)) {
		dp_helper_reply_fail("invalid probe arguments: probe takes kvm|mshv|tun|vhost-net|vhost-vsock "
				     "<device path> [<host path> <major> <minor>]");
		return;
	}
	if (argc == 6 && !host_check(argv + 3, kinds[k].companion))
		return;
	reply(kinds[k].fn(argv[2], reason, sizeof(reason)), reason);
}

const dp_helper_entry hl_probe_helpers[] = {
	{ "probe-kvm", entry_probe_kvm },
	{ "probe-mshv", entry_probe_mshv },
	{ "check-host", entry_check_host },
	{ HL_PROBE_HELPER, entry_probe },
};
const size_t hl_probe_n_helpers = DP_ELEMENTSOF(hl_probe_helpers);
static_assert(DP_ELEMENTSOF(hl_probe_helpers) <= HL_PROBE_MAX_HELPERS, "main.c's helper table holds them");
