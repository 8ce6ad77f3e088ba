/* SPDX-License-Identifier: Apache-2.0 */
/* plugin: one kata resource's driver: its checks and Allocate answer (plugin.h). */
#include "plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "spec.h"

#define ID_MAX 24

struct kata_plugin {
	dp_loop *loop;
	char resource[KATA_NAME_MAX];
	char plugin_name[KATA_NAME_MAX]; /* "kata.nvidia.com-gpu" */
	char socket_prefix[KATA_NAME_MAX];
	char spec_file[KATA_NAME_MAX];
	struct kata_device *devs;
	char (*ids)[ID_MAX];
	size_t n;
	int devdir; /* KATA_DEV_DIR (O_PATH), opened at start; -1: the cdevs' full paths */
	dp_endpoint *ep;
	dp_cdi_file *cdi;
	bool cdi_changed; /* the CDI watch saw a change that no check has looked at yet */
};

/* The cdev is still the character device with the number the scan saw. By its name in the
 * directory opened at start: a stat of one path component, not of the whole path, on every
 * Allocate (a replaced directory is a changed device set: the VFIO watch ends the daemon). */
static int verify_node(const kata_plugin *p, const struct kata_device *d, char *reason, size_t size)
{
	char path[PATH_MAX];
	struct stat st;
	int r = p->devdir >= 0 ? 0 : dp_path(path, sizeof(path), d->path);
	if (r < 0) {
		snprintf(reason, size, "invalid root prefix");
		return r;
	}
	if ((p->devdir >= 0 ? fstatat(p->devdir, d->name, &st, AT_SYMLINK_NOFOLLOW) : lstat(path, &st)) < 0) {
		r = -errno;
		snprintf(reason, size, "%s: %s", d->path, strerror(-r));
		return r;
	}
	if (!S_ISCHR(st.st_mode) || st.st_rdev != d->rdev) {
		snprintf(reason, size, "%s is no longer the character device %u:%u", d->path, major(d->rdev),
			 minor(d->rdev));
		return -ENODEV;
	}
	return 0;
}

