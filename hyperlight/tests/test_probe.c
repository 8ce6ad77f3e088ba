/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hypervisor probe, run the way the daemon runs it: through dp_helper (a real child with a
 * real deadline), this binary being the helper executable. The child gets tests/fakes/
 * libhvshim.so preloaded (found through SDP_BUILD_DIR) so the real probe code talks to a fake
 * /dev/kvm or /dev/mshv; a few tests run without the shim against ordinary files.
 * The companion devices (tun, vhost-net, vhost-vsock) the same way, through the shim's fake
 * companions (HVSHIM_TUN...) on mknod'ed nodes, and once against the real kernel: a mknod'ed
 * 10:200, 10:238 and 10:241 answer what this machine's kernel answers (ok, or the reason naming
 * the missing driver), the expectation chosen by what opening the node gives here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <linux/vhost.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/helper.h"
#include "dp/loop.h"
#include "probe.h"

#define BOUND_USEC (10 * DP_USEC_PER_SEC)
#define DEADLINE (5 * DP_USEC_PER_SEC)
#define SHORT_DEADLINE (300 * DP_USEC_PER_MSEC)
#define GRACE (2 * DP_USEC_PER_SEC)
#define SELF "/proc/self/exe"

/* ---------------------------------------------------------------- test-only child entry */

/* "mshv-raw <device> <flags> <isolation>": MSHV_CREATE_PARTITION with arbitrary arguments, to
 * check that the shim judges them like the kernel. Replies "ok" or "fail <ERRNO NAME>". */
static void entry_mshv_raw(int argc, char **argv)
{
	uint64_t args[2];
	int fd, p;

	if (argc != 4) {
		dp_helper_reply_fail("usage");
		return;
	}
	args[0] = strtoull(argv[2], NULL, 0);
	args[1] = strtoull(argv[3], NULL, 0);
	fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		dp_helper_reply_fail("open %s", strerrorname_np(errno));
		return;
	}
	p = ioctl(fd, 0x4010B800UL, args);
	if (p < 0)
		dp_helper_reply_fail("%s", strerrorname_np(errno));
	else
		dp_helper_reply_ok(NULL);
	if (p >= 0)
		close(p);
	close(fd);
}

/* "companion-raw <path> <nofollow 0|1> <tun|vhost|kvm> <null 0|1>": open the path O_RDWR (and
 * O_NOFOLLOW), then TUNGETFEATURES, VHOST_GET_FEATURES or KVM_GET_API_VERSION with a pointer
 * (or NULL): to check the shim's companion fds as the kernel behaves. Replies "ok <features in
 * hex>", "fail open <ERRNO>" or "fail <ERRNO>". */
static void entry_companion_raw(int argc, char **argv)
{
	uint64_t features = 0;
	unsigned long req;
	bool null;
	int fd, r;

	if (argc != 5) {
		dp_helper_reply_fail("usage");
		return;
	}
	null = strcmp(argv[4], "1") == 0;
	req = strcmp(argv[3], "tun") == 0 ? TUNGETFEATURES : strcmp(argv[3], "vhost") == 0 ? VHOST_GET_FEATURES
											 : KVM_GET_API_VERSION;
	fd = open(argv[1], O_RDWR | O_CLOEXEC | (strcmp(argv[2], "1") == 0 ? O_NOFOLLOW : 0));
	if (fd < 0) {
		dp_helper_reply_fail("open %s", strerrorname_np(errno));
		return;
	}
	r = req == KVM_GET_API_VERSION ? ioctl(fd, req, 0) : ioctl(fd, req, null ? NULL : &features);
	if (r < 0)
		dp_helper_reply_fail("%s", strerrorname_np(errno));
	else {
		char detail[32];
		snprintf(detail, sizeof(detail), "%#llx", (unsigned long long)features);
		dp_helper_reply_ok(detail);
	}
	close(fd);
}

/* ---------------------------------------------------------------- fixture */

struct fixture {
	dp_loop *loop;
	char dir[64];
	char kvm[128];	   /* the fake device (a regular file the shim stands in for) */
	char mshv[128];
	char host_ok[128]; /* char 10:232 */
	char host_other[128]; /* char 10:233 */
	char regular[128];
	char state[128];
	char tun[128];	    /* char 10:200: the fake tun (HVSHIM_TUN) */
	char vnet[128];	    /* char 10:238 */
	char vsock[128];    /* char 10:241 */
	char tun_link[128]; /* a symlink to tun */
	char host_tun[128]; /* char 10:200, the host's node */
	char host_tun_link[128]; /* a symlink to host_tun */
	char host_kvm_link[128]; /* a symlink to host_ok */
};

static const char *const knob_names[] = {
	"HVSHIM_DEVICE",       "HVSHIM_OPEN_ERRNO",   "HVSHIM_API_VERSION", "HVSHIM_CREATE_VM_ERRNO",
	"HVSHIM_CREATE_ERRNO", "HVSHIM_HANG",	      "HVSHIM_STATE_FILE",  "HVSHIM_PID_FILE",
	"HVSHIM_IPA_LIMIT",   "LD_PRELOAD",
	"HVSHIM_TUN",	      "HVSHIM_VHOST_NET",    "HVSHIM_VHOST_VSOCK", "HVSHIM_TUN_OPEN_ERRNO",
	"HVSHIM_VHOST_NET_OPEN_ERRNO", "HVSHIM_VHOST_VSOCK_OPEN_ERRNO", "HVSHIM_TUN_FEATURES",
	"HVSHIM_VHOST_NET_FEATURES", "HVSHIM_VHOST_VSOCK_FEATURES", "HVSHIM_CRASH", "HVSHIM_EXIT",
	"HVSHIM_TRY_SOCKET",
};

