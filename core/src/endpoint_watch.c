/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_watch: notice kubelet restarts. inotify on the device-plugins directory (kubelet.sock
 * created, our socket deleted or renamed away, the directory itself removed or replaced: then the
 * watch is re-armed), plus a stat backstop that compares the identities of kubelet.sock and of
 * our socket with those seen at registration: every 5 s while the directory has no inotify watch
 * (it could not be added), every 30 s while it has one (then inotify sees every change the stat
 * could; the stat shares the periodic check's wake-up on the loop's grid), and at once when the
 * inotify queue overflowed (events were lost).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/log.h"
#include "endpoint_internal.h"

#define STAT_FALLBACK_USEC (5 * DP_USEC_PER_SEC)
#define STAT_WATCHED_USEC (30 * DP_USEC_PER_SEC)
#define DIR_MASK                                                                                  \
	(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF |     \
	 IN_ONLYDIR)

static bool is_kubelet_sock(const struct inotify_event *ev)
{
	return ev->len && strcmp(ev->name, "kubelet.sock") == 0;
}

static bool is_our_sock(const dp_endpoint *ep, const struct inotify_event *ev)
{
	return ev->len && ep->socket_name[0] && strcmp(ev->name, ep->socket_name) == 0;
}

static int on_stat_timer(dp_source *s, void *userdata);

static int on_dir_event(dp_source *s, const struct inotify_event *ev, void *userdata)
{
	dp_endpoint *ep = userdata;

	if (ev->mask & IN_Q_OVERFLOW)
		return on_stat_timer(ep->stat_timer, ep); /* events were lost: compare now */
	if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
		/* The directory went away or was replaced: watch the new one, start over. */
		ep->dir_watch = dp_source_free(ep->dir_watch);
		dp_endpoint_restart(ep, "device-plugins directory replaced");
		return 0;
	}
	if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && is_kubelet_sock(ev)) {
		dp_endpoint_restart(ep, "kubelet.sock created");
		return 0;
	}
	if ((ev->mask & (IN_DELETE | IN_MOVED_FROM)) && is_our_sock(ep, ev) &&
	    (ep->state == EP_REGISTERED || ep->state == EP_REGISTERING)) {
		dp_endpoint_restart(ep, "plugin socket deleted");
		return 0;
	}
	return 0;
}

/* The stat backstop's interval follows the watch: 5 s without one, 30 s with one. */
static void arm_stat_timer(dp_endpoint *ep)
{
	uint64_t p = ep->dir_watch ? STAT_WATCHED_USEC : STAT_FALLBACK_USEC;
	if (ep->stat_timer && p != ep->stat_period && dp_timer_set_coarse(ep->stat_timer, p, p) == 0)
		ep->stat_period = p;
}

void dp_endpoint_watch_ensure(dp_endpoint *ep)
{
	if (!ep->dir_watch) {
		int r = dp_inotify_add(ep->loop, ep->dir, DIR_MASK, on_dir_event, ep, &ep->dir_watch);
		if (r < 0)
			dp_debug("cannot watch device-plugins directory", "dir=%s error=%d", ep->dir, r);
	}
	arm_stat_timer(ep);
}

void dp_endpoint_watch_remember(dp_endpoint *ep)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
	if (stat(path, &st) == 0) {
		ep->kubelet_ino = st.st_ino;
		ep->kubelet_dev = st.st_dev;
	}
}

static bool same_file(const char *path, ino_t ino, dev_t dev)
{
	struct stat st;
	return lstat(path, &st) == 0 && st.st_ino == ino && st.st_dev == dev;
}

/* The backstop for lost or impossible inotify watches. */
static int on_stat_timer(dp_source *s, void *userdata)
{
	dp_endpoint *ep = userdata;
	char path[PATH_MAX];

	dp_endpoint_watch_ensure(ep);
	if (ep->state == EP_WAIT_KUBELET) {
		snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
		if (access(path, F_OK) == 0)
			dp_endpoint_restart(ep, "kubelet.sock appeared");
		return 0;
	}
	if (ep->state != EP_REGISTERED)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", ep->dir, ep->socket_name);
	if (!same_file(path, ep->socket_ino, ep->socket_dev)) {
		dp_endpoint_restart(ep, "plugin socket gone (stat)");
		return 0;
	}
	snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
	if (!same_file(path, ep->kubelet_ino, ep->kubelet_dev))
		dp_endpoint_restart(ep, "kubelet.sock replaced (stat)");
	return 0;
}

int dp_endpoint_watch_start(dp_endpoint *ep)
{
	/* Coarse (on the loop's grid): the periodic check and the other backstops share its
	 * wake-ups; armed by dp_endpoint_watch_ensure. */
	int r = dp_timer_add(ep->loop, STAT_FALLBACK_USEC, STAT_FALLBACK_USEC, on_stat_timer, ep,
			     &ep->stat_timer);
	if (r < 0)
		return r;
	ep->stat_period = 0;
	dp_endpoint_watch_ensure(ep);
	return 0;
}

void dp_endpoint_watch_stop(dp_endpoint *ep)
{
	ep->dir_watch = dp_source_free(ep->dir_watch);
	ep->stat_timer = dp_source_free(ep->stat_timer);
	ep->stat_period = 0;
}
