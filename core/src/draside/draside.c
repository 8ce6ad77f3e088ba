/* SPDX-License-Identifier: Apache-2.0 */
/* draside: the DRA side's setup, the helper's queue of calls, and the slices' publication. */
#include "dp/draside.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/draapi.h"
#include "dp/endpoint.h"
#include "dp/health.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "dp/paths.h"
#include "draside_internal.h"

#define HELPER_DEADLINE_USEC (40 * DP_USEC_PER_SEC) /* a list and up to 65 writes of 15 s at most each... bounded */
#define HELPER_GRACE_USEC (2 * DP_USEC_PER_SEC)
#define BACKOFF_FIRST_USEC (1 * DP_USEC_PER_SEC)
#define BACKOFF_MAX_USEC (300 * DP_USEC_PER_SEC)
#define DRIVER_MAX 63

/* ---------------------------------------------------------------- the helper's queue */

/* gcc 12 -fanalyzer loses a job once it is linked into the queue (s->queue, then s->running)
 * and reports it leaked: it is freed when its run ends (on_helper_done) or with the queue. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-malloc-leak"
#endif

static void on_helper_done(const dp_helper_result *r, void *userdata);

static void start_next(dp_draside *s)
{
	char out[DRASIDE_OUT_MAX];
	char *argv[12];

	while (!s->running && s->queue) {
		struct job *j = s->queue;
		s->queue = j->next;
		j->next = NULL;
		if (j->kind == JOB_SLICES) {
			s->slices_queued = false;
			s->slices_dirty = false;
			char *v[] = { DP_DRAAPI_SLICES, s->env.api, s->env.token_path, s->env.ca_path, s->driver,
				      s->env.node, s->desired, NULL };
			memcpy(argv, v, sizeof(v));
		} else {
			draside_claim_argv(s, j, out, sizeof(out), argv);
		}
		s->running = j;
		int r = dp_helper_set_argv(s->helper, argv);
		if (r == 0)
			r = dp_helper_request(s->helper, on_helper_done, s, &s->wait);
		if (r < 0) {
			dp_helper_result res = { .ok = false, .start_error = r };
			snprintf(res.reason, sizeof(res.reason), "cannot start %s: %s", DP_KUBEAPI_EXE, strerror(-r));
			s->wait = NULL;
			on_helper_done(&res, s);
		}
	}
}

void draside_enqueue(dp_draside *s, struct job *j)
{
	struct job **p = &s->queue;

	if (j->kind == JOB_SLICES) {
		if (s->slices_queued) {
			free(j);
			return;
		}
		s->slices_queued = true;
	}
	while (*p)
		p = &(*p)->next;
	j->queued_usec = dp_now_usec();
	*p = j;
	start_next(s);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* ---------------------------------------------------------------- slices */

static void queue_slices(dp_draside *s)
{
	struct job *j;

	if (!s->devices)
		return;
	if (!(j = calloc(1, sizeof(*j)))) {
		dp_warn("ResourceSlices not published", "driver=%s reason=\"out of memory\"", s->driver);
		return;
	}
	j->kind = JOB_SLICES;
	draside_enqueue(s, j);
}

static int on_retry(dp_source *src, void *userdata)
{
	queue_slices(userdata);
	return 0;
}

static void slices_done(dp_draside *s, const dp_helper_result *r)
{
	uint64_t next = DP_DRASIDE_RESYNC_USEC;

	if (r->ok) {
		bool changed = strncmp(r->reason, "unchanged", 9) != 0;
		dp_metrics_dra_slices(s->driver, changed ? "published" : "unchanged");
		if (changed || !s->published)
			dp_info("ResourceSlices published", "driver=%s node=%s result=\"%s\"", s->driver, s->env.node,
				r->reason);
		else
			dp_debug("ResourceSlices unchanged", "driver=%s result=\"%s\"", s->driver, r->reason);
		s->published = true;
		s->backoff_usec = 0;
		dp_health_changed(s->health);
	} else {
		dp_metrics_dra_slices(s->driver, "error");
		next = s->backoff_usec ? s->backoff_usec : BACKOFF_FIRST_USEC;
		s->backoff_usec = next * 2 > BACKOFF_MAX_USEC ? BACKOFF_MAX_USEC : next * 2;
		dp_warn("ResourceSlices not published", "driver=%s node=%s reason=\"%s\" retry_in=%llus", s->driver,
			s->env.node, r->reason, (unsigned long long)(next / DP_USEC_PER_SEC));
	}
	if (s->slices_dirty)
		queue_slices(s); /* given a new set while this run read the old one */
	else
		(void)dp_timer_set(s->retry, next, 0);
}

static void on_helper_done(const dp_helper_result *r, void *userdata)
{
	dp_draside *s = userdata;
	struct job *j = s->running;

	s->wait = NULL;
	s->running = NULL;
	if (j && j->kind == JOB_SLICES)
		slices_done(s, r);
	else if (j)
		draside_claim_done(s, j, r);
	free(j);
	start_next(s);
}

