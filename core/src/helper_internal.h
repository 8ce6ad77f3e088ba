/* SPDX-License-Identifier: Apache-2.0 */
/* helper internals: the child start-up (helper_spawn.c), used by helper.c. */
#pragma once

#include <sys/types.h>

/* Start (clone, the memory shared until the exec) and exec the binary behind exe_fd (an O_PATH
 * fd above stderr) with argv; path is exec'd only where execveat is missing. The child's stdin
 * is /dev/null, its stdout out_w, stderr inherited, no other fd. On success *ret_pid is the
 * child, which has exec'd. -EINVAL, or the errno of pipe/clone or of the child's exec (-ENOENT,
 * -EACCES, -EPERM under a filter...). */
int dp_helper_spawn(int exe_fd, const char *path, char *const argv[], int out_w, pid_t *ret_pid);
