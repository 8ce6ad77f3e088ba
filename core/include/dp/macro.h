/* SPDX-License-Identifier: Apache-2.0 */
/* macro: small ownership helpers in the style of systemd: cleanup attributes, hand-off macros. */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

/* The systemd spellings the developer guide prescribes; no C library or compiler defines them. */
/* NOLINTBEGIN(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */
#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
/* NOLINTEND(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */

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
/* NOLINTBEGIN(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp): systemd spellings, as above */
#define _cleanup_free_ _cleanup_(dp_freep)
#define _cleanup_close_ _cleanup_(dp_closep)
/* NOLINTEND(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp) */

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
	/* NOLINTNEXTLINE(bugprone-macro-parentheses): a type name cannot be parenthesized */ \
	static inline void fn##p(type **p)           \
	{                                            \
		if (*p)                              \
			(void)fn(*p);                \
	}

/* free() each pointer given (NULL ok): a struct's members and then the struct, in one statement,
 * as systemd's free_many(). */
static inline void dp_free_many(const void *const *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free((void *)p[i]);
}
#define DP_FREE_MANY(...)                                        \
	dp_free_many((const void *const[]){ __VA_ARGS__ },       \
		     DP_ELEMENTSOF(((const void *const[]){ __VA_ARGS__ })))
