/* SPDX-License-Identifier: Apache-2.0 */
/* seccomp: self-confinement with a libseccomp allow-list and its build-up (dp/seccomp.h). */
#include "dp/seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/macro.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

static const struct {
	const char *name;
	dp_seccomp_mode mode;
} modes[] = {
	{ "enforce", DP_SECCOMP_ENFORCE },
	{ "log", DP_SECCOMP_LOG },
	{ "off", DP_SECCOMP_OFF },
};

const char *dp_seccomp_mode_name(dp_seccomp_mode mode)
{
	for (size_t i = 0; i < DP_ELEMENTSOF(modes); i++)
		if (modes[i].mode == mode)
			return modes[i].name;
	return "?";
}

int dp_seccomp_mode_from_env(dp_seccomp_mode *ret, char *err, size_t errlen)
{
	const char *v = getenv(DP_SECCOMP_ENV);

	if (!ret)
		return -EINVAL;
	*ret = DP_SECCOMP_ENFORCE;
	if (!v)
		return 0;
	for (size_t i = 0; i < DP_ELEMENTSOF(modes); i++)
		if (strcmp(v, modes[i].name) == 0) {
			*ret = modes[i].mode;
			return 0;
		}
	if (err && errlen)
		snprintf(err, errlen, "%s=\"%.32s%s\" is not one of enforce, log, off", DP_SECCOMP_ENV, v,
			 strlen(v) > 32 ? "..." : "");
	return -EINVAL;
}

dp_seccomp_rule dp_seccomp_exec_rule(int exe_fd)
{
	dp_seccomp_rule r = {
		.name = "execveat",
		.n_args = 2,
		.args = {
			{ 0, 0xffffffffu, (uint32_t)exe_fd },
			{ 4, 0xffffffffu, AT_EMPTY_PATH },
		},
	};
	return r;
}

static void ctx_release(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int add_rule(scmp_filter_ctx ctx, const dp_seccomp_rule *rule)
{
	struct scmp_arg_cmp cmp[DP_SECCOMP_MAX_ARGS];
	int nr;

	if (!rule->name || rule->n_args > DP_SECCOMP_MAX_ARGS)
		return -EINVAL;
	nr = seccomp_syscall_resolve_name(rule->name);
	if (nr == __NR_SCMP_ERROR)
		return -EINVAL;
	for (unsigned i = 0; i < rule->n_args; i++) {
		if (rule->args[i].index > 5)
			return -EINVAL;
		cmp[i] = (struct scmp_arg_cmp){ .arg = rule->args[i].index, .op = SCMP_CMP_MASKED_EQ,
						.datum_a = rule->args[i].mask,
						.datum_b = rule->args[i].value };
	}
	return seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, rule->n_args, cmp);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DP_ASAN_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DP_ASAN_BUILD 1
#endif

/* Instrumented builds only (make asan; release builds never allow these), in every filter (the
 * probe helper's too): the AddressSanitizer/LeakSanitizer runtime's own calls. The leak check
 * at exit stops the world from a cloned tracer thread (clone, ptrace, prctl), reads /proc with
 * raw open/getdents, resets the signal stack, and reports. Found with SDP_SECCOMP=log + dmesg. */
static int add_sanitizer_rules(scmp_filter_ctx ctx)
{
#ifdef DP_ASAN_BUILD
	static const char *const calls[] = {
		"clone", "ptrace", "prctl", "sched_yield", "sigaltstack", "futex", "getppid",
		"sched_getaffinity", "uname", "open", "getdents", "getdents64", "readlink",
		"mmap", "munmap", "madvise", "mprotect", "write", "close", "gettid", "getpid",
		"wait4", "rt_sigaction", "rt_sigprocmask", "exit", "exit_group", "tgkill",
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(calls); i++) {
		int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, seccomp_syscall_resolve_name(calls[i]), 0);
		if (r < 0 && r != -EEXIST)
			return r;
	}
#else
	(void)ctx;
#endif
	return 0;
}

