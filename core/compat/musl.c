/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.c: built only against musl (meson.build). What glibc has and musl lacks, of what
 * the static daemons link: sigabbrev_np() and strerrorname_np() (the daemons log signal and
 * error names), and the _FORTIFY_SOURCE entry points Debian's libnghttp2.a, libseccomp.a and
 * libmbed*.a call (built against glibc with -D_FORTIFY_SOURCE=2), with glibc's checks kept.
 */
#include "compat/musl.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sigabbrev_np(int sig)
{
	static const char *const names[] = {
		[SIGHUP] = "HUP",   [SIGINT] = "INT",     [SIGQUIT] = "QUIT", [SIGILL] = "ILL",
		[SIGTRAP] = "TRAP", [SIGABRT] = "ABRT",   [SIGBUS] = "BUS",   [SIGFPE] = "FPE",
		[SIGKILL] = "KILL", [SIGUSR1] = "USR1",   [SIGSEGV] = "SEGV", [SIGUSR2] = "USR2",
		[SIGPIPE] = "PIPE", [SIGALRM] = "ALRM",   [SIGTERM] = "TERM", [SIGCHLD] = "CHLD",
		[SIGCONT] = "CONT", [SIGSTOP] = "STOP",   [SIGTSTP] = "TSTP", [SIGTTIN] = "TTIN",
		[SIGTTOU] = "TTOU", [SIGURG] = "URG",     [SIGXCPU] = "XCPU", [SIGXFSZ] = "XFSZ",
		[SIGVTALRM] = "VTALRM", [SIGPROF] = "PROF", [SIGWINCH] = "WINCH", [SIGIO] = "IO",
		[SIGPWR] = "PWR",   [SIGSYS] = "SYS",
	};
	if (sig <= 0 || (size_t)sig >= sizeof(names) / sizeof(names[0]))
		return NULL;
	return names[sig];
}

const char *strerrorname_np(int err)
{
	static const char *const names[] = {
		[EPERM] = "EPERM",     [ENOENT] = "ENOENT",   [ESRCH] = "ESRCH",     [EINTR] = "EINTR",
		[EIO] = "EIO",         [ENXIO] = "ENXIO",     [E2BIG] = "E2BIG",     [EBADF] = "EBADF",
		[ECHILD] = "ECHILD",   [EAGAIN] = "EAGAIN",   [ENOMEM] = "ENOMEM",   [EACCES] = "EACCES",
		[EFAULT] = "EFAULT",   [EBUSY] = "EBUSY",     [EEXIST] = "EEXIST",   [ENODEV] = "ENODEV",
		[ENOTDIR] = "ENOTDIR", [EISDIR] = "EISDIR",   [EINVAL] = "EINVAL",   [ENFILE] = "ENFILE",
		[EMFILE] = "EMFILE",   [ENOTTY] = "ENOTTY",   [ENOSPC] = "ENOSPC",   [EROFS] = "EROFS",
		[ENOSYS] = "ENOSYS",   [ELOOP] = "ELOOP",     [ENAMETOOLONG] = "ENAMETOOLONG",
		[EOPNOTSUPP] = "EOPNOTSUPP", [ETIMEDOUT] = "ETIMEDOUT", [ECONNREFUSED] = "ECONNREFUSED",
		[EXDEV] = "EXDEV",     [ENOEXEC] = "ENOEXEC", [ENOTBLK] = "ENOTBLK", [ETXTBSY] = "ETXTBSY",
		[EFBIG] = "EFBIG",     [ESPIPE] = "ESPIPE",   [EMLINK] = "EMLINK",   [EPIPE] = "EPIPE",
		[EDOM] = "EDOM",       [ERANGE] = "ERANGE",   [EDEADLK] = "EDEADLK", [ENOLCK] = "ENOLCK",
		[ENOTEMPTY] = "ENOTEMPTY", [ENOMSG] = "ENOMSG", [EIDRM] = "EIDRM",   [ENODATA] = "ENODATA",
		[ETIME] = "ETIME",     [EPROTO] = "EPROTO",   [EBADMSG] = "EBADMSG", [EOVERFLOW] = "EOVERFLOW",
		[ENOTSOCK] = "ENOTSOCK", [EPROTONOSUPPORT] = "EPROTONOSUPPORT", [EAFNOSUPPORT] = "EAFNOSUPPORT",
		[EADDRINUSE] = "EADDRINUSE", [EADDRNOTAVAIL] = "EADDRNOTAVAIL", [ENETDOWN] = "ENETDOWN",
		[ENETUNREACH] = "ENETUNREACH", [ECONNABORTED] = "ECONNABORTED", [ECONNRESET] = "ECONNRESET",
		[ENOBUFS] = "ENOBUFS", [EISCONN] = "EISCONN", [ENOTCONN] = "ENOTCONN", [EHOSTUNREACH] = "EHOSTUNREACH",
		[EALREADY] = "EALREADY", [EINPROGRESS] = "EINPROGRESS", [ESTALE] = "ESTALE", [EDQUOT] = "EDQUOT",
		[ECANCELED] = "ECANCELED", [ENOMEDIUM] = "ENOMEDIUM", [EKEYREJECTED] = "EKEYREJECTED",
	};
	if (err <= 0 || (size_t)err >= sizeof(names) / sizeof(names[0]))
		return NULL;
	return names[err];
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
