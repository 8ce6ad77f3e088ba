/* SPDX-License-Identifier: Apache-2.0 */
/* idle: the health socket kata serves when no device matches the table (idle.h). */
#include "idle.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/health.h"
#include "dp/log.h"
#include "dp/watch.h"
#include "table.h"

#define CHECK_USEC (5 * DP_USEC_PER_SEC)          /* without a watch, or while not serving */
#define CHECK_WATCHED_USEC (30 * DP_USEC_PER_SEC) /* serving, with an inotify watch */

struct kata_idle {
	dp_loop *loop;
	char dir[PATH_MAX];
	dp_health *health;
	dp_grpc_server *server;
	char prefix[DP_SOCKET_PREFIX_MAX + 1]; /* "kata-<hash of "idle">" */
	char name[DP_SOCKET_NAME_MAX + 1];     /* "" when not serving */
	ino_t ino;
	dev_t dev;
	unsigned generation;
	dp_watch *watch; /* with the backstop */
	int last_error; /* logged once per distinct failure */
};

static int status(const char *service, void *userdata)
{
	if (service[0] == '\0')
		return DP_HEALTH_SERVING;
	if (strcmp(service, DP_HEALTH_READINESS) == 0)
		return DP_HEALTH_NOT_SERVING;
	return -ENOENT;
}

static void stop_serving(kata_idle *i)
{
	char path[PATH_MAX + 64];
	struct stat st;
	i->server = dp_grpc_server_free(i->server);
	if (!i->name[0])
		return;
	snprintf(path, sizeof(path), "%s/%s", i->dir, i->name);
	if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == i->ino && st.st_dev == i->dev)
		(void)unlink(path);
	i->name[0] = '\0';
}

static void on_stale_removed(const char *name, void *userdata)
{
	dp_info("removed stale socket", "socket=%s", name);
}

static void serve(kata_idle *i)
{
	char path[PATH_MAX + 64] = "";
	dp_grpc_method m[2];
	struct stat st;
	size_t n = dp_health_methods(i->health, m);

	stop_serving(i);
	/* As PID 1 after kill -9, the predecessor's sockets are ours: removed before the first. */
	if (i->generation++ == 0)
		(void)dp_socket_sweep(i->dir, i->prefix, NULL, on_stale_removed, NULL);
	int r = dp_socket_name(i->name, sizeof(i->name), i->prefix);
	if (r >= 0 && (size_t)snprintf(path, sizeof(path), "%s/%s", i->dir, i->name) >= sizeof(path))
		r = -ENAMETOOLONG;
	if (r >= 0)
		r = dp_grpc_server_new(i->loop, path, m, n, NULL, &i->server);
	if (r < 0) {
		if (r != i->last_error)
			dp_warn("cannot serve the idle health socket, retrying", "socket=%s error=%s", path,
				strerror(-r));
		i->last_error = r;
		i->name[0] = '\0';
		return;
	}
	i->last_error = 0;
	if (lstat(path, &st) == 0) {
		i->ino = st.st_ino;
		i->dev = st.st_dev;
	}
	if (i->generation == 1)
		dp_info("serving health only, not registered with kubelet", "socket=%s", i->name);
	else
		dp_info("idle health socket re-created", "socket=%s", i->name);
}

static bool ours_present(const kata_idle *i)
{
	char path[PATH_MAX + 64];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", i->dir, i->name);
	return i->name[0] && lstat(path, &st) == 0 && st.st_ino == i->ino && st.st_dev == i->dev;
}

/* The backstop for a lost watch and the retry of a failed serve(): 5 s while one of them is
 * needed, 30 s (coarse, with the other backstops) while inotify watches a served socket. */
static void arm_backstop(kata_idle *i)
{
	dp_watch_set_backstop(i->watch, i->name[0] ? CHECK_WATCHED_USEC : CHECK_USEC, CHECK_USEC);
}

static void on_watch(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	kata_idle *i = userdata;

	bool ours_gone = kind == DP_WATCH_ENTRY && i->name[0] && strcmp(name, i->name) == 0;
	/* the backstop, or events lost: compare by stat */
	bool recheck = kind == DP_WATCH_BACKSTOP || kind == DP_WATCH_OVERFLOW;

	if (kind == DP_WATCH_DIR || ours_gone || (recheck && !ours_present(i)))
		serve(i);
	arm_backstop(i);
}

int kata_idle_new(dp_loop *loop, const char *kubelet_dir, kata_idle **ret)
{
	_cleanup_(kata_idle_freep) kata_idle *i = calloc(1, sizeof(*i));
	if (!i)
		return -ENOMEM;
	i->loop = loop;
	if ((size_t)snprintf(i->dir, sizeof(i->dir), "%s", kubelet_dir) >= sizeof(i->dir) ||
	    dp_socket_dir_check(kubelet_dir) < 0)
		// cppcheck-suppress memleak ; i is freed by its _cleanup_ attribute, which cppcheck does not model
		return -ENAMETOOLONG;
	int r = dp_socket_prefix(i->prefix, sizeof(i->prefix), KATA_SOCKET_TAG, KATA_IDLE_SOCKET_KEY);
	if (r >= 0)
		r = dp_health_new(status, i, &i->health);
	if (r < 0)
		return r;
	dp_watch_config cfg = { .dir = i->dir, .mask = IN_DELETE | IN_MOVED_FROM,
				.backstop_usec = CHECK_USEC, .unwatched_usec = CHECK_USEC,
				.fn = on_watch, .userdata = i };
	r = dp_watch_new(loop, &cfg, &i->watch);
	if (r < 0)
		return r;
	serve(i);
	arm_backstop(i);
	*ret = TAKE_PTR(i);
	return 0;
}

kata_idle *kata_idle_free(kata_idle *i)
{
	if (!i)
		return NULL;
	i->watch = dp_watch_free(i->watch);
	stop_serving(i);
	i->health = dp_health_free(i->health);
	return (free(i), NULL);
}

const char *kata_idle_socket(const kata_idle *i)
{
	return i->name[0] ? i->name : NULL;
}