static void clear_child_env(void)
{
	for (size_t i = 0; i < DP_ELEMENTSOF(knob_names); i++)
		unsetenv(knob_names[i]);
}

static void touch(const char *path)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	close(fd);
}

static void make_node(const char *path, unsigned maj, unsigned min)
{
	if (mknod(path, S_IFCHR | 0600, makedev(maj, min)) < 0)
		fail_msg("mknod %s %u:%u: %s (these tests run as root)", path, maj, min, strerror(errno));
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(dp_loop_new(&f->loop), 0);
	strcpy(f->dir, "/tmp/test_probe.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->kvm, sizeof(f->kvm), "%s/kvm", f->dir);
	snprintf(f->mshv, sizeof(f->mshv), "%s/mshv", f->dir);
	snprintf(f->host_ok, sizeof(f->host_ok), "%s/host-kvm", f->dir);
	snprintf(f->host_other, sizeof(f->host_other), "%s/host-other", f->dir);
	snprintf(f->regular, sizeof(f->regular), "%s/regular", f->dir);
	snprintf(f->state, sizeof(f->state), "%s/state", f->dir);
	snprintf(f->tun, sizeof(f->tun), "%s/tun", f->dir);
	snprintf(f->vnet, sizeof(f->vnet), "%s/vhost-net", f->dir);
	snprintf(f->vsock, sizeof(f->vsock), "%s/vhost-vsock", f->dir);
	snprintf(f->tun_link, sizeof(f->tun_link), "%s/tun-link", f->dir);
	snprintf(f->host_tun, sizeof(f->host_tun), "%s/host-tun", f->dir);
	snprintf(f->host_tun_link, sizeof(f->host_tun_link), "%s/host-tun-link", f->dir);
	snprintf(f->host_kvm_link, sizeof(f->host_kvm_link), "%s/host-kvm-link", f->dir);
	touch(f->kvm);
	touch(f->mshv);
	touch(f->regular);
	make_node(f->host_ok, 10, 232);
	make_node(f->host_other, 10, 233);
	make_node(f->tun, 10, 200);
	make_node(f->vnet, 10, 238);
	make_node(f->vsock, 10, 241);
	make_node(f->host_tun, 10, 200);
	assert_int_equal(symlink(f->tun, f->tun_link), 0);
	assert_int_equal(symlink(f->host_tun, f->host_tun_link), 0);
	assert_int_equal(symlink(f->host_ok, f->host_kvm_link), 0);
	clear_child_env();
	*state = f;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	clear_child_env();
	dp_loop_free(f->loop);
	assert_int_equal(nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0);
	free(f);
	return 0;
}

/* Preload the shim into children started from now on (not into this process). */
static void with_shim(void)
{
	const char *build = getenv("SDP_BUILD_DIR");
	char so[4096];

	if (!build || !*build)
		fail_msg("SDP_BUILD_DIR is not set: point it at the meson build directory "
			 "(tests/run.sh does) so that tests/fakes/libhvshim.so can be found");
	snprintf(so, sizeof(so), "%s/tests/fakes/libhvshim.so", build);
	if (access(so, R_OK) < 0)
		fail_msg("%s: %s (build the hvshim target)", so, strerror(errno));
	assert_int_equal(setenv("LD_PRELOAD", so, 1), 0);
}

static void knob(const char *name, const char *value)
{
	assert_int_equal(setenv(name, value, 1), 0);
}

struct res {
	bool done;
	dp_helper_result r;
};

static void on_done(const dp_helper_result *r, void *userdata)
{
	struct res *x = userdata;

	x->done = true;
	x->r = *r;
}

static void run_loop_until(dp_loop *l, const bool *flag)
{
	uint64_t end = dp_now_usec() + BOUND_USEC;

	while (!*flag && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	assert_true(*flag);
}

/* Run argv (NULL-terminated) in one helper child with that deadline; its result. */
static dp_helper_result run_helper(struct fixture *f, uint64_t deadline, char *const argv[])
{
	_cleanup_(dp_helper_freep) dp_helper *h = NULL;
	struct res x = {0};

	assert_int_equal(dp_helper_new(f->loop, SELF, argv, deadline, GRACE, &h), 0);
	assert_int_equal(dp_helper_request(h, on_done, &x, NULL), 0);
	run_loop_until(f->loop, &x.done);
	assert_int_equal(dp_helper_runs(h), 1);
	return x.r;
}

#define RUN(f, ...) run_helper((f), DEADLINE, (char *const[]){ __VA_ARGS__, NULL })

static void expect_ok(dp_helper_result r, const char *detail)
{
	if (!r.ok)
		fail_msg("expected ok, got failure \"%s\"", r.reason);
	assert_string_equal(r.reason, detail);
}

static void expect_fail(dp_helper_result r, const char *reason)
{
	if (r.ok)
		fail_msg("expected failure \"%s\", got ok \"%s\"", reason, r.reason);
	assert_string_equal(r.reason, reason);
}

_printf_(2, 3) static void expect_failf(dp_helper_result r, const char *fmt, ...)
{
	char want[DP_HELPER_REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	expect_fail(r, want);
}

/* ---------------------------------------------------------------- KVM through the shim */

/* The shim preloaded into the children, standing for the device node dev. */
static void shim(const char *dev)
{
	with_shim();
	knob("HVSHIM_DEVICE", dev);
}

/* The device cannot be opened (EACCES): the probe entry's reason names the node. */
static void expect_open_eacces(struct fixture *f, char *entry, char *dev)
{
	shim(dev);
	knob("HVSHIM_OPEN_ERRNO", "EACCES");
	expect_failf(RUN(f, entry, dev), "EACCES opening %s", dev);
}

static void test_kvm_ok(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	expect_ok(RUN(f, "probe-kvm", f->kvm), "KVM API version 12, VM created");
}

static void test_kvm_api_version_11(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	knob("HVSHIM_API_VERSION", "11");
	expect_fail(RUN(f, "probe-kvm", f->kvm), "API version 11");
}

static void test_kvm_open_eacces(void **state)
{
	struct fixture *f = *state;

	expect_open_eacces(f, "probe-kvm", f->kvm);
}

/* The shim keeps the node's existence: a deleted device cannot be opened. */
static void test_kvm_device_removed(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	assert_int_equal(unlink(f->kvm), 0);
	expect_failf(RUN(f, "probe-kvm", f->kvm), "ENOENT opening %s", f->kvm);
}

static void test_kvm_create_vm_enomem(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	knob("HVSHIM_CREATE_VM_ERRNO", "ENOMEM");
	expect_fail(RUN(f, "probe-kvm", f->kvm), "KVM_CREATE_VM: ENOMEM");
	knob("HVSHIM_CREATE_VM_ERRNO", "24"); /* numbers work too */
	expect_fail(RUN(f, "probe-kvm", f->kvm), "KVM_CREATE_VM: EMFILE");
}

/* arm64's KVM_CREATE_VM type from the host's IPA limit: the default (0, 40 bits) unless the host
 * has less; then that size, which the kernel takes from 32 bits up (issue 30). */
static void test_kvm_vm_type(void **state)
{
	(void)state;
	assert_int_equal(hl_kvm_vm_type(0), 0); /* no KVM_CAP_ARM_VM_IPA_SIZE: the default */
	assert_int_equal(hl_kvm_vm_type(-1), 0);
	assert_int_equal(hl_kvm_vm_type(48), 0);
	assert_int_equal(hl_kvm_vm_type(44), 0);
	assert_int_equal(hl_kvm_vm_type(HL_KVM_DEFAULT_IPA_BITS), 0);
	assert_int_equal(hl_kvm_vm_type(39), KVM_VM_TYPE_ARM_IPA_SIZE(39));
	assert_int_equal(hl_kvm_vm_type(36), 36); /* Apple M1/M2 */
	assert_int_equal(hl_kvm_vm_type(32), 32);
}

/* A host whose IPA limit is below 40 bits refuses KVM_CREATE_VM(0) (the shim as the kernel): on
 * arm64 the probe asks for the limit and says so; elsewhere the knob changes nothing. */
static void test_kvm_small_ipa(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	knob("HVSHIM_IPA_LIMIT", "36");
#if defined(__aarch64__)
	expect_ok(RUN(f, "probe-kvm", f->kvm),
		  "KVM API version 12, VM created (IPA 36 bits, the host's limit)");
#else
	expect_ok(RUN(f, "probe-kvm", f->kvm), "KVM API version 12, VM created");
#endif
	knob("HVSHIM_IPA_LIMIT", "48");
	expect_ok(RUN(f, "probe-kvm", f->kvm), "KVM API version 12, VM created");
}

/* The pid the shim's child wrote to path (HVSHIM_PID_FILE). */
static pid_t read_pid_file(const char *path)
{
	FILE *p = fopen(path, "re");
	int pid = 0;

	assert_non_null(p);
	assert_int_equal(fscanf(p, "%d", &pid), 1);
	fclose(p);
	assert_true(pid > 0);
	return (pid_t)pid;
}

/* How child pid ended, without reaping it (the helper's loop still does): it is dead once
 * killed, so the poll ends at once; the bound only keeps a missing kill from hanging the test. */
static siginfo_t peek_exit(pid_t pid)
{
	uint64_t end = dp_now_usec() + BOUND_USEC;
	siginfo_t si;

	do {
		memset(&si, 0, sizeof(si));
		assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG), 0);
	} while (si.si_pid == 0 && dp_now_usec() < end && usleep(1000) == 0);
	if (si.si_pid != pid) {
		kill(pid, SIGKILL); /* not left behind by a failed test */
		fail_msg("helper child %d still alive after its deadline's verdict", (int)pid);
	}
	return si;
}

/* A probe stuck in the kernel: at the deadline the verdict is a timeout and the child is
 * killed with SIGKILL (its exit status, seen before the helper reaps it); the next run starts
 * only after the stuck child was reaped, and then succeeds. No time is asserted: the verdict
 * and the kill are what the deadline produces. */
static void test_kvm_hang_deadline(void **state)
{
	struct fixture *f = *state;
	_cleanup_(dp_helper_freep) dp_helper *h = NULL;
	char *argv[] = { "probe-kvm", f->kvm, NULL };
	struct res first = {0}, second = {0};
	char pid_file[160];
	siginfo_t si;
	pid_t pid;

	snprintf(pid_file, sizeof(pid_file), "%s/pid", f->dir);
	shim(f->kvm);
	knob("HVSHIM_HANG", "1");
	knob("HVSHIM_PID_FILE", pid_file);
	assert_int_equal(dp_helper_new(f->loop, SELF, argv, SHORT_DEADLINE, GRACE, &h), 0);
	assert_int_equal(dp_helper_request(h, on_done, &first, NULL), 0);
	run_loop_until(f->loop, &first.done);
	expect_fail(first.r, "timeout after 300 ms");
	assert_int_equal(first.r.run, 1);
	/* the hung child (it wrote its pid from inside the stuck ioctl) died of SIGKILL */
	pid = read_pid_file(pid_file);
	si = peek_exit(pid);
	assert_int_equal(si.si_code, CLD_KILLED);
	if (si.si_status != SIGKILL)
		fail_msg("helper child ended by signal %d, not SIGKILL", si.si_status);

	unsetenv("HVSHIM_HANG");
	assert_int_equal(dp_helper_request(h, on_done, &second, NULL), 0);
	run_loop_until(f->loop, &second.done);
	expect_ok(second.r, "KVM API version 12, VM created");
	assert_int_equal(second.r.run, 2);
	assert_int_equal(dp_helper_runs(h), 2);
	/* the killed child was reaped before the second run started */
	assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT | WNOHANG), -1);
	assert_int_equal(errno, ECHILD);
}

