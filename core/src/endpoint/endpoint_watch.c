/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_watch: notice kubelet restarts. The device-plugins directory is watched (dp_watch):
 * kubelet.sock created, our socket deleted or renamed away, the directory itself removed,
 * replaced or created (the watch re-arms itself); plus a stat backstop that compares the
 * identities of kubelet.sock and of our socket with those seen at registration: every 5 s while
 * inotify cannot watch (no watch could be added), every 30 s while it can (then inotify sees
 * every change the stat could; the stat shares the periodic check's wake-up on the loop's
 * grid), and at once when the inotify queue overflowed (events were lost).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "dp/log.h"
#include "endpoint_internal.h"

#define STAT_FALLBACK_USEC (5 * DP_USEC_PER_SEC)
#define STAT_WATCHED_USEC (30 * DP_USEC_PER_SEC)

static void stat_compare(dp_endpoint *ep);

/*
 * kubelet.sock created (or renamed in). An event read after our Register was sent to that very
 * file (same device, inode and ctime) is no news: the kubelet restart that created it is the one
 * we are registering with (its other signs, our stream ended or our socket deleted, came first).
 */
void dp_endpoint_watch_kubelet_created(dp_endpoint *ep)
{
	if ((ep->state == EP_REGISTERING || ep->state == EP_REGISTERED) && dp_endpoint_watch_kubelet_same(ep)) {
		dp_debug("kubelet.sock created: already registering with it", "resource=%s", ep->resource);
		return;
	}
	ep->cut_retried = false;
	dp_endpoint_kubelet_created(ep); /* bound: it may not listen yet; spaced when it churns */
}

static void on_watch(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	dp_endpoint *ep = userdata;

	switch (kind) {
	case DP_WATCH_OVERFLOW: /* events were lost: compare now */
	case DP_WATCH_BACKSTOP:
		stat_compare(ep);
		break;
	case DP_WATCH_DIR: /* the directory went away, was replaced or appeared: start over */
		dp_endpoint_restart(ep, dp_watch_dir_watched(w) ? "device-plugins directory replaced"
								 : "device-plugins directory removed");
		break;
	case DP_WATCH_ENTRY:
		if ((mask & (IN_CREATE | IN_MOVED_TO)) && strcmp(name, "kubelet.sock") == 0)
			dp_endpoint_watch_kubelet_created(ep);
		else if ((mask & (IN_DELETE | IN_MOVED_FROM)) && ep->socket_name[0] &&
			   strcmp(name, ep->socket_name) == 0 &&
			   (ep->state == EP_REGISTERED || ep->state == EP_REGISTERING ||
			    ep->state == EP_WAIT_LISTEN))
			dp_endpoint_restart(ep, "plugin socket deleted");
		break;
	}
}

void dp_endpoint_watch_ensure(dp_endpoint *ep)
{
	(void)dp_watch_rearm(ep->watch);
}

void dp_endpoint_watch_remember(dp_endpoint *ep)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
	if (stat(path, &st) == 0) {
		ep->kubelet_ino = st.st_ino;
		ep->kubelet_dev = st.st_dev;
		ep->kubelet_ctime = st.st_ctim;
	} else {
		ep->kubelet_ino = 0;
		ep->kubelet_dev = 0;
		ep->kubelet_ctime = (struct timespec){ 0 };
	}
}

/* The ctime tells a new file that got a freed inode number back (delete and create, back to
 * back) from the one remembered. */
bool dp_endpoint_watch_kubelet_same(const dp_endpoint *ep)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
	return ep->kubelet_ino != 0 && stat(path, &st) == 0 && st.st_ino == ep->kubelet_ino &&
	       st.st_dev == ep->kubelet_dev && st.st_ctim.tv_sec == ep->kubelet_ctime.tv_sec &&
	       st.st_ctim.tv_nsec == ep->kubelet_ctime.tv_nsec;
}

static bool same_file(const char *path, ino_t ino, dev_t dev)
{
	struct stat st;
	return lstat(path, &st) == 0 && st.st_ino == ino && st.st_dev == dev;
}

/* The backstop for lost or impossible inotify watches. */
static void stat_compare(dp_endpoint *ep)
{
	char path[PATH_MAX];

	if (ep->state == EP_WAIT_KUBELET) {
		snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
		if (access(path, F_OK) == 0) {
			ep->kubelet_created = true;
			dp_endpoint_restart(ep, "kubelet.sock appeared");
		}
		return;
	}
	if (ep->state != EP_REGISTERED)
		return;
	snprintf(path, sizeof(path), "%s/%s", ep->dir, ep->socket_name);
	if (!same_file(path, ep->socket_ino, ep->socket_dev)) {
		dp_endpoint_restart(ep, "plugin socket gone (stat)");
		return;
	}
	snprintf(path, sizeof(path), "%s/kubelet.sock", ep->dir);
	if (!same_file(path, ep->kubelet_ino, ep->kubelet_dev))
		dp_endpoint_restart(ep, "kubelet.sock replaced (stat)");
}

int dp_endpoint_watch_start(dp_endpoint *ep)
{
	/* The stat backstop is coarse (on the loop's grid): the periodic check and the other
	 * backstops share its wake-ups. */
	dp_watch_config cfg = {
		.dir = ep->dir,
		.mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO,
		.backstop_usec = STAT_WATCHED_USEC,
		.unwatched_usec = STAT_FALLBACK_USEC,
		.fn = on_watch,
		.userdata = ep,
	};
	return dp_watch_new(ep->loop, &cfg, &ep->watch);
}

void dp_endpoint_watch_stop(dp_endpoint *ep)
{
	ep->watch = dp_watch_free(ep->watch);
}
