/* SPDX-License-Identifier: Apache-2.0 */
/* prefer: the fewest NUMA nodes, then switches, then the lowest addresses (prefer.h). */
#include "prefer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "dp/macro.h"

/* A candidate from avail; sw is the switch key, or the ID of a device with none known. */
struct cand {
	size_t idx;
	int numa;
	bool own;
	uint64_t sw;
	uint64_t pci;
};

/* A run of candidates (one NUMA node or one switch) in the sorted candidate array. */
struct run {
	size_t start, len;
	uint64_t minpci;
	bool free; /* a must-include ID's own node or switch: costs nothing */
};

/* The must-include IDs' nodes and switches. */
struct freeset {
	struct cand *v;
	size_t n;
};

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int cmp_switch(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->numa != y->numa)
		return x->numa < y->numa ? -1 : 1;
	if (x->own != y->own)
		return x->own ? 1 : -1;
	return cmp_u64(x->sw, y->sw);
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	int r = cmp_switch(a, b);
	if (r == 0)
		r = cmp_u64(x->pci, y->pci);
	return r ? r : cmp_u64(x->idx, y->idx);
}

static int cmp_pci(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	int r = cmp_u64(x->pci, y->pci);
	return r ? r : cmp_u64(x->idx, y->idx);
}

/* Larger first, then the lowest address. */
static int cmp_run(const void *a, const void *b)
{
	const struct run *x = a, *y = b;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return cmp_u64(x->minpci, y->minpci);
}

static struct cand cand_of(const struct kata_topo *t, size_t idx)
{
	bool own = t[idx].switch_key == 0;
	return (struct cand){ .idx = idx, .numa = t[idx].numa < 0 ? -1 : t[idx].numa, .own = own,
			      .sw = own ? idx : t[idx].switch_key, .pci = t[idx].pci_key };
}

