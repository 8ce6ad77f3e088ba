/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.c: built only against musl (meson.build). What glibc has and musl lacks, of what
 * the static daemons link: sigabbrev_np() and strerrorname_np() (the daemons log signal and
 * error names), and the _FORTIFY_SOURCE entry points Debian's libnghttp2.a, libseccomp.a,
 * libmbed*.a and libjansson.a call (built against glibc with -D_FORTIFY_SOURCE=2), with glibc's checks kept.
 */
#include "compat/musl.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name a table indexed by value holds for i, or NULL. */
#define NAME_AT(names, i) \
	((i) > 0 && (size_t)(i) < sizeof(names) / sizeof((names)[0]) ? (names)[i] : NULL)

/* Each signal named as its constant without "SIG". */
#define SIG(name) [SIG##name] = #name
static const char *const signal_names[] = {
	SIG(HUP), SIG(INT), SIG(QUIT), SIG(ILL), SIG(TRAP), SIG(ABRT), SIG(BUS), SIG(FPE),
	SIG(KILL), SIG(USR1), SIG(SEGV), SIG(USR2), SIG(PIPE), SIG(ALRM), SIG(TERM),
	SIG(CHLD), SIG(CONT), SIG(STOP), SIG(TSTP), SIG(TTIN), SIG(TTOU), SIG(URG),
	SIG(XCPU), SIG(XFSZ), SIG(VTALRM), SIG(PROF), SIG(WINCH), SIG(IO), SIG(PWR),
	SIG(SYS),
};
#undef SIG

const char *sigabbrev_np(int sig)
{
	return NAME_AT(signal_names, sig);
}

/* Each errno value named as its constant. */
#define ERRNO(name) [name] = #name
static const char *const errno_names[] = {
	ERRNO(EPERM), ERRNO(ENOENT), ERRNO(ESRCH), ERRNO(EINTR), ERRNO(EIO), ERRNO(ENXIO),
	ERRNO(E2BIG), ERRNO(EBADF), ERRNO(ECHILD), ERRNO(EAGAIN), ERRNO(ENOMEM), ERRNO(EACCES),
	ERRNO(EFAULT), ERRNO(EBUSY), ERRNO(EEXIST), ERRNO(ENODEV), ERRNO(ENOTDIR), ERRNO(EISDIR),
	ERRNO(EINVAL), ERRNO(ENFILE), ERRNO(EMFILE), ERRNO(ENOTTY), ERRNO(ENOSPC), ERRNO(EROFS),
	ERRNO(ENOSYS), ERRNO(ELOOP), ERRNO(ENAMETOOLONG), ERRNO(EOPNOTSUPP), ERRNO(ETIMEDOUT),
	ERRNO(ECONNREFUSED), ERRNO(EXDEV), ERRNO(ENOEXEC), ERRNO(ENOTBLK), ERRNO(ETXTBSY),
	ERRNO(EFBIG), ERRNO(ESPIPE), ERRNO(EMLINK), ERRNO(EPIPE), ERRNO(EDOM), ERRNO(ERANGE),
	ERRNO(EDEADLK), ERRNO(ENOLCK), ERRNO(ENOTEMPTY), ERRNO(ENOMSG), ERRNO(EIDRM),
	ERRNO(ENODATA), ERRNO(ETIME), ERRNO(EPROTO), ERRNO(EBADMSG), ERRNO(EOVERFLOW),
	ERRNO(ENOTSOCK), ERRNO(EPROTONOSUPPORT), ERRNO(EAFNOSUPPORT), ERRNO(EADDRINUSE),
	ERRNO(EADDRNOTAVAIL), ERRNO(ENETDOWN), ERRNO(ENETUNREACH), ERRNO(ECONNABORTED),
	ERRNO(ECONNRESET), ERRNO(ENOBUFS), ERRNO(EISCONN), ERRNO(ENOTCONN), ERRNO(EHOSTUNREACH),
	ERRNO(EALREADY), ERRNO(EINPROGRESS), ERRNO(ESTALE), ERRNO(EDQUOT), ERRNO(ECANCELED),
	ERRNO(ENOMEDIUM), ERRNO(EKEYREJECTED),
};
#undef ERRNO

const char *strerrorname_np(int err)
{
	return NAME_AT(errno_names, err);
}

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...);
int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap);

int __fprintf_chk(FILE *f, int flag, const char *fmt, ...)
{
	va_list ap;
	(void)flag;
	va_start(ap, fmt);
	int r = vfprintf(f, fmt, ap);
	va_end(ap);
	return r;
}

int __vsnprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, va_list ap)
{
	(void)flag;
	if (maxlen > slen)
		abort(); /* glibc: __chk_fail, "buffer overflow detected" */
	return vsnprintf(s, maxlen, fmt, ap);
}

int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...);
int __printf_chk(int flag, const char *fmt, ...);
void *__memcpy_chk(void *dest, const void *src, size_t len, size_t destlen);
void *__memset_chk(void *dest, int c, size_t len, size_t destlen);
char *__strncpy_chk(char *dest, const char *src, size_t len, size_t destlen);

int __snprintf_chk(char *s, size_t maxlen, int flag, size_t slen, const char *fmt, ...)
{
	va_list ap;
	(void)flag;
	if (maxlen > slen)
		abort();
	va_start(ap, fmt);
	int r = vsnprintf(s, maxlen, fmt, ap);
	va_end(ap);
	return r;
}

int __printf_chk(int flag, const char *fmt, ...)
{
	va_list ap;
	(void)flag;
	va_start(ap, fmt);
	int r = vprintf(fmt, ap);
	va_end(ap);
	return r;
}

void *__memcpy_chk(void *dest, const void *src, size_t len, size_t destlen)
{
	if (len > destlen)
		abort();
	return memcpy(dest, src, len);
}

void *__memset_chk(void *dest, int c, size_t len, size_t destlen)
{
	if (len > destlen)
		abort();
	return memset(dest, c, len);
}

/* libjansson.a (sdp-kube-api) */
char *__strncpy_chk(char *dest, const char *src, size_t len, size_t destlen)
{
	if (len > destlen)
		abort();
	return strncpy(dest, src, len);
}

#if defined(__aarch64__)
#include <sys/auxv.h>
/* libgcc's outline atomics (Debian's arm64 libjansson.a: its reference counts) probe the CPU
 * for LSE at start through glibc's internal name. musl's libc.a has it too (the static build
 * takes that one); its libc.so does not export it (the dynamic build takes this). */
unsigned long __getauxval(unsigned long type);
__attribute__((weak)) unsigned long __getauxval(unsigned long type)
{
	return getauxval(type);
}
#endif
