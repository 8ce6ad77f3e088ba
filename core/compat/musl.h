/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.h: the two glibc extensions libdp names, for a build against musl (meson adds
 * this header with -include when the C library is not glibc; scripts/build-static-kata.sh
 * builds the static kata daemon that way). Both are used only by the helper module (core/src/
 * helper.c), which the kata daemon does not link.
 */
#pragma once

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>

#ifndef __GLIBC__
/* glibc 2.32: the signal's abbreviation ("TERM"), NULL when unknown. */
const char *sigabbrev_np(int sig);
/* glibc 2.34: musl has no "close every fd from" spawn action; fail rather than leak fds into a
 * child. */
static inline int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from)
{
	(void)fa;
	(void)from;
	return ENOSYS;
}
#endif
