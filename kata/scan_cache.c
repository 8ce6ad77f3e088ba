/* SPDX-License-Identifier: Apache-2.0 */
/* scan_cache: what one VFIO rescan leaves to the next, so that an unchanged node costs stats. */
#include "scan_cache.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct entry {
	dev_t dev;
	ino_t ino;
	int kind;
	off_t size;
	struct timespec mtim, ctim;
	uint64_t value;
};

struct table {
	struct entry *v;
	size_t n, cap;
};

struct kata_cache {
	bool has_root;
	char root[PATH_MAX];
	char sysroot[PATH_MAX];
	int procfd;
	struct timespec settled; /* files whose times are before this may be kept */
	struct table prev, cur;
};

int kata_cache_new(kata_cache **ret)
{
	kata_cache *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->procfd = -1;
	*ret = c;
	return 0;
}

kata_cache *kata_cache_free(kata_cache *c)
{
	if (!c)
		return NULL;
	if (c->procfd >= 0)
		close(c->procfd);
	free(c->prev.v);
	free(c->cur.v);
	free(c);
	return NULL;
}

bool kata_cache_root(const kata_cache *c, const char *root, int *procfd, const char **sysroot)
{
	if (!c->has_root || strcmp(c->root, root) != 0)
		return false;
	*procfd = c->procfd;
	*sysroot = c->sysroot;
	return true;
}

int kata_cache_set_root(kata_cache *c, const char *root, int procfd, const char *sysroot)
{
	size_t rl = strlen(root), sl = strlen(sysroot);
	if (rl >= sizeof(c->root) || sl >= sizeof(c->sysroot))
		return -ENAMETOOLONG;
	if (c->procfd >= 0 && c->procfd != procfd)
		close(c->procfd);
	c->procfd = procfd;
	memcpy(c->root, root, rl + 1);
	memcpy(c->sysroot, sysroot, sl + 1);
	c->has_root = true;
	return 0;
}

void kata_cache_begin(kata_cache *c)
{
	clock_gettime(CLOCK_REALTIME, &c->settled);
	c->settled.tv_sec -= KATA_CACHE_SETTLE_SEC;
	c->cur.n = 0;
}

static int cmp_ts(const struct timespec *a, const struct timespec *b)
{
	if (a->tv_sec != b->tv_sec)
		return a->tv_sec < b->tv_sec ? -1 : 1;
	return (a->tv_nsec > b->tv_nsec) - (a->tv_nsec < b->tv_nsec);
}

/* The lookup key: device, inode, kind. */
static int cmp_key(const struct entry *a, const struct entry *b)
{
	if (a->dev != b->dev)
		return a->dev < b->dev ? -1 : 1;
	if (a->ino != b->ino)
		return a->ino < b->ino ? -1 : 1;
	return (a->kind > b->kind) - (a->kind < b->kind);
}

static int cmp_entry(const void *a, const void *b)
{
	return cmp_key(a, b);
}

static struct entry entry_of(const struct stat *st, enum kata_cache_kind kind, uint64_t value)
{
	return (struct entry){ .dev = st->st_dev, .ino = st->st_ino, .kind = (int)kind, .size = st->st_size,
			       .mtim = st->st_mtim, .ctim = st->st_ctim, .value = value };
}

static void keep(kata_cache *c, const struct entry *e)
{
	struct table *t = &c->cur;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct entry *v = reallocarray(t->v, cap, sizeof(*v));
		if (!v)
			return; /* a miss next time */
		t->v = v;
		t->cap = cap;
	}
	t->v[t->n++] = *e;
}

bool kata_cache_get(kata_cache *c, const struct stat *st, enum kata_cache_kind kind, uint64_t *ret)
{
	struct entry want = entry_of(st, kind, 0);
	if (!c->prev.n)
		return false;
	const struct entry *e = bsearch(&want, c->prev.v, c->prev.n, sizeof(want), cmp_entry);
	if (!e || e->size != want.size || cmp_ts(&e->mtim, &want.mtim) != 0 ||
	    cmp_ts(&e->ctim, &want.ctim) != 0)
		return false;
	keep(c, e);
	*ret = e->value;
	return true;
}

void kata_cache_put(kata_cache *c, const struct stat *st, enum kata_cache_kind kind, uint64_t value)
{
	if (cmp_ts(&st->st_mtim, &c->settled) >= 0)
		return;
	struct entry e = entry_of(st, kind, value);
	keep(c, &e);
}

void kata_cache_end(kata_cache *c)
{
	struct table t = c->prev;
	if (c->cur.n > 1)
		qsort(c->cur.v, c->cur.n, sizeof(*c->cur.v), cmp_entry);
	c->prev = c->cur;
	c->cur = t;
	c->cur.n = 0;
}