/* The knobs can change under a running parent through the state file. */
static void test_state_file(void **state)
{
	struct fixture *f = *state;
	FILE *s;

	shim(f->kvm);
	knob("HVSHIM_API_VERSION", "10"); /* ignored while the state file is readable */
	knob("HVSHIM_STATE_FILE", f->state);
	s = fopen(f->state, "we");
	assert_non_null(s);
	fprintf(s, "# fake KVM\nHVSHIM_DEVICE=%s\nHVSHIM_API_VERSION=11\n", f->kvm);
	fclose(s);
	expect_fail(RUN(f, "probe-kvm", f->kvm), "API version 11");

	s = fopen(f->state, "we");
	assert_non_null(s);
	fprintf(s, "HVSHIM_DEVICE=%s\nHVSHIM_CREATE_VM_ERRNO=EPERM\n", f->kvm);
	fclose(s);
	expect_fail(RUN(f, "probe-kvm", f->kvm), "KVM_CREATE_VM: EPERM");

	assert_int_equal(unlink(f->state), 0); /* missing: the environment again */
	expect_fail(RUN(f, "probe-kvm", f->kvm), "API version 10");
}

/* ---------------------------------------------------------------- MSHV through the shim */

static void test_mshv_ok(void **state)
{
	struct fixture *f = *state;

	shim(f->mshv);
	expect_ok(RUN(f, "probe-mshv", f->mshv), "MSHV partition created");
}

