/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.h: the glibc extension libdp and the daemons name, for a build against musl (meson
 * adds this header with -include when the C library is not glibc; scripts/build-static-kata.sh
 * builds the static kata daemon that way).
 */
#pragma once

#ifndef __GLIBC__
/* glibc 2.32: the signal's abbreviation ("TERM"), NULL when unknown. */
const char *sigabbrev_np(int sig);
#endif
