/* SPDX-License-Identifier: Apache-2.0 */
/* helper_internal.h: what helper.c uses of helper_spawn.c, helper_result.c and helper_exe.c. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dp/helper.h"
#include "dp/macro.h"

#define HELPER_OUTPUT_MAX 4096

/* What the child printed on stdout: the first HELPER_OUTPUT_MAX bytes; overflow when more came. */
typedef struct helper_output {
	char buf[HELPER_OUTPUT_MAX + 1];
	size_t len;
	bool overflow;
} helper_output;

/* Start (clone, the memory shared until the exec) and exec the binary behind exe_fd (an O_PATH
 * fd above stderr) with argv; path is exec'd only where execveat is missing. The child's stdin
 * is /dev/null, its stdout out_w, stderr inherited, no other fd. On success *ret_pid is the
 * child, which has exec'd. -EINVAL, or the errno of pipe/clone or of the child's exec (-ENOENT,
 * -EACCES, -EPERM under a filter...). */
int dp_helper_spawn(int exe_fd, const char *path, char *const argv[], int out_w, pid_t *ret_pid);

/* ---- helper_result.c ---- */

/* ok, and the reason from fmt (run and run_usec cleared: the run in flight sets them). */
void helper_result_set(dp_helper_result *r, bool ok, const char *fmt, ...) _printf_(3, 4);
/* "timeout after 2 s". */
void helper_result_timeout(dp_helper_result *r, uint64_t deadline_usec);
/* The result of the child pid reaped with si, which printed o: its "ok[ detail]" or "fail
 * reason" line when it exited 0, else why it failed. */
void helper_result_of_exit(const helper_output *o, const siginfo_t *si, pid_t pid,
			   dp_helper_result *r);

/* ---- helper_exe.c ---- */

/* {exe, DP_HELPER_ARG, argv..., NULL}, every string copied; NULL when out of memory. */
char **helper_copy_argv(const char *exe, char *const argv[]);
/* Free what helper_copy_argv returned (NULL ok). */
void helper_free_argv(char **v);
/* The path of our own binary into buf (size bytes), or "/proc/self/exe" (see helper_exe.c). */
const char *helper_self_exe(char *buf, size_t size);