/* Under valgrind (make valgrind; detected at run time, never true in production): execveat is
 * not implemented (ENOSYS), so the helper runner falls back to execve of its path, and
 * valgrind's own code in a forked child makes calls the daemon never makes. The helper
 * runner's clone(CLONE_VM | CLONE_VFORK) reaches the kernel as clone(CLONE_VFORK | SIGCHLD):
 * valgrind runs it as a fork. */
static int add_valgrind_rules(scmp_filter_ctx ctx)
{
	static const int extra[] = { SCMP_SYS(execve), SCMP_SYS(pipe), SCMP_SYS(open),
				     SCMP_SYS(rt_sigtimedwait), SCMP_SYS(sched_yield) };
	int r = 0;

	if (!RUNNING_ON_VALGRIND)
		return 0;
	for (size_t i = 0; i < DP_ELEMENTSOF(extra) && r >= 0; i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, extra[i], 0);
	if (r >= 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, CLONE_VFORK | SIGCHLD));
	return r;
}

/* clone3 passes its flags in memory a filter cannot read: refuse it with ENOSYS so libc uses
 * clone, whose flags the rules see. */
static int add_fixed_rules(scmp_filter_ctx ctx)
{
	int nr = seccomp_syscall_resolve_name("clone3");

	if (nr == __NR_SCMP_ERROR)
		return 0;
	return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
}

/* The filter of every list for arch (0: the native one) into *ret; -EINVAL (a bad entry:
 * *bad_name), -ENOMEM, or libseccomp's error. A name the architecture does not have (arm64 has no
 * open, poll, epoll_wait, pipe, dup2, ...: only their *at, p* and 2/3 forms) is a pseudo system
 * call number there, and seccomp_rule_add_array() adds no rule for it (only the _exact variant
 * refuses one, with -EDOM): the lists name both forms, and each architecture's filter holds the
 * ones it has. */
static int build(const dp_seccomp_rule *const *lists, const size_t *counts, size_t n_lists,
		 dp_seccomp_mode mode, uint32_t arch, const char **bad_name, scmp_filter_ctx *ret)
{
	_cleanup_(ctx_release) scmp_filter_ctx ctx = NULL;
	int r;

	if ((!lists || !counts) && n_lists)
		return -EINVAL;
	ctx = seccomp_init(mode == DP_SECCOMP_LOG ? SCMP_ACT_LOG : SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM;
	/* Another architecture's filter (dp_seccomp_export_bpf): the rules name the native
	 * numbers, which libseccomp translates by name for every architecture of the filter. */
	if (arch && arch != seccomp_arch_native() &&
	    ((r = seccomp_arch_add(ctx, arch)) < 0 || (r = seccomp_arch_remove(ctx, SCMP_ARCH_NATIVE)) < 0))
		return r;
	/* A binary search over the system call numbers instead of a linear chain: with ~120
	 * rules, every system call otherwise runs through about as many BPF instructions, which
	 * showed in the daemons' idle CPU. */
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
		return r;
	for (size_t l = 0; l < n_lists; l++)
		for (size_t i = 0; i < counts[l]; i++)
			if ((r = add_rule(ctx, &lists[l][i])) < 0) {
				if (bad_name)
					*bad_name = lists[l][i].name;
				return r == -EEXIST ? -EINVAL : r;
			}
	if ((r = add_fixed_rules(ctx)) < 0 || (r = add_valgrind_rules(ctx)) < 0 ||
	    (r = add_sanitizer_rules(ctx)) < 0)
		return r;
	*ret = TAKE_PTR(ctx);
	return 0;
}

#ifndef SECCOMP_GET_ACTION_AVAIL
#define SECCOMP_GET_ACTION_AVAIL 2
#endif

/* Asked of the kernel as libseccomp asks it (its seccomp_init() then fails with no reason
 * given, which reached the log as ENOMEM). SCMP_ACT_LOG is SECCOMP_RET_LOG. */
int dp_seccomp_log_available(void)
{
	uint32_t action = SCMP_ACT_LOG;

	return syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) < 0 ? -errno : 0;
}

