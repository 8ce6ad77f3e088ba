/* SPDX-License-Identifier: Apache-2.0 */
/*
 * compat/musl.c: built only against musl (meson.build). What glibc has and musl lacks, of what
 * the static kata daemon links: sigabbrev_np() (the daemon logs signal names), and the two
 * _FORTIFY_SOURCE entry points Debian's libnghttp2.a and libseccomp.a call (built against glibc
 * with -D_FORTIFY_SOURCE=2): __fprintf_chk and __vsnprintf_chk, with glibc's buffer check kept.
 */
#include "compat/musl.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

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
