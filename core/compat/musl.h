/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.h: the glibc extension libdp and the daemons name, for a build against musl (meson
 * adds this header with -include when the C library is not glibc; scripts/build-static.sh
 * builds the static daemons that way).
 */
#pragma once

#ifndef __GLIBC__
/* glibc 2.32: the signal's abbreviation ("TERM"), NULL when unknown. */
const char *sigabbrev_np(int sig);
/* glibc 2.32: the error's name ("EACCES"), NULL when unknown. Here: the errors a system call
 * made by the daemons (open, ioctl, stat, socket, ...) can return. */
const char *strerrorname_np(int err);
#endif
