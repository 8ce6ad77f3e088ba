/* SPDX-License-Identifier: Apache-2.0 */
/* Small ownership helpers in the style of systemd: cleanup attributes and hand-off macros. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))

#define DP_ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

static inline void dp_freep(void *p) { free(*(void **)p); }
static inline void dp_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}
#define _cleanup_free_ _cleanup_(dp_freep)
#define _cleanup_close_ _cleanup_(dp_closep)

/* Hand ownership out of a cleanup-scoped variable. */
#define TAKE_PTR(p)                          \
	({                                   \
		__typeof__(p) _tp = (p);     \
		(p) = NULL;                  \
		_tp;                         \
	})
#define TAKE_FD(fd)                          \
	({                                   \
		int _tf = (fd);              \
		(fd) = -1;                   \
		_tf;                         \
	})

/* Declare name##p(type **) calling fn on a non-NULL pointer, for _cleanup_(name##p). */
#define DP_DEFINE_CLEANUP(type, fn)                  \
	static inline void fn##p(type **p)           \
	{                                            \
		if (*p)                              \
			(void)fn(*p);                \
	}
