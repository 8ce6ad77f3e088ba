/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/macro.h"
#include "dp/seccomp.h"
#include "dp_test.h"

/* ---- mode from the environment ---- */

static void test_mode_from_env(void **state)
{
	static const struct {
		const char *value;
		int r;
		dp_seccomp_mode mode;
	} cases[] = {
		{ NULL, 0, DP_SECCOMP_ENFORCE }, { "enforce", 0, DP_SECCOMP_ENFORCE },
		{ "log", 0, DP_SECCOMP_LOG },    { "off", 0, DP_SECCOMP_OFF },
		{ "", -EINVAL, DP_SECCOMP_ENFORCE }, { "OFF", -EINVAL, DP_SECCOMP_ENFORCE },
		{ "of", -EINVAL, DP_SECCOMP_ENFORCE }, { "off ", -EINVAL, DP_SECCOMP_ENFORCE },
	};
	char err[128];
	dp_seccomp_mode mode;

	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++) {
		if (cases[i].value)
			setenv(DP_SECCOMP_ENV, cases[i].value, 1);
		else
			unsetenv(DP_SECCOMP_ENV);
		err[0] = '\0';
		mode = DP_SECCOMP_OFF;
		assert_int_equal(dp_seccomp_mode_from_env(&mode, err, sizeof(err)), cases[i].r);
		assert_int_equal(mode, cases[i].mode);
		if (cases[i].r < 0)
			assert_non_null(strstr(err, "is not one of enforce, log, off"));
		else
			assert_string_equal(err, "");
	}
	setenv(DP_SECCOMP_ENV, "of", 1);
	assert_int_equal(dp_seccomp_mode_from_env(&mode, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "SDP_SECCOMP=\"of\" is not one of enforce, log, off");
	unsetenv(DP_SECCOMP_ENV);
	assert_string_equal(dp_seccomp_mode_name(DP_SECCOMP_LOG), "log");
}

/* ---- filters, each loaded in a forked child ---- */

/* Run fn in a child; its exit status (0: every check passed, else the failed check's number). */
static int in_child(int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

/* "Seccomp:" of /proc/self/status: 0 none, 2 filter; -1 unreadable. */
static int seccomp_status(void)
{
	char buf[4096], *p;
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strstr(buf, "\nSeccomp:");
	return p ? atoi(p + 9) : -1;
}

/* errno of a call that must fail, 0 when it succeeded (the fd is closed). */
static int fails_with(int r)
{
	if (r >= 0) {
		close(r);
		return 0;
	}
	return errno;
}

static int install_core(dp_seccomp_mode mode, int exe_fd)
{
	dp_seccomp_rule exec = dp_seccomp_exec_rule(exe_fd);
	const dp_seccomp_rule *lists[] = { dp_seccomp_core_rules, &exec };
	size_t counts[] = { dp_seccomp_n_core_rules, 1 };

	return dp_seccomp_install(lists, counts, 2, mode, NULL);
}

static int core_enforced(void)
{
	char *const argv[] = { (char *)"/nonexistent/x", NULL };
	int exe = open("/proc/self/exe", O_PATH | O_CLOEXEC);

	if (exe < 0 || install_core(DP_SECCOMP_ENFORCE, exe) < 0)
		return 1;
	if (seccomp_status() != 2)
		return 2;
	if (fails_with(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) != EPERM)
		return 3; /* only unix sockets */
	if (fails_with(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) != 0)
		return 4;
	if (execve(argv[0], argv, environ) == 0 || errno != EPERM)
		return 5;
	/* execveat: the daemon's own fd with AT_EMPTY_PATH only */
	if (syscall(SYS_execveat, AT_FDCWD, argv[0], argv, environ, 0) == 0 || errno != EPERM)
		return 6;
	if (syscall(SYS_execveat, exe, "", argv, environ, 0) == 0 || errno != EPERM)
		return 7;
	if (syscall(SYS_clone3, NULL, 0) == 0 || errno != ENOSYS)
		return 8; /* so that libc falls back to clone */
	if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM)
		return 9;
	if (syscall(SYS_mount, NULL, NULL, NULL, 0, NULL) == 0 || errno != EPERM)
		return 10; /* unconfined: EFAULT */
	pid_t pid = fork(); /* clone with fork's flags stays allowed */
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, NULL, 0) != pid)
		return 11;
	return 0;
}