static bool free_numa(const struct freeset *fs, int numa)
{
	for (size_t lo = 0, hi = fs->n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;
		if (fs->v[mid].numa == numa)
			return true;
		if (fs->v[mid].numa < numa)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static bool free_switch(const struct freeset *fs, const struct cand *c)
{
	return !c->own && bsearch(c, fs->v, fs->n, sizeof(*fs->v), cmp_switch) != NULL;
}

/* Splits c[0..n) (sorted by cmp_cand) into runs of one node (by_switch false) or one switch. */
static size_t make_runs(const struct cand *c, size_t n, bool by_switch, const struct freeset *fs,
			struct run *runs)
{
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		bool same = i > 0 && (by_switch ? cmp_switch(&c[i - 1], &c[i]) == 0 : c[i - 1].numa == c[i].numa);
		if (!same)
			runs[m++] = (struct run){ .start = i, .minpci = c[i].pci,
						  .free = by_switch ? free_switch(fs, &c[i]) : free_numa(fs, c[i].numa) };
		struct run *r = &runs[m - 1];
		r->len++;
		if (c[i].pci < r->minpci)
			r->minpci = c[i].pci;
	}
	return m;
}

/* Moves the free runs to the front (in order) and sorts the rest by cmp_run; returns how many are
 * free and sets *free_len to their candidates. */
static size_t order_runs(struct run *runs, size_t m, size_t *free_len)
{
	size_t f = 0;
	*free_len = 0;
	for (size_t i = 0; i < m; i++)
		if (runs[i].free) {
			*free_len += runs[i].len;
			struct run t = runs[f];
			runs[f++] = runs[i];
			runs[i] = t;
		}
	qsort(runs + f, m - f, sizeof(*runs), cmp_run);
	return f;
}

static void take(const struct run *run, bool *mark)
{
	for (size_t j = 0; j < run->len; j++)
		mark[run->start + j] = true;
}

/* How many switches beyond the free ones cover r of c[0..n) (sorted by cmp_cand, at least r):
 * the largest first. -ENOMEM. */
static long min_switches(const struct cand *c, size_t n, size_t r, const struct freeset *fs)
{
	_cleanup_free_ struct run *runs = calloc(n ? n : 1, sizeof(*runs));
	if (!runs)
		return -ENOMEM;
	size_t free_len, m = make_runs(c, n, true, fs, runs);
	size_t f = order_runs(runs, m, &free_len);
	long count = 0;
	r = free_len >= r ? 0 : r - free_len;
	for (size_t i = f; r > 0 && i < m; i++, count++)
		r -= runs[i].len < r ? runs[i].len : r;
	return count;
}

/* Among the nodes runs[i..m) that hold r, the one needing the fewest switches, then the lowest
 * address. */
static long last_node(const struct cand *c, const struct run *runs, size_t i, size_t m, size_t r,
		      const struct freeset *fs)
{
	size_t best = i;
	long best_need = -1;
	for (size_t j = i; j < m && runs[j].len >= r; j++) {
		long need = min_switches(c + runs[j].start, runs[j].len, r, fs);
		if (need < 0)
			return need;
		if (best_need < 0 || need < best_need || (need == best_need && runs[j].minpci < runs[best].minpci)) {
			best = j;
			best_need = need;
		}
	}
	return (long)best;
}

/* Marks in node[] (positions in c) the candidates of the fewest NUMA nodes that hold k. */
static int choose_nodes(const struct cand *c, size_t n, size_t k, const struct freeset *fs, bool *node)
{
	_cleanup_free_ struct run *runs = calloc(n ? n : 1, sizeof(*runs));
	if (!runs)
		return -ENOMEM;
	size_t free_len, m = make_runs(c, n, false, fs, runs);
	size_t f = order_runs(runs, m, &free_len);
	for (size_t i = 0; i < f; i++)
		take(&runs[i], node);
	size_t r = free_len >= k ? 0 : k - free_len;
	for (size_t i = f; r > 0; i++) {
		if (runs[i].len < r) {
			take(&runs[i], node);
			r -= runs[i].len;
			continue;
		}
		long best = last_node(c, runs, i, m, r, fs);
		if (best < 0)
			return (int)best;
		take(&runs[best], node);
		r = 0;
	}
	return 0;
}

/* The sum of the largest b of a multiset of values 1..n: a Fenwick tree over n + 1 - value. */
struct topk {
	size_t n, total;
	uint64_t total_sum;
	size_t *cnt;
	uint64_t *sum;
};

static void topk_add(struct topk *t, size_t v, bool add)
{
	if (v == 0)
		return;
	size_t dc = add ? 1 : (size_t)-1;
	uint64_t ds = add ? v : (uint64_t)0 - v;
	t->total += dc;
	t->total_sum += ds;
	for (size_t i = t->n + 1 - v; i <= t->n; i += i & (~i + 1)) {
		t->cnt[i] += dc;
		t->sum[i] += ds;
	}
}

static uint64_t topk_sum(const struct topk *t, size_t b)
{
	if (b >= t->total)
		return t->total_sum;
	size_t pos = 0, cc = 0, step = 1;
	uint64_t cs = 0;
	while (step * 2 <= t->n)
		step *= 2;
	for (; step; step /= 2)
		if (pos + step <= t->n && cc + t->cnt[pos + step] < b) {
			pos += step;
			cc += t->cnt[pos];
			cs += t->sum[pos];
		}
	return cs + (uint64_t)(b - cc) * (t->n - pos);
}

/* The state of the address-order pass: per switch, its candidates not yet passed and whether it
 * is open (free, or taken); the open ones' total; the closed ones' in a topk. */
struct pass {
	struct topk tk;
	size_t *fut;
	bool *open;
	uint64_t open_fut;
	size_t opened, budget;
};

/* Takes the candidate of switch j just passed when the rest (r after it) can still be completed
 * within the switch budget: always on an open switch, else when opening j leaves enough. */
static bool pass_take(struct pass *p, size_t j, size_t r)
{
	if (p->open[j]) {
		p->open_fut--;
		p->fut[j]--;
		return true;
	}
	topk_add(&p->tk, p->fut[j], false);
	p->fut[j]--;
	if (p->opened < p->budget &&
	    p->open_fut + p->fut[j] + topk_sum(&p->tk, p->budget - p->opened - 1) >= r - 1) {
		p->open[j] = true;
		p->open_fut += p->fut[j];
		p->opened++;
		return true;
	}
	topk_add(&p->tk, p->fut[j], true);
	return false;
}

/*
 * The lowest sorted address list of k candidates of c[0..n) (sorted by cmp_cand) within budget
 * switches beyond the free ones, into pick[] (positions in c): in address order, each is taken
 * when the rest can still be completed. O(n log n).
 */
static int pick_lowest(const struct cand *c, size_t n, size_t k, size_t budget, const struct freeset *fs,
		       bool *pick)
{
	_cleanup_free_ struct run *runs = calloc(n + 1, sizeof(*runs));
	_cleanup_free_ struct cand *ord = calloc(n + 1, sizeof(*ord));
	_cleanup_free_ size_t *sid = calloc(n + 1, sizeof(*sid));
	_cleanup_free_ size_t *fut = calloc(n + 1, sizeof(*fut));
	_cleanup_free_ size_t *cnt = calloc(n + 1, sizeof(*cnt));
	_cleanup_free_ uint64_t *sum = calloc(n + 1, sizeof(*sum));
	_cleanup_free_ bool *open = calloc(n + 1, sizeof(*open));
	if (!runs || !ord || !sid || !fut || !cnt || !sum || !open)
		/* the blocks are freed by their _cleanup_ attributes, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	struct pass p = { .tk = { .n = n, .cnt = cnt, .sum = sum }, .fut = fut, .open = open, .budget = budget };
	size_t m = make_runs(c, n, true, fs, runs);
	for (size_t j = 0; j < m; j++) {
		fut[j] = runs[j].len;
		open[j] = runs[j].free;
		if (open[j])
			p.open_fut += fut[j];
		else
			topk_add(&p.tk, fut[j], true);
		for (size_t i = 0; i < runs[j].len; i++)
			sid[runs[j].start + i] = j;
	}
	for (size_t i = 0; i < n; i++) {
		ord[i] = c[i];
		ord[i].idx = i; /* its position in c */
	}
	qsort(ord, n, sizeof(*ord), cmp_pci);
	for (size_t i = 0, r = k; i < n && r > 0; i++)
		if (pass_take(&p, sid[ord[i].idx], r)) {
			pick[ord[i].idx] = true;
			r--;
		}
	return 0;
}