/* slices.json replaced by text (a temporary file, renamed). */
static int write_desired(const dp_draside *s, const char *text, size_t len)
{
	char tmp[PATH_MAX + 16];
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->desired);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	for (size_t off = 0; off < len;) {
		ssize_t n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = -errno;
			close(fd);
			unlink(tmp);
			return e;
		}
		off += (size_t)n;
	}
	close(fd);
	return rename(tmp, s->desired) < 0 ? -errno : 0;
}

int dp_draside_publish(dp_draside *s, const char *devices_json, size_t len)
{
	int r;

	if (s->devices && strlen(s->devices) == len && memcmp(s->devices, devices_json, len) == 0)
		return 0;
	char *copy = strndup(devices_json, len);
	if (!copy)
		return -ENOMEM;
	if (s->running && s->running->kind == JOB_SLICES)
		s->slices_dirty = true; /* runs again when this one ends */
	if ((r = write_desired(s, devices_json, len)) < 0) {
		free(copy);
		dp_warn("ResourceSlices not published", "driver=%s reason=\"cannot write %s: %s\"", s->driver,
			s->desired, strerror(-r));
		return r;
	}
	free(s->devices);
	s->devices = copy;
	s->published = false;
	dp_health_changed(s->health);
	if (!s->slices_dirty)
		queue_slices(s);
	return 0;
}

/* ---------------------------------------------------------------- registration */

static void on_status(bool registered, const char *error, void *userdata)
{
	dp_draside *s = userdata;

	s->registered = registered;
	dp_health_changed(s->health);
	if (!registered) {
		dp_warn("DRA driver registration refused by the kubelet", "driver=%s error=\"%s\"", s->driver, error);
		return;
	}
	dp_info("DRA driver registered with the kubelet", "driver=%s endpoint=%s", s->driver, s->socket);
	queue_slices(s); /* a kubelet that restarted may have wiped them */
}

/* ---------------------------------------------------------------- setup */