static void test_core_enforced(void **state)
{
	if (dpt_seccomp_unavailable())
		skip();
	assert_int_equal(in_child(core_enforced), 0);
}

/* The allowed exec really runs: the child re-executes /bin/true through its fd. */
static int exec_through_fd(void)
{
	char *const argv[] = { (char *)"true", NULL };
	int exe = open("/bin/true", O_PATH | O_CLOEXEC);

	if (exe < 0 || install_core(DP_SECCOMP_ENFORCE, exe) < 0)
		return 1;
	syscall(SYS_execveat, exe, "", argv, environ, AT_EMPTY_PATH);
	return 2; /* exec failed */
}

static void test_exec_through_fd(void **state)
{
	if (dpt_seccomp_unavailable())
		skip();
	assert_int_equal(in_child(exec_through_fd), 0);
}

static int log_mode(void)
{
	if (install_core(DP_SECCOMP_LOG, -1) < 0)
		return 1;
	if (seccomp_status() != 2)
		return 2;
	return fails_with(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == 0 ? 0 : 3;
}

static void test_log_mode_refuses_nothing(void **state)
{
	if (dpt_seccomp_unavailable())
		skip();
	assert_int_equal(in_child(log_mode), 0);
}

/* A kernel before 4.14, as far as the log action goes: seccomp(SECCOMP_GET_ACTION_AVAIL)
 * answered EINVAL by a filter loaded first (tests/fakes/oldkernel.c does the same for the
 * scenarios). SDP_SECCOMP=log then loads nothing and says what the kernel lacks. */
static int old_kernel_log_mode(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	dp_seccomp_mode mode = DP_SECCOMP_OFF;
	char err[512];

	if (!ctx || seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(seccomp), 1,
				     SCMP_A0(SCMP_CMP_EQ, SECCOMP_GET_ACTION_AVAIL, 0)) < 0 ||
	    seccomp_load(ctx) < 0)
		return 1;
	seccomp_release(ctx);
	if (dp_seccomp_log_available() != -EINVAL)
		return 2;
	setenv(DP_SECCOMP_ENV, "log", 1);
	if (dp_seccomp_confine(NULL, 0, -1, &mode, err, sizeof(err)) != -EOPNOTSUPP || mode != DP_SECCOMP_OFF)
		return 3;
	if (!strstr(err, "SDP_SECCOMP=log: this kernel has no seccomp log action (SECCOMP_RET_LOG: Linux 4.14 or "
			 "later, \"log\" in /proc/sys/kernel/seccomp/actions_avail; "
			 "seccomp(SECCOMP_GET_ACTION_AVAIL): EINVAL)"))
		return 4;
	if (dp_seccomp_install((const dp_seccomp_rule *const[]){ dp_seccomp_core_rules },
			       (size_t[]){ dp_seccomp_n_core_rules }, 1, DP_SECCOMP_LOG, NULL) != -EOPNOTSUPP)
		return 5;
	/* only the harness's filter: ours was never loaded (no no_new_privs from us either way) */
	return fails_with(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == 0 ? 0 : 6;
}

static void test_log_mode_unavailable(void **state)
{
	if (dpt_seccomp_unavailable())
		skip();
	assert_int_equal(dp_seccomp_log_available(), 0); /* this kernel has it */
	assert_int_equal(in_child(old_kernel_log_mode), 0);
}

static int off_mode(void)
{
	if (install_core(DP_SECCOMP_OFF, -1) != 0)
		return 1;
	return seccomp_status() == 0 ? 0 : 2;
}

static void test_off_mode_installs_nothing(void **state)
{
	assert_int_equal(in_child(off_mode), 0);
}

/* A second, narrower filter takes rights away; the first still holds. */
static int narrower(void)
{
	static const dp_seccomp_rule only[] = { DP_SC("write"), DP_SC("exit_group"), DP_SC("close") };
	const dp_seccomp_rule *lists[] = { only };
	size_t counts[] = { DP_ELEMENTSOF(only) };

	if (install_core(DP_SECCOMP_ENFORCE, -1) < 0 ||
	    dp_seccomp_install(lists, counts, 1, DP_SECCOMP_ENFORCE, NULL) < 0)
		return 1;
	if (fails_with(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) != EPERM)
		return 2;
	errno = 0; /* getuid: in the core list, not in the second one */
	if (syscall(SYS_getuid) != -1 || errno != EPERM)
		return 3;
	return 0;
}

static void test_narrower_filter(void **state)
{
	if (dpt_seccomp_unavailable())
		skip();
	assert_int_equal(in_child(narrower), 0);
}

/* Bad lists: a clear error naming the entry, nothing installed. */
static int bad_lists(void)
{
	static const dp_seccomp_rule unknown[] = { DP_SC("read"), DP_SC("no_such_syscall") };
	static const dp_seccomp_rule bad_arg[] = { DP_SC_ARG("socket", 6, 1, 1) };
	const dp_seccomp_rule *l1[] = { unknown }, *l2[] = { bad_arg };
	size_t c1[] = { 2 }, c2[] = { 1 };
	const char *bad = NULL;
	char err[128];
	dp_seccomp_mode mode;

	if (dp_seccomp_install(l1, c1, 1, DP_SECCOMP_ENFORCE, &bad) != -EINVAL || !bad ||
	    strcmp(bad, "no_such_syscall") != 0)
		return 1;
	if (dp_seccomp_install(l2, c2, 1, DP_SECCOMP_ENFORCE, &bad) != -EINVAL)
		return 2;
	if (dp_seccomp_install(NULL, NULL, 1, DP_SECCOMP_ENFORCE, NULL) != -EINVAL)
		return 3;
	if (dp_seccomp_confine(unknown, 2, -1, &mode, err, sizeof(err)) != -EINVAL ||
	    strcmp(err, "invalid allow-list entry \"no_such_syscall\"") != 0)
		return 4;
	return seccomp_status() == 0 ? 0 : 5;
}

static void test_bad_lists(void **state)
{
	assert_int_equal(in_child(bad_lists), 0);
}


/* ---- each architecture's filter, run by a BPF interpreter (nothing loaded) ---- */

/* The filter the core list and the exec of EXE_FD make, as the kernel would run it. */
#define EXE_FD 5
struct filter {
	uint32_t arch;
	size_t n;
	struct sock_filter prog[4096];
};

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN_BUILD 1
#endif

/* An instrumented build's filter also allows the sanitizer runtime's calls (clone and ptrace
 * unconditionally among them: core/src/seccomp/seccomp.c, add_sanitizer_rules), so the exported
 * filters are checked in the normal build (make test, make valgrind); said, not silent. */
static bool sanitizer_filter(void)
{
#ifdef TEST_ASAN_BUILD
	print_message("skipped: the ASan build's filter adds the sanitizer runtime's calls; "
		      "checked in the normal build\n");
	return true;
#else
	return false;
#endif
}

static struct filter *export_core(uint32_t arch)
{
	dp_seccomp_rule exec = dp_seccomp_exec_rule(EXE_FD);
	const dp_seccomp_rule *lists[] = { dp_seccomp_core_rules, &exec };
	size_t counts[] = { dp_seccomp_n_core_rules, 1 }, got = 0;
	struct filter *f = calloc(1, sizeof(*f));
	int p[2];
	ssize_t n;

	assert_non_null(f);
	f->arch = arch;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	assert_int_equal(dp_seccomp_export_bpf(lists, counts, 2, DP_SECCOMP_ENFORCE, arch, p[1], NULL), 0);
	close(p[1]);
	while ((n = read(p[0], (char *)f->prog + got, sizeof(f->prog) - got)) > 0)
		got += (size_t)n;
	close(p[0]);
	assert_true(got > 0 && got < sizeof(f->prog) && got % sizeof(struct sock_filter) == 0);
	f->n = got / sizeof(struct sock_filter);
	return f;
}

/* The filter's answer to name(a0, a1, 0, 0, a4, 0) made on its architecture. */
static uint32_t verdict(const struct filter *f, const char *name, uint64_t a0, uint64_t a1, uint64_t a4)
{
	const uint64_t args[6] = { a0, a1, 0, 0, a4, 0 };
	int nr = seccomp_syscall_resolve_name_arch(f->arch, name);

	if (nr < 0)
		fail_msg("no system call %s on architecture 0x%x", name, (unsigned)f->arch);
	return dpt_seccomp_run(f->prog, f->n, f->arch, nr, args);
}

#define RET_ALLOW SECCOMP_RET_ALLOW
#define RET_EPERM (SECCOMP_RET_ERRNO | EPERM)
#define RET_ENOSYS (SECCOMP_RET_ERRNO | ENOSYS)

/* What libdp needs on every architecture (the *at, p* and 2/3 forms arm64 has alone), what it
 * must be refused, and checked arguments. */
static void check_common(const struct filter *f)
{
	static const char *const allowed[] = {
		"read", "write", "close", "openat", "epoll_pwait", "epoll_ctl", "epoll_create1",
		"pipe2", "dup3", "newfstatat", "fstat", "getdents64", "readlinkat", "renameat",
		"renameat2", "unlinkat", "mkdirat", "fchmodat", "faccessat", "faccessat2",
		"timerfd_create", "timerfd_settime", "signalfd4", "inotify_init1", "pidfd_open",
		"waitid", "clock_nanosleep", "accept4", "connect", "sendmsg", "recvmsg", "fsync",
		"rt_sigprocmask", "exit_group", "mmap", "brk", "getrandom",
	};
	static const char *const refused[] = {
		"execve", "ptrace", "mount", "umount2", "unshare", "setns", "bpf", "init_module",
		"kexec_load", "ioctl", "memfd_create", "process_vm_readv", "setuid", "chroot",
	};

	for (size_t i = 0; i < DP_ELEMENTSOF(allowed); i++)
		if (verdict(f, allowed[i], 0, 0, 0) != RET_ALLOW)
			fail_msg("%s refused on architecture 0x%x", allowed[i], (unsigned)f->arch);
	for (size_t i = 0; i < DP_ELEMENTSOF(refused); i++)
		if (verdict(f, refused[i], 0, 0, 0) != RET_EPERM)
			fail_msg("%s not refused with EPERM on architecture 0x%x", refused[i], (unsigned)f->arch);
	assert_int_equal(verdict(f, "socket", AF_UNIX, SOCK_STREAM, 0), RET_ALLOW);
	assert_int_equal(verdict(f, "socket", AF_INET, SOCK_STREAM, 0), RET_EPERM);
	assert_int_equal(verdict(f, "socket", AF_NETLINK, SOCK_RAW, 0), RET_EPERM);
	/* clone: fork's and the helper runner's flags; threads and namespaces refused */
	assert_int_equal(verdict(f, "clone", CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, 0, 0), RET_ALLOW);
	assert_int_equal(verdict(f, "clone", CLONE_VM | CLONE_VFORK | SIGCHLD, 0, 0), RET_ALLOW);
	assert_int_equal(verdict(f, "clone", CLONE_VM | CLONE_THREAD | CLONE_SIGHAND, 0, 0), RET_EPERM);
	assert_int_equal(verdict(f, "clone", CLONE_NEWUSER | SIGCHLD, 0, 0), RET_EPERM);
	assert_int_equal(verdict(f, "clone3", 0, 0, 0), RET_ENOSYS);
	/* the one exec: the daemon's own fd with AT_EMPTY_PATH */
	assert_int_equal(verdict(f, "execveat", EXE_FD, 0, AT_EMPTY_PATH), RET_ALLOW);
	assert_int_equal(verdict(f, "execveat", EXE_FD, 0, 0), RET_EPERM);
	assert_int_equal(verdict(f, "execveat", EXE_FD + 1, 0, AT_EMPTY_PATH), RET_EPERM);
	assert_int_equal(verdict(f, "execveat", (uint32_t)AT_FDCWD, 0, AT_EMPTY_PATH), RET_EPERM);
	assert_int_equal(verdict(f, "prctl", PR_SET_NO_NEW_PRIVS, 1, 0), RET_ALLOW);
	assert_int_equal(verdict(f, "prctl", PR_SET_DUMPABLE, 1, 0), RET_EPERM);
}

/* Every system call number of the architecture: a name the core list holds without an argument
 * condition is allowed, any name it does not hold refused (clone3 with ENOSYS); the filter holds
 * nothing else. A call of another architecture (its AUDIT_ARCH value) kills. */
static void check_sweep(const struct filter *f, uint32_t other_arch)
{
	const uint64_t none[6] = { 0 };
	size_t allowed = 0;

	for (int nr = 0; nr < 1024; nr++) {
		char *name = seccomp_syscall_resolve_num_arch(f->arch, nr);
		bool listed = false, conditional = false;
		uint32_t want, got;

		if (!name)
			continue;
		for (size_t i = 0; i < dp_seccomp_n_core_rules; i++)
			if (strcmp(dp_seccomp_core_rules[i].name, name) == 0) {
				listed = true;
				conditional = conditional || dp_seccomp_core_rules[i].n_args > 0;
			}
		conditional = conditional || strcmp(name, "execveat") == 0;
		want = strcmp(name, "clone3") == 0 ? RET_ENOSYS : listed ? RET_ALLOW : RET_EPERM;
		got = dpt_seccomp_run(f->prog, f->n, f->arch, nr, none);
		if (!conditional && got != want)
			fail_msg("%s (%d) on architecture 0x%x: 0x%x, want 0x%x", name, nr, (unsigned)f->arch,
				 (unsigned)got, (unsigned)want);
		allowed += got == RET_ALLOW;
		free(name);
	}
	assert_true(allowed > 60);
	uint32_t k = dpt_seccomp_run(f->prog, f->n, other_arch, 0, none) & SECCOMP_RET_ACTION_FULL;
	assert_true(k == SECCOMP_RET_KILL_THREAD || k == SECCOMP_RET_KILL_PROCESS);
}

static void test_filter_x86_64(void **state)
{
	if (sanitizer_filter())
		skip();
	struct filter *f = export_core(SCMP_ARCH_X86_64);
	static const char *const legacy[] = { "epoll_wait", "dup2", "rename", "unlink", "mkdir",
					       "chmod", "access", "readlink", "arch_prctl" };

	check_common(f);
	/* glibc on x86_64 also makes the calls arm64 lacks */
	for (size_t i = 0; i < DP_ELEMENTSOF(legacy); i++)
		if (verdict(f, legacy[i], 0, 0, 0) != RET_ALLOW)
			fail_msg("%s refused on x86_64", legacy[i]);
	check_sweep(f, SCMP_ARCH_AARCH64);
	free(f);
}

static void test_filter_aarch64(void **state)
{
	if (sanitizer_filter())
		skip();
	struct filter *f = export_core(SCMP_ARCH_AARCH64);
	static const char *const missing[] = { "open", "poll", "epoll_wait", "pipe", "dup2", "rename",
						"unlink", "mkdir", "chmod", "access", "readlink",
						"arch_prctl", "fork", "stat" };

	/* arm64 has none of these: their rules were dropped, not mapped to another number */
	for (size_t i = 0; i < DP_ELEMENTSOF(missing); i++)
		if (seccomp_syscall_resolve_name_arch(SCMP_ARCH_AARCH64, missing[i]) >= 0)
			fail_msg("%s exists on aarch64", missing[i]);
	check_common(f);
	check_sweep(f, SCMP_ARCH_X86_64);
	free(f);
}

/* The daemons' own filter is built for the architecture they run on. */
static void test_filter_native(void **state)
{
	if (sanitizer_filter())
		skip();
	struct filter *f = export_core(0);

#if defined(__x86_64__)
	assert_int_equal(seccomp_arch_native(), SCMP_ARCH_X86_64);
	f->arch = SCMP_ARCH_X86_64;
	check_sweep(f, SCMP_ARCH_AARCH64);
#elif defined(__aarch64__)
	assert_int_equal(seccomp_arch_native(), SCMP_ARCH_AARCH64);
	f->arch = SCMP_ARCH_AARCH64;
	check_sweep(f, SCMP_ARCH_X86_64);
#else
	f->arch = seccomp_arch_native();
#endif
	check_common(f);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode_from_env),
		cmocka_unit_test(test_core_enforced),
		cmocka_unit_test(test_exec_through_fd),
		cmocka_unit_test(test_log_mode_refuses_nothing),
		cmocka_unit_test(test_log_mode_unavailable),
		cmocka_unit_test(test_off_mode_installs_nothing),
		cmocka_unit_test(test_narrower_filter),
		cmocka_unit_test(test_bad_lists),
		cmocka_unit_test(test_filter_x86_64),
		cmocka_unit_test(test_filter_aarch64),
		cmocka_unit_test(test_filter_native),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
