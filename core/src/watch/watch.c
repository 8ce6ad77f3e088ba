/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch: two inotify sources at most, dir_src on the directory and anc_src on an ancestor
 * (the deepest existing one while the directory is missing, or the parent with watch_parent),
 * plus the backstop timer. Any change of the directory's own identity drops both sources and
 * arms again from scratch before the callback runs: the callback is the last use of the watch
 * in every handler, so it may free it.
 */
#include "dp/watch.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"

#define DIR_GONE (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)
#define DIR_SELF (IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
#define ANC_MASK (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | DIR_SELF)

struct dp_watch {
	dp_loop *loop;
	char *dir;  /* absolute, no trailing '/' */
	char *name; /* NULL: every entry */
	uint32_t mask;
	bool watch_parent;
	uint64_t backstop, unwatched;
	uint64_t period; /* the timer's current interval, 0 while disarmed */
	bool missing;    /* dir does not exist (or is no directory): anc_src waits for it */
	dp_watch_fn fn;
	void *userdata;
	dp_source *dir_src;
	dp_source *anc_src;
	char anc_child[NAME_MAX + 1]; /* the entry of the watched ancestor on the way to dir */
	dp_source *timer;
	bool failing; /* an inotify source could not be added (said once, at warn) */
};

/* Why inotify refused, in the operator's terms. */
static const char *refused_why(int r)
{
	switch (r) {
	case -EMFILE:
		return "out of inotify instances or file descriptors (fs.inotify.max_user_instances, the fd limit)";
	case -ENOSPC:
		return "out of inotify watches (fs.inotify.max_user_watches)";
	case -ENOMEM:
		return "out of memory";
	default:
		return NULL;
	}
}

/* A source could not be added (r < 0, not the directory's absence): said once per episode at
 * warn, as changes there are now seen only by the periodic checks; r == 0 after that: watched
 * again, said at info. */
static void watch_result(dp_watch *w, int r)
{
	const char *why = refused_why(r);

	if (r < 0 && !w->failing) {
		w->failing = true;
		if (why)
			dp_warn("cannot watch a directory: its changes are seen by periodic checks only",
				"dir=%s error=%s reason=\"%s\"", w->dir, dp_errname(r), why);
		else
			dp_warn("cannot watch a directory: its changes are seen by periodic checks only",
				"dir=%s error=%s", w->dir, dp_errname(r));
	} else if (r < 0) {
		dp_debug("watch: still cannot watch", "dir=%s error=%s", w->dir, dp_errname(r));
	} else if (w->failing) {
		w->failing = false;
		dp_info("watching a directory again", "dir=%s", w->dir);
	}
}

static void update_timer(dp_watch *w)
{
	uint64_t p = w->dir_src || (w->missing && w->anc_src) ? w->backstop : w->unwatched;
	int r;

	if (p == w->period)
		return;
	r = p ? dp_timer_set_coarse(w->timer, p, p) : dp_timer_set(w->timer, 0, 0);
	if (r == 0)
		w->period = p;
	else
		dp_debug("watch: cannot arm the backstop", "dir=%s error=%s", w->dir, dp_errname(r));
}

static void drop_sources(dp_watch *w)
{
	w->dir_src = dp_source_free(w->dir_src);
	w->anc_src = dp_source_free(w->anc_src);
}

static void rearm_call(dp_watch *w, dp_watch_kind kind)
{
	drop_sources(w);
	dp_watch_rearm(w);
	w->fn(w, kind, NULL, 0, w->userdata);
}

static int on_dir_event(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	dp_watch *w = userdata;

	if (ev->mask & IN_Q_OVERFLOW)
		w->fn(w, DP_WATCH_OVERFLOW, NULL, 0, w->userdata);
	else if (ev->mask & DIR_GONE)
		rearm_call(w, DP_WATCH_DIR);
	else if (ev->len && (ev->mask & w->mask) && (!w->name || strcmp(ev->name, w->name) == 0))
		w->fn(w, DP_WATCH_ENTRY, ev->name, ev->mask & (w->mask | IN_ISDIR), w->userdata);
	return 0;
}