static int make_dirs(dp_draside *s)
{
	char plugins[PATH_MAX];
	int n = snprintf(plugins, sizeof(plugins), "%s/plugins", s->cfg.kubelet_dir);
	if (n < 0 || (size_t)n >= sizeof(plugins) ||
	    snprintf(s->dir, sizeof(s->dir), "%s/%s", plugins, s->driver) >= (int)sizeof(s->dir) ||
	    snprintf(s->claims, sizeof(s->claims), "%s/claims", s->dir) >= (int)sizeof(s->claims) ||
	    snprintf(s->desired, sizeof(s->desired), "%s/slices.json", s->dir) >= (int)sizeof(s->desired))
		return -ENAMETOOLONG;
	if ((mkdir(plugins, 0750) < 0 && errno != EEXIST) || (mkdir(s->dir, 0750) < 0 && errno != EEXIST) ||
	    (mkdir(s->claims, 0700) < 0 && errno != EEXIST))
		return -errno;
	struct stat st;
	if (lstat(s->claims, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int health_status(const char *service, void *userdata)
{
	dp_draside *s = userdata;

	if (service[0] == '\0')
		return DP_HEALTH_SERVING;
	if (strcmp(service, DP_HEALTH_READINESS) == 0)
		return dp_draside_ready(s) ? DP_HEALTH_SERVING : DP_HEALTH_NOT_SERVING;
	return -ENOENT;
}

static void swept(const char *name, void *userdata)
{
	dp_info("stale DRA socket removed", "path=\"%s/%s\"", ((dp_draside *)userdata)->dir, name);
}

static int serve(dp_draside *s)
{
	char registry[PATH_MAX], name[DP_SOCKET_NAME_MAX + 1];
	static const char *const versions[] = { DP_DRA_VERSION, DP_DRA_HEALTH_VERSION };
	int r;

	(void)dp_socket_sweep(s->dir, DP_DRASIDE_SOCKET_PREFIX, NULL, swept, s); /* killed instances' */
	if ((r = dp_socket_name(name, sizeof(name), DP_DRASIDE_SOCKET_PREFIX)) < 0)
		return r;
	if (snprintf(s->socket, sizeof(s->socket), "%s/%s", s->dir, name) >= (int)sizeof(s->socket))
		return -ENAMETOOLONG;
	if ((r = dp_health_new(health_status, s, &s->health)) < 0)
		return r;
	dp_dra_driver drv = draside_dra_driver;
	drv.health = s->health;
	if ((r = dp_dra_new(s->loop, s->socket, &drv, s, &s->dra)) < 0)
		return r;
	if (snprintf(registry, sizeof(registry), "%s/plugins_registry", s->cfg.kubelet_dir) >= (int)sizeof(registry))
		return -ENAMETOOLONG;
	if (mkdir(registry, 0750) < 0 && errno != EEXIST)
		return -errno;
	dp_pluginreg_config rc = { .type = DP_PLUGINREG_TYPE_DRA, .name = s->driver, .endpoint = s->socket,
				   .versions = versions, .n_versions = 2, .on_status = on_status, .userdata = s };
	return dp_pluginreg_new(s->loop, registry, &rc, &s->reg);
}

int dp_draside_new(dp_loop *loop, const dp_draside_config *c, dp_draside **ret)
{
	_cleanup_(dp_draside_freep) dp_draside *s = NULL;
	char exe[PATH_MAX];
	char *argv[] = { DP_DRAAPI_SLICES, NULL };
	int r;

	if (!loop || !c || !c->driver || strlen(c->driver) > DRIVER_MAX || !dp_kube_dns_subdomain(c->driver) ||
	    !c->env || !c->kubelet_dir || !c->resolve || !ret)
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->loop = loop;
	s->cfg = *c;
	s->env = *c->env;
	s->cfg.env = &s->env;
	snprintf(s->driver, sizeof(s->driver), "%s", c->driver);
	if (!c->exe && (r = dp_helper_sibling(DP_KUBEAPI_EXE, exe, sizeof(exe))) < 0)
		return r;
	if ((r = make_dirs(s)) < 0 ||
	    (r = dp_helper_new(loop, c->exe ? c->exe : exe, argv, HELPER_DEADLINE_USEC, HELPER_GRACE_USEC, &s->helper)) < 0 ||
	    (r = dp_timer_add_disarmed(loop, on_retry, s, &s->retry)) < 0 || (r = serve(s)) < 0)
		return r;
	s->cfg.exe = NULL;
	*ret = TAKE_PTR(s);
	return 0;
}

int dp_draside_new_in_pod(dp_loop *loop, const char *driver, const char *exe, dp_draside_resolve_fn resolve,
			  void *userdata, dp_draside **ret, char *why, size_t why_size)
{
	char kubelet[PATH_MAX];
	dp_kubeenv env;
	int r = dp_kubeenv_load(&env, why, why_size);

	if (r == 0)
		r = dp_path(kubelet, sizeof(kubelet), "/var/lib/kubelet");
	if (r != 0)
		return r < 0 ? r : r == 1 ? -ENOENT : -EINVAL;
	dp_draside_config c = { .driver = driver, .env = &env, .kubelet_dir = kubelet, .exe = exe,
				.resolve = resolve, .userdata = userdata };
	if ((r = dp_draside_new(loop, &c, ret)) < 0)
		snprintf(why, why_size, "cannot serve the DRA driver %s: %s", driver, strerror(-r));
	return r;
}

dp_draside *dp_draside_free(dp_draside *s)
{
	if (!s)
		return NULL;
	s->reg = dp_pluginreg_free(s->reg);
	s->dra = dp_dra_free(s->dra); /* cancels the claims in flight */
	if (s->socket[0])
		(void)unlink(s->socket);
	s->health = dp_health_free(s->health);
	if (s->wait)
		dp_helper_wait_cancel(s->wait);
	s->helper = dp_helper_free(s->helper);
	free(s->running);
	while (s->queue) {
		struct job *j = s->queue;
		s->queue = j->next;
		free(j);
	}
	s->retry = dp_source_free(s->retry);
	free(s->devices);
	free(s);
	return NULL;
}

int dp_draside_set_health(dp_draside *s, const dp_draside_health *devices, size_t n)
{
	dp_dra_device_health *h;
	int r;

	if (!s || (n && !devices))
		return -EINVAL;
	if (!(h = calloc(n ? n : 1, sizeof(*h))))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		h[i] = (dp_dra_device_health){ .pool = s->env.node, .device = devices[i].device,
					       .health = devices[i].healthy ? DP_DRA_HEALTH_HEALTHY : DP_DRA_HEALTH_UNHEALTHY,
					       .message = devices[i].message };
	r = dp_dra_set_health(s->dra, h, n, DP_DRASIDE_HEALTH_TIMEOUT_S);
	free(h);
	return r;
}

int dp_draside_exe_fd(const dp_draside *s)
{
	return s ? dp_helper_exe_fd(s->helper) : -1;
}

bool dp_draside_ready(const dp_draside *s)
{
	return s && s->registered && s->published;
}

unsigned dp_draside_prepared(const dp_draside *s, unsigned *repeats)
{
	if (repeats)
		*repeats = s ? s->repeats : 0;
	return s ? s->prepared : 0;
}

size_t dp_draside_seccomp_rules(int exe_fd, dp_seccomp_rule *out, size_t cap)
{
	size_t n = 0;

	if (exe_fd < 0)
		return 0;
	if (n < cap)
		out[n++] = (dp_seccomp_rule)DP_SC("futex"); /* the C library's locks around the fork */
	for (size_t i = 0; i < dp_seccomp_n_api_client_rules && n < cap; i++)
		out[n++] = dp_seccomp_api_client_rules[i];
	if (n < cap)
		out[n++] = dp_seccomp_exec_rule(exe_fd);
	return n;
}
