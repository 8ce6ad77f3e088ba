/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-prefer-bench: the cost of kata's GetPreferredAllocation order, kata_prefer() (kata/prefer.c),
 * alone, in the three shapes of call kubelet makes (docs/kata.md, "Allocation order"), on two
 * topologies built in memory:
 *
 *   hgx   8 GPUs, 2 NUMA nodes of 4, 4 PCIe switches of 2 (an HGX board's 4 NVSwitches are a
 *         resource of their own: not part of this call)
 *   4096  4096 devices, 8 NUMA nodes of 512, 16 switches of 32 per node
 *
 * PCI keys increase with the ID. The cases:
 *
 *   nohint  no NUMA hint: every device available, size half the devices (and 8 on 4096)
 *   numa    a hint with more free aligned devices than asked: only NUMA node 0's available, size 2
 *   must    a hint with fewer: node 0's free devices (all but the first few, taken) must be
 *           included, every free device available, size the must-include IDs + 2
 *
 * Each is timed REPS times (CLOCK_MONOTONIC around each call, its allocations included) and printed
 * as one line:
 *
 *   prefer topo=T case=C size=S reps=R p50_us=M p99_us=P max_us=Z
 *
 *   sdp-prefer-bench [REPS]   (default 2001)
 *
 * Every call's return is checked: a call that does not answer size IDs stops the benchmark.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "dp/macro.h"
#include "prefer.h"
#include "timing.h"

/* A topology: n devices, per_numa to a NUMA node, per_switch to a PCIe switch. */
struct topo {
	const char *name;
	size_t n, per_numa, per_switch;
};

/* One call's arguments. */
struct call {
	const char *name;
	const size_t *avail, *must;
	size_t n_avail, n_must, size;
};

/* The devices of t in ID order: NUMA node, switch (never 0: every device has one) and PCI key. */
static struct kata_topo *topo_build(const struct topo *t)
{
	struct kata_topo *v = calloc(t->n, sizeof(*v));
	for (size_t i = 0; v && i < t->n; i++)
		v[i] = (struct kata_topo){ .numa = (int)(i / t->per_numa), .switch_key = i / t->per_switch + 1,
					   .pci_key = (uint64_t)(i + 1) << 8 };
	return v;
}

/* The IDs from..n-1. */
static size_t *ids_from(size_t from, size_t n)
{
	size_t *v = calloc(n > from ? n - from : 1, sizeof(*v));
	for (size_t i = from; v && i < n; i++)
		v[i - from] = i;
	return v;
}

/* Times c REPS times on topo; prints its line. Returns false when a call fails. */
static bool run(const struct topo *t, const struct kata_topo *topo, const struct call *c, size_t reps)
{
	_cleanup_free_ double *s = calloc(reps, sizeof(*s));
	_cleanup_free_ size_t *out = calloc(c->size, sizeof(*out));
	if (!s || !out) {
		fprintf(stderr, "sdp-prefer-bench: out of memory\n");
		return false;
	}
	for (size_t r = 0; r < reps; r++) {
		double t0 = bench_now_us();
		int e = kata_prefer(topo, t->n, c->avail, c->n_avail, c->must, c->n_must, c->size, out);
		s[r] = bench_now_us() - t0;
		if (e < 0 || (size_t)e != c->size) {
			fprintf(stderr, "sdp-prefer-bench: topo=%s case=%s size=%zu: kata_prefer returned %d\n",
				t->name, c->name, c->size, e);
			return false;
		}
	}
	bench_sort(s, reps);
	printf("prefer topo=%s case=%s size=%zu reps=%zu p50_us=%.2f p99_us=%.2f max_us=%.2f\n", t->name, c->name,
	       c->size, reps, bench_pct(s, reps, 50), bench_pct(s, reps, 99), bench_pct(s, reps, 100));
	return true;
}

/* The three shapes of call on t, the no-hint one at each of the sizes nohint[0..n_nohint). */
static bool bench_topo(const struct topo *t, const size_t *nohint, size_t n_nohint, size_t taken, size_t reps)
{
	_cleanup_free_ struct kata_topo *topo = topo_build(t);
	_cleanup_free_ size_t *all = ids_from(0, t->n);
	_cleanup_free_ size_t *free_ids = ids_from(taken, t->n); /* node 0's first ones taken */
	if (!topo || !all || !free_ids) {
		fprintf(stderr, "sdp-prefer-bench: out of memory\n");
		return false;
	}
	bool ok = true;
	for (size_t i = 0; ok && i < n_nohint; i++)
		ok = run(t, topo, &(struct call){ .name = "nohint", .avail = all, .n_avail = t->n, .size = nohint[i] }, reps);
	struct call numa = { .name = "numa", .avail = all, .n_avail = t->per_numa, .size = 2 };
	/* Node 0's free IDs lead free_ids: they are the must-include ones. */
	size_t n_must = t->per_numa - taken;
	struct call must = { .name = "must", .avail = free_ids, .n_avail = t->n - taken, .must = free_ids,
			     .n_must = n_must, .size = n_must + 2 };
	return ok && run(t, topo, &numa, reps) && run(t, topo, &must, reps);
}

int main(int argc, char **argv)
{
	char *end = NULL;
	unsigned long reps = argc > 1 ? strtoul(argv[1], &end, 10) : 2001;
	if (argc > 2 || reps == 0 || reps > 1000000 || (end && *end)) {
		fprintf(stderr, "usage: sdp-prefer-bench [REPS (1..1000000)]\n");
		return 2;
	}
	static const struct topo hgx = { "hgx", 8, 4, 2 }, big = { "4096", 4096, 512, 32 };
	static const size_t hgx_sizes[] = { 4 }, big_sizes[] = { 8, 2048 };
	/* must: one of node 0's 4 GPUs taken on hgx; a quarter of a switch on 4096. */
	if (!bench_topo(&hgx, hgx_sizes, 1, 1, reps) || !bench_topo(&big, big_sizes, 2, 8, reps))
		return 1;
	return 0;
}