static void test_mshv_einval(void **state)
{
	struct fixture *f = *state;

	shim(f->mshv);
	knob("HVSHIM_CREATE_ERRNO", "EINVAL");
	expect_fail(RUN(f, "probe-mshv", f->mshv), "MSHV_CREATE_PARTITION: EINVAL");
}

static void test_mshv_open_eacces(void **state)
{
	struct fixture *f = *state;

	expect_open_eacces(f, "probe-mshv", f->mshv);
}

/* The shim checks the arguments like the kernel: bit 3 (extended arguments) or isolation set
 * is refused, so the probe's own ok above means its arguments were the non-isolated v1 ones. */
static void test_shim_mshv_arguments(void **state)
{
	struct fixture *f = *state;

	shim(f->mshv);
	expect_ok(RUN(f, "mshv-raw", f->mshv, "0", "0"), "");
	expect_ok(RUN(f, "mshv-raw", f->mshv, "1", "0"), "");
	expect_fail(RUN(f, "mshv-raw", f->mshv, "8", "0"), "EINVAL");
	expect_fail(RUN(f, "mshv-raw", f->mshv, "0", "1"), "EINVAL");
}

/* ---------------------------------------------------------------- without the shim */

static void test_regular_file_enotty(void **state)
{
	struct fixture *f = *state;

	expect_fail(RUN(f, "probe-kvm", f->regular), "KVM_GET_API_VERSION: ENOTTY");
	expect_fail(RUN(f, "probe-mshv", f->regular), "MSHV_CREATE_PARTITION: ENOTTY");
}

static void test_missing_device(void **state)
{
	struct fixture *f = *state;
	char missing[160];

	snprintf(missing, sizeof(missing), "%s/absent", f->dir);
	expect_failf(RUN(f, "probe-kvm", missing), "ENOENT opening %s", missing);
}

/* The same checks in-process: return codes as documented. */
static void test_inprocess_returns(void **state)
{
	struct fixture *f = *state;
	char reason[DP_HELPER_REASON_MAX] = "untouched";

	assert_int_equal(hl_probe_kvm(NULL, reason, sizeof(reason)), -EINVAL);
	assert_int_equal(hl_probe_mshv(f->kvm, NULL, 10), -EINVAL);
	assert_int_equal(hl_probe_host_node(f->kvm, 10, 232, false, reason, 0), -EINVAL);
	assert_string_equal(reason, "untouched");
	assert_int_equal(hl_probe_kvm(f->regular, reason, sizeof(reason)), -ENOTTY);
	assert_string_equal(reason, "KVM_GET_API_VERSION: ENOTTY");
	assert_int_equal(hl_probe_host_node(f->regular, 10, 232, false, reason, sizeof(reason)), -ENOTTY);
	assert_int_equal(hl_probe_host_node(f->host_other, 10, 232, false, reason, sizeof(reason)), -ENODEV);
	assert_int_equal(hl_probe_host_node(f->host_ok, 10, 232, false, reason, sizeof(reason)), 0);
}

/* ---------------------------------------------------------------- host device check */

static void test_host_missing(void **state)
{
	struct fixture *f = *state;
	char missing[160];

	snprintf(missing, sizeof(missing), "%s/absent", f->dir);
	expect_failf(RUN(f, "check-host", missing, "10", "232"), "host device %s missing", missing);
}

static void test_host_not_chardev(void **state)
{
	struct fixture *f = *state;

	expect_failf(RUN(f, "check-host", f->regular, "10", "232"),
		     "host device %s is not a character device", f->regular);
}

static void test_host_wrong_number(void **state)
{
	struct fixture *f = *state;

	expect_failf(RUN(f, "check-host", f->host_other, "10", "232"),
		     "host device %s has device number 10:233, expected 10:232", f->host_other);
}

static void test_host_ok(void **state)
{
	struct fixture *f = *state;

	expect_ok(RUN(f, "check-host", f->host_ok, "10", "232"), "host device matches");
}

