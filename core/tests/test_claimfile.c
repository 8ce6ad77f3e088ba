/* SPDX-License-Identifier: Apache-2.0 */
/*
 * claimfile: a claim's allocation written and read back the same; the write atomic (only the
 * file itself in its directory afterwards, an existing one replaced whole) and refusing what it
 * could not read back; the read strict about every hostile file (no header, wrong fields, bad
 * names, too many results, a NUL, no final newline, too big, a symlink), writing nothing then.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/claimfile.h"
#include "dp_test.h"

static char dir[128], path[256], why[256];

static int setup(void **state)
{
	assert_int_equal(dpt_tmpdir(dir, sizeof(dir), "claimfile"), 0);
	snprintf(path, sizeof(path), "%s/uid-1", dir);
	return 0;
}

static int teardown(void **state)
{
	dpt_rmtree(dir);
	return 0;
}

static void put(const char *text, size_t n)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, n, f), n);
	fclose(f);
}

static int entries(void)
{
	int n = 0;
	DIR *d = opendir(dir);
	assert_non_null(d);
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void round_trip(void **state)
{
	dp_draclaim c = { .n = 2 }, back;
	strcpy(c.results[0].request, "gpus");
	strcpy(c.results[0].device, "gpu-12");
	strcpy(c.results[1].request, "hv/shared");
	strcpy(c.results[1].device, "hypervisor");
	strcpy(c.results[1].share_id, "5c1e-0a");
	c.results[1].admin_access = true;
	assert_int_equal(dp_claimfile_write(path, &c), 0);
	assert_int_equal(dp_claimfile_read(path, &back, why, sizeof(why)), 0);
	assert_int_equal(back.n, 2);
	assert_memory_equal(&back.results[0], &c.results[0], sizeof(c.results[0]));
	assert_memory_equal(&back.results[1], &c.results[1], sizeof(c.results[1]));
	/* replaced whole; nothing else left in the directory */
	c.n = 1;
	assert_int_equal(dp_claimfile_write(path, &c), 0);
	assert_int_equal(dp_claimfile_read(path, &back, why, sizeof(why)), 0);
	assert_int_equal(back.n, 1);
	assert_int_equal(entries(), 1);
}

static void write_refuses(void **state)
{
	dp_draclaim c = { .n = 1 };
	strcpy(c.results[0].request, "gpus");
	strcpy(c.results[0].device, "GPU");
	assert_int_equal(dp_claimfile_write(path, &c), -EINVAL);
	c.n = 0;
	assert_int_equal(dp_claimfile_write(path, &c), -EINVAL);
	assert_int_equal(entries(), 0);
	char missing[300];
	snprintf(missing, sizeof(missing), "%s/no/such", dir);
	strcpy(c.results[0].device, "gpu");
	c.n = 1;
	assert_int_equal(dp_claimfile_write(missing, &c), -ENOENT);
}

static void refused(const char *text, size_t n, const char *said)
{
	dp_draclaim c;
	memset(&c, 0x5a, sizeof(c));
	put(text, n);
	assert_int_equal(dp_claimfile_read(path, &c, why, sizeof(why)), -EBADMSG);
	assert_int_equal(((unsigned char *)&c)[0], 0x5a);
	if (!strstr(why, said))
		fail_msg("refusal says \"%s\", want \"%s\"", why, said);
}
#define REFUSED(lit, said) refused(lit, sizeof(lit) - 1, said)

static void hostile(void **state)
{
	dp_draclaim c;
	REFUSED("", "header");
	REFUSED("sdp-claim 2\ngpus\tgpu-0\t\t0\n", "header");
	REFUSED("sdp-claim 1\n", "no result");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t\t0", "line 2: no newline");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t\t0\t\n", "line 2: not 4");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t0\n", "line 2: not 4");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t\t2\n", "admin access");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t\t0\ngpus\t../x\t\t0\n", "line 3: device name \"../x\"");
	REFUSED("sdp-claim 1\ngp us\tgpu-0\t\t0\n", "request name");
	REFUSED("sdp-claim 1\ngpus\tgpu-0\t\0\t0\n", "NUL");
	char big[DP_CLAIMFILE_MAX + 2];
	memset(big, 'a', sizeof(big));
	refused(big, sizeof(big), "over 16384 bytes");
	/* 33 results */
	char many[2048];
	int n = snprintf(many, sizeof(many), "sdp-claim 1\n");
	for (int i = 0; i < 33; i++)
		n += snprintf(many + n, sizeof(many) - (size_t)n, "gpus\tgpu-%d\t\t0\n", i);
	refused(many, (size_t)n, "more than 32");
	/* a symlink is not followed */
	char target[300];
	snprintf(target, sizeof(target), "%s/target", dir);
	put("sdp-claim 1\ngpus\tgpu-0\t\t0\n", 26);
	assert_int_equal(rename(path, target), 0);
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(dp_claimfile_read(path, &c, why, sizeof(why)), -ELOOP);
	unlink(path);
	assert_int_equal(dp_claimfile_read(path, &c, why, sizeof(why)), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(write_refuses, setup, teardown),
		cmocka_unit_test_setup_teardown(hostile, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
