/* SPDX-License-Identifier: Apache-2.0 */
/* kata's GetPreferredAllocation order (prefer.c): an HGX-like node, the three ways kubelet calls
 * it (../shared/reference/kubelet-allocation.md), and every answer on small random trees checked
 * against a brute force over all subsets. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dp/macro.h"
#include "prefer.h"

#define MAXN 64

/* GPU i at bus 0x10 + i; switch keys are the switch's number + 1. */
static struct kata_topo dev(int numa, unsigned sw, unsigned bus)
{
	return (struct kata_topo){ .numa = numa, .switch_key = sw, .pci_key = (uint64_t)bus << 12 };
}

/* Runs kata_prefer and returns the answer as a sorted, comma-separated list of indices. */
static const char *answer(const struct kata_topo *t, size_t n, const size_t *avail, size_t n_avail,
			  const size_t *must, size_t n_must, size_t size)
{
	static char s[512];
	size_t out[MAXN];
	int r = kata_prefer(t, n, avail, n_avail, must, n_must, size, out);
	assert_true(r >= 0);
	bool in[MAXN] = { false };
	for (int i = 0; i < r; i++) {
		assert_false(in[out[i]]);
		in[out[i]] = true;
	}
	size_t len = 0;
	s[0] = '\0';
	for (size_t i = 0; i < n; i++)
		if (in[i])
			len += (size_t)snprintf(s + len, sizeof(s) - len, "%s%zu", len ? "," : "", i);
	return s;
}

static size_t range(size_t *v, size_t from, size_t to)
{
	size_t k = 0;
	for (size_t i = from; i <= to; i++)
		v[k++] = i;
	return k;
}

/* HGX-like: 8 GPUs, NUMA 0 holds 0-3 under switches 1 (0,1) and 2 (2,3), NUMA 1 holds 4-7 under
 * switches 3 (4,5) and 4 (6,7). (The 4 NVSwitches are a resource of their own.) */
static void hgx(struct kata_topo *t)
{
	for (unsigned i = 0; i < 8; i++)
		t[i] = dev(i < 4 ? 0 : 1, i / 2 + 1, 0x10 + i);
}

static void hgx_node(void **state)
{
	(void)state;
	struct kata_topo t[8];
	size_t av[8];
	hgx(t);
	size_t n = range(av, 0, 7);
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 1), "0");
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 2), "0,1");      /* one switch */
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 4), "0,1,2,3");  /* one NUMA node */
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 6), "0,1,2,3,4,5"); /* two, one switch on the second */
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 8), "0,1,2,3,4,5,6,7");
	/* GPU 0 taken: a pair comes from a whole switch (2,3), not 1 plus another */
	n = range(av, 1, 7);
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 2), "2,3");
	/* three: NUMA 0 (1,2,3) and NUMA 1 (4,5,6) both need two switches: the smaller node */
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 3), "1,2,3");
	/* four: only NUMA 1 holds four on one node */
	assert_string_equal(answer(t, 8, av, n, NULL, 0, 4), "4,5,6,7");
	/* 0 and 4 taken: one left on switch 1 and one on switch 3; a single GPU comes from a switch
	 * that is already broken, the lowest address */
	size_t av2[] = { 7, 6, 5, 3, 2, 1 };
	assert_string_equal(answer(t, 8, av2, 6, NULL, 0, 1), "1");
	assert_string_equal(answer(t, 8, av2, 6, NULL, 0, 2), "2,3");
}

/* A 2-NUMA, 3-switch tree: NUMA 0 holds switch A (0,1) and switch B (2); NUMA 1 holds switch C
 * (3,4,5). The three shapes of kubelet-allocation.md. */
static void tree(struct kata_topo *t)
{
	t[0] = dev(0, 1, 0x10);
	t[1] = dev(0, 1, 0x11);
	t[2] = dev(0, 2, 0x20);
	t[3] = dev(1, 3, 0x80);
	t[4] = dev(1, 3, 0x81);
	t[5] = dev(1, 3, 0x82);
}

