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
#include <time.h>
#include <unistd.h>

#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "backend.h"
#include "group.h"
#include "prefer.h"
#include "spec.h"

#define ID_MAX (KATA_UNIT_NAME_MAX + 1) /* "0".."n-1", or the DRA device names */
#define KATA_RECHECK_USEC DP_USEC_PER_SEC /* a down ID is checked again this often */

/* One advertised ID: the devices of one IOMMU group (spec.h, kata_units). */
struct unit {
	size_t first, n;  /* into devs */
	bool down;        /* the last check found it unusable: why, since when */
	char why[KATA_GROUP_REASON_MAX];
	time_t since;
};

struct kata_plugin {
	dp_loop *loop;
	char resource[KATA_NAME_MAX];
	char plugin_name[KATA_NAME_MAX]; /* "kata.nvidia.com-gpu" */
	char socket_prefix[KATA_NAME_MAX];
	char spec_file[KATA_NAME_MAX];
	struct kata_device *devs;
	size_t n;
	struct unit *units; /* the IDs, in order */
	size_t n_units;
	struct kata_topo *topo; /* per ID: GetPreferredAllocation */
	bool *down;             /* per ID: scratch for dp_endpoint_set_devices_down */
	char (*ids)[ID_MAX];
	enum kata_backend backend;
	int devdir; /* kata_backend_dir() (O_PATH), opened at start; -1: the nodes' full paths */
	dp_endpoint *ep;
	dp_cdi_file *cdi;
	bool cdi_changed; /* the CDI watch saw a change that no check has looked at yet */
	dp_source *recheck; /* while an ID is down: check again after KATA_RECHECK_USEC */
	bool dra;           /* PLUGIN_API=dra: no kubelet endpoint, DRA names (kata_plugin_names) */
	bool checked;       /* a full check has run */
	bool sick;          /* the last full check failed: every unit unusable, why, since when */
	char sick_why[512];
	time_t sick_since;
	kata_plugin_units_fn units_fn;
	void *units_data;
};

/* The node directory opened again when the one at its path is no longer the one open (removed
 * with its last node and made again by the kernel, or replaced: a vfio module reload). True when
 * it was. */
static bool refresh_devdir(kata_plugin *p)
{
	char path[PATH_MAX];
	struct stat now, open_st;
	if (dp_path(path, sizeof(path), kata_backend_dir(p->backend)) < 0 || stat(path, &now) < 0)
		return false;
	if (p->devdir >= 0 && fstat(p->devdir, &open_st) == 0 && open_st.st_ino == now.st_ino &&
	    open_st.st_dev == now.st_dev)
		return false;
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (p->devdir >= 0)
		close(p->devdir);
	p->devdir = fd;
	dp_debug("VFIO node directory opened again", "resource=%s dir=%s", p->resource, kata_backend_dir(p->backend));
	return true;
}

/* The cdev is still the character device with the number the scan saw. By its name in the
 * directory opened at start: a stat of one path component, not of the whole path, on every
 * Allocate; when that fails, the directory at the path is checked and, if it is another one
 * now, opened and asked again. */
