/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-encode-bench: the daemon's own ListAndWatch encode time, without the transport. For each
 * device count it builds hyperlight's device list exactly as the daemon does (hl_device_id(),
 * the arena the endpoint keeps) and times dp_ep_encode_list() (core/src/endpoint/endpoint_encode.c), the
 * encoder a health flip runs before handing the bytes to gRPC, with every device Unhealthy.
 *
 *   sdp-encode-bench COUNT|ceiling...
 *
 * "ceiling" is hyperlight's DEVICE_COUNT ceiling (hl_device_count_ceiling()). One line per
 * count: "count=N bytes=B reps=R median_ms=M min_ms=A max_ms=Z" (CLOCK_MONOTONIC around each
 * call, including the malloc of the buffer and its free). make bench runs it (bench/report.go).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "endpoint/endpoint_encode.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The IDs one after the other, NUL-terminated, as the endpoint keeps them. */
static char *id_arena(unsigned long n)
{
	size_t cap = 64 * (size_t)n + 1, off = 0;
	char *a = malloc(cap);
	for (unsigned long i = 0; a && i < n; i++) {
		hl_device_id((uint32_t)i, a + off, 64);
		off += strlen(a + off) + 1;
	}
	return a;
}

static int bench(unsigned long n)
{
	/* About 2 s per count at most, at least 21 samples for a median. */
	unsigned reps = n >= 100000 ? 21 : n >= 10000 ? 101 : 1001;
	double *t = calloc(reps, sizeof(*t));
	char *ids = id_arena(n);
	size_t len = 0;
	if (!t || !ids) {
		free(t);
		free(ids);
		return -ENOMEM;
	}
	for (unsigned r = 0; r < reps; r++) {
		uint8_t *buf = NULL;
		double t0 = now_ms();
		int e = dp_ep_encode_list(ids, n, NULL, false, NULL, &buf, &len);
		free(buf);
		t[r] = now_ms() - t0;
		if (e < 0) {
			free(t);
			free(ids);
			return e;
		}
	}
	qsort(t, reps, sizeof(*t), cmp_double);
	printf("count=%lu bytes=%zu reps=%u median_ms=%.4f min_ms=%.4f max_ms=%.4f\n", n, len, reps,
	       t[reps / 2], t[0], t[reps - 1]);
	free(t);
	free(ids);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: sdp-encode-bench COUNT|ceiling...\n");
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		char *end;
		unsigned long n = strcmp(argv[i], "ceiling") == 0 ? hl_device_count_ceiling()
								  : strtoul(argv[i], &end, 10);
		if (n == 0 || (strcmp(argv[i], "ceiling") != 0 && *end)) {
			fprintf(stderr, "sdp-encode-bench: invalid count '%s'\n", argv[i]);
			return 2;
		}
		int r = bench(n);
		if (r < 0) {
			fprintf(stderr, "sdp-encode-bench: %lu devices: %s\n", n, strerror(-r));
			return 1;
		}
	}
	return 0;
}