static void kubelet_shapes(void **state)
{
	(void)state;
	struct kata_topo t[6];
	tree(t);
	/* 1. a hint with more aligned devices than asked: only the aligned ones, no must */
	size_t numa0[] = { 2, 1, 0 };
	assert_string_equal(answer(t, 6, numa0, 3, NULL, 0, 2), "0,1");
	size_t numa1[] = { 5, 3, 4 };
	assert_string_equal(answer(t, 6, numa1, 3, NULL, 0, 2), "3,4");
	/* 2. fewer aligned than asked: the aligned as must, every free device as available. NUMA 1
	 * has 3 and 4 left (5 taken) and the container asks 3: both, then one from NUMA 0 (one
	 * switch either way: the lowest address) */
	size_t must[] = { 4, 3 };
	size_t all_free[] = { 0, 1, 2, 3, 4 };
	size_t out[6];
	assert_int_equal(kata_prefer(t, 6, all_free, 5, must, 2, 3, out), 3);
	assert_int_equal(out[0], 4); /* the must-include IDs first, as sent */
	assert_int_equal(out[1], 3);
	assert_string_equal(answer(t, 6, all_free, 5, must, 2, 3), "0,3,4");
	/* a must alone on NUMA 1 (3), 2 more asked: two NUMA nodes and two switches however they
	 * are taken, so the lowest addresses (0, 1), not 3's neighbour 4 */
	size_t must1[] = { 3 };
	assert_string_equal(answer(t, 6, all_free, 5, must1, 1, 3), "0,1,3");
	/* NUMA 0 asked for (must 2, switch B), 2 asked, 1 free beside it on NUMA 0 (switch A): the
	 * node first, even on another switch */
	size_t must2[] = { 2 };
	size_t some[] = { 1, 2, 3, 4 };
	assert_string_equal(answer(t, 6, some, 4, must2, 1, 2), "1,2");
	/* 3 asked with must 2: two NUMA nodes either way; 3 and 4 share switch C, where 1 and 3
	 * would add switches A and C */
	assert_string_equal(answer(t, 6, some, 4, must2, 1, 3), "2,3,4");
	/* 3. exactly as many aligned as asked: kubelet makes no call. Without a hint everything
	 * free is available: a pair on one switch and a trio on one node */
	size_t every[] = { 0, 1, 2, 3, 4, 5 };
	assert_string_equal(answer(t, 6, every, 6, NULL, 0, 2), "0,1");
	assert_string_equal(answer(t, 6, every, 6, NULL, 0, 3), "3,4,5");
	/* two nodes and two switches either way: the lowest addresses, not a whole switch kept */
	assert_string_equal(answer(t, 6, every, 6, NULL, 0, 4), "0,1,3,4");
}

static void bad_input(void **state)
{
	(void)state;
	struct kata_topo t[6];
	tree(t);
	size_t out[4] = { 99, 99, 99, 99 };
	size_t bad[] = { 0, 6 };
	size_t ok[] = { 0, 1 };
	assert_int_equal(kata_prefer(t, 6, bad, 2, NULL, 0, 2, out), -EINVAL);
	assert_int_equal(kata_prefer(t, 6, ok, 2, bad, 2, 2, out), -EINVAL);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(out[i], 99);
	/* duplicates count once; a size beyond what is offered gives what is offered */
	size_t dup[] = { 1, 1, 0, 0 };
	assert_int_equal(kata_prefer(t, 6, dup, 4, ok, 2, 4, out), 2);
	assert_int_equal(kata_prefer(t, 6, dup, 4, NULL, 0, 0, out), 0);
}

/* ---- the brute force ---- */

struct cost {
	int numa, sw;
};

static int count_distinct(const uint64_t *v, int n)
{
	int d = 0;
	for (int i = 0; i < n; i++) {
		bool seen = false;
		for (int j = 0; j < i; j++)
			seen = seen || v[j] == v[i];
		d += !seen;
	}
	return d;
}

static struct cost cost_of(const struct kata_topo *t, unsigned mask, size_t n)
{
	uint64_t numa[MAXN], sw[MAXN];
	int k = 0;
	for (size_t i = 0; i < n; i++)
		if (mask & (1u << i)) {
			numa[k] = (uint64_t)(t[i].numa < 0 ? 999 : t[i].numa);
			sw[k++] = ((uint64_t)t[i].numa << 48) ^ (t[i].switch_key ? t[i].switch_key : 0x1000000 + i);
		}
	return (struct cost){ count_distinct(numa, k), count_distinct(sw, k) };
}

