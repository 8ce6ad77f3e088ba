/* SPDX-License-Identifier: Apache-2.0 */
/* detect: find the hypervisor device node (/dev/mshv, then /dev/kvm) under the root prefix. */
#include "detect.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "companion.h"
#include "dp/log.h"
#include "dp/paths.h"

static const struct {
	const char *name;
	const char *path;
} candidates[] = {
	{ "mshv", "/dev/mshv" },
	{ "kvm", "/dev/kvm" },
};

#define DEV_PREFIX "/dev/"

static int candidate_path(const char *dir, const char *name, char *buf, size_t size)
{
	char abs[PATH_MAX];
	if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", dir, name) >= sizeof(abs))
		return -ENAMETOOLONG;
	return dp_path(buf, size, abs);
}

int hl_detect(const char *dir, struct hl_device *ret, char *err, size_t errlen)
{
	char tried[2][PATH_MAX];
	for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
		struct hl_device d = { .name = candidates[i].name, .path = candidates[i].path,
				       .node = candidates[i].name };
		struct stat st;
		int r = candidate_path(dir, d.name, d.host_path, sizeof(d.host_path));
		if (r < 0) {
			snprintf(err, errlen, "invalid device directory %s", dir);
			return r;
		}
		snprintf(tried[i], sizeof(tried[i]), "%s", d.host_path);
		if (stat(d.host_path, &st) < 0) {
			if (errno == ENOENT)
				continue;
			r = -errno;
			snprintf(err, errlen, "cannot stat %s: %s", d.host_path, strerror(errno));
			return r;
		}
		if (!S_ISCHR(st.st_mode)) {
			snprintf(err, errlen, "%s is not a character device", d.host_path);
			return -ENOTTY;
		}
		r = dp_path(d.host_dir, sizeof(d.host_dir), dir);
		if (r < 0)
			return r;
		d.rdev = st.st_rdev;
		*ret = d;
		return 0;
	}
	snprintf(err, errlen, "no hypervisor device: neither %s nor %s exists", tried[0], tried[1]);
	return -ENOENT;
}

int hl_companion_device(const struct hl_companion_type *t, const char *dir, struct hl_device *ret)
{
	struct hl_device d = { .name = t->name, .path = t->path, .rdev = makedev(t->major, t->minor),
			       .fixed = true };
	const char *rel = t->path + strlen(DEV_PREFIX); /* "net/tun" */
	char abs[PATH_MAX];
	int r;

	d.node = strrchr(t->path, '/') + 1;
	if ((size_t)snprintf(abs, sizeof(abs), "%s/%s", dir, rel) >= sizeof(abs))
		return -ENAMETOOLONG;
	r = dp_path(d.host_path, sizeof(d.host_path), abs);
	if (r < 0)
		return r;
	/* host_path's directory: the resolved path up to its last '/' */
	snprintf(d.host_dir, sizeof(d.host_dir), "%.*s", (int)(strrchr(d.host_path, '/') - d.host_path),
		 d.host_path);
	*ret = d;
	return 0;
}

/* A companion's node: lstat, and the wording of a node that never was seen. */
static int verify_fixed(const struct hl_device *d, char *reason, size_t size)
{
	struct stat st;
	if (lstat(d->host_path, &st) < 0) {
		int r = -errno;
		if (r == -ENOENT)
			snprintf(reason, size, "%s missing", d->host_path);
		else
			snprintf(reason, size, "%s: %s", d->host_path, strerror(-r));
		return r;
	}
	if (S_ISLNK(st.st_mode)) {
		snprintf(reason, size, "%s is a symbolic link, not the device node", d->host_path);
		return -ELOOP;
	}
	if (!S_ISCHR(st.st_mode)) {
		snprintf(reason, size, "%s is not a character device", d->host_path);
		return -ENOTTY;
	}
	if (st.st_rdev != d->rdev) {
		snprintf(reason, size, "%s has device number %u:%u, expected %u:%u", d->host_path,
			 major(st.st_rdev), minor(st.st_rdev), major(d->rdev), minor(d->rdev));
		return -ENODEV;
	}
	return 0;
}

int hl_device_verify(const struct hl_device *d, char *reason, size_t size)
{
	struct stat st;
	if (d->fixed)
		return verify_fixed(d, reason, size);
	if (stat(d->host_path, &st) < 0) {
		int r = -errno;
		snprintf(reason, size, "%s: %s", d->host_path, strerror(errno));
		return r;
	}
	if (!S_ISCHR(st.st_mode)) {
		snprintf(reason, size, "%s is no longer a character device", d->host_path);
		return -ENOTTY;
	}
	if (st.st_rdev != d->rdev) {
		snprintf(reason, size, "%s changed device number from %u:%u to %u:%u", d->host_path,
			 major(d->rdev), minor(d->rdev), major(st.st_rdev), minor(st.st_rdev));
		return -ENODEV;
	}
	return 0;
}

static void on_node_event(dp_watch *dw, dp_watch_kind kind, const char *name, uint32_t mask,
			  void *userdata)
{
	struct hl_node_watch *w = userdata;
	static const char *const what[] = { [DP_WATCH_ENTRY] = "node", [DP_WATCH_DIR] = "directory",
					    [DP_WATCH_OVERFLOW] = "overflow",
					    [DP_WATCH_BACKSTOP] = "backstop" };

	dp_debug("device node watch: checking now", "node=%s/%s event=%s", w->dir, w->name, what[kind]);
	if (w->changed)
		w->changed(w->userdata);
	else
		dp_endpoint_request_check(w->ep);
}

void hl_node_watch_ensure(struct hl_node_watch *w)
{
	dp_watch_config cfg = { .dir = w->dir, .name = w->name,
				.mask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB,
				.fn = on_node_event, .userdata = w };
	if (!w->ep)
		return;
	if (w->src) {
		(void)dp_watch_rearm(w->src);
		return;
	}
	int r = dp_watch_new(w->loop, &cfg, &w->src);
	if (r < 0 && !w->failed) /* tried again at each check: said once */
		dp_warn("cannot watch a device directory: its changes are seen by periodic checks only",
			"dir=%s error=%s", w->dir, dp_errname(r));
	else if (r == 0 && w->failed)
		dp_info("watching a device directory again", "dir=%s", w->dir);
	w->failed = r < 0;
}

void hl_node_watch_stop(struct hl_node_watch *w)
{
	w->src = dp_watch_free(w->src);
}
