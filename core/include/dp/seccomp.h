/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seccomp: self-confinement with an allow-list (libseccomp). After start-up a daemon sets
 * PR_SET_NO_NEW_PRIVS and loads a filter that allows exactly the system calls named in its
 * rules; every other call fails with EPERM (clone3 with ENOSYS, so that libc falls back to
 * clone, which the rules can inspect). The filter is inherited by children and cannot be
 * loosened; a child may add a narrower one (the probe helper does).
 *
 * SDP_SECCOMP selects the mode: "enforce" (default), "log" (nothing is refused; the kernel logs
 * what would have been, for building a list), "off" (no filter, no no_new_privs). Any other
 * value keeps "enforce" and is reported (a typo never turns confinement off).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define DP_SECCOMP_ENV "SDP_SECCOMP"
#define DP_SECCOMP_MAX_ARGS 3

typedef enum dp_seccomp_mode {
	DP_SECCOMP_ENFORCE,
	DP_SECCOMP_LOG,
	DP_SECCOMP_OFF,
} dp_seccomp_mode;

/* The call matches when (argument[index] & mask) == value. 32 bits: every argument a rule
 * checks is an int or a flag word (the upper half of the register is masked off), and the
 * tables stay small (12 bytes per condition; they are most of a static binary's .data). */
typedef struct dp_seccomp_arg {
	uint8_t index;
	uint32_t mask;
	uint32_t value;
} dp_seccomp_arg;

/* Allow the system call `name` (libseccomp's name, e.g. "openat"), with every argument
 * condition holding. Several rules for one name are alternatives. */
typedef struct dp_seccomp_rule {
	const char *name;
	unsigned n_args;
	dp_seccomp_arg args[DP_SECCOMP_MAX_ARGS];
} dp_seccomp_rule;

#define DP_SC(n) { .name = (n) }
#define DP_SC_ARG(n, i, m, v) { .name = (n), .n_args = 1, .args = { { (i), (m), (v) } } }
/* Against musl (the static image builds, scripts/build-static.sh), stat(), lstat() and open()
 * (also inside fopen(), opendir() and realpath()) make the legacy x86_64 system calls where
 * glibc makes newfstatat and openat; they reach nothing those do not. Empty against glibc. */
#ifdef __GLIBC__
#define DP_SC_MUSL_LEGACY
#else
#define DP_SC_MUSL_LEGACY DP_SC("stat"), DP_SC("lstat"), DP_SC("open"),
#endif

/* The mode from $SDP_SECCOMP (unset: enforce). An invalid value: -EINVAL, *ret = enforce, and
 * err (may be NULL) holds e.g.  SDP_SECCOMP="of" is not one of enforce, log, off. */
int dp_seccomp_mode_from_env(dp_seccomp_mode *ret, char *err, size_t errlen);
const char *dp_seccomp_mode_name(dp_seccomp_mode mode);

/* Whether the kernel has the log action (SECCOMP_RET_LOG, Linux 4.14): 0, or the error of
 * seccomp(SECCOMP_GET_ACTION_AVAIL): -EINVAL (a kernel before 4.14), -EOPNOTSUPP, -ENOSYS, or
 * what a filter above the process answers. */
int dp_seccomp_log_available(void);

/* Set no_new_privs and load the filter made of every list (lists[i] has counts[i] rules).
 * Nothing is confined on failure: -EINVAL (NULL, a name libseccomp does not know, an argument
 * index above 5: *bad_name names it when bad_name is not NULL), -ENOMEM, -EOPNOTSUPP (mode log
 * on a kernel without the log action: dp_seccomp_log_available), or the error of prctl/seccomp
 * (-EACCES, -ENOSYS: kernel without seccomp filters). Mode off: returns 0 and installs nothing. */
int dp_seccomp_install(const dp_seccomp_rule *const *lists, const size_t *counts, size_t n_lists,
		       dp_seccomp_mode mode, const char **bad_name);

/* The filter dp_seccomp_install() would load (mode enforce or log), built for arch, written to
 * fd as its classic BPF program (struct sock_filter[], what the kernel runs): arch 0 is the
 * native architecture, else an AUDIT_ARCH_* value (libseccomp's SCMP_ARCH_*, e.g.
 * SCMP_ARCH_AARCH64), so one machine checks every architecture's filter (tests). -EINVAL (a bad
 * entry, mode off, fd < 0), -ENOMEM, or libseccomp's error (an unknown architecture). */
int dp_seccomp_export_bpf(const dp_seccomp_rule *const *lists, const size_t *counts, size_t n_lists,
			  dp_seccomp_mode mode, uint32_t arch, int fd, const char **bad_name);

/* Confine the calling daemon: mode from $SDP_SECCOMP, then core rules + rules + the exec of
 * exe_fd (none when exe_fd < 0). 0 with *ret_mode set; err then holds a warning when
 * SDP_SECCOMP was invalid (enforced anyway), else "". On failure err says why (an invalid entry,
 * the kernel refused the filter, or -EOPNOTSUPP: SDP_SECCOMP=log on a kernel without the log
 * action, which names what is missing) and nothing is confined: the daemon does not start, as
 * neither running unconfined nor enforcing is what was asked for. */
int dp_seccomp_confine(const dp_seccomp_rule *rules, size_t n_rules, int exe_fd,
		       dp_seccomp_mode *ret_mode, char *err, size_t errlen);

/* dp_seccomp_confine for a daemon's main path, with its log lines: msg="cannot confine the
 * daemon" (error; the caller exits 1), msg="invalid SDP_SECCOMP ignored" (warn), msg=confined
 * seccomp=<mode> (info). Returns dp_seccomp_confine's result. */
int dp_seccomp_confine_daemon(const dp_seccomp_rule *rules, size_t n_rules, int exe_fd);

/* The calls libdp itself makes after start-up (loop, gRPC server and client on unix sockets,
 * CDI writer, helper runner, log), plus what the C library and, in instrumented builds, the
 * sanitizer runtime need. A daemon adds its own rules and dp_seccomp_exec_rule(). */
extern const dp_seccomp_rule dp_seccomp_core_rules[];
extern const size_t dp_seccomp_n_core_rules;

/* What a helper child that calls the API server adds (it runs under the daemon's filter): IPv4
 * and IPv6 sockets, poll, the resolver's calls. */
extern const dp_seccomp_rule dp_seccomp_api_client_rules[];
extern const size_t dp_seccomp_n_api_client_rules;

/* The only exec allowed: execveat(exe_fd, "", argv, envp, AT_EMPTY_PATH), i.e. the helper
 * runner re-executing the daemon's own binary through the fd it opened at start-up. */
dp_seccomp_rule dp_seccomp_exec_rule(int exe_fd);
