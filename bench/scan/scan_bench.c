/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-scan-bench: the cost of kata's periodic VFIO rescan (kata/scan.c) alone, on the tree the
 * root prefix names (SDP_TEST_ROOT, as the daemon takes it). It scans as the 30 s rescan does
 * (not verbose, with the cache each rescan leaves to the next: kata/scan_cache.h), REPS times,
 * and prints
 *
 *   devices=N reps=R median_us=M min_us=A max_us=Z rss_before_kib=B maxrss_kib=P
 *
 * (CLOCK_MONOTONIC around each scan; the process's resident set before the first scan and its
 * peak, VmHWM, after the last). make bench runs it on the kata node's tree and on
 * a legacy tree of 10,000 IOMMU groups (bench/).
 *
 *   SDP_TEST_ROOT=<root> [VFIO_BACKEND=legacy|iommufd] sdp-scan-bench [REPS [GAP_MS]]
 *
 * VFIO_BACKEND as the daemon reads it (default, and auto: as the daemon would choose on the tree).
 *
 * GAP_MS: a pause before each scan (default 0), so that each one starts, as the daemon's does
 * every 30 s, with caches its neighbours have cooled.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "scan.h"
#include "table.h"
#include "timing.h"

/* A field of this process's /proc/self/status in kB (name: "VmRSS:"), or -1. */
static long status_kib(const char *name)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, name, strlen(name)) == 0 && sscanf(line + strlen(name), "%ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	char err[256] = "";
	char *end = NULL, *end2 = NULL;
	unsigned long reps = argc > 1 ? strtoul(argv[1], &end, 10) : 2001;
	unsigned long gap = argc > 2 ? strtoul(argv[2], &end2, 10) : 0;
	if (argc > 3 || reps == 0 || reps > 1000000 || (end && *end) || gap > 60000 || (end2 && *end2)) {
		fprintf(stderr, "usage: SDP_TEST_ROOT=<root> sdp-scan-bench [REPS (1..1000000) [GAP_MS (0..60000)]]\n");
		return 2;
	}
	enum kata_backend_setting setting;
	char why[256];
	if (kata_backend_from_env(&setting, err, sizeof(err)) < 0) {
		fprintf(stderr, "sdp-scan-bench: %s\n", err);
		return 2;
	}
	double *t = calloc(reps, sizeof(*t));
	_cleanup_(kata_cache_freep) kata_cache *cache = NULL;
	struct kata_scan_opts o = { .table = kata_table, .n_rows = kata_table_len };
	size_t n = 0;
	if (!t || kata_cache_new(&cache) < 0)
		return 1;
	o.cache = cache;
	o.backend = kata_backend_choose(setting, why, sizeof(why));
	long before = status_kib("VmRSS:");
	for (unsigned long r = 0; r < reps; r++) {
		struct kata_scan s;
		if (gap)
			usleep((useconds_t)(gap * 1000));
		double t0 = bench_now_us();
		int e = kata_scan_run(&o, &s, err, sizeof(err));
		t[r] = bench_now_us() - t0;
		if (e < 0) {
			fprintf(stderr, "sdp-scan-bench: %s\n", err);
			free(t);
			return 1;
		}
		n = s.n_devices;
		kata_scan_done(&s);
	}
	bench_sort(t, reps);
	/* VmHWM, not getrusage's ru_maxrss: that one keeps the parent's high-water mark across
	 * the exec (a Go harness's 14 MiB showed as the scan's) */
	printf("devices=%zu reps=%lu median_us=%.1f min_us=%.1f max_us=%.1f rss_before_kib=%ld maxrss_kib=%ld\n", n,
	       reps, bench_pct(t, reps, 50), bench_pct(t, reps, 0), bench_pct(t, reps, 100), before,
	       status_kib("VmHWM:"));
	free(t);
	return 0;
}
