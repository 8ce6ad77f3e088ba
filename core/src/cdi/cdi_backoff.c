/* SPDX-License-Identifier: Apache-2.0 */
/* cdi_backoff: when to repair an owned file another writer keeps replacing (cdi_backoff.h). */
#include "cdi_backoff.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/macro.h"

void dp_cdi_backoff_init(dp_cdi_backoff *b)
{
	*b = (dp_cdi_backoff){
		.free_repairs = DP_CDI_BACKOFF_FREE,
		.min_usec = DP_CDI_BACKOFF_MIN_USEC,
		.max_usec = DP_CDI_BACKOFF_MAX_USEC,
		.stable_usec = DP_CDI_BACKOFF_STABLE_USEC,
	};
}

static void end_episode(dp_cdi_backoff *b, dp_cdi_backoff_event *ev)
{
	if (b->delay)
		*ev = DP_CDI_BACKOFF_ENDED;
	b->streak = 0;
	b->delay = 0;
	b->not_before = 0;
}

/* Our last write was found overwritten at now: how long had it stayed? */
static void judge(dp_cdi_backoff *b, uint64_t now, dp_cdi_backoff_event *ev)
{
	b->judged = true;
	if (now - b->written_at >= b->stable_usec) {
		end_episode(b, ev);
		return;
	}
	if (b->streak < UINT32_MAX)
		b->streak++;
	if (b->streak <= b->free_repairs)
		return;
	if (!b->delay) {
		b->delay = b->min_usec;
		*ev = DP_CDI_BACKOFF_STARTED;
	} else {
		b->delay = b->delay > b->max_usec / 2 ? b->max_usec : b->delay * 2;
	}
	b->not_before = now + b->delay;
}

uint64_t dp_cdi_backoff_foreign(dp_cdi_backoff *b, uint64_t now, dp_cdi_backoff_event *ret_event)
{
	dp_cdi_backoff_event ev = DP_CDI_BACKOFF_NONE;

	b->in_place_since = 0;
	if (b->written_at && !b->judged)
		judge(b, now, &ev);
	*ret_event = ev;
	return b->delay && b->not_before > now ? b->not_before : now;
}

void dp_cdi_backoff_written(dp_cdi_backoff *b, uint64_t now)
{
	b->written_at = now;
	b->judged = false;
}

uint64_t dp_cdi_backoff_in_place(dp_cdi_backoff *b, uint64_t now, dp_cdi_backoff_event *ret_event)
{
	dp_cdi_backoff_event ev = DP_CDI_BACKOFF_NONE;
	uint64_t end = 0;

	if (b->delay) {
		if (!b->in_place_since)
			b->in_place_since = now;
		end = b->in_place_since + b->stable_usec;
		if (now >= end) {
			end_episode(b, &ev);
			end = 0;
		}
	}
	*ret_event = ev;
	return end;
}

uint64_t dp_cdi_backoff_delay(const dp_cdi_backoff *b)
{
	return b->delay;
}

unsigned dp_cdi_backoff_streak(const dp_cdi_backoff *b)
{
	return b->streak;
}

/* ---- the other writer's content ---- */

#define LINE_MAX_SHOWN 48

static uint32_t fnv1a(const unsigned char *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

/* The line of other[0..n) holding offset d: number and excerpt (indent skipped). */
static void describe_line(const unsigned char *other, size_t n, size_t d, char *out, size_t size)
{
	size_t start = d, line = 1, k = 0;
	char text[LINE_MAX_SHOWN + 4];

	while (start > 0 && other[start - 1] != '\n')
		start--;
	for (size_t i = 0; i < start; i++)
		line += other[i] == '\n';
	while (start < n && (other[start] == ' ' || other[start] == '\t'))
		start++;
	for (size_t i = start; i < n && other[i] != '\n' && k < LINE_MAX_SHOWN; i++) {
		text[k] = '?';
		if (other[i] >= 0x20 && other[i] < 0x7f)
			text[k] = ((const char *)other)[i];
		k++;
	}
	if (k == LINE_MAX_SHOWN && start + k < n && other[start + k] != '\n')
		k += (size_t)snprintf(text + k, sizeof(text) - k, "...");
	text[k] = '\0';
	snprintf(out, size, ", line %zu: %s", line, text);
}

static void describe_bytes(const unsigned char *other, size_t n, long long total,
			   const unsigned char *ours, size_t len, char *out, size_t size)
{
	char line[LINE_MAX_SHOWN + 64] = "";
	size_t d = 0;

	while (d < n && d < len && other[d] == ours[d])
		d++;
	if (d < n)
		describe_line(other, n, d, line, sizeof(line));
	else if ((unsigned long long)total < len)
		snprintf(line, sizeof(line), ", ends early");
	snprintf(out, size, "%lld bytes, fnv1a %08x%s", total, (unsigned)fnv1a(other, n), line);
}

/* Read fd up to DP_CDI_BACKOFF_READ_MAX bytes into buf; the count read. */
static size_t read_some(int fd, unsigned char *buf)
{
	size_t n = 0;

	while (n < DP_CDI_BACKOFF_READ_MAX) {
		ssize_t r = read(fd, buf + n, DP_CDI_BACKOFF_READ_MAX - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	return n;
}

void dp_cdi_backoff_describe(int dirfd, const char *name, const void *ours, size_t len, char *out,
			     size_t size)
{
	_cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	_cleanup_free_ unsigned char *buf = NULL;
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0) {
		if (errno == ENOENT)
			snprintf(out, size, "no file");
		else if (errno == ELOOP)
			snprintf(out, size, "not a regular file");
		else
			snprintf(out, size, "unreadable: %s", strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(out, size, "not a regular file");
	} else if (!(buf = malloc(DP_CDI_BACKOFF_READ_MAX))) {
		snprintf(out, size, "%lld bytes", (long long)st.st_size);
	} else {
		size_t n = read_some(fd, buf);
		describe_bytes(buf, n, (long long)st.st_size, ours, len, out, size);
	}
}