static void test_bad_arguments(void **state)
{
	struct fixture *f = *state;

	expect_fail(RUN(f, "check-host", f->host_ok, "10", "23x"),
		    "invalid probe arguments: device number \"10:23x\"");
	expect_fail(RUN(f, "check-host", f->host_ok, "10"),
		    "invalid probe arguments: check-host takes <path> <major> <minor>");
	expect_fail(RUN(f, "probe-kvm"), "invalid probe arguments: probe-kvm takes <device path>");
	expect_fail(RUN(f, "probe", "xen", f->kvm),
		    "invalid probe arguments: probe takes kvm|mshv|tun|vhost-net|vhost-vsock <device path> "
		    "[<host path> <major> <minor>]");
	expect_fail(RUN(f, "probe", "kvm", f->kvm, f->host_ok, "10"),
		    "invalid probe arguments: probe takes kvm|mshv|tun|vhost-net|vhost-vsock <device path> "
		    "[<host path> <major> <minor>]");
}

/* ---------------------------------------------------------------- combined "probe" */

static void test_probe_combined_ok(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	expect_ok(RUN(f, HL_PROBE_HELPER, "kvm", f->kvm, f->host_ok, "10", "232"),
		  "KVM API version 12, VM created");
	knob("HVSHIM_DEVICE", f->mshv);
	expect_ok(RUN(f, HL_PROBE_HELPER, "mshv", f->mshv), "MSHV partition created");
}

/* The host check runs first: its failure is the reason even when the probe would fail too. */
static void test_probe_combined_host_first(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	knob("HVSHIM_API_VERSION", "11");
	expect_failf(RUN(f, HL_PROBE_HELPER, "kvm", f->kvm, f->host_other, "10", "232"),
		     "host device %s has device number 10:233, expected 10:232", f->host_other);
	expect_fail(RUN(f, HL_PROBE_HELPER, "kvm", f->kvm, f->host_ok, "10", "232"),
		    "API version 11");
}

/* The injected node still works but the host's node is gone: the check fails. */
static void test_probe_combined_host_gone(void **state)
{
	struct fixture *f = *state;

	shim(f->kvm);
	assert_int_equal(unlink(f->host_ok), 0);
	expect_failf(RUN(f, HL_PROBE_HELPER, "kvm", f->kvm, f->host_ok, "10", "232"),
		     "host device %s missing", f->host_ok);
}

/* ---------------------------------------------------------------- companions through the shim */

#define TUN_OK "tun features 0x7173 (tap, tun, no_pi, vnet_hdr, multi_queue)"
#define VHOST_NET_OK "vhost-net features 0x33d008000"
#define VHOST_VSOCK_OK "vhost-vsock features 0x33d000002"

/* The shim preloaded, standing for the three companions at the fixture's nodes. */
static void shim_companions(struct fixture *f)
{
	with_shim();
	knob("HVSHIM_TUN", f->tun);
	knob("HVSHIM_VHOST_NET", f->vnet);
	knob("HVSHIM_VHOST_VSOCK", f->vsock);
}

/* Linux 6.x's answers by default (hvshim.c), as the probe reports them. */
static void test_companions_ok(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun), TUN_OK);
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet), VHOST_NET_OK);
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock), VHOST_VSOCK_OK);
}

/* The reason lists the features the tun has, whatever they are; all 64 bits of vhost's. */
static void test_companions_features(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN_FEATURES", "0x2");
	expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "tun features 0x2 (tap)");
	knob("HVSHIM_TUN_FEATURES", "4098"); /* decimal: IFF_TAP | IFF_NO_PI */
	expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "tun features 0x1002 (tap, no_pi)");
	knob("HVSHIM_VHOST_NET_FEATURES", "0xffffffffffffffff");
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet), "vhost-net features 0xffffffffffffffff");
	knob("HVSHIM_VHOST_VSOCK_FEATURES", "0");
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock), "vhost-vsock features 0x0");
}

/* A tun without tap devices cannot serve a micro-VM's network: the probe fails. */
static void test_tun_no_tap(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN_FEATURES", "0x7171"); /* Linux 6.x's without IFF_TAP */
	expect_fail(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "tun features 0x7171: no tap devices (IFF_TAP)");
	knob("HVSHIM_TUN_FEATURES", "0");
	expect_fail(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "tun features 0x0: no tap devices (IFF_TAP)");
}

/* A node whose driver is not loaded: the reason names the module to load. */
static void test_companions_no_driver(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN_OPEN_ERRNO", "ENODEV");
	knob("HVSHIM_VHOST_NET_OPEN_ERRNO", "ENODEV");
	knob("HVSHIM_VHOST_VSOCK_OPEN_ERRNO", "ENXIO");
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "ENODEV opening %s (no driver: module tun not loaded?)",
		     f->tun);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet),
		     "ENODEV opening %s (no driver: module vhost_net not loaded?)", f->vnet);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock),
		     "ENXIO opening %s (no driver: module vhost_vsock not loaded?)", f->vsock);
	/* each knob is its companion's own: the others still open */
	unsetenv("HVSHIM_VHOST_NET_OPEN_ERRNO");
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet), VHOST_NET_OK);
}

static void test_companions_eacces(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN_OPEN_ERRNO", "EACCES");
	knob("HVSHIM_VHOST_VSOCK_OPEN_ERRNO", "13"); /* numbers work too */
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "EACCES opening %s", f->tun);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock), "EACCES opening %s", f->vsock);
}

/* The node itself, never through a symlink (O_NOFOLLOW): the shim as the kernel. */
static void test_companion_symlink(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN", f->tun_link);
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun_link),
		     "ELOOP opening %s (a symbolic link, not the device node)", f->tun_link);
	/* without O_NOFOLLOW the link is followed to the node, as the kernel does */
	expect_ok(RUN(f, "companion-raw", f->tun_link, "0", "tun", "0"), "0x7173");
	expect_fail(RUN(f, "companion-raw", f->tun_link, "1", "tun", "0"), "open ELOOP");
}

