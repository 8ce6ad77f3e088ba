/* SPDX-License-Identifier: Apache-2.0 */
#include "watch.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "dp/paths.h"

#define MASK                                                                                       \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF |        \
	 IN_MOVE_SELF | IN_ONLYDIR)

/* Watched from the deepest that exists; a parent is watched only for its child on the way. */
static const struct {
	const char *dir;
	const char *child; /* the entry of dir that leads to KATA_DEV_DIR */
} chain[] = {
	{ KATA_DEV_DIR, NULL },
	{ "/dev/vfio", "devices" },
	{ "/dev", "vfio" },
};

struct kata_watch {
	dp_loop *loop;
	struct kata_scan_opts opts;
	const struct kata_scan *initial;
	kata_changed_fn changed;
	void *userdata;
	dp_source *inotify;
	size_t level; /* index in chain[] of the watched directory */
	dp_source *kick; /* one-shot: rescan after the current batch of events */
	dp_source *period;
	bool fired;
	kata_cache *cache; /* what each rescan leaves to the next */
};

static int on_event(dp_source *s, const struct inotify_event *ev, void *userdata);

static void arm(kata_watch *w)
{
	char path[PATH_MAX];
	for (size_t lvl = 0; lvl < DP_ELEMENTSOF(chain); lvl++) {
		dp_source *s;
		if (w->inotify && w->level <= lvl)
			return;
		if (dp_path(path, sizeof(path), chain[lvl].dir) < 0)
			return;
		if (dp_inotify_add(w->loop, path, MASK, on_event, w, &s) == 0) {
			dp_source_free(w->inotify);
			w->inotify = s;
			w->level = lvl;
			dp_debug("watching for VFIO device changes", "dir=%s", chain[lvl].dir);
			return;
		}
	}
}

static int on_event(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	kata_watch *w = userdata;
	bool relevant = w->level == 0 || (ev->len && strcmp(ev->name, chain[w->level].child) == 0);
	if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
		/* The watched directory went away or was replaced: the rescan re-arms. */
		w->inotify = dp_source_free(w->inotify);
		relevant = true;
	}
	if (relevant)
		(void)dp_timer_set_asap(w->kick);
	return 0;
}

int kata_watch_rescan(kata_watch *w)
{
	struct kata_scan now;
	char err[512];
	_cleanup_(dp_buf_done) dp_buf removed = { 0 }, added = { 0 }, changed = { 0 };

	arm(w);
	if (w->fired)
		return 0;
	int r = kata_scan_run(&w->opts, &now, err, sizeof(err));
	if (r < 0) {
		dp_debug("rescan failed", "error=%d", r);
		return r;
	}
	r = kata_scan_diff(w->initial, &now, &removed, &added, &changed);
	kata_scan_done(&now);
	if (r <= 0)
		return r;
	w->fired = true;
	w->changed(removed.len ? removed.data : "", added.len ? added.data : "",
		   changed.len ? changed.data : "", w->userdata);
	return r;
}

static int on_timer(dp_source *s, void *userdata)
{
	(void)kata_watch_rescan(userdata);
	return 0;
}

int kata_watch_new(dp_loop *loop, const struct kata_scan_opts *opts, const struct kata_scan *initial,
		   uint64_t period_usec, kata_changed_fn changed, void *userdata, kata_watch **ret)
{
	if (!loop || !opts || !initial || !changed || !ret)
		return -EINVAL;
	_cleanup_(kata_watch_freep) kata_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->loop = loop;
	w->opts = *opts;
	w->opts.verbose = false;
	int r = kata_cache_new(&w->cache);
	if (r < 0)
		return r;
	w->opts.cache = w->cache;
	w->initial = initial;
	w->changed = changed;
	w->userdata = userdata;
	uint64_t p = period_usec ? period_usec : KATA_RESCAN_USEC;
	r = dp_timer_add(loop, p, p, on_timer, w, &w->period);
	if (r < 0 || (r = dp_timer_set_coarse(w->period, p, p)) < 0) /* shares the backstops' wake-ups */
		return r;
	/* No rescan at start: the caller scans after this (watch.h), so there is no gap to close. */
	arm(w);
	r = dp_timer_add(loop, 0, 0, on_timer, w, &w->kick);
	if (r < 0 || (r = dp_timer_set(w->kick, 0, 0)) < 0)
		return r;
	*ret = TAKE_PTR(w);
	return 0;
}

kata_watch *kata_watch_free(kata_watch *w)
{
	if (!w)
		return NULL;
	dp_source_free(w->inotify);
	dp_source_free(w->kick);
	dp_source_free(w->period);
	kata_cache_free(w->cache);
	free(w);
	return NULL;
}