int dp_seccomp_install(const dp_seccomp_rule *const *lists, const size_t *counts, size_t n_lists,
		       dp_seccomp_mode mode, const char **bad_name)
{
	_cleanup_(ctx_release) scmp_filter_ctx ctx = NULL;
	int r;

	if ((!lists || !counts) && n_lists)
		return -EINVAL;
	if (mode == DP_SECCOMP_OFF)
		return 0;
	if (mode == DP_SECCOMP_LOG && dp_seccomp_log_available() < 0)
		return -EOPNOTSUPP;
	if ((r = build(lists, counts, n_lists, mode, 0, bad_name, &ctx)) < 0)
		return r;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	return seccomp_load(ctx);
}

int dp_seccomp_export_bpf(const dp_seccomp_rule *const *lists, const size_t *counts, size_t n_lists,
			  dp_seccomp_mode mode, uint32_t arch, int fd, const char **bad_name)
{
	_cleanup_(ctx_release) scmp_filter_ctx ctx = NULL;
	int r;

	if (mode == DP_SECCOMP_OFF || fd < 0)
		return -EINVAL;
	if ((r = build(lists, counts, n_lists, mode, arch, bad_name, &ctx)) < 0)
		return r;
	return seccomp_export_bpf(ctx, fd);
}

int dp_seccomp_confine(const dp_seccomp_rule *rules, size_t n_rules, int exe_fd,
		       dp_seccomp_mode *ret_mode, char *err, size_t errlen)
{
	dp_seccomp_rule exec = dp_seccomp_exec_rule(exe_fd);
	const dp_seccomp_rule *lists[] = { dp_seccomp_core_rules, rules, &exec };
	size_t counts[] = { dp_seccomp_n_core_rules, n_rules, exe_fd >= 0 ? 1 : 0 };
	const char *bad = NULL;
	dp_seccomp_mode mode;
	int r;

	if (!ret_mode || !err || !errlen || (!rules && n_rules))
		return -EINVAL;
	err[0] = '\0';
	(void)dp_seccomp_mode_from_env(&mode, err, errlen); /* invalid: enforce, err says why */
	if (mode == DP_SECCOMP_LOG && (r = dp_seccomp_log_available()) < 0) {
		snprintf(err, errlen, "%s=log: this kernel has no seccomp log action (SECCOMP_RET_LOG: Linux "
			 "4.14 or later, \"log\" in /proc/sys/kernel/seccomp/actions_avail; "
			 "seccomp(SECCOMP_GET_ACTION_AVAIL): %s); nothing loaded, not starting: "
			 "%s=enforce confines the daemon, off runs it unconfined",
			 DP_SECCOMP_ENV, dp_errname(r), DP_SECCOMP_ENV);
		return -EOPNOTSUPP;
	}
	r = dp_seccomp_install(lists, counts, DP_ELEMENTSOF(lists), mode, &bad);
	if (r < 0) {
		if (bad)
			snprintf(err, errlen, "invalid allow-list entry \"%s\"", bad);
		else
			snprintf(err, errlen, "cannot load the seccomp filter: %s (%s=off runs unconfined)",
				 strerror(-r), DP_SECCOMP_ENV);
		return r;
	}
	*ret_mode = mode;
	return 0;
}

/* The daemons' main-path log lines for confinement (the daemon shell, dp_daemon_main, calls this
 * once after the daemon's start): error, warning, info. */
int dp_seccomp_confine_daemon(const dp_seccomp_rule *rules, size_t n_rules, int exe_fd)
{
	dp_seccomp_mode mode;
	char err[512], q[600];
	int r = dp_seccomp_confine(rules, n_rules, exe_fd, &mode, err, sizeof(err));

	if (r < 0) {
		dp_error("cannot confine the daemon", "error=%s", dp_logq(q, sizeof(q), err));
		return r;
	}
	if (err[0])
		dp_warn("invalid SDP_SECCOMP ignored", "error=%s", dp_logq(q, sizeof(q), err));
	dp_info("confined", "seccomp=%s", dp_seccomp_mode_name(mode));
	return 0;
}