/* A node deleted (or never made): ENOENT, the shim keeping the node's existence. */
static void test_companion_missing(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	assert_int_equal(unlink(f->vnet), 0);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet), "ENOENT opening %s", f->vnet);
	assert_int_equal(unlink(f->tun), 0);
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun), "ENOENT opening %s", f->tun);
	/* the dangling link is still a link: ELOOP first, as the kernel's O_NOFOLLOW */
	knob("HVSHIM_TUN", f->tun_link);
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun_link),
		     "ELOOP opening %s (a symbolic link, not the device node)", f->tun_link);
}

/* A regular file at the companion's path is no device: the kernel opens it, and the ioctl fails. */
static void test_companion_regular_file(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	knob("HVSHIM_TUN", f->regular);
	knob("HVSHIM_VHOST_NET", f->regular);
	expect_fail(RUN(f, HL_PROBE_HELPER, "tun", f->regular), "TUNGETFEATURES: ENOTTY");
	expect_fail(RUN(f, HL_PROBE_HELPER, "vhost-net", f->regular), "VHOST_GET_FEATURES: ENOTTY");
	/* the same without the shim: the shim does what the kernel does */
	unsetenv("LD_PRELOAD");
	expect_fail(RUN(f, HL_PROBE_HELPER, "tun", f->regular), "TUNGETFEATURES: ENOTTY");
	expect_fail(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->regular), "VHOST_GET_FEATURES: ENOTTY");
}

/* The shim's companion fds answer their own ioctl only, EFAULT for a NULL pointer. */
static void test_shim_companion_ioctls(void **state)
{
	struct fixture *f = *state;

	shim_companions(f);
	expect_ok(RUN(f, "companion-raw", f->tun, "1", "tun", "0"), "0x7173");
	expect_fail(RUN(f, "companion-raw", f->tun, "1", "tun", "1"), "EFAULT");
	expect_fail(RUN(f, "companion-raw", f->tun, "1", "vhost", "0"), "ENOTTY");
	expect_fail(RUN(f, "companion-raw", f->tun, "1", "kvm", "0"), "ENOTTY");
	expect_ok(RUN(f, "companion-raw", f->vnet, "1", "vhost", "0"), "0x33d008000");
	expect_fail(RUN(f, "companion-raw", f->vnet, "1", "vhost", "1"), "EFAULT");
	expect_fail(RUN(f, "companion-raw", f->vnet, "1", "tun", "0"), "ENOTTY");
	expect_ok(RUN(f, "companion-raw", f->vsock, "1", "vhost", "0"), "0x33d000002");
	expect_fail(RUN(f, "companion-raw", f->vsock, "1", "kvm", "0"), "ENOTTY");
	/* an invalid features knob: the default (with a warning on stderr) */
	knob("HVSHIM_TUN_FEATURES", "0x1ffffffff"); /* wider than TUNGETFEATURES' unsigned int */
	expect_ok(RUN(f, "companion-raw", f->tun, "1", "tun", "0"), "0x7173");
	knob("HVSHIM_TUN_FEATURES", "-2");
	expect_ok(RUN(f, "companion-raw", f->tun, "1", "tun", "0"), "0x7173");
}

/* The fault knobs act on the companions' fds too, and the probe of a companion is confined. */
static void test_companion_faults(void **state)
{
	struct fixture *f = *state;
	dp_helper_result r;

	shim_companions(f);
	knob("HVSHIM_EXIT", "3");
	expect_fail(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet), "helper exited with status 3");
	unsetenv("HVSHIM_EXIT");
	knob("HVSHIM_CRASH", "SIGSEGV");
	r = RUN(f, HL_PROBE_HELPER, "tun", f->tun);
	assert_false(r.ok);
	if (strncmp(r.reason, "helper killed by signal 11 ", strlen("helper killed by signal 11 ")) != 0)
		fail_msg("got \"%s\", want the helper killed by SIGSEGV", r.reason);
	unsetenv("HVSHIM_CRASH");
	knob("HVSHIM_TRY_SOCKET", "1"); /* EXDEV unless the helper's filter refused the socket */
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock), VHOST_VSOCK_OK);
	expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun), TUN_OK);
	unsetenv("HVSHIM_TRY_SOCKET");
	knob("HVSHIM_HANG", "1");
	expect_fail(run_helper(f, SHORT_DEADLINE, (char *const[]){ HL_PROBE_HELPER, "tun", f->tun, NULL }),
		    "timeout after 300 ms");
}

/* ---------------------------------------------------------------- companions' host node */

static void test_host_node_nofollow(void **state)
{
	struct fixture *f = *state;
	char reason[DP_HELPER_REASON_MAX], want[DP_HELPER_REASON_MAX];

	/* a companion's host node: lstat, a symlink refused even when it leads to the right node */
	assert_int_equal(hl_probe_host_node(f->host_tun_link, 10, 200, true, reason, sizeof(reason)), -ELOOP);
	snprintf(want, sizeof(want), "host device %s is a symbolic link, not the device node", f->host_tun_link);
	assert_string_equal(reason, want);
	/* stat: followed */
	assert_int_equal(hl_probe_host_node(f->host_tun_link, 10, 200, false, reason, sizeof(reason)), 0);
	snprintf(want, sizeof(want), "host device %s is 10:200", f->host_tun_link);
	assert_string_equal(reason, want);
	/* the node itself passes either way */
	assert_int_equal(hl_probe_host_node(f->host_tun, 10, 200, true, reason, sizeof(reason)), 0);
	snprintf(want, sizeof(want), "host device %s is 10:200", f->host_tun);
	assert_string_equal(reason, want);
	assert_int_equal(hl_probe_host_node(f->host_tun, 10, 238, true, reason, sizeof(reason)), -ENODEV);
	snprintf(want, sizeof(want), "host device %s has device number 10:200, expected 10:238", f->host_tun);
	assert_string_equal(reason, want);
	/* a dangling symlink: still the link (lstat), missing when followed */
	assert_int_equal(unlink(f->host_tun), 0);
	assert_int_equal(hl_probe_host_node(f->host_tun_link, 10, 200, true, reason, sizeof(reason)), -ELOOP);
	assert_int_equal(hl_probe_host_node(f->host_tun_link, 10, 200, false, reason, sizeof(reason)), -ENOENT);
	snprintf(want, sizeof(want), "host device %s missing", f->host_tun_link);
	assert_string_equal(reason, want);
}

