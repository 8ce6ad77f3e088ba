/* SPDX-License-Identifier: Apache-2.0 */
/* scan_cache: what one rescan keeps for the next (kata/scan_cache.h). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "scan_cache.h"

/* A file as fstatat describes it, last modified and changed age_sec ago. The clock is the cache's
 * own (CLOCK_REALTIME, to the nanosecond): time(NULL) is the coarse clock, up to a tick behind,
 * which made a file 1 s younger than the settle time look settled when a second began in between. */
static struct stat file(ino_t ino, time_t age_sec)
{
	struct stat st = { .st_dev = 42, .st_ino = ino, .st_size = 4096, .st_mode = S_IFREG | 0444 };
	struct timespec now;
	assert_int_equal(clock_gettime(CLOCK_REALTIME, &now), 0);
	now.tv_sec -= age_sec;
	st.st_mtim = st.st_ctim = now;
	return st;
}

static kata_cache *scanned(const struct stat *st, size_t n, uint64_t value)
{
	kata_cache *c;
	assert_int_equal(kata_cache_new(&c), 0);
	kata_cache_begin(c);
	for (size_t i = 0; i < n; i++)
		kata_cache_put(c, &st[i], KATA_CACHE_VENDOR, value + i);
	kata_cache_end(c);
	return c;
}

static bool hit(kata_cache *c, const struct stat *st, enum kata_cache_kind kind, uint64_t *v)
{
	return kata_cache_get(c, st, kind, v);
}

/* A value read from a file older than the settle time comes back for the same file only. */
static void kept_for_the_same_file(void **state)
{
	struct stat st[] = { file(1, 3600), file(2, 3600) };
	kata_cache *c = scanned(st, 2, 0x10de);
	uint64_t v = 0;
	kata_cache_begin(c);
	assert_true(hit(c, &st[0], KATA_CACHE_VENDOR, &v));
	assert_int_equal(v, 0x10de);
	assert_true(hit(c, &st[1], KATA_CACHE_VENDOR, &v));
	assert_int_equal(v, 0x10df);
	assert_false(hit(c, &st[0], KATA_CACHE_CLASS, &v)); /* another attribute */
	struct stat other = st[0];
	other.st_dev = 43;
	assert_false(hit(c, &other, KATA_CACHE_VENDOR, &v));
	other = st[0];
	other.st_mtim.tv_nsec++;
	assert_false(hit(c, &other, KATA_CACHE_VENDOR, &v));
	other = st[0];
	other.st_ctim.tv_sec++;
	assert_false(hit(c, &other, KATA_CACHE_VENDOR, &v));
	other = st[0];
	other.st_size = 9;
	assert_false(hit(c, &other, KATA_CACHE_VENDOR, &v));
	kata_cache_end(c);
	kata_cache_free(c);
}

/* Modified within the settle time of the scan's start: read again next time. */
static void recent_files_are_not_kept(void **state)
{
	struct stat st[] = { file(1, 0), file(2, KATA_CACHE_SETTLE_SEC - 1), file(3, KATA_CACHE_SETTLE_SEC + 1) };
	kata_cache *c = scanned(st, 3, 7);
	uint64_t v;
	kata_cache_begin(c);
	assert_false(hit(c, &st[0], KATA_CACHE_VENDOR, &v));
	assert_false(hit(c, &st[1], KATA_CACHE_VENDOR, &v));
	assert_true(hit(c, &st[2], KATA_CACHE_VENDOR, &v));
	assert_int_equal(v, 9);
	kata_cache_end(c);
	kata_cache_free(c);
}

/* Only what the last scan met is kept: an entry it did not look up is gone. */
static void only_the_last_scan_is_kept(void **state)
{
	struct stat st[] = { file(1, 3600), file(2, 3600) };
	kata_cache *c = scanned(st, 2, 1);
	uint64_t v;
	kata_cache_begin(c);
	assert_true(hit(c, &st[0], KATA_CACHE_VENDOR, &v));
	kata_cache_end(c);
	kata_cache_begin(c);
	assert_true(hit(c, &st[0], KATA_CACHE_VENDOR, &v));
	assert_false(hit(c, &st[1], KATA_CACHE_VENDOR, &v));
	kata_cache_end(c);
	kata_cache_free(c);
}

/* The root's parts come back for the same root only; the cache owns and closes the fd. */
static void root_parts(void **state)
{
	kata_cache *c;
	int fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC), got = -1;
	const char *sysroot = NULL;
	assert_true(fd >= 0);
	assert_int_equal(kata_cache_new(&c), 0);
	assert_false(kata_cache_root(c, "", &got, &sysroot));
	assert_int_equal(kata_cache_set_root(c, "/tmp/r", fd, "/tmp/r/sys"), 0);
	assert_true(kata_cache_root(c, "/tmp/r", &got, &sysroot));
	assert_int_equal(got, fd);
	assert_string_equal(sysroot, "/tmp/r/sys");
	assert_false(kata_cache_root(c, "/tmp/s", &got, &sysroot));
	assert_false(kata_cache_root(c, "", &got, &sysroot));
	char longer[5000];
	memset(longer, 'a', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_int_equal(kata_cache_set_root(c, longer, fd, "/sys"), -ENAMETOOLONG);
	assert_true(kata_cache_root(c, "/tmp/r", &got, &sysroot)); /* unchanged */
	kata_cache_free(c);
	assert_int_equal(fcntl(fd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kept_for_the_same_file),
		cmocka_unit_test(recent_files_are_not_kept),
		cmocka_unit_test(only_the_last_scan_is_kept),
		cmocka_unit_test(root_parts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