static int on_anc_event(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	dp_watch *w = userdata;

	if (ev->mask & IN_Q_OVERFLOW)
		rearm_call(w, DP_WATCH_OVERFLOW);
	else if ((ev->mask & DIR_GONE) || (ev->len && strcmp(ev->name, w->anc_child) == 0))
		rearm_call(w, DP_WATCH_DIR);
	return 0;
}

/* Watch the deepest existing ancestor of path for its next component (the parent of dir first);
 * 0, or why it could not be added. */
static int arm_ancestor(dp_watch *w, const char *path)
{
	char p[PATH_MAX];
	char *slash;
	size_t n = strlen(path);
	int r = -ENOENT;

	if (n >= sizeof(p))
		return -ENAMETOOLONG;
	memcpy(p, path, n + 1);
	while ((r == -ENOENT || r == -ENOTDIR) && (slash = strrchr(p, '/')) && slash[1]) {
		n = strlen(slash + 1);
		if (n >= sizeof(w->anc_child))
			return -ENAMETOOLONG;
		memcpy(w->anc_child, slash + 1, n + 1);
		if (slash == p)
			slash++; /* the root keeps its '/' */
		*slash = '\0';
		r = dp_inotify_add(w->loop, p, ANC_MASK, on_anc_event, w, &w->anc_src);
	}
	return r;
}

bool dp_watch_rearm(dp_watch *w)
{
	if (!w)
		return false;
	int err = 0;

	if (!w->dir_src) {
		int r = dp_inotify_add(w->loop, w->dir, w->mask | DIR_SELF, on_dir_event, w, &w->dir_src);
		if (r == 0 && w->missing)
			w->anc_src = dp_source_free(w->anc_src); /* was on the way; re-added below */
		w->missing = r == -ENOENT || r == -ENOTDIR;
		if (!w->missing)
			err = r;
	}
	if (!w->anc_src && (w->missing || w->watch_parent)) {
		int r = arm_ancestor(w, w->dir);
		if (!err)
			err = r;
	}
	watch_result(w, err);
	update_timer(w);
	return w->dir_src != NULL;
}

bool dp_watch_dir_watched(const dp_watch *w)
{
	return w && w->dir_src;
}

void dp_watch_set_backstop(dp_watch *w, uint64_t backstop_usec, uint64_t unwatched_usec)
{
	if (!w)
		return;
	w->backstop = backstop_usec;
	w->unwatched = unwatched_usec;
	update_timer(w);
}

static int on_timer(dp_source *s, void *userdata)
{
	dp_watch *w = userdata;

	dp_watch_rearm(w);
	w->fn(w, DP_WATCH_BACKSTOP, NULL, 0, w->userdata);
	return 0;
}

int dp_watch_new(dp_loop *l, const dp_watch_config *cfg, dp_watch **ret)
{
	_cleanup_(dp_watch_freep) dp_watch *w = NULL;
	size_t n;
	int r;

	if (!l || !cfg || !cfg->dir || cfg->dir[0] != '/' || !cfg->fn || !ret ||
	    (cfg->mask & ~(uint32_t)DP_WATCH_ENTRY_EVENTS))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	n = strlen(cfg->dir);
	while (n > 1 && cfg->dir[n - 1] == '/')
		n--;
	w->dir = strndup(cfg->dir, n);
	w->name = cfg->name ? strdup(cfg->name) : NULL;
	if (!w->dir || (cfg->name && !w->name))
		/* w is freed by its _cleanup_ attribute, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	w->loop = l;
	w->mask = cfg->mask;
	w->watch_parent = cfg->watch_parent;
	w->backstop = cfg->backstop_usec;
	w->unwatched = cfg->unwatched_usec;
	w->fn = cfg->fn;
	w->userdata = cfg->userdata;
	r = dp_timer_add_disarmed(l, on_timer, w, &w->timer); /* armed by update_timer */
	if (r < 0)
		return r;
	dp_watch_rearm(w);
	*ret = TAKE_PTR(w);
	return 0;
}

dp_watch *dp_watch_free(dp_watch *w)
{
	if (!w)
		return NULL;
	drop_sources(w);
	dp_source_free(w->timer);
	free(w->dir);
	free(w->name);
	free(w);
	return NULL;
}
