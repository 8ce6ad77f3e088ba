/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz: temp directory and invariant helpers shared by every target. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"

static char tmpdir[64];
static pid_t tmpdir_owner;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	if (ftw->level == 0)
		return 0;
	if (remove(path) < 0 && errno != ENOENT)
		fprintf(stderr, "fuzz: cannot remove %s: %s\n", path, strerror(errno));
	return 0;
}

void fuzz_clear_dir(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void tmpdir_remove(void)
{
	if (!tmpdir[0] || getpid() != tmpdir_owner)
		return;
	fuzz_clear_dir(tmpdir);
	rmdir(tmpdir);
}

const char *fuzz_tmpdir(void)
{
	if (tmpdir[0])
		return tmpdir;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sdp-fuzz-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		fprintf(stderr, "fuzz: mkdtemp: %s\n", strerror(errno));
		abort();
	}
	tmpdir_owner = getpid(); /* only the creating process removes it (not forked children) */
	atexit(tmpdir_remove);
	return tmpdir;
}

_Noreturn void fuzz_fail(const char *file, int line, const char *what)
{
	fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
	abort();
}

char *fuzz_string(const uint8_t *data, size_t size)
{
	const uint8_t *nul = memchr(data, 0, size);
	size_t n = nul ? (size_t)(nul - data) : size;
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, data, n);
		s[n] = '\0';
	}
	return s;
}