static int verify_node(kata_plugin *p, const struct kata_device *d, char *reason, size_t size)
{
	char path[PATH_MAX];
	struct stat st;
	int r = p->devdir >= 0 ? 0 : dp_path(path, sizeof(path), d->path);
	if (r < 0) {
		snprintf(reason, size, "invalid root prefix");
		return r;
	}
	const char *name = strrchr(d->path, '/') + 1; /* in kata_backend_dir() */
	r = p->devdir >= 0 ? fstatat(p->devdir, name, &st, AT_SYMLINK_NOFOLLOW) : lstat(path, &st);
	if ((r < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != d->rdev) && p->devdir >= 0 && refresh_devdir(p))
		r = fstatat(p->devdir, name, &st, AT_SYMLINK_NOFOLLOW);
	if (r < 0) {
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

/* The unit's nodes, and its group as the kernel judges it (group.h). 0, or negative errno with
 * the reason; v gets the group's verdict. */
static int check_unit(kata_plugin *p, const struct unit *u, struct kata_group_verdict *v)
{
	const char *pcis[64];
	*v = (struct kata_group_verdict){ 0 };
	for (size_t i = 0; i < u->n; i++) {
		const struct kata_device *d = &p->devs[u->first + i];
		if ((p->backend == KATA_BACKEND_IOMMUFD || i == 0) &&
		    verify_node(p, d, v->reason, sizeof(v->reason)) < 0)
			return -ENODEV;
	}
	/* a group has a few functions; more than 64 matched ones are checked 64 at a time */
	for (size_t i = 0; i < u->n; i += DP_ELEMENTSOF(pcis)) {
		size_t k = 0;
		for (; k < DP_ELEMENTSOF(pcis) && i + k < u->n; k++)
			pcis[k] = p->devs[u->first + i + k].pci;
		int r = kata_group_check(p->devs[u->first].group, pcis, k, v);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Log a unit's change of state once: unusable at warn (a group that is not viable, r -EPERM,
 * names the member and its driver), usable again at info. */
static void tell_unit(const kata_plugin *p, size_t id, struct unit *u, int r, const struct kata_group_verdict *v)
{
	char q[KATA_GROUP_REASON_MAX + 64], qm[NAME_MAX * 4 + 3], qd[KATA_DRIVER_MAX * 4 + 3];
	bool down = r < 0;
	if (down == u->down && (!down || strcmp(u->why, v->reason) == 0))
		return;
	const struct kata_device *d = &p->devs[u->first];
	if (r == -EPERM)
		dp_warn("IOMMU group not viable, advertising the device Unhealthy",
			"resource=%s id=%zu group=%u member=%s driver=%s reason=%s", p->resource, id, d->group,
			dp_logq(qm, sizeof(qm), v->member), dp_logq(qd, sizeof(qd), v->driver),
			dp_logq(q, sizeof(q), v->reason));
	else if (down)
		dp_warn("device unusable, advertising it Unhealthy", "resource=%s id=%zu group=%u pci=%s reason=%s",
			p->resource, id, d->group, d->pci, dp_logq(q, sizeof(q), v->reason));
	else
		dp_info("device usable again", "resource=%s id=%zu group=%u pci=%s", p->resource, id, d->group, d->pci);
	if (down && !u->down)
		u->since = time(NULL);
	u->down = down;
	snprintf(u->why, sizeof(u->why), "%s", down ? v->reason : "");
}

/* The units' states to the endpoint; while one is down, a check again in KATA_RECHECK_USEC (a
 * bind without a uevent, e.g. in a user namespace, is seen within it). */
static void publish(kata_plugin *p)
{
	bool any = false;
	for (size_t i = 0; i < p->n_units; i++) {
		p->down[i] = p->units[i].down;
		any = any || p->down[i];
	}
	(void)dp_endpoint_set_devices_down(p->ep, p->down, p->n_units);
	if (any)
		(void)dp_timer_set(p->recheck, KATA_RECHECK_USEC, 0);
	if (p->units_fn)
		p->units_fn(p, p->units_data);
}

/* Every unit: its state, told once per change and given to the endpoint. */
static void check_units(kata_plugin *p)
{
	struct kata_group_verdict v;
	(void)refresh_devdir(p); /* a rebuilt directory: its nodes are found again */
	for (size_t i = 0; i < p->n_units; i++)
		tell_unit(p, i, &p->units[i], check_unit(p, &p->units[i], &v), &v);
	publish(p);
}

/* The index an advertised ID names ("0".."n-1", validated by the endpoint), or n_units. */
static size_t id_index(const kata_plugin *p, const char *id)
{
	size_t v = 0;
	for (const char *c = id; *c; c++) {
		if (*c < '0' || *c > '9' || v > p->n_units)
			return p->n_units;
		v = v * 10 + (size_t)(*c - '0');
	}
	return *id && v < p->n_units ? v : p->n_units;
}

/* Only the requested units: their nodes and groups, not every advertised one's. */
static int verify_requested(kata_plugin *p, dp_alloc *a, char *reason, size_t size)
{
	struct kata_group_verdict v;
	for (size_t c = 0; c < dp_alloc_containers(a); c++) {
		size_t n;
		char **ids = dp_alloc_ids(a, c, &n);
		for (size_t i = 0; i < n; i++) {
			size_t k = id_index(p, ids[i]);
			if (k == p->n_units)
				continue; /* the endpoint validated every ID */
			int r = check_unit(p, &p->units[k], &v);
			bool down = r < 0, was = p->units[k].down;
			tell_unit(p, k, &p->units[k], r, &v);
			if (down != was)
				publish(p);
			if (down) {
				snprintf(reason, size, "ID %s: %s", ids[i], v.reason);
				return -ENODEV;
			}
		}
	}
	return 0;
}

/* The legacy container node /dev/vfio/vfio is a character device (in the node directory, as
 * the group nodes: the legacy backend's directory is /dev/vfio). */
static int stat_container_node(const kata_plugin *p, struct stat *st)
{
	char path[PATH_MAX];
	if (p->devdir >= 0)
		return fstatat(p->devdir, "vfio", st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	if (dp_path(path, sizeof(path), KATA_CONTAINER_NODE) < 0)
		return -EINVAL;
	return lstat(path, st) < 0 ? -errno : 0;
}

static int verify_container_node(kata_plugin *p, char *reason, size_t size)
{
	struct stat st;
	int r = stat_container_node(p, &st);
	if ((r < 0 || !S_ISCHR(st.st_mode)) && refresh_devdir(p))
		r = stat_container_node(p, &st);
	if (r < 0 || !S_ISCHR(st.st_mode)) {
		snprintf(reason, size, KATA_CONTAINER_NODE " (the VFIO container node): %s",
			 r < 0 ? strerror(-r) : "not a character device");
		return -ENODEV;
	}
	return 0;
}

/* The full check's verdict for every unit (why: NULL when it passed), told to units_fn. */
static void set_sick(kata_plugin *p, const char *why)
{
	bool was = p->sick;
	p->checked = true;
	if (why && !was)
		p->sick_since = time(NULL);
	p->sick = why != NULL;
	snprintf(p->sick_why, sizeof(p->sick_why), "%s", why ? why : "");
	if (p->units_fn)
		p->units_fn(p, p->units_data);
}

static bool check(kata_plugin *p, char *reason, size_t size)
{
	bool repaired = false;
	reason[0] = '\0';
	p->cdi_changed = false;
	check_units(p);
	if (p->backend == KATA_BACKEND_LEGACY && verify_container_node(p, reason, size) < 0)
		goto unhealthy;
	if (dp_cdi_file_sync(p->cdi, &repaired) < 0) {
		snprintf(reason, size, "%s", dp_cdi_file_error(p->cdi));
		goto unhealthy;
	}
	if (repaired)
		dp_info("CDI spec written", "resource=%s path=%s", p->resource, dp_cdi_file_path(p->cdi));
	dp_endpoint_set_health(p->ep, true, NULL);
	set_sick(p, NULL);
	return true;
unhealthy:
	dp_endpoint_set_health(p->ep, false, reason);
	set_sick(p, reason);
	return false;
}

static void drv_check(dp_endpoint *ep, void *userdata)
{
	char reason[512];
	(void)check(userdata, reason, sizeof(reason));
}

/* The full check's part of an Allocate: its last verdict while nothing changed since (below). */
static bool ready(kata_plugin *p, char *reason, size_t size)
{
	bool ok = dp_endpoint_healthy(p->ep) && !p->cdi_changed &&
		  (p->backend != KATA_BACKEND_LEGACY || verify_container_node(p, reason, size) == 0);
	return ok || check(p, reason, size);
}

static void drv_allocate(dp_endpoint *ep, dp_alloc *a, void *userdata)
{
	kata_plugin *p = userdata;
	char reason[512], msg[KATA_NAME_MAX + 600];

	/*
	 * The requested units are verified on every Allocate (nodes, group viability, binding); the
	 * others at the periodic check, on a PCI uevent and on a change of the VFIO directory.
	 * The CDI spec has a watch (any change of the file or its directory triggers a check that
	 * repairs it), so while the last check passed and no change is pending, the spec is not
	 * re-read here: its open/read/close would be a large part of an Allocate's time (make
	 * bench's Allocate figures, sdp-bench). Otherwise the full check runs. The legacy container
	 * node, named in every spec entry, is looked at on every Allocate (one stat).
	 */
	bool ok = ready(p, reason, sizeof(reason));
	if (ok)
		ok = verify_requested(p, a, reason, sizeof(reason)) == 0;
	if (!ok) {
		snprintf(msg, sizeof(msg), "%s is not usable: %s", p->resource, reason);
		dp_alloc_finish(a, DP_GRPC_UNAVAILABLE, msg);
	} else if (dp_alloc_add_cdi_answer(a, p->plugin_name, p->resource, NULL) < 0) {
		/* per container request: "<resource>=<id>" for each ID, and the annotation */
		dp_alloc_finish(a, DP_GRPC_RESOURCE_EXHAUSTED, "out of memory");
	} else {
		dp_alloc_finish(a, DP_GRPC_OK, NULL);
	}
}

/* GetPreferredAllocation: kata_prefer over the units' topology (prefer.h). */
static int drv_prefer(dp_endpoint *ep, const size_t *avail, size_t n_avail, const size_t *must, size_t n_must,
		      size_t size, size_t *out, void *userdata)
{
	const kata_plugin *p = userdata;
	return kata_prefer(p->topo, p->n_units, avail, n_avail, must, n_must, size, out);
}

static const dp_driver driver = { .check = drv_check, .allocate = drv_allocate, .prefer = drv_prefer };

static void on_cdi_changed(dp_cdi_file *f, void *userdata)
{
	kata_plugin *p = userdata;
	p->cdi_changed = true;
	dp_endpoint_request_check(p->ep);
}

static int setup_cdi(kata_plugin *p, const char *cdi_dir)
{
	_cleanup_(dp_buf_done) dp_buf spec = { 0 };
	if (p->dra)
		kata_spec_render_dra(p->resource, p->devs, p->n, &spec);
	else
		kata_spec_render(p->resource, p->devs, p->n, &spec);
	return dp_cdi_file_new_owned(p->loop, cdi_dir, p->spec_file, &spec, on_cdi_changed, p, &p->cdi);
}

static int on_recheck(dp_source *s, void *userdata)
{
	kata_plugin *p = userdata;
	dp_endpoint_request_check(p->ep);
	return 0;
}

static int setup_endpoint(kata_plugin *p, const char *kubelet_dir)
{
	_cleanup_free_ dp_device *dd = calloc(p->n_units, sizeof(*dd));
	if (!dd)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_units; i++) {
		const struct kata_device *d = &p->devs[p->units[i].first];
		if (p->dra)
			kata_unit_name(p->resource, d, p->ids[i], ID_MAX);
		else
			snprintf(p->ids[i], ID_MAX, "%zu", i);
		dd[i].id = p->ids[i];
		dd[i].numa_node = d->numa_node;
		p->topo[i] = (struct kata_topo){ .numa = d->numa_node, .switch_key = d->switch_key,
						 .pci_key = d->unit_key ? d->unit_key : d->pci_key };
	}
	dp_endpoint_config ec = {
		.resource_name = p->resource,
		.socket_prefix = p->socket_prefix,
		.devices = dd,
		.n_devices = p->n_units,
		.preferred_allocation = true,
		.no_kubelet = p->dra,
		.healthy_message = "devices usable",
		.unhealthy_message = "devices unusable, advertising every device Unhealthy",
		.events = &dp_endpoint_log_events,
		.driver = &driver,
		.userdata = p,
	};
	return dp_endpoint_new(p->loop, kubelet_dir, &ec, &p->ep);
}

static int open_devdir(enum kata_backend b)
{
	char path[PATH_MAX];
	if (dp_path(path, sizeof(path), kata_backend_dir(b)) < 0)
		return -1;
	return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

/* The devices and their units (IDs). */
static int alloc_units(kata_plugin *p, const struct kata_device *devs, size_t n)
{
	_cleanup_free_ size_t *first = calloc(n, sizeof(*first));
	p->devs = calloc(n, sizeof(*p->devs));
	if (!first || !p->devs)
		/* first is freed by its _cleanup_ attribute, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	memcpy(p->devs, devs, n * sizeof(*devs));
	p->n = n;
	p->n_units = kata_units(devs, n, first);
	p->units = calloc(p->n_units, sizeof(*p->units));
	p->topo = calloc(p->n_units, sizeof(*p->topo));
	p->down = calloc(p->n_units, sizeof(*p->down));
	p->ids = calloc(p->n_units, sizeof(*p->ids));
	if (!p->units || !p->topo || !p->down || !p->ids)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_units; i++)
		p->units[i] = (struct unit){ .first = first[i],
					     .n = (i + 1 < p->n_units ? first[i + 1] : n) - first[i] };
	return 0;
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
	p->dra = names->dra;
	p->backend = kata_device_backend(&devs[0]);
	p->devdir = open_devdir(p->backend);
	if (!copy_name(p->resource, names->resource) || !copy_name(p->plugin_name, names->plugin_name) ||
	    !copy_name(p->socket_prefix, names->socket_prefix) || !copy_name(p->spec_file, names->spec_file))
		// cppcheck-suppress memleak ; p is freed by its _cleanup_ attribute, which the analyzers do not model
		return -ENAMETOOLONG; // NOLINT(clang-analyzer-unix.Malloc)
	int r = alloc_units(p, devs, n);
	if (r < 0)
		// cppcheck-suppress memleak ; p is freed by its _cleanup_ attribute, as above
		return r;
	r = setup_cdi(p, cdi_dir);
	if (r < 0)
		return r;
	r = setup_endpoint(p, kubelet_dir);
	if (r < 0)
		return r;
	r = dp_timer_add_disarmed(loop, on_recheck, p, &p->recheck);
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
	dp_source_free(p->recheck);
	p->ep = dp_endpoint_free(p->ep);
	p->cdi = dp_cdi_file_free(p->cdi);
	if (p->devdir >= 0)
		close(p->devdir);
	free(p->devs);
	free(p->units);
	free(p->topo);
	free(p->down);
	free(p->ids);
	free(p);
	return NULL;
}

void kata_plugin_request_check(kata_plugin *p)
{
	dp_endpoint_request_check(p->ep);
}

dp_endpoint *kata_plugin_endpoint(const kata_plugin *p) { return p->ep; }
const char *kata_plugin_spec_path(const kata_plugin *p) { return dp_cdi_file_path(p->cdi); }

const char *kata_plugin_resource(const kata_plugin *p) { return p->resource; }
size_t kata_plugin_n_units(const kata_plugin *p) { return p->n_units; }
bool kata_plugin_checked(const kata_plugin *p) { return p->checked; }

const struct kata_device *kata_plugin_unit(const kata_plugin *p, size_t i, struct kata_unit_state *st)
{
	const struct unit *u = &p->units[i];
	bool sick = p->sick && !u->down;
	*st = (struct kata_unit_state){ .name = p->ids[i], .n_devs = u->n, .down = u->down || p->sick,
					.why = sick ? p->sick_why : u->why, .since = sick ? p->sick_since : u->since };
	return &p->devs[u->first];
}

size_t kata_plugin_find_unit(const kata_plugin *p, const char *name)
{
	for (size_t i = 0; i < p->n_units; i++)
		if (strcmp(p->ids[i], name) == 0)
			return i;
	return SIZE_MAX;
}

int kata_plugin_prepare_unit(kata_plugin *p, size_t i, char *why, size_t size)
{
	char reason[512];
	struct kata_group_verdict v;

	if (!ready(p, reason, sizeof(reason))) {
		snprintf(why, size, "%s is not usable: %s", p->resource, reason);
		return -EIO;
	}
	int r = check_unit(p, &p->units[i], &v);
	bool was = p->units[i].down;
	tell_unit(p, i, &p->units[i], r, &v);
	if ((r < 0) != was)
		publish(p);
	if (r < 0) {
		snprintf(why, size, "device %s is unusable: %s", p->ids[i], v.reason);
		return -EIO;
	}
	return 0;
}

void kata_plugin_set_units_fn(kata_plugin *p, kata_plugin_units_fn fn, void *userdata)
{
	p->units_fn = fn;
	p->units_data = userdata;
}
