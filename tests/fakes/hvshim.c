/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hvshim: an LD_PRELOAD library that fakes the hypervisor device for tests, so the daemon's real
 * probe code runs (open, KVM_GET_API_VERSION, KVM_CREATE_VM, MSHV_CREATE_PARTITION, close).
 *
 * Knobs (environment, or the file named by HVSHIM_STATE_FILE):
 *   HVSHIM_DEVICE=<path>          the path (as passed to open) that is the fake device; unset or
 *                                 empty: the shim passes everything through
 *   HVSHIM_OPEN_ERRNO=EACCES      open of the device fails with this errno (name or number)
 *   HVSHIM_API_VERSION=12         what KVM_GET_API_VERSION returns (default 12)
 *   HVSHIM_CREATE_VM_ERRNO=ENOMEM KVM_CREATE_VM fails with this errno
 *   HVSHIM_IPA_LIMIT=36           arm64 builds: the host's IPA limit in bits, what
 *                                 KVM_CHECK_EXTENSION(KVM_CAP_ARM_VM_IPA_SIZE) answers; unset or 0:
 *                                 the capability absent (a kernel before 4.20). KVM_CREATE_VM
 *                                 judges its type against it as arm64's kvm_arm_setup_stage2 does
 *                                 (below)
 *   HVSHIM_CREATE_ERRNO=EINVAL    MSHV_CREATE_PARTITION fails with this errno
 *   HVSHIM_HANG=1                 every ioctl on a fake fd sleeps forever (nanosleep loop)
 *   HVSHIM_PID_FILE=<path>        every ioctl on a fake fd first writes the process's pid (decimal
 *                                 and a newline) to this file (created 0600 or truncated), so a
 *                                 test can tell how the process ended (waitid with WNOWAIT)
 *   HVSHIM_DELAY_MS=300           KVM_CREATE_VM sleeps that long before it answers (a slow but
 *                                 successful probe; 0..60000, anything else: no delay)
 *   HVSHIM_CRASH=SIGSEGV          every ioctl on a fake fd kills the process with this signal
 *                                 (name or number; default disposition restored, no core file)
 *   HVSHIM_EXIT=3                 every ioctl on a fake fd ends the process at once with
 *                                 _exit(3) (0..255), printing nothing
 *   HVSHIM_TRY_SOCKET=1           every ioctl on a fake fd first tries socket(AF_UNIX): when
 *                                 that is not refused with EPERM (the probe helper's seccomp
 *                                 filter refuses it), the ioctl fails with EXDEV
 *   HVSHIM_GARBAGE=1              every ioctl on a fake fd writes bytes that are not a helper
 *                                 result line to stdout, then _exit(0)
 *   HVSHIM_SPAWN_ERRNO=EAGAIN     in the daemon: clone() with CLONE_VFORK (the helper runner's
 *                                 start of a child) fails with this errno, as fork does when the
 *                                 process limit or memory runs out: the probe cannot start
 *   HVSHIM_TUN=<path>             the path (as passed to open) that is a fake tun device
 *                                 (/dev/net/tun, misc 10:200); unset or empty: that path goes to
 *                                 the real kernel (the real /dev/net/tun, a mknod'ed node)
 *   HVSHIM_VHOST_NET=<path>       the same for a fake vhost-net device (/dev/vhost-net, 10:238)
 *   HVSHIM_VHOST_VSOCK=<path>     the same for a fake vhost-vsock device (/dev/vhost-vsock, 10:241)
 *   HVSHIM_TUN_OPEN_ERRNO=ENODEV  open of the fake tun fails with this errno (name or number;
 *                                 ENODEV is what a node without its driver gives: the module
 *                                 not loaded); likewise HVSHIM_VHOST_NET_OPEN_ERRNO and
 *                                 HVSHIM_VHOST_VSOCK_OPEN_ERRNO
 *   HVSHIM_TUN_FEATURES=0x7173    what TUNGETFEATURES writes (an unsigned int, 0x-prefixed hex
 *                                 or decimal; default 0x7173, what Linux 6.0 and later answer:
 *                                 IFF_TUN|IFF_TAP|IFF_NAPI|IFF_NAPI_FRAGS|IFF_NO_CARRIER|
 *                                 IFF_MULTI_QUEUE|IFF_NO_PI|IFF_ONE_QUEUE|IFF_VNET_HDR)
 *   HVSHIM_VHOST_NET_FEATURES=0x33d008000
 *                                 what VHOST_GET_FEATURES writes on the fake vhost-net (a u64,
 *                                 hex or decimal as above); default what Debian 12's Linux 6.1
 *                                 answers (read in make test-live-kvm's guest): VHOST_FEATURES
 *                                 (vhost.h: NOTIFY_ON_EMPTY 24, LOG_ALL 26, ANY_LAYOUT 27,
 *                                 RING_INDIRECT_DESC 28, RING_EVENT_IDX 29, VERSION_1 32) |
 *                                 VHOST_NET_F_VIRTIO_NET_HDR 27 | VIRTIO_NET_F_MRG_RXBUF 15 |
 *                                 VIRTIO_F_ACCESS_PLATFORM 33 (later kernels add
 *                                 VIRTIO_F_RING_RESET 40)
 *   HVSHIM_VHOST_VSOCK_FEATURES=0x33d000002
 *                                 the same on the fake vhost-vsock; default Linux 6.1's (the
 *                                 guest's answer too)
 *                                 VHOST_VSOCK_FEATURES (drivers/vhost/vsock.c): VHOST_FEATURES |
 *                                 VIRTIO_F_ACCESS_PLATFORM 33 | VIRTIO_VSOCK_F_SEQPACKET 1
 *                                 An invalid *_FEATURES value: the default, with a warning.
 *   HVSHIM_STATE_FILE=<path>      when set and readable, every open and every ioctl on a fake fd
 *                                 re-reads the knobs from this file (lines KEY=VALUE with the
 *                                 names above, '#' comments) instead of the environment; when it
 *                                 is missing or unreadable, the environment is used.
 *
 * Opening the device path still has the real node's semantics for existence and permission
 * (faccessat with the effective ids: a deleted node gives ENOENT, a denied user EACCES), but
 * nothing is opened: the fd is the read end of a pipe the shim remembers (by fd number and
 * inode, so a reused number is not mistaken for it). The shim makes only calls the probe
 * helper's seccomp filter allows (hyperlight/probe.c): pipe2 rather than memfd_create,
 * nanosleep rather than pause. On the device fd: KVM_GET_API_VERSION (arg must be 0),
 * KVM_CHECK_EXTENSION (0 for every capability but arm64's KVM_CAP_ARM_VM_IPA_SIZE),
 * KVM_CREATE_VM (x86-64: the machine type must be 0; arm64: the type is the IPA size, bits 0..7
 * only; 0 asks for the default 40 bits, refused with EINVAL when HVSHIM_IPA_LIMIT is below 40;
 * a size must be 32..HVSHIM_IPA_LIMIT, and without the capability no size is taken) and
 * MSHV_CREATE_PARTITION (16-byte arguments: flags only in bits 0..2, so bit 3 clear; isolation
 * 0; else EINVAL) answer like the kernel, and the VM/partition fd returned is another fake fd;
 * any other ioctl on a fake fd fails with ENOTTY.
 *
 * The companion devices (HVSHIM_TUN, HVSHIM_VHOST_NET, HVSHIM_VHOST_VSOCK) keep more of the
 * node's semantics, checked in this order: the *_OPEN_ERRNO knob; the path looked up with
 * fstatat (AT_SYMLINK_NOFOLLOW when open has O_NOFOLLOW: a symlink there gives ELOOP, as the
 * kernel's open does; a missing path ENOENT); a path that is not a character device (a regular
 * file, a directory, a FIFO...) or a character device of another number than the companion's
 * (major 10, minor 200, 238 or 241: another driver's node) goes to the real open, so the kernel
 * answers (a regular file
 * opens and every ioctl on it fails with ENOTTY, a directory gives EISDIR; the fault knobs do
 * not apply to such an fd: it is not a fake); then permission with faccessat as above, and the
 * fd is a fake one. On it TUNGETFEATURES (tun) and VHOST_GET_FEATURES (vhost-net, vhost-vsock)
 * answer as the kernel: the features copied to the pointer argument, EFAULT for NULL. Any other
 * ioctl fails with ENOTTY (the kernel answers most others on a fresh fd with EBADFD, tun with no
 * interface attached, or EPERM, vhost before VHOST_SET_OWNER; the probe makes none of them).
 * The fault knobs HVSHIM_HANG, HVSHIM_PID_FILE, HVSHIM_CRASH, HVSHIM_EXIT, HVSHIM_TRY_SOCKET
 * and HVSHIM_GARBAGE apply to every fake fd, the companions' included. The request number is
 * compared as the kernel takes it, 32 bits (musl's ioctl() takes an int: TUNGETFEATURES and
 * VHOST_GET_FEATURES are negative there).
 * Every other path and fd goes to the real functions (dlsym RTLD_NEXT). Single-threaded use.
 */
#undef _FILE_OFFSET_BITS /* define open and open64 as themselves, not one redirected to the other */
#undef _FORTIFY_SOURCE
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <linux/vhost.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define SHIM_MSHV_CREATE_PARTITION 0x4010B800UL /* _IOW(0xB8, 0x00, 16-byte struct) */
#define SHIM_MSHV_FLAGS_KNOWN 0x7ULL		/* LAPIC, X2APIC, GPA_SUPER_PAGES */
#define MAX_FAKE_FD 1024
#define VALUE_MAX 64
#define DELAY_MAX_MS 60000
#define IPA_DEFAULT_BITS 40 /* arm64's KVM_PHYS_SHIFT: what KVM_CREATE_VM(0) asks for */
#define IPA_MIN_BITS 32	    /* arm64's ARM64_MIN_PARANGE_BITS */
/* What Linux answers (HVSHIM_*_FEATURES above): TUNGETFEATURES since 6.0 (IFF_NO_CARRIER),
 * VHOST_GET_FEATURES as of 6.1. */
#define TUN_FEATURES_DEFAULT 0x7173ULL
#define VHOST_NET_FEATURES_DEFAULT 0x33d008000ULL
#define VHOST_VSOCK_FEATURES_DEFAULT 0x33d000002ULL

#ifdef __GLIBC__
/* glibc's fortified entry points (declared by bits/fcntl2.h only under _FORTIFY_SOURCE). */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
#define IOCTL_REQ unsigned long
#else
/* Built against musl for the musl hyperlight (scripts/build-static.sh): its ioctl() takes an
 * int request, and the glibc extensions come from core/compat/musl.c. */
#include "compat/musl.h"
#define IOCTL_REQ int
#endif

enum fake_kind { FAKE_NONE, FAKE_DEVICE, FAKE_VM, FAKE_TUN, FAKE_VHOST_NET, FAKE_VHOST_VSOCK };

static struct {
	unsigned char kind;
	ino_t ino;
} fakes[MAX_FAKE_FD];

static struct knobs {
	char device[PATH_MAX];
	char open_errno[VALUE_MAX];
	char api_version[VALUE_MAX];
	char create_vm_errno[VALUE_MAX];
	char ipa_limit[VALUE_MAX];
	char create_errno[VALUE_MAX];
	char hang[VALUE_MAX];
	char delay_ms[VALUE_MAX];
	char crash[VALUE_MAX];
	char exit_status[VALUE_MAX];
	char garbage[VALUE_MAX];
	char try_socket[VALUE_MAX];
	char spawn_errno[VALUE_MAX];
	char pid_file[PATH_MAX];
	char tun[PATH_MAX];
	char tun_open_errno[VALUE_MAX];
	char tun_features[VALUE_MAX];
	char vhost_net[PATH_MAX];
	char vhost_net_open_errno[VALUE_MAX];
	char vhost_net_features[VALUE_MAX];
	char vhost_vsock[PATH_MAX];
	char vhost_vsock_open_errno[VALUE_MAX];
	char vhost_vsock_features[VALUE_MAX];
} knobs;

static const struct {
	const char *name;
	size_t off, size;
} knob_table[] = {
#define KNOB(n, f) { n, offsetof(struct knobs, f), sizeof(((struct knobs *)0)->f) }
	KNOB("HVSHIM_DEVICE", device),
	KNOB("HVSHIM_OPEN_ERRNO", open_errno),
	KNOB("HVSHIM_API_VERSION", api_version),
	KNOB("HVSHIM_CREATE_VM_ERRNO", create_vm_errno),
	KNOB("HVSHIM_IPA_LIMIT", ipa_limit),
	KNOB("HVSHIM_CREATE_ERRNO", create_errno),
	KNOB("HVSHIM_HANG", hang),
	KNOB("HVSHIM_DELAY_MS", delay_ms),
	KNOB("HVSHIM_CRASH", crash),
	KNOB("HVSHIM_EXIT", exit_status),
	KNOB("HVSHIM_GARBAGE", garbage),
	KNOB("HVSHIM_TRY_SOCKET", try_socket),
	KNOB("HVSHIM_SPAWN_ERRNO", spawn_errno),
	KNOB("HVSHIM_PID_FILE", pid_file),
	KNOB("HVSHIM_TUN", tun),
	KNOB("HVSHIM_TUN_OPEN_ERRNO", tun_open_errno),
	KNOB("HVSHIM_TUN_FEATURES", tun_features),
	KNOB("HVSHIM_VHOST_NET", vhost_net),
	KNOB("HVSHIM_VHOST_NET_OPEN_ERRNO", vhost_net_open_errno),
	KNOB("HVSHIM_VHOST_NET_FEATURES", vhost_net_features),
	KNOB("HVSHIM_VHOST_VSOCK", vhost_vsock),
	KNOB("HVSHIM_VHOST_VSOCK_OPEN_ERRNO", vhost_vsock_open_errno),
	KNOB("HVSHIM_VHOST_VSOCK_FEATURES", vhost_vsock_features),
#undef KNOB
};
#define N_KNOBS (sizeof(knob_table) / sizeof(knob_table[0]))

/* The companion devices: their knobs (offsets into knobs), the fake kind, the one ioctl each
 * answers, what it writes by default and how wide that is (bytes). */
static const struct companion {
	const char *name;
	size_t path, open_errno, features;
	enum fake_kind kind;
	unsigned long req;
	unsigned long long features_default;
	size_t width;
	unsigned minor; /* the kernel's misc minor (major 10): another number is another driver's */
} companions[] = {
	{ "HVSHIM_TUN_FEATURES", offsetof(struct knobs, tun), offsetof(struct knobs, tun_open_errno),
	  offsetof(struct knobs, tun_features), FAKE_TUN, TUNGETFEATURES, TUN_FEATURES_DEFAULT,
	  sizeof(unsigned int), 200 },
	{ "HVSHIM_VHOST_NET_FEATURES", offsetof(struct knobs, vhost_net),
	  offsetof(struct knobs, vhost_net_open_errno), offsetof(struct knobs, vhost_net_features),
	  FAKE_VHOST_NET, VHOST_GET_FEATURES, VHOST_NET_FEATURES_DEFAULT, sizeof(uint64_t), 238 },
	{ "HVSHIM_VHOST_VSOCK_FEATURES", offsetof(struct knobs, vhost_vsock),
	  offsetof(struct knobs, vhost_vsock_open_errno), offsetof(struct knobs, vhost_vsock_features),
	  FAKE_VHOST_VSOCK, VHOST_GET_FEATURES, VHOST_VSOCK_FEATURES_DEFAULT, sizeof(uint64_t), 241 },
};
#define N_COMPANIONS (sizeof(companions) / sizeof(companions[0]))

static const char *knob_at(size_t off)
{
	return (const char *)&knobs + off;
}

/* ---------------------------------------------------------------- real functions */

#define REAL(name)                                                  \
	({                                                          \
		static __typeof__(name) *_real;                     \
		if (!_real)                                         \
			_real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name); \
		_real;                                              \
	})

static void set_knob(size_t i, const char *value, size_t len)
{
	char *dst = (char *)&knobs + knob_table[i].off;

	if (len >= knob_table[i].size)
		len = knob_table[i].size - 1;
	memcpy(dst, value, len);
	dst[len] = '\0';
}

static void parse_line(const char *line, size_t len)
{
	for (size_t i = 0; i < N_KNOBS; i++) {
		size_t n = strlen(knob_table[i].name);
		if (len > n && memcmp(line, knob_table[i].name, n) == 0 && line[n] == '=') {
			set_knob(i, line + n + 1, len - n - 1);
			return;
		}
	}
}

/* The state file into the knobs; false when it cannot be read. */
static bool load_file(const char *path)
{
	static char buf[5 * PATH_MAX + 4096]; /* every knob at its longest */
	int (*real_open)(const char *, int, ...) = REAL(open);
	size_t used = 0;
	int fd;

	if (!real_open || (fd = real_open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return false;
	for (;;) {
		ssize_t n = read(fd, buf + used, sizeof(buf) - 1 - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
		if (used == sizeof(buf) - 1)
			break;
	}
	REAL(close)(fd);
	memset(&knobs, 0, sizeof(knobs));
	for (size_t start = 0; start < used;) {
		const char *nl = memchr(buf + start, '\n', used - start);
		size_t end = nl ? (size_t)(nl - buf) : used;
		if (buf[start] != '#')
			parse_line(buf + start, end - start);
		start = end + 1;
	}
	return true;
}

/* Refresh the knobs: the state file when set and readable, else the environment. */
static void load_knobs(void)
{
	int saved = errno;
	const char *file = getenv("HVSHIM_STATE_FILE");

	if (!file || !*file || !load_file(file)) {
		memset(&knobs, 0, sizeof(knobs));
		for (size_t i = 0; i < N_KNOBS; i++) {
			const char *v = getenv(knob_table[i].name);
			if (v)
				set_knob(i, v, strlen(v));
		}
	}
	errno = saved;
}

/* "ENOMEM" or "12" -> 12; "" -> 0 (no failure); an unknown name -> EIO, with a warning. */
static int knob_errno(const char *v)
{
	char *end;
	long n;

	if (!*v)
		return 0;
	n = strtol(v, &end, 10);
	if (*end == '\0' && n >= 0 && n < 4096)
		return (int)n;
	for (int e = 1; e < 4096; e++) {
		const char *name = strerrorname_np(e);
		if (name && strcmp(name, v) == 0)
			return e;
	}
	fprintf(stderr, "hvshim: unknown errno name \"%s\", using EIO\n", v);
	return EIO;
}

/* ---------------------------------------------------------------- fake fds */

/* A new fake fd of that kind, or -1 with errno. */
static int fake_new(enum fake_kind kind, bool cloexec)
{
	struct stat st;
	int p[2], fd;

	if (pipe2(p, cloexec ? O_CLOEXEC : 0) < 0)
		return -1;
	REAL(close)(p[1]);
	fd = p[0];
	if (fd >= MAX_FAKE_FD || fstat(fd, &st) < 0) {
		REAL(close)(fd);
		errno = EMFILE;
		return -1;
	}
	fakes[fd].kind = (unsigned char)kind;
	fakes[fd].ino = st.st_ino;
	return fd;
}

/* The kind of a fake fd; FAKE_NONE for every other fd (a stale entry is dropped). */
static enum fake_kind fake_kind(int fd)
{
	struct stat st;

	if (fd < 0 || fd >= MAX_FAKE_FD || fakes[fd].kind == FAKE_NONE)
		return FAKE_NONE;
	if (fstat(fd, &st) < 0 || st.st_ino != fakes[fd].ino) {
		fakes[fd].kind = FAKE_NONE;
		return FAKE_NONE;
	}
	return (enum fake_kind)fakes[fd].kind;
}

/* A companion's path (HVSHIM_TUN...): 1 with *ret_fd set (errno set on failure), 0 to pass
 * through (not a companion, not a character device, or another number: the kernel answers). */
static int companion_open(const char *path, int flags, int *ret_fd)
{
	const struct companion *c = NULL;
	struct stat st;
	int e, mode;

	for (size_t i = 0; !c && i < N_COMPANIONS; i++)
		if (knob_at(companions[i].path)[0] && strcmp(path, knob_at(companions[i].path)) == 0)
			c = &companions[i];
	if (!c)
		return 0;
	*ret_fd = -1;
	if ((e = knob_errno(knob_at(c->open_errno))) != 0) {
		errno = e;
		return 1;
	}
	/* newfstatat (glibc; musl: stat or lstat), all allowed in the probe helper */
	if (fstatat(AT_FDCWD, path, &st, (flags & O_NOFOLLOW) ? AT_SYMLINK_NOFOLLOW : 0) < 0)
		return 1;
	if (S_ISLNK(st.st_mode)) {
		errno = ELOOP;
		return 1;
	}
	/* not a character device, or another driver's number: the real open answers */
	if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != 10 || minor(st.st_rdev) != c->minor)
		return 0;
	mode = (flags & O_ACCMODE) == O_RDONLY ? R_OK : (flags & O_ACCMODE) == O_WRONLY ? W_OK : R_OK | W_OK;
	if (faccessat(AT_FDCWD, path, mode, AT_EACCESS) < 0)
		return 1;
	*ret_fd = fake_new(c->kind, flags & O_CLOEXEC);
	return 1;
}

/* 1 when path is the fake device (*ret_fd set, errno set on failure), 0 to pass through. */
__attribute__((noinline)) static int device_open(int dirfd, const char *path, int flags,
						 int *ret_fd)
{
	int e, mode;

	if (!path || (path[0] != '/' && dirfd != AT_FDCWD))
		return 0;
	load_knobs();
	if (!knobs.device[0] || strcmp(path, knobs.device) != 0)
		return companion_open(path, flags, ret_fd);
	*ret_fd = -1;
	if ((e = knob_errno(knobs.open_errno)) != 0) {
		errno = e;
		return 1;
	}
	mode = (flags & O_ACCMODE) == O_RDONLY ? R_OK : (flags & O_ACCMODE) == O_WRONLY ? W_OK : R_OK | W_OK;
	if (faccessat(AT_FDCWD, path, mode, AT_EACCESS) < 0)
		return 1;
	*ret_fd = fake_new(FAKE_DEVICE, flags & O_CLOEXEC);
	return 1;
}

static mode_t va_mode(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, unsigned) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = va_mode(flags, ap);
	va_end(ap);
	if (device_open(AT_FDCWD, path, flags, &fd))
		return fd;
	return REAL(open)(path, flags, mode);
}

#ifdef __GLIBC__ /* musl has no separate 64-bit names (and defines open64 as open) */
int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = va_mode(flags, ap);
	va_end(ap);
	if (device_open(AT_FDCWD, path, flags, &fd))
		return fd;
	return REAL(open64)(path, flags, mode);
}

#endif

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = va_mode(flags, ap);
	va_end(ap);
	if (device_open(dirfd, path, flags, &fd))
		return fd;
	return REAL(openat)(dirfd, path, flags, mode);
}

#ifdef __GLIBC__ /* glibc's 64-bit and _FORTIFY_SOURCE names; musl has neither */
int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	va_start(ap, flags);
	mode = va_mode(flags, ap);
	va_end(ap);
	if (device_open(dirfd, path, flags, &fd))
		return fd;
	return REAL(openat64)(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags)
{
	int fd;

	if (device_open(AT_FDCWD, path, flags, &fd))
		return fd;
	return REAL(__open_2)(path, flags);
}

int __open64_2(const char *path, int flags)
{
	int fd;

	if (device_open(AT_FDCWD, path, flags, &fd))
		return fd;
	return REAL(__open64_2)(path, flags);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	int fd;

	if (device_open(dirfd, path, flags, &fd))
		return fd;
	return REAL(__openat_2)(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	int fd;

	if (device_open(dirfd, path, flags, &fd))
		return fd;
	return REAL(__openat64_2)(dirfd, path, flags);
}
#endif

int close(int fd)
{
	if (fd >= 0 && fd < MAX_FAKE_FD)
		fakes[fd].kind = FAKE_NONE;
	return REAL(close)(fd);
}

/* ---------------------------------------------------------------- ioctls */

static int fail(int e)
{
	errno = e;
	return -1;
}

/* HVSHIM_PID_FILE: our pid into that file (errors are the test's to notice: no file). */
static void write_pid_file(void)
{
	int (*real_open)(const char *, int, ...) = REAL(open);
	char line[32];
	int fd, n;

	if (!knobs.pid_file[0] || !real_open)
		return;
	fd = real_open(knobs.pid_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%d\n", (int)getpid());
	(void)!write(fd, line, (size_t)n);
	REAL(close)(fd);
}

static int create_child(const char *errno_knob)
{
	int e = knob_errno(errno_knob);

	return e ? fail(e) : fake_new(FAKE_VM, true);
}

static int mshv_create(const void *arg)
{
	uint64_t a[2];

	if (!arg)
		return fail(EFAULT);
	memcpy(a, arg, sizeof(a));
	if ((a[0] & ~SHIM_MSHV_FLAGS_KNOWN) || a[1] != 0)
		return fail(EINVAL);
	return create_child(knobs.create_errno);
}

/* Sleep HVSHIM_DELAY_MS milliseconds (the whole time, even when signals interrupt it). */
static void delay(void)
{
	struct timespec ts;
	char *end;
	long ms;

	if (!knobs.delay_ms[0])
		return;
	ms = strtol(knobs.delay_ms, &end, 10);
	if (*end || ms <= 0 || ms > DELAY_MAX_MS)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* HVSHIM_TRY_SOCKET: a confined probe helper must not get a socket. */
static bool socket_refused(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0) {
		REAL(close)(fd);
		return false;
	}
	return errno == EPERM;
}

/* "SIGSEGV" or "11" -> 11; "" -> 0; an unknown name -> SIGABRT, with a warning. */
static int knob_signal(const char *v)
{
	char *end;
	long n;

	if (!*v)
		return 0;
	n = strtol(v, &end, 10);
	if (*end == '\0' && n > 0 && n < NSIG)
		return (int)n;
	for (int sig = 1; sig < NSIG; sig++) {
		const char *name = sigabbrev_np(sig);
		if (name && strncmp(v, "SIG", 3) == 0 && strcmp(name, v + 3) == 0)
			return sig;
	}
	fprintf(stderr, "hvshim: unknown signal name \"%s\", using SIGABRT\n", v);
	return SIGABRT;
}

/* The process-ending faults: HVSHIM_CRASH, HVSHIM_EXIT, HVSHIM_GARBAGE (in that order). */
static void end_faults(void)
{
	static const char junk[] = "\x01\xfe garbage \x7f not a result\nsecond line\n";
	struct rlimit no_core = { 0, 0 };
	sigset_t set;
	char *end;
	long v;
	int sig = knob_signal(knobs.crash);

	if (sig) {
		setrlimit(RLIMIT_CORE, &no_core);
		signal(sig, SIG_DFL);
		sigemptyset(&set);
		sigaddset(&set, sig);
		sigprocmask(SIG_UNBLOCK, &set, NULL);
		raise(sig);
		_exit(128 + sig); /* a signal that does not kill (SIGCHLD...) */
	}
	if (knobs.exit_status[0]) {
		v = strtol(knobs.exit_status, &end, 10);
		if (!*end && v >= 0 && v <= 255)
			_exit((int)v);
	}
	if (knobs.garbage[0] && strcmp(knobs.garbage, "0") != 0) {
		ssize_t n = write(STDOUT_FILENO, junk, sizeof(junk) - 1);
		_exit(n < 0 ? 1 : 0);
	}
}

/* HVSHIM_IPA_LIMIT on arm64 (0: the capability absent); 0 elsewhere. */
static long ipa_limit(void)
{
#if defined(__aarch64__)
	char *end;
	long v = strtol(knobs.ipa_limit, &end, 10);

	return *end || v < 0 || v > 255 ? 0 : v;
#else
	return 0;
#endif
}

/* KVM_CREATE_VM's type as the kernel takes it: x86-64 only 0 here; arm64 the IPA size
 * (virt/kvm/kvm_main.c, arch/arm64/kvm/mmu.c kvm_arm_setup_stage2, Linux 4.20 and later; before
 * that, kvm_arch_init_vm refused every type but 0). */
static bool vm_type_ok(unsigned long type)
{
#if defined(__aarch64__)
	long limit = ipa_limit(), bits = (long)(type & KVM_VM_TYPE_ARM_IPA_SIZE_MASK);

	if (type & ~KVM_VM_TYPE_ARM_IPA_SIZE_MASK)
		return false;
	if (!limit)
		return type == 0;
	if (!bits)
		return limit >= IPA_DEFAULT_BITS;
	return bits >= IPA_MIN_BITS && bits <= limit;
#else
	return type == 0;
#endif
}

static int device_ioctl(unsigned long req, unsigned long arg)
{
	char *end;
	long v;

	switch (req) {
	case KVM_GET_API_VERSION:
		if (arg)
			return fail(EINVAL);
		if (!knobs.api_version[0])
			return KVM_API_VERSION;
		v = strtol(knobs.api_version, &end, 10);
		return *end ? KVM_API_VERSION : (int)v;
	case KVM_CHECK_EXTENSION:
		return arg == KVM_CAP_ARM_VM_IPA_SIZE ? (int)ipa_limit() : 0;
	case KVM_CREATE_VM:
		if (!vm_type_ok(arg))
			return fail(EINVAL);
		delay();
		return create_child(knobs.create_vm_errno);
	case SHIM_MSHV_CREATE_PARTITION:
		return mshv_create((const void *)arg);
	default:
		return fail(ENOTTY);
	}
}

/* HVSHIM_*_FEATURES: 0x-prefixed hex or decimal, at most max; else the default (warned). */
static unsigned long long knob_features(const struct companion *c)
{
	const char *v = knob_at(c->features);
	unsigned long long max = c->width < sizeof(unsigned long long) ? (1ULL << (8 * c->width)) - 1 : ~0ULL;
	bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
	const char *digits = hex ? v + 2 : v;
	unsigned long long n = 0;
	char *end = NULL;
	int e = EINVAL;

	if (!*v)
		return c->features_default;
	/* strtoull alone would take blanks, a sign and an empty string */
	if ((*digits >= '0' && *digits <= '9') ||
	    (hex && ((*digits >= 'a' && *digits <= 'f') || (*digits >= 'A' && *digits <= 'F')))) {
		errno = 0;
		n = strtoull(digits, &end, hex ? 16 : 10);
		e = *end ? EINVAL : errno;
	}
	if (e || n > max) {
		fprintf(stderr, "hvshim: invalid %s \"%s\", using 0x%llx\n", c->name, v, c->features_default);
		return c->features_default;
	}
	return n;
}

/* TUNGETFEATURES on the tun, VHOST_GET_FEATURES on a vhost: the features written to arg. */
static int companion_ioctl(enum fake_kind kind, unsigned long req, unsigned long arg)
{
	const struct companion *c = NULL;
	unsigned long long v;

	for (size_t i = 0; i < N_COMPANIONS; i++)
		if (companions[i].kind == kind)
			c = &companions[i];
	if (!c || req != c->req)
		return fail(ENOTTY);
	if (!arg)
		return fail(EFAULT);
	v = knob_features(c);
	if (c->width == sizeof(unsigned int)) {
		unsigned int u = (unsigned int)v;
		memcpy((void *)arg, &u, sizeof(u));
	} else {
		uint64_t u = v;
		memcpy((void *)arg, &u, sizeof(u));
	}
	return 0;
}

int ioctl(int fd, IOCTL_REQ req, ...)
{
	enum fake_kind kind = fake_kind(fd);
	unsigned long arg;
	va_list ap;

	va_start(ap, req);
	arg = va_arg(ap, unsigned long);
	va_end(ap);
	if (kind == FAKE_NONE)
		return REAL(ioctl)(fd, req, arg);
	load_knobs();
	write_pid_file();
	if (knobs.hang[0] && strcmp(knobs.hang, "0") != 0)
		for (;;)
			(void)nanosleep(&(struct timespec){ .tv_sec = 3600 }, NULL);
	end_faults();
	if (knobs.try_socket[0] && strcmp(knobs.try_socket, "0") != 0 && !socket_refused())
		return fail(EXDEV);
	/* the kernel's request is an unsigned int (musl passes an int: no sign extension) */
	switch (kind) {
	case FAKE_DEVICE:
		return device_ioctl((unsigned int)req, arg);
	case FAKE_TUN:
	case FAKE_VHOST_NET:
	case FAKE_VHOST_VSOCK:
		return companion_ioctl(kind, (unsigned int)req, arg);
	default:
		return fail(ENOTTY);
	}
}

/* ---------------------------------------------------------------- the daemon's spawn */

/* glibc's clone(): the helper runner starts its child with CLONE_VM | CLONE_VFORK. With
 * HVSHIM_SPAWN_ERRNO set, that start fails; every other clone goes through. */
int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
	static int (*real_clone)(int (*)(void *), void *, int, void *, ...);
	va_list ap;
	void *ptid, *tls, *ctid;
	int e;

	if (flags & CLONE_VFORK) {
		load_knobs();
		if ((e = knob_errno(knobs.spawn_errno)) != 0)
			return fail(e);
	}
	if (!real_clone)
		real_clone = (int (*)(int (*)(void *), void *, int, void *, ...))dlsym(RTLD_NEXT, "clone");
	va_start(ap, arg);
	ptid = va_arg(ap, void *);
	tls = va_arg(ap, void *);
	ctid = va_arg(ap, void *);
	va_end(ap);
	return real_clone(fn, stack, flags, arg, ptid, tls, ctid);
}
