/* SPDX-License-Identifier: Apache-2.0 */
/* watch: notices when the node's VFIO device set differs from the one fixed at start. */
#include "watch.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "dp/paths.h"
#include "dp/watch.h"
#include "backend.h"

struct kata_watch {
	dp_loop *loop;
	struct kata_scan_opts opts;
	const struct kata_scan *initial;
	kata_changed_fn changed;
	void *userdata;
	kata_grow_fn grow;
	void *grow_userdata;
	kata_removed_fn removed;
	void *removed_userdata;
	dp_watch *watch; /* kata_backend_dir(), with the periodic rescan as its backstop */
	dp_watch *cdevs; /* VFIO_BACKEND=auto that chose legacy: /dev/vfio/devices, for cdevs */
	dp_source *kick; /* one-shot: the rescan events ask for (kick_event) */
	uint64_t period;
	uint64_t rescanned; /* when the last rescan ended */
	bool kicked;        /* the kick is armed */
	bool fired;
	kata_cache *cache; /* what each rescan leaves to the next */
};

/* A change, or events lost: rescan after the batch, or, when the last rescan ended less than
 * KATA_RESCAN_GAP_USEC ago, that long after it. One armed kick answers every event until it
 * fires: a flood of events (a node recreated in a loop) costs a rescan per gap, not one per
 * turn of the loop, and the first event after a quiet spell is answered at once. */
static void kick_event(kata_watch *w)
{
	uint64_t now = dp_now_usec(), next = w->rescanned + KATA_RESCAN_GAP_USEC;
	if (w->kicked)
		return;
	int r = w->rescanned && now < next ? dp_timer_set(w->kick, next - now, 0)
					   : dp_timer_set_asap(w->kick);
	if (r < 0)
		dp_debug("cannot schedule the rescan", "error=%s", dp_errname(r));
	w->kicked = r == 0;
}

static void on_watch(dp_watch *dw, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	kata_watch *w = userdata;

	if (kind == DP_WATCH_BACKSTOP)
		(void)kata_watch_rescan(w);
	else
		kick_event(w);
}

/* auto chose legacy for want of cdevs: cdevs now are a change (auto picks iommufd at restart);
 * a stray file or directory there is not. */
static bool cdevs_appeared(kata_watch *w)
{
	_cleanup_(dp_buf_done) dp_buf names = { 0 };
	if (!w->cdevs)
		return false;
	(void)dp_watch_rearm(w->cdevs);
	if (kata_backend_cdevs(&names) <= 0)
		return false;
	w->fired = true;
	w->changed("", names.oom ? KATA_DEV_DIR : names.data, "", w->userdata);
	return true;
}

/* The scan and its comparison with the initial set (kata_watch_rescan). */
static int rescan(kata_watch *w)
{
	struct kata_scan now;
	char err[512];
	_cleanup_(dp_buf_done) dp_buf removed = { 0 }, added = { 0 }, changed = { 0 };

	(void)dp_watch_rearm(w->watch);
	if (w->fired || cdevs_appeared(w))
		return w->fired;
	int r = kata_scan_run(&w->opts, &now, err, sizeof(err));
	if (r < 0) {
		dp_debug("rescan failed", "error=%s", dp_errname(r));
		return r;
	}
	r = kata_scan_diff(w->initial, &now, &removed, &added, &changed);
	if (r > 0 && w->grow && !removed.len && !changed.len && w->grow(&now, w->grow_userdata))
		return r; /* now is the caller's */
	kata_scan_done(&now);
	if (r < 0)
		return r;
	if (w->removed && !added.len && !changed.len) {
		/* the IDs stay: their checks fail, or pass again (a device back, a node directory made
		 * again, the container node gone or back: nothing the set compares) */
		w->removed(removed.len ? removed.data : "", w->removed_userdata);
		return r;
	}
	if (r == 0)
		return 0;
	w->fired = true;
	w->changed(removed.len ? removed.data : "", added.len ? added.data : "",
		   changed.len ? changed.data : "", w->userdata);
	return r;
}

int kata_watch_rescan(kata_watch *w)
{
	int r = rescan(w);
	w->rescanned = dp_now_usec();
	return r;
}

static int on_timer(dp_source *s, void *userdata)
{
	kata_watch *w = userdata;
	w->kicked = false;
	(void)kata_watch_rescan(w);
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
	char dir[PATH_MAX];
	uint64_t p = period_usec ? period_usec : KATA_RESCAN_USEC;
	w->period = p;
	/* coarse: the periodic rescan shares the backstops' wake-ups */
	dp_watch_config cfg = { .dir = dir,
				.mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB,
				.backstop_usec = p, .unwatched_usec = p, .fn = on_watch, .userdata = w };
	r = dp_path(dir, sizeof(dir), kata_backend_dir(opts->backend));
	/* No rescan at start: the caller scans after this (watch.h), so there is no gap to close. */
	if (r < 0 || (r = dp_watch_new(loop, &cfg, &w->watch)) < 0 ||
	    (r = dp_timer_add_disarmed(loop, on_timer, w, &w->kick)) < 0)
		return r;
	*ret = TAKE_PTR(w);
	return 0;
}

int kata_watch_add_cdevs(kata_watch *w)
{
	char dir[PATH_MAX];
	dp_watch_config cfg = { .dir = dir,
				.mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB,
				.backstop_usec = w->period, .unwatched_usec = w->period, .fn = on_watch, .userdata = w };
	int r = dp_path(dir, sizeof(dir), KATA_DEV_DIR);
	return r < 0 ? r : dp_watch_new(w->loop, &cfg, &w->cdevs);
}

void kata_watch_set_removed(kata_watch *w, kata_removed_fn removed, void *userdata)
{
	w->removed = removed;
	w->removed_userdata = userdata;
}

void kata_watch_set_grow(kata_watch *w, kata_grow_fn grow, void *userdata)
{
	w->grow = grow;
	w->grow_userdata = userdata;
}

kata_watch *kata_watch_free(kata_watch *w)
{
	if (!w)
		return NULL;
	dp_watch_free(w->watch);
	dp_watch_free(w->cdevs);
	dp_source_free(w->kick);
	kata_cache_free(w->cache);
	free(w);
	return NULL;
}