/* The combined entry with the host node: checked first; a companion's never through a symlink,
 * the hypervisor's may be one (as before the companions). */
static void test_probe_combined_companions(void **state)
{
	struct fixture *f = *state;
	char host_vnet[160], host_vsock[160];

	snprintf(host_vnet, sizeof(host_vnet), "%s/host-vhost-net", f->dir);
	snprintf(host_vsock, sizeof(host_vsock), "%s/host-vhost-vsock", f->dir);
	make_node(host_vnet, 10, 238);
	make_node(host_vsock, 10, 241);
	shim_companions(f);
	expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun, f->host_tun, "10", "200"), TUN_OK);
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet, host_vnet, "10", "238"), VHOST_NET_OK);
	expect_ok(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock, host_vsock, "10", "241"), VHOST_VSOCK_OK);
	/* the host node a symlink to the right node: refused */
	expect_failf(RUN(f, HL_PROBE_HELPER, "tun", f->tun, f->host_tun_link, "10", "200"),
		     "host device %s is a symbolic link, not the device node", f->host_tun_link);
	/* another number: refused, and before the device probe (which would fail too) */
	knob("HVSHIM_VHOST_NET_OPEN_ERRNO", "ENODEV");
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet, host_vsock, "10", "238"),
		     "host device %s has device number 10:241, expected 10:238", host_vsock);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-net", f->vnet, host_vnet, "10", "238"),
		     "ENODEV opening %s (no driver: module vhost_net not loaded?)", f->vnet);
	/* the host node gone */
	assert_int_equal(unlink(host_vsock), 0);
	expect_failf(RUN(f, HL_PROBE_HELPER, "vhost-vsock", f->vsock, host_vsock, "10", "241"),
		     "host device %s missing", host_vsock);
	/* the hypervisor's host node may be a symlink (stat) */
	knob("HVSHIM_DEVICE", f->kvm);
	expect_ok(RUN(f, HL_PROBE_HELPER, "kvm", f->kvm, f->host_kvm_link, "10", "232"),
		  "KVM API version 12, VM created");
}

/* The companions' probe steps in-process: the documented return codes (no shim here: the real
 * kernel answers for files, links and missing paths). */
static void test_companions_inprocess(void **state)
{
	struct fixture *f = *state;
	char reason[DP_HELPER_REASON_MAX] = "untouched", want[DP_HELPER_REASON_MAX];
	char missing[160];

	assert_int_equal(hl_probe_tun(NULL, reason, sizeof(reason)), -EINVAL);
	assert_int_equal(hl_probe_vhost_net(f->vnet, NULL, 10), -EINVAL);
	assert_int_equal(hl_probe_vhost_vsock(f->vsock, reason, 0), -EINVAL);
	assert_int_equal(hl_probe_host_node(NULL, 10, 200, true, reason, sizeof(reason)), -EINVAL);
	assert_string_equal(reason, "untouched");
	assert_int_equal(hl_probe_tun(f->regular, reason, sizeof(reason)), -ENOTTY);
	assert_string_equal(reason, "TUNGETFEATURES: ENOTTY");
	assert_int_equal(hl_probe_vhost_net(f->regular, reason, sizeof(reason)), -ENOTTY);
	assert_string_equal(reason, "VHOST_GET_FEATURES: ENOTTY");
	assert_int_equal(hl_probe_tun(f->tun_link, reason, sizeof(reason)), -ELOOP);
	snprintf(want, sizeof(want), "ELOOP opening %s (a symbolic link, not the device node)", f->tun_link);
	assert_string_equal(reason, want);
	snprintf(missing, sizeof(missing), "%s/absent", f->dir);
	assert_int_equal(hl_probe_vhost_vsock(missing, reason, sizeof(reason)), -ENOENT);
	snprintf(want, sizeof(want), "ENOENT opening %s", missing);
	assert_string_equal(reason, want);
}

/* ---------------------------------------------------------------- companions: the real kernel */

/* -errno of opening path as the probe does, 0 when it opens (closed again). */
static int try_open(const char *path)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* The tun on a mknod'ed 10:200: this machine's kernel answers. Where /dev/net/tun opens (the tun
 * driver there), the probe is ok with tap devices, in-process and confined in the helper, and the
 * shim given the kernel's features reports the same; elsewhere the reason names open's errno. */