static int verify_nodes(const kata_plugin *p, char *reason, size_t size)
{
	for (size_t i = 0; i < p->n; i++) {
		int r = verify_node(p, &p->devs[i], reason, size);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The index an advertised ID names ("0".."n-1", validated by the endpoint), or p->n. */
static size_t id_index(const kata_plugin *p, const char *id)
{
	size_t v = 0;
	for (const char *c = id; *c; c++) {
		if (*c < '0' || *c > '9' || v > p->n)
			return p->n;
		v = v * 10 + (size_t)(*c - '0');
	}
	return *id && v < p->n ? v : p->n;
}

/* Only the requested devices' nodes: one stat per device, not one per advertised device. */
static int verify_requested(const kata_plugin *p, dp_alloc *a, char *reason, size_t size)
{
	for (size_t c = 0; c < dp_alloc_containers(a); c++) {
		size_t n;
		char **ids = dp_alloc_ids(a, c, &n);
		for (size_t i = 0; i < n; i++) {
			size_t k = id_index(p, ids[i]);
			int r = k < p->n ? verify_node(p, &p->devs[k], reason, size) : verify_nodes(p, reason, size);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static bool check(kata_plugin *p, char *reason, size_t size)
{
	bool repaired = false;
	reason[0] = '\0';
	p->cdi_changed = false;
	if (verify_nodes(p, reason, size) < 0)
		goto unhealthy;
	if (dp_cdi_file_sync(p->cdi, &repaired) < 0) {
		snprintf(reason, size, "%s", dp_cdi_file_error(p->cdi));
		goto unhealthy;
	}
	if (repaired)
		dp_info("CDI spec written", "resource=%s path=%s", p->resource, dp_cdi_file_path(p->cdi));
	dp_endpoint_set_health(p->ep, true, NULL);
	return true;
unhealthy:
	dp_endpoint_set_health(p->ep, false, reason);
	return false;
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	char reason[512];
	(void)check(userdata, reason, sizeof(reason));
}

static void drv_allocate(dp_endpoint *ep, dp_alloc *a, void *userdata)
{
	kata_plugin *p = userdata;
	char reason[512], msg[KATA_NAME_MAX + 600];

	/*
	 * The requested devices' cdevs are verified on every Allocate (the other devices' at the
	 * periodic check; a removed or replaced cdev also ends the daemon through the VFIO watch).
	 * The CDI spec has a watch (any change of the file or its directory triggers a check that
	 * repairs it), so while the last check passed and no change is pending, the spec is not
	 * re-read here: its open/read/close would be a large part of an Allocate's time (make
	 * bench's Allocate figures, sdp-bench). Otherwise the full check runs.
	 */
	bool fast = dp_endpoint_healthy(ep) && !p->cdi_changed &&
		    verify_requested(p, a, reason, sizeof(reason)) == 0;
	if (!fast && !check(p, reason, sizeof(reason))) {
		snprintf(msg, sizeof(msg), "%s is not usable: %s", p->resource, reason);
		dp_alloc_finish(a, DP_GRPC_UNAVAILABLE, msg);
	} else if (dp_alloc_add_cdi_answer(a, p->plugin_name, p->resource, NULL) < 0) {
		/* per container request: "<resource>=<id>" for each ID, and the annotation */
		dp_alloc_finish(a, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	} else {
		dp_alloc_finish(a, DP_GRPC_OK, NULL);
	}
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate };

static void on_cdi_changed(dp_cdi_file *f, void *userdata)
{
	kata_plugin *p = userdata;
	p->cdi_changed = true;
	dp_endpoint_request_check(p->ep);
}

static int setup_cdi(kata_plugin *p, const char *cdi_dir)
{
	_cleanup_(dp_buf_done) dp_buf spec = { 0 };
	kata_spec_render(p->resource, p->devs, p->n, &spec);
	return dp_cdi_file_new_owned(p->loop, cdi_dir, p->spec_file, &spec, on_cdi_changed, p, &p->cdi);
}

static int setup_endpoint(kata_plugin *p, const char *kubelet_dir)
{
	_cleanup_free_ dp_device *dd = calloc(p->n, sizeof(*dd));
	if (!dd)
		return -ENOMEM;
	for (size_t i = 0; i < p->n; i++) {
		snprintf(p->ids[i], ID_MAX, "%zu", i);
		dd[i].id = p->ids[i];
		dd[i].numa_node = p->devs[i].numa_node;
	}
	dp_endpoint_config ec = {
		.resource_name = p->resource,
		.socket_prefix = p->socket_prefix,
		.devices = dd,
		.n_devices = p->n,
		.healthy_message = "devices usable",
		.unhealthy_message = "devices unusable, advertising every device Unhealthy",
		.events = &dp_endpoint_log_events,
		.driver = &driver,
		.userdata = p,
	};
	return dp_endpoint_new(p->loop, kubelet_dir, &ec, &p->ep);
}

static int open_devdir(void)
{
	char path[PATH_MAX];
	if (dp_path(path, sizeof(path), KATA_DEV_DIR) < 0)
		return -1;
	return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

static bool copy_name(char *dst, const char *src)
{
	return src && strlen(src) < KATA_NAME_MAX && memcpy(dst, src, strlen(src) + 1);
}

int kata_plugin_new(dp_loop *loop, const char *resource, const struct kata_device *devs, size_t n,
		    const char *kubelet_dir, const char *cdi_dir, kata_plugin **ret)
{
	char prefix[KATA_NAME_MAX], plugin[KATA_NAME_MAX], file[KATA_NAME_MAX];
	int r = kata_socket_prefix(resource, prefix, sizeof(prefix));
	if (r >= 0)
		r = kata_plugin_name(resource, plugin, sizeof(plugin));
	if (r >= 0)
		r = kata_spec_file(resource, file, sizeof(file));
	if (r < 0)
		return r;
	const struct kata_plugin_names names = {
		.resource = resource, .socket_prefix = prefix, .plugin_name = plugin, .spec_file = file
	};
	return kata_plugin_new_named(loop, &names, devs, n, kubelet_dir, cdi_dir, ret);
}

int kata_plugin_new_named(dp_loop *loop, const struct kata_plugin_names *names, const struct kata_device *devs,
			  size_t n, const char *kubelet_dir, const char *cdi_dir, kata_plugin **ret)
{
	if (!loop || !names || !names->resource || !strchr(names->resource, '/') || !devs || n == 0 || !ret)
		return -EINVAL;
	_cleanup_(kata_plugin_freep) kata_plugin *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->devdir = open_devdir();
	if (!copy_name(p->resource, names->resource) || !copy_name(p->plugin_name, names->plugin_name) ||
	    !copy_name(p->socket_prefix, names->socket_prefix) || !copy_name(p->spec_file, names->spec_file))
		// cppcheck-suppress memleak ; p is freed by its _cleanup_ attribute, which the analyzers do not model
		return -ENAMETOOLONG; // NOLINT(clang-analyzer-unix.Malloc)
	int r;
	p->devs = calloc(n, sizeof(*p->devs));
	p->ids = calloc(n, sizeof(*p->ids));
	if (!p->devs || !p->ids)
		// cppcheck-suppress memleak ; p is freed by its _cleanup_ attribute, as above
		return -ENOMEM;
	memcpy(p->devs, devs, n * sizeof(*devs));
	p->n = n;
	r = setup_cdi(p, cdi_dir);
	if (r < 0)
		return r;
	r = setup_endpoint(p, kubelet_dir);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(p);
	return 0;
}

int kata_plugin_start(kata_plugin *p)
{
	return dp_endpoint_start(p->ep);
}

kata_plugin *kata_plugin_free(kata_plugin *p)
{
	if (!p)
		return NULL;
	p->ep = dp_endpoint_free(p->ep);
	p->cdi = dp_cdi_file_free(p->cdi);
	if (p->devdir >= 0)
		close(p->devdir);
	free(p->devs);
	free(p->ids);
	free(p);
	return NULL;
}

dp_endpoint *kata_plugin_endpoint(const kata_plugin *p) { return p->ep; }
const char *kata_plugin_spec_path(const kata_plugin *p) { return dp_cdi_file_path(p->cdi); }
