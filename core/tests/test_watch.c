/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: a real directory under /tmp on a real loop. Entries created, deleted and replaced;
 * the name filter; the directory removed and created again, absent at start (three levels
 * deep), replaced by a rename; an inotify queue overflow; the backstop timer; a callback that
 * frees its watch; inotify refused (said once, and when watched again).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/log.h"
#include "dp/loop.h"
#include "dp/watch.h"
#include "dp_test.h"

#define BOUND_USEC (5 * DP_USEC_PER_SEC)
#define MAX_EVENTS 64

struct rec {
	dp_watch_kind kind;
	char name[NAME_MAX + 1];
	uint32_t mask;
};

struct ctx {
	dp_loop *loop;
	dp_watch *w;
	char *root;
	char dir[PATH_MAX];
	struct rec ev[MAX_EVENTS];
	size_t n;
	bool overflow;
	bool free_on_event;
};

static void on_watch(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	struct ctx *c = userdata;

	if (kind == DP_WATCH_OVERFLOW)
		c->overflow = true;
	if (c->free_on_event)
		c->w = dp_watch_free(w);
	if (c->n == MAX_EVENTS)
		return;
	c->ev[c->n].kind = kind;
	snprintf(c->ev[c->n].name, sizeof(c->ev[c->n].name), "%s", name ? name : "");
	c->ev[c->n].mask = mask;
	c->n++;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p) < 0 ? -1 : 0;
}

/* root/rel; two results at a time (for rename()). */
static char *path(struct ctx *c, const char *rel)
{
	static char bufs[2][2 * PATH_MAX];
	static unsigned next;
	char *buf = bufs[next++ % 2];

	snprintf(buf, sizeof(bufs[0]), "%s/%s", c->root, rel);
	return buf;
}

static void touch(const char *p)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(close(fd), 0);
}