static void test_real_tun(void **state)
{
	struct fixture *f = *state;
	char node[160], reason[DP_HELPER_REASON_MAX], want[DP_HELPER_REASON_MAX], hex[32];
	unsigned features = 0;
	int e, r;

	snprintf(node, sizeof(node), "%s/real-tun", f->dir);
	make_node(node, 10, 200);
	e = try_open(node);
	r = hl_probe_tun(node, reason, sizeof(reason));
	if (e == 0) {
		if (r != 0)
			fail_msg("the kernel's tun opens here, but the probe failed: %s", reason);
		if (sscanf(reason, "tun features %x (", &features) != 1 || !(features & IFF_TAP))
			fail_msg("reason \"%s\": no features with IFF_TAP", reason);
		assert_non_null(strstr(reason, "(tap"));
		/* confined in the helper (seccomp on), without the shim: the same answer */
		expect_ok(RUN(f, HL_PROBE_HELPER, "tun", node, node, "10", "200"), reason);
		/* the shim given these features says what the kernel said */
		snprintf(hex, sizeof(hex), "%#x", features);
		shim_companions(f);
		knob("HVSHIM_TUN_FEATURES", hex);
		expect_ok(RUN(f, HL_PROBE_HELPER, "tun", f->tun), reason);
		print_message("real tun: %s\n", reason);
	} else {
		assert_int_equal(r, e);
		if (e == -ENODEV || e == -ENXIO)
			snprintf(want, sizeof(want), "%s opening %s (no driver: module tun not loaded?)",
				 strerrorname_np(-e), node);
		else
			snprintf(want, sizeof(want), "%s opening %s", strerrorname_np(-e), node);
		assert_string_equal(reason, want);
		print_message("real tun: %s\n", reason);
	}
}

/* A vhost device on a mknod'ed node: with its driver the probe is ok (features from the kernel),
 * without it (ENODEV here: no vhost_net/vhost_vsock module) the reason names the module. */
static void real_vhost(struct fixture *f, const char *name, unsigned minor, const char *module,
		       int (*probe)(const char *, char *, size_t))
{
	char node[160], reason[DP_HELPER_REASON_MAX], want[DP_HELPER_REASON_MAX], minor_s[16];
	unsigned long long features;
	int e, r;

	snprintf(node, sizeof(node), "%s/real-%s", f->dir, name);
	snprintf(minor_s, sizeof(minor_s), "%u", minor);
	make_node(node, 10, minor);
	e = try_open(node);
	r = probe(node, reason, sizeof(reason));
	if (e == 0) {
		if (r != 0)
			fail_msg("%s opens here, but the probe failed: %s", node, reason);
		if (strncmp(reason, name, strlen(name)) != 0 ||
		    sscanf(reason + strlen(name), " features 0x%llx", &features) != 1 || features == 0)
			fail_msg("reason \"%s\": no features", reason);
	} else if (e == -ENODEV || e == -ENXIO) {
		assert_int_equal(r, e);
		snprintf(want, sizeof(want), "%s opening %s (no driver: module %s not loaded?)", strerrorname_np(-e),
			 node, module);
		assert_string_equal(reason, want);
	} else {
		assert_int_equal(r, e);
		snprintf(want, sizeof(want), "%s opening %s", strerrorname_np(-e), node);
		assert_string_equal(reason, want);
	}
	/* confined in the helper, without the shim: the same verdict and reason */
	dp_helper_result hr = RUN(f, HL_PROBE_HELPER, (char *)name, node, node, "10", minor_s);
	if (hr.ok != (r == 0) || strcmp(hr.reason, reason) != 0)
		fail_msg("in the helper: %s \"%s\"; in-process: %s \"%s\"", hr.ok ? "ok" : "fail", hr.reason,
			 r == 0 ? "ok" : "fail", reason);
	print_message("real %s: %s\n", name, reason);
}

static void test_real_vhost_net(void **state)
{
	real_vhost(*state, "vhost-net", 238, "vhost_net", hl_probe_vhost_net);
}

static void test_real_vhost_vsock(void **state)
{
	real_vhost(*state, "vhost-vsock", 241, "vhost_vsock", hl_probe_vhost_vsock);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(int argc, char **argv)
{
	dp_helper_entry *entries = calloc(hl_probe_n_helpers + 2, sizeof(*entries));

	if (!entries)
		return 1;
	memcpy(entries, hl_probe_helpers, hl_probe_n_helpers * sizeof(*entries));
	entries[hl_probe_n_helpers] = (dp_helper_entry){ "mshv-raw", entry_mshv_raw };
	entries[hl_probe_n_helpers + 1] = (dp_helper_entry){ "companion-raw", entry_companion_raw };
	dp_helper_main(argc, argv, entries, hl_probe_n_helpers + 2);
	free(entries);

	const struct CMUnitTest tests[] = {
		T(test_kvm_ok),
		T(test_kvm_api_version_11),
		T(test_kvm_open_eacces),
		T(test_kvm_device_removed),
		T(test_kvm_create_vm_enomem),
		cmocka_unit_test(test_kvm_vm_type),
		T(test_kvm_small_ipa),
		T(test_kvm_hang_deadline),
		T(test_state_file),
		T(test_mshv_ok),
		T(test_mshv_einval),
		T(test_mshv_open_eacces),
		T(test_shim_mshv_arguments),
		T(test_regular_file_enotty),
		T(test_missing_device),
		T(test_inprocess_returns),
		T(test_host_missing),
		T(test_host_not_chardev),
		T(test_host_wrong_number),
		T(test_host_ok),
		T(test_bad_arguments),
		T(test_probe_combined_ok),
		T(test_probe_combined_host_first),
		T(test_probe_combined_host_gone),
		T(test_companions_ok),
		T(test_companions_features),
		T(test_tun_no_tap),
		T(test_companions_no_driver),
		T(test_companions_eacces),
		T(test_companion_symlink),
		T(test_companion_missing),
		T(test_companion_regular_file),
		T(test_shim_companion_ioctls),
		T(test_companion_faults),
		T(test_host_node_nofollow),
		T(test_probe_combined_companions),
		T(test_companions_inprocess),
		T(test_real_tun),
		T(test_real_vhost_net),
		T(test_real_vhost_vsock),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
