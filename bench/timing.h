/* SPDX-License-Identifier: Apache-2.0 */
/* timing: the C benchmarks' clock (CLOCK_MONOTONIC, in µs) and the percentiles of their samples. */
#pragma once

#include <stddef.h>
#include <stdlib.h>
#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline double bench_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts the samples t[0..n) in place, for bench_pct. */
static inline void bench_sort(double *t, size_t n)
{
	qsort(t, n, sizeof(*t), bench_cmp_double);
}

/* The p-th percentile (0..100) of the sorted samples t[0..n), n > 0: the sample at the rounded rank
 * p/100 * (n - 1), so 0 is the minimum, 100 the maximum and 50 t[n / 2]. */
static inline double bench_pct(const double *t, size_t n, double p)
{
	return t[(size_t)(p / 100 * (double)(n - 1) + 0.5)];
}