static int setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	c->root = strdup("/tmp/test_watch.XXXXXX");
	assert_non_null(c->root);
	assert_non_null(mkdtemp(c->root));
	snprintf(c->dir, sizeof(c->dir), "%s/d", c->root);
	assert_int_equal(dp_loop_new(&c->loop), 0);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct ctx *c = *state;

	/* the watch before its loop, the tree last */
	dp_loop_free((dp_watch_free(c->w), c->loop));
	assert_int_equal(nftw(c->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(c->root);
	free(c);
	return 0;
}

static void start(struct ctx *c, const char *name, uint32_t mask, bool parent, uint64_t backstop)
{
	dp_watch_config cfg = { .dir = c->dir, .name = name, .mask = mask, .watch_parent = parent,
				.backstop_usec = backstop, .unwatched_usec = backstop,
				.fn = on_watch, .userdata = c };
	assert_int_equal(dp_watch_new(c->loop, &cfg, &c->w), 0);
}

/* Run the loop until an event of kind (with name, when not NULL) was recorded after index
 * from; returns its index. Fails the test after BOUND_USEC. */
static size_t wait_for(struct ctx *c, size_t from, dp_watch_kind kind, const char *name)
{
	uint64_t end = dp_now_usec() + BOUND_USEC;

	for (;;) {
		for (size_t i = from; i < c->n; i++)
			if (c->ev[i].kind == kind && (!name || strcmp(c->ev[i].name, name) == 0))
				return i;
		assert_true(dp_now_usec() < end);
		assert_true(dp_loop_run_once(c->loop, 100) >= 0);
	}
}

/* Dispatch what is pending now (the events of the steps so far). */
static void drain(struct ctx *c)
{
	while (dp_loop_run_once(c->loop, 50) > 0)
		;
}

static void test_entries_filtered(void **state)
{
	struct ctx *c = *state;
	size_t i;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	start(c, "spec.json", IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_CLOSE_WRITE, false, 0);
	assert_true(dp_watch_dir_watched(c->w));
	touch(path(c, "d/other"));
	touch(path(c, "d/spec.json"));
	i = wait_for(c, 0, DP_WATCH_ENTRY, "spec.json");
	assert_true(c->ev[i].mask & IN_CREATE);
	/* replaced by a rename, as an atomic writer does */
	touch(path(c, "d/spec.json.tmp"));
	assert_int_equal(rename(path(c, "d/spec.json.tmp"), path(c, "d/spec.json")), 0);
	i = wait_for(c, i + 1, DP_WATCH_ENTRY, "spec.json");
	while (!(c->ev[i].mask & IN_MOVED_TO))
		i = wait_for(c, i + 1, DP_WATCH_ENTRY, "spec.json");
	assert_int_equal(unlink(path(c, "d/spec.json")), 0);
	i = wait_for(c, i + 1, DP_WATCH_ENTRY, "spec.json");
	while (!(c->ev[i].mask & IN_DELETE))
		i = wait_for(c, i + 1, DP_WATCH_ENTRY, "spec.json");
	drain(c);
	const uint32_t asked = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_CLOSE_WRITE;
	for (size_t k = 0; k < c->n; k++) {
		assert_int_equal(c->ev[k].kind, DP_WATCH_ENTRY);
		assert_string_equal(c->ev[k].name, "spec.json"); /* never other, nor the temp file */
		assert_int_equal(c->ev[k].mask & ~asked, 0);
	}
}

static void test_entries_all(void **state)
{
	struct ctx *c = *state;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	start(c, NULL, IN_CREATE | IN_DELETE, false, 0);
	touch(path(c, "d/a"));
	(void)wait_for(c, 0, DP_WATCH_ENTRY, "a");
	assert_int_equal(mkdir(path(c, "d/sub"), 0755), 0);
	size_t i = wait_for(c, 0, DP_WATCH_ENTRY, "sub");
	assert_true(c->ev[i].mask & IN_ISDIR);
	assert_int_equal(unlink(path(c, "d/a")), 0);
	i = wait_for(c, i + 1, DP_WATCH_ENTRY, "a");
	assert_true(c->ev[i].mask & IN_DELETE);
}

static void test_dir_removed_recreated(void **state)
{
	struct ctx *c = *state;
	size_t i;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	start(c, "x", IN_CREATE, false, 0);
	assert_int_equal(rmdir(c->dir), 0);
	i = wait_for(c, 0, DP_WATCH_DIR, NULL);
	assert_false(dp_watch_dir_watched(c->w));
	assert_int_equal(mkdir(c->dir, 0755), 0);
	i = wait_for(c, i + 1, DP_WATCH_DIR, NULL);
	assert_true(dp_watch_dir_watched(c->w));
	touch(path(c, "d/x"));
	(void)wait_for(c, i + 1, DP_WATCH_ENTRY, "x");
	/* moved away and back: the same again */
	assert_int_equal(rename(c->dir, path(c, "moved")), 0);
	i = wait_for(c, c->n, DP_WATCH_DIR, NULL);
	assert_int_equal(rename(path(c, "moved"), c->dir), 0);
	i = wait_for(c, i + 1, DP_WATCH_DIR, NULL);
	drain(c);
	assert_true(dp_watch_dir_watched(c->w));
	assert_int_equal(unlink(path(c, "d/x")), 0);
	touch(path(c, "d/x"));
	(void)wait_for(c, c->n, DP_WATCH_ENTRY, "x");
}

static void test_dir_absent_at_start(void **state)
{
	struct ctx *c = *state;
	size_t i = 0;

	snprintf(c->dir, sizeof(c->dir), "%s/a/b/c", c->root);
	start(c, "x", IN_CREATE, false, 0);
	assert_false(dp_watch_dir_watched(c->w));
	assert_int_equal(mkdir(path(c, "a"), 0755), 0);
	i = wait_for(c, i, DP_WATCH_DIR, NULL) + 1;
	assert_int_equal(mkdir(path(c, "a/b"), 0755), 0);
	i = wait_for(c, i, DP_WATCH_DIR, NULL) + 1;
	assert_false(dp_watch_dir_watched(c->w));
	assert_int_equal(mkdir(path(c, "a/b/c"), 0755), 0);
	i = wait_for(c, i, DP_WATCH_DIR, NULL) + 1;
	assert_true(dp_watch_dir_watched(c->w));
	touch(path(c, "a/b/c/x"));
	(void)wait_for(c, i, DP_WATCH_ENTRY, "x");
}

/* A regular file where the directory should be: waited for like a missing one. */
static void test_dir_not_a_directory(void **state)
{
	struct ctx *c = *state;

	touch(c->dir);
	start(c, "x", IN_CREATE, false, 0);
	assert_false(dp_watch_dir_watched(c->w));
	assert_int_equal(unlink(c->dir), 0);
	assert_int_equal(mkdir(c->dir, 0755), 0);
	size_t i = wait_for(c, 0, DP_WATCH_DIR, NULL);
	drain(c);
	assert_true(dp_watch_dir_watched(c->w));
	touch(path(c, "d/x"));
	(void)wait_for(c, i + 1, DP_WATCH_ENTRY, "x");
}

/* With watch_parent, a directory renamed over the watched one is seen from the parent, and
 * the new directory is the one watched afterwards. */
static void test_dir_replaced(void **state)
{
	struct ctx *c = *state;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	assert_int_equal(mkdir(path(c, "new"), 0755), 0);
	start(c, "x", IN_CREATE, true, 0);
	assert_int_equal(rename(path(c, "new"), c->dir), 0);
	size_t i = wait_for(c, 0, DP_WATCH_DIR, NULL);
	drain(c);
	assert_true(dp_watch_dir_watched(c->w));
	/* entries of other names in the parent are not reported */
	touch(path(c, "unrelated"));
	touch(path(c, "d/x"));
	i = wait_for(c, i + 1, DP_WATCH_ENTRY, "x");
	drain(c);
	assert_int_equal(c->n, i + 1);
}

static void test_overflow(void **state)
{
	struct ctx *c = *state;
	unsigned long max = 16384;
	FILE *f = fopen("/proc/sys/fs/inotify/max_queued_events", "re");

	if (f) {
		assert_int_equal(fscanf(f, "%lu", &max), 1);
		fclose(f);
	}
	assert_int_equal(mkdir(c->dir, 0755), 0);
	start(c, NULL, IN_CREATE | IN_DELETE, false, 0);
	/* more events than the queue holds, without dispatching them */
	for (unsigned long k = 0; k < max / 2 + 16; k++) {
		touch(path(c, "d/f"));
		assert_int_equal(unlink(path(c, "d/f")), 0);
	}
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (!c->overflow) {
		assert_true(dp_now_usec() < end);
		assert_true(dp_loop_run_once(c->loop, 100) >= 0);
	}
	/* the watch goes on */
	drain(c);
	c->n = 0;
	touch(path(c, "d/after"));
	(void)wait_for(c, 0, DP_WATCH_ENTRY, "after");
}

/* ---- a flood in the directory ---- */

#define FLOOD_FILES 1000   /* events queued at any time: each one handled makes the next */
#define FLOOD_LIMIT 20000 /* then the flood stops: the bound of a turn that would never end */

struct flood {
	struct ctx *c;
	dp_source *kick;
	int entries;         /* DP_WATCH_ENTRY callbacks */
	int kicks;           /* the kick's callbacks */
	int entries_at_kick; /* entries seen when the first kick ran */
};

/* As kata's watch: each entry event asks for a rescan after the batch (the kick, "as soon as
 * possible"), and each one handled makes the next (a created entry removed, a removed one
 * created again, as a loop recreating a node does) until FLOOD_LIMIT. */
static void on_flood(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	struct flood *f = userdata;
	char rel[NAME_MAX + 8];

	assert_int_equal(kind, DP_WATCH_ENTRY);
	assert_int_equal(dp_timer_set_asap(f->kick), 0);
	if (++f->entries > FLOOD_LIMIT)
		return;
	snprintf(rel, sizeof(rel), "d/%s", name);
	if (mask & IN_CREATE)
		assert_int_equal(unlink(path(f->c, rel)), 0);
	else
		touch(path(f->c, rel));
}

static int on_kick(dp_source *s, void *userdata)
{
	struct flood *f = userdata;
	if (f->kicks++ == 0)
		f->entries_at_kick = f->entries;
	return 0;
}

/* The kick runs while the flood goes on, at most once per turn: each turn hands the watch at
 * most one buffer of events. Before, the first turn read until the queue was empty, which the
 * flood never let happen (here: until FLOOD_LIMIT), and the kick ran only after it. */
static void test_flood(void **state)
{
	struct ctx *c = *state;
	struct flood f = { .c = c };
	dp_watch_config cfg = { .dir = c->dir, .mask = IN_CREATE | IN_DELETE, .fn = on_flood,
				.userdata = &f };
	char rel[16];
	int turns = 0;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	assert_int_equal(dp_timer_add_disarmed(c->loop, on_kick, &f, &f.kick), 0);
	assert_int_equal(dp_watch_new(c->loop, &cfg, &c->w), 0);
	for (int i = 0; i < FLOOD_FILES; i++) {
		snprintf(rel, sizeof(rel), "d/f%04d", i);
		touch(path(c, rel));
	}
	uint64_t end = dp_now_usec() + BOUND_USEC;
	while (f.kicks < 3 && !(f.kicks > 0 && f.entries >= FLOOD_LIMIT)) {
		assert_true(dp_now_usec() < end);
		assert_true(dp_loop_run_once(c->loop, 100) >= 0);
		turns++;
	}
	assert_in_range(f.entries_at_kick, 1, FLOOD_LIMIT - 1);
	assert_int_equal(f.kicks, 3);
	assert_true(f.kicks <= turns);
	c->w = dp_watch_free(c->w);
	dp_source_free(f.kick);
}

static void test_backstop(void **state)
{
	struct ctx *c = *state;
	size_t i;

	/* below the grid the interval is exact; the directory is missing: the backstop re-arms */
	snprintf(c->dir, sizeof(c->dir), "%s/gone/d", c->root);
	start(c, NULL, IN_CREATE, false, 20 * DP_USEC_PER_MSEC);
	i = wait_for(c, 0, DP_WATCH_BACKSTOP, NULL);
	i = wait_for(c, i + 1, DP_WATCH_BACKSTOP, NULL);
	/* off: no more backstop events */
	dp_watch_set_backstop(c->w, 0, 0);
	drain(c);
	size_t n = c->n;
	assert_int_equal(dp_loop_run_once(c->loop, 100), 0);
	assert_int_equal(c->n, n);
	/* on again */
	dp_watch_set_backstop(c->w, 10 * DP_USEC_PER_MSEC, 0);
	(void)wait_for(c, n, DP_WATCH_BACKSTOP, NULL);
}

static void test_free_in_callback(void **state)
{
	struct ctx *c = *state;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	start(c, NULL, IN_CREATE, true, 0);
	c->free_on_event = true;
	touch(path(c, "d/a"));
	touch(path(c, "d/b"));
	(void)wait_for(c, 0, DP_WATCH_ENTRY, "a");
	assert_null(c->w);
	drain(c);
	assert_int_equal(c->n, 1); /* nothing after the free */
}

static void test_invalid(void **state)
{
	struct ctx *c = *state;
	dp_watch *w = NULL;
	dp_watch_config cfg = { .dir = "relative", .fn = on_watch };

	assert_int_equal(dp_watch_new(c->loop, &cfg, &w), -EINVAL);
	cfg.dir = "/tmp";
	cfg.mask = IN_DELETE_SELF;
	assert_int_equal(dp_watch_new(c->loop, &cfg, &w), -EINVAL);
	cfg.mask = IN_CREATE;
	cfg.fn = NULL;
	assert_int_equal(dp_watch_new(c->loop, &cfg, &w), -EINVAL);
	assert_null(w);
	assert_null(dp_watch_free(NULL));
}


/* inotify refused (here no file descriptor is left: EMFILE, as when
 * fs.inotify.max_user_instances runs out): one warning with the reason, none more while it lasts
 * (the unwatched backstop keeps calling), one info line once the directory is watched again,
 * whose events then come as before. */
static void test_refused_said_once(void **state)
{
	struct ctx *c = *state;
	struct dpt_capture cap;
	struct rlimit saved, none;
	size_t i;

	assert_int_equal(mkdir(c->dir, 0755), 0);
	dp_log_set_level(DP_LOG_INFO);
	dpt_capture_start(&cap, STDERR_FILENO);
	start(c, NULL, IN_CREATE, false, 20 * DP_USEC_PER_MSEC);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &saved), 0);
	none = saved;
	none.rlim_cur = 0; /* no new descriptor, the open ones unaffected */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &none), 0);
	assert_int_equal(rmdir(c->dir), 0);
	i = wait_for(c, 0, DP_WATCH_DIR, NULL);
	i = wait_for(c, i + 1, DP_WATCH_BACKSTOP, NULL);
	i = wait_for(c, i + 1, DP_WATCH_BACKSTOP, NULL);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &saved), 0);
	assert_int_equal(mkdir(c->dir, 0755), 0);
	i = wait_for(c, i + 1, DP_WATCH_BACKSTOP, NULL);
	touch(path(c, "d/a"));
	(void)wait_for(c, i + 1, DP_WATCH_ENTRY, "a");
	const char *text = dpt_capture_end(&cap);
	if (dpt_count(text, "msg=\"cannot watch a directory: its changes are seen by periodic checks only\"") != 1 ||
	    !strstr(text, "level=warn") || !strstr(text, "error=EMFILE") ||
	    !strstr(text, "reason=\"out of inotify instances or file descriptors (fs.inotify.max_user_instances, the fd limit)\"") ||
	    dpt_count(text, "level=info msg=\"watching a directory again\"") != 1)
		fail_msg("the log:\n%s", text);
}

/* Each test on its own directory and loop. */
#define WATCH_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		WATCH_TEST(test_entries_filtered),    WATCH_TEST(test_entries_all),
		WATCH_TEST(test_dir_removed_recreated), WATCH_TEST(test_dir_absent_at_start),
		WATCH_TEST(test_dir_not_a_directory), WATCH_TEST(test_dir_replaced),
		WATCH_TEST(test_overflow),            WATCH_TEST(test_backstop),
		WATCH_TEST(test_flood),
		WATCH_TEST(test_free_in_callback),    WATCH_TEST(test_invalid),
		WATCH_TEST(test_refused_said_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