/* The sorted address lists of two sets of one size: negative when a's is lower. */
static int cmp_addresses(const struct kata_topo *t, size_t n, unsigned a, unsigned b)
{
	uint64_t x[MAXN], y[MAXN];
	int kx = 0, ky = 0;
	for (size_t i = 0; i < n; i++) {
		if (a & (1u << i))
			x[kx++] = t[i].pci_key;
		if (b & (1u << i))
			y[ky++] = t[i].pci_key;
	}
	for (int i = 0; i < kx; i++) /* insertion sort: both are tiny */
		for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
			uint64_t v = x[j];
			x[j] = x[j - 1];
			x[j - 1] = v;
		}
	for (int i = 0; i < ky; i++)
		for (int j = i; j > 0 && y[j] < y[j - 1]; j--) {
			uint64_t v = y[j];
			y[j] = y[j - 1];
			y[j - 1] = v;
		}
	for (int i = 0; i < kx; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

static unsigned mask_nodes(const struct kata_topo *t, unsigned mask, size_t n)
{
	unsigned nodes = 0;
	for (size_t i = 0; i < n; i++)
		if (mask & (1u << i))
			nodes |= 1u << (t[i].numa + 1);
	return nodes;
}

/* One random case: checks the answer is one kubelet accepts, its NUMA count is the least of all
 * such answers, its switch count the least of the answers on its own nodes (and, with no must
 * and one node, of all answers), and its address list the lowest of the answers on its nodes
 * with that many switches. */
static void random_case(unsigned seed)
{
	srand(seed);
	size_t n = 1 + (size_t)(rand() % 9);
	struct kata_topo t[MAXN];
	for (size_t i = 0; i < n; i++)
		t[i] = dev(rand() % 4 - 1, (unsigned)(rand() % 4), (unsigned)(rand() % 64) << 4 | (unsigned)i); /* unique */
	size_t avail[MAXN], must[MAXN], n_avail = 0, n_must = 0;
	unsigned offer = 0, mmask = 0;
	for (size_t i = 0; i < n; i++)
		if (rand() % 4) {
			avail[n_avail++] = i;
			offer |= 1u << i;
			if (rand() % 5 == 0)
				must[n_must++] = i, mmask |= 1u << i;
		}
	size_t size = n_must + (size_t)(rand() % ((int)(n_avail - n_must) + 1));
	size_t out[MAXN];
	int r = kata_prefer(t, n, avail, n_avail, must, n_must, size, out);
	assert_int_equal(r, (int)size);
	unsigned got = 0;
	for (int i = 0; i < r; i++) {
		assert_true(offer & (1u << out[i]));
		got |= 1u << out[i];
	}
	assert_int_equal(got & mmask, mmask);
	struct cost mine = cost_of(t, got, n), best = { 99, 99 }, best_here = { 99, 99 };
	unsigned mine_nodes = mask_nodes(t, got, n), lowest = got;
	for (unsigned s = 0; s < (1u << n); s++) {
		if ((s & ~offer) || (s & mmask) != mmask || (size_t)__builtin_popcount(s) != size)
			continue;
		struct cost c = cost_of(t, s, n);
		if (c.numa < best.numa || (c.numa == best.numa && c.sw < best.sw))
			best = c;
		if ((mask_nodes(t, s, n) & ~mine_nodes) != 0)
			continue;
		if (c.sw < best_here.sw)
			best_here = c;
		if (c.sw == mine.sw && cmp_addresses(t, n, s, lowest) < 0)
			lowest = s;
	}
	if (mine.numa != best.numa || mine.sw != best_here.sw || (!n_must && best.numa == 1 && mine.sw != best.sw) ||
	    lowest != got)
		fail_msg("seed %u: %d NUMA nodes, %d switches; best %d, %d (%d on its nodes); lower addresses: %s",
			 seed, mine.numa, mine.sw, best.numa, best.sw, best_here.sw, lowest != got ? "yes" : "no");
}

static void brute_force(void **state)
{
	(void)state;
	for (unsigned seed = 1; seed <= 20000; seed++)
		random_case(seed);
}

/* The same offer in any order gives the same answer. */
static void deterministic(void **state)
{
	(void)state;
	struct kata_topo t[8];
	hgx(t);
	size_t a[] = { 0, 1, 2, 3, 4, 5, 6, 7 }, b[] = { 7, 5, 3, 1, 6, 4, 2, 0 };
	for (size_t size = 1; size <= 8; size++) {
		char first[512];
		snprintf(first, sizeof(first), "%s", answer(t, 8, a, 8, NULL, 0, size));
		assert_string_equal(answer(t, 8, b, 8, NULL, 0, size), first);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hgx_node),
		cmocka_unit_test(kubelet_shapes),
		cmocka_unit_test(bad_input),
		cmocka_unit_test(brute_force),
		cmocka_unit_test(deterministic),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
