/* SPDX-License-Identifier: Apache-2.0 */
/* helper_result: a run's result from the child's exit status and its one line of output. */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dp/loop.h"
#include "helper_internal.h"

#define SHOWN_MAX 64

void helper_result_set(dp_helper_result *r, bool ok, const char *fmt, ...)
{
	va_list ap;

	r->ok = ok;
	r->run = 0; /* finish_run sets the run */
	r->run_usec = 0;
	r->start_error = 0;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
}

/* "2 s", "150 ms", "1500 us". */
static void format_duration(char *buf, size_t size, uint64_t usec)
{
	if (usec % DP_USEC_PER_SEC == 0)
		snprintf(buf, size, "%" PRIu64 " s", (uint64_t)(usec / DP_USEC_PER_SEC));
	else if (usec % DP_USEC_PER_MSEC == 0)
		snprintf(buf, size, "%" PRIu64 " ms", (uint64_t)(usec / DP_USEC_PER_MSEC));
	else
		snprintf(buf, size, "%" PRIu64 " us", usec);
}

static void describe_signal(char *buf, size_t size, int sig)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, size, "SIG%s", abbrev);
	else
		snprintf(buf, size, "%s", strsignal(sig));
}

/* The first SHOWN_MAX bytes of s[0..n) with every non-printable byte replaced by '?'. */
static void sanitise(char *out, size_t size, const char *s, size_t n)
{
	size_t i, m = n < SHOWN_MAX ? n : SHOWN_MAX;

	for (i = 0; i < m && i + 1 < size; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = (char)((c < ' ' || c >= 0x7f) ? '?' : c);
	}
	out[i] = '\0';
}

/* Replace control characters of a reason taken from the child's output by '?'. */
static void sanitise_reason(dp_helper_result *r)
{
	for (char *p = r->reason; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
}

/* Parse the output of a child that exited 0: exactly one line "ok[ detail]" or "fail reason". */
static void parse_output(const helper_output *o, dp_helper_result *r)
{
	const char *nl = memchr(o->buf, '\n', o->len);
	char shown[SHOWN_MAX + 1];
	size_t n;

	if (o->len == 0) {
		helper_result_set(r, false, "helper exited without a result");
		return;
	}
	if (o->overflow) {
		helper_result_set(r, false, "helper printed more than %d bytes", HELPER_OUTPUT_MAX);
		return;
	}
	n = nl ? (size_t)(nl - o->buf) : 0;
	if (nl && n + 1 == o->len && memchr(o->buf, '\0', n) == NULL) {
		if (n == 2 && memcmp(o->buf, "ok", 2) == 0) {
			helper_result_set(r, true, "%s", "");
			return;
		}
		if (n > 3 && memcmp(o->buf, "ok ", 3) == 0) {
			helper_result_set(r, true, "%.*s", (int)(n - 3), o->buf + 3);
			sanitise_reason(r);
			return;
		}
		if (n > 5 && memcmp(o->buf, "fail ", 5) == 0) {
			helper_result_set(r, false, "%.*s", (int)(n - 5), o->buf + 5);
			sanitise_reason(r);
			return;
		}
	}
	sanitise(shown, sizeof(shown), o->buf, o->len);
	helper_result_set(r, false, "helper printed an invalid result: %s", shown);
}

void helper_result_of_exit(const helper_output *o, const siginfo_t *si, pid_t pid,
			   dp_helper_result *r)
{
	char sig[64];

	switch (si->si_code) {
	case CLD_EXITED:
		if (si->si_status == 0) {
			parse_output(o, r);
		} else if (o->len > 5 && !o->overflow && memcmp(o->buf, "fail ", 5) == 0 &&
			   o->buf[o->len - 1] == '\n' && memchr(o->buf, '\n', o->len) == o->buf + o->len - 1) {
			helper_result_set(r, false, "helper exited with status %d: %.*s", si->si_status,
				   (int)(o->len - 6), o->buf + 5);
			sanitise_reason(r);
		} else {
			helper_result_set(r, false, "helper exited with status %d", si->si_status);
		}
		break;
	case CLD_KILLED:
	case CLD_DUMPED:
		describe_signal(sig, sizeof(sig), si->si_status);
		helper_result_set(r, false, "helper killed by signal %d (%s)", si->si_status, sig);
		break;
	default:
		helper_result_set(r, false, "helper (pid %d) was reaped elsewhere; no result", (int)pid);
		break;
	}
}

void helper_result_timeout(dp_helper_result *r, uint64_t deadline_usec)
{
	char d[32];

	format_duration(d, sizeof(d), deadline_usec);
	helper_result_set(r, false, "timeout after %s", d);
}