/* The must-include IDs, deduplicated, into out; their nodes and switches into fs. */
static size_t add_must(const struct kata_topo *topo, const size_t *must, size_t n_must, size_t size, bool *used,
		       size_t *out, struct freeset *fs)
{
	size_t r = 0;
	for (size_t i = 0; i < n_must && r < size; i++)
		if (!used[must[i]]) {
			used[must[i]] = true;
			out[r++] = must[i];
			fs->v[fs->n++] = cand_of(topo, must[i]);
		}
	qsort(fs->v, fs->n, sizeof(*fs->v), cmp_switch);
	return r;
}

/* From c[0..m) (sorted by cmp_cand), the k the order of prefer.h takes, appended to out. */
static int add_chosen(struct cand *c, size_t m, size_t k, const struct freeset *fs, size_t *out)
{
	_cleanup_free_ bool *node = calloc(m, sizeof(*node));
	_cleanup_free_ bool *pick = calloc(m, sizeof(*pick));
	if (!node || !pick)
		/* the blocks are freed by their _cleanup_ attributes, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	int r = choose_nodes(c, m, k, fs, node);
	if (r < 0)
		// cppcheck-suppress memleak ; node and pick are freed by their _cleanup_ attributes
		return r;
	size_t s = 0;
	for (size_t i = 0; i < m; i++)
		if (node[i])
			c[s++] = c[i]; /* still sorted */
	long budget = min_switches(c, s, k, fs);
	if (budget < 0)
		return (int)budget;
	r = pick_lowest(c, s, k, (size_t)budget, fs, pick);
	if (r < 0)
		return r;
	size_t t = 0;
	for (size_t i = 0; i < s; i++)
		if (pick[i])
			c[t++] = c[i];
	qsort(c, t, sizeof(*c), cmp_pci);
	for (size_t i = 0; i < t; i++)
		out[i] = c[i].idx;
	return 0;
}

static bool indices_valid(size_t n, const size_t *v, size_t count)
{
	for (size_t i = 0; i < count; i++)
		if (v[i] >= n)
			return false;
	return true;
}

int kata_prefer(const struct kata_topo *topo, size_t n, const size_t *avail, size_t n_avail,
		const size_t *must, size_t n_must, size_t size, size_t *out)
{
	if (!indices_valid(n, avail, n_avail) || !indices_valid(n, must, n_must))
		return -EINVAL;
	_cleanup_free_ bool *used = calloc(n ? n : 1, sizeof(*used));
	_cleanup_free_ struct cand *fsv = calloc(n_must ? n_must : 1, sizeof(*fsv));
	_cleanup_free_ struct cand *c = calloc(n_avail ? n_avail : 1, sizeof(*c));
	_cleanup_free_ size_t *res = calloc(size ? size : 1, sizeof(*res));
	if (!used || !fsv || !c || !res)
		/* the blocks are freed by their _cleanup_ attributes, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	struct freeset fs = { .v = fsv };
	size_t r = add_must(topo, must, n_must, size, used, res, &fs);
	size_t m = 0;
	for (size_t i = 0; i < n_avail; i++)
		if (!used[avail[i]]) {
			used[avail[i]] = true;
			c[m++] = cand_of(topo, avail[i]);
		}
	size_t k = size - r < m ? size - r : m;
	qsort(c, m, sizeof(*c), cmp_cand);
	int e = k ? add_chosen(c, m, k, &fs, res + r) : 0;
	if (e < 0)
		return e;
	for (size_t i = 0; i < r + k; i++)
		out[i] = res[i];
	return (int)(r + k);
}
