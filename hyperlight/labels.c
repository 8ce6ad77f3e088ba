/* SPDX-License-Identifier: Apache-2.0 */
/*
 * labels: the parent side of node labelling. Each attempt is one run of the "label-node"
 * helper child (label-node/label_patch.c); this module validates the configuration, starts
 * attempts from the loop, logs their outcome and schedules the retry. No HTTP or TLS here.
 * One track per label a verdict moves (the hypervisor's hyperlight.dev/enabled, then one per
 * companion), each with its own hold; one attempt sends every track's label at once.
 */
#include "labels.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/env.h"
#include "dp/helper.h"
#include "dp/kubeenv.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "label-node/label_node.h"

#define BACKOFF_FIRST_USEC (1 * DP_USEC_PER_SEC)
#define BACKOFF_MAX_USEC (300 * DP_USEC_PER_SEC)
#define LABEL_VALUE_MAX 63
#define STATUS_PREFIX "status="
#define BODY_PREFIX " body="

/* What a track's label says, or is to say. */
enum { LABEL_NONE = -1, LABEL_FALSE = 0, LABEL_TRUE = 1 };
#define TRACKS_MAX (1 + HL_LABELS_COMPANIONS_MAX)
#define KEY_SIZE (HL_LABELS_KEY_MAX + 1)
#define COMPANIONS_TEXT_SIZE (HL_LABELS_COMPANIONS_MAX * (KEY_SIZE + sizeof(" =false")) + 1)

struct hl_labels;

/* One label a verdict moves. */
struct track {
	struct hl_labels *l;
	dp_source *hold; /* armed while the verdict differs from want */
	char key[KEY_SIZE];
	char reason[HL_LABELS_REASON_MAX]; /* the latest verdict's */
	int want;    /* the label to have: the verdict that held for hold_usec (the first at once) */
	int sent;    /* the label of the attempt in flight (LABEL_NONE: not in it) */
	int applied; /* the label the API server last accepted */
	bool healthy; /* the latest verdict */
	bool hold_armed;
};

struct hl_labels {
	dp_loop *loop;
	dp_helper *helper;    /* idle while the labels say what they should */
	dp_helper_wait *wait; /* the attempt in flight, or NULL */
	dp_source *retry;     /* the next attempt */
	char *node;
	char *url;
	char hypervisor[LABEL_VALUE_MAX + 1];
	char token_path[PATH_MAX];
	char ca_path[PATH_MAX];
	char args[HL_LABELS_COMPANIONS_MAX][KEY_SIZE + sizeof("=false")]; /* the companions' argv */
	struct track tracks[TRACKS_MAX]; /* [HL_LABELS_HYPERVISOR], then the companions' */
	size_t n_tracks;
	uint64_t backoff_usec;
	uint64_t hold_usec;
	unsigned attempts;
	bool retry_armed; /* an attempt is scheduled */
};

DP_DEFINE_CLEANUP(hl_labels, hl_labels_free)

/* ---------------------------------------------------------------- configuration */

static bool is_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z');
}

/* A non-empty Kubernetes label value: (([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?, <= 63. */
static bool label_value(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > LABEL_VALUE_MAX || !is_alnum(s[0]) || !is_alnum(s[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!is_alnum(s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
			return false;
	return true;
}

/* NODE_LABELS_HOLD (seconds): invalid -> the default, said once. */
static void load_hold(hl_labels *l)
{
	char err[DP_ENV_QUOTED_SIZE + 64];
	uint32_t s;

	if (dp_env_u32(HL_LABELS_HOLD_ENV, HL_LABELS_HOLD_DEFAULT_S, 0, HL_LABELS_HOLD_MAX_S, &s, err, sizeof(err)) < 0) {
		dp_warn("invalid " HL_LABELS_HOLD_ENV ", using the default", "error=%s default=%us", err,
			HL_LABELS_HOLD_DEFAULT_S);
		s = HL_LABELS_HOLD_DEFAULT_S;
	}
	l->hold_usec = (uint64_t)s * DP_USEC_PER_SEC;
}

/* Fills node, url, token_path, ca_path and hold_usec. Returns 0 (active), 1 / 2 (inactive, see
 * dp_kubeenv_load), or a negative errno. */
static int load_config(hl_labels *l, char *why, size_t size)
{
	const char *off = getenv("NODE_LABELS");
	dp_kubeenv e;
	int r;

	if (off && strcmp(off, "false") == 0) {
		snprintf(why, size, "NODE_LABELS=false");
		return 1;
	}
	r = dp_kubeenv_load(&e, why, size);

	if (r != 0)
		return r;
	load_hold(l);
	snprintf(l->token_path, sizeof(l->token_path), "%s", e.token_path);
	snprintf(l->ca_path, sizeof(l->ca_path), "%s", e.ca_path);
	if (!(l->node = strdup(e.node)) || asprintf(&l->url, "%s/api/v1/nodes/%s", e.api, e.node) < 0) {
		l->url = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* "node labelling enabled", with the companions' label keys when there are any. */
static void log_enabled(const hl_labels *l)
{
	char keys[HL_LABELS_COMPANIONS_MAX * KEY_SIZE + 1] = "";
	size_t n = 0;

	for (size_t i = 1; i < l->n_tracks; i++) {
		int w = snprintf(keys + n, sizeof(keys) - n, "%s%s", i > 1 ? "," : "", l->tracks[i].key);
		n += w > 0 ? (size_t)w : 0;
	}
	if (n)
		dp_info("node labelling enabled", "node=%s api=%s " HL_LABEL_HYPERVISOR "=%s hold=%llus companions=%s",
			l->node, l->url, l->hypervisor, (unsigned long long)(l->hold_usec / DP_USEC_PER_SEC), keys);
	else
		dp_info("node labelling enabled", "node=%s api=%s " HL_LABEL_HYPERVISOR "=%s hold=%llus", l->node,
			l->url, l->hypervisor, (unsigned long long)(l->hold_usec / DP_USEC_PER_SEC));
}

bool hl_labels_companion_key(const char *key)
{
	static const char prefix[] = HL_LABEL_PREFIX;
	static const char *const own[] = { HL_LABEL_ENABLED, HL_LABEL_HYPERVISOR };

	if (!key || strncmp(key, prefix, sizeof(prefix) - 1) != 0 || !label_value(key + sizeof(prefix) - 1))
		return false;
	for (size_t i = 0; i < DP_ELEMENTSOF(own); i++)
		if (strcmp(key, own[i]) == 0)
			return false;
	return true;
}

/* ---------------------------------------------------------------- attempts */

static void schedule_retry(hl_labels *l)
{
	uint64_t delay = l->backoff_usec;
	int r;

	l->backoff_usec = delay >= BACKOFF_MAX_USEC / 2 ? BACKOFF_MAX_USEC : delay * 2;
	r = dp_timer_set(l->retry, delay, 0);
	l->retry_armed = r >= 0;
	if (r < 0)
		dp_warn("node labelling stopped: cannot arm the retry timer", "node=%s error=%s", l->node,
			strerror(-r));
}

/* "status=<code> body=<excerpt>" from the child: the API server's answer. */
static bool parse_answer(const char *reason, long *ret_status, const char **ret_body)
{
	char *end;
	long status;

	if (strncmp(reason, STATUS_PREFIX, strlen(STATUS_PREFIX)) != 0)
		return false;
	errno = 0;
	status = strtol(reason + strlen(STATUS_PREFIX), &end, 10);
	if (errno || end == reason + strlen(STATUS_PREFIX) || strncmp(end, BODY_PREFIX, strlen(BODY_PREFIX)) != 0)
		return false;
	*ret_status = status;
	*ret_body = end + strlen(BODY_PREFIX);
	return true;
}

/* Log a failed attempt and schedule the next one. */
static void attempt_failed(hl_labels *l, const char *reason)
{
	char q[3 * DP_HELPER_REASON_MAX + 8];
	unsigned long long retry_s = (unsigned long long)(l->backoff_usec / DP_USEC_PER_SEC);
	const char *body;
	long status;

	if (parse_answer(reason, &status, &body))
		dp_warn("node labelling failed", "node=%s attempt=%u status=%ld body=%s retry_in=%llus",
			l->node, l->attempts, status, dp_logq(q, sizeof(q), body), retry_s);
	else
		dp_warn("node labelling failed", "node=%s attempt=%u error=%s retry_in=%llus", l->node,
			l->attempts, dp_logq(q, sizeof(q), reason), retry_s);
	schedule_retry(l);
}

static char *label_text(int v)
{
	return v == LABEL_TRUE ? "true" : "false";
}

/* A track whose label the API server does not have yet. */
static bool behind(const struct track *t)
{
	return t->want != LABEL_NONE && t->applied != t->want;
}

/* Something to send: the hypervisor's first verdict has come (no attempt before it) and a
 * track is behind. */
static bool pending(const hl_labels *l)
{
	if (l->tracks[HL_LABELS_HYPERVISOR].want == LABEL_NONE)
		return false;
	for (size_t i = 0; i < l->n_tracks; i++)
		if (behind(&l->tracks[i]))
			return true;
	return false;
}

/* Send now unless an attempt is in flight (its end comes back here), a retry is already
 * scheduled (its back-off is kept), or the API server has every label already. */
static void kick(hl_labels *l)
{
	if (l->wait || l->retry_armed || !pending(l))
		return;
	l->retry_armed = dp_timer_set_asap(l->retry) >= 0;
}

/* " hyperlight.dev/tun=true ..." for the companions the attempt sent. */
static void companions_text(const hl_labels *l, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 1; i < l->n_tracks && n < size; i++)
		if (l->tracks[i].sent != LABEL_NONE) {
			int w = snprintf(buf + n, size - n, " %s=%s", l->tracks[i].key, label_text(l->tracks[i].sent));
			n += w > 0 ? (size_t)w : 0;
		}
}

static void on_attempt_done(const dp_helper_result *r, void *userdata)
{
	hl_labels *l = userdata;
	const struct track *hv = &l->tracks[HL_LABELS_HYPERVISOR];
	char q[3 * HL_LABELS_REASON_MAX + 8], more[COMPANIONS_TEXT_SIZE];

	l->wait = NULL;
	dp_debug("node labels: attempt finished", "attempt=%u ok=%d result=%s", l->attempts, r->ok, r->reason);
	if (!r->ok) {
		attempt_failed(l, r->reason);
		return;
	}
	for (size_t i = 0; i < l->n_tracks; i++)
		if (l->tracks[i].sent != LABEL_NONE)
			l->tracks[i].applied = l->tracks[i].sent;
	l->backoff_usec = BACKOFF_FIRST_USEC;
	companions_text(l, more, sizeof(more));
	if (hv->applied == LABEL_TRUE)
		dp_info("node labelled", "node=%s " HL_LABEL_ENABLED "=true " HL_LABEL_HYPERVISOR "=%s%s attempts=%u",
			l->node, l->hypervisor, more, l->attempts);
	else
		dp_info("node labelled", "node=%s " HL_LABEL_ENABLED "=false " HL_LABEL_HYPERVISOR "=%s%s attempts=%u reason=%s",
			l->node, l->hypervisor, more, l->attempts, dp_logq(q, sizeof(q), hv->reason));
	/* The helper stays (idle: no child) so that the fd the daemon's seccomp filter lets it
	 * exec through is never reused; the next verdict that holds sends again. */
	kick(l);
}

/* The attempt's argv: the hypervisor's two labels, then "<key>=<value>" for each companion
 * with a verdict; each track's sent is what goes. */
static void attempt_argv(hl_labels *l, char **argv, size_t cap)
{
	size_t n = 0;

	argv[n++] = HL_LABEL_HELPER;
	argv[n++] = l->url;
	argv[n++] = l->token_path;
	argv[n++] = l->ca_path;
	argv[n++] = l->hypervisor;
	argv[n++] = label_text(l->tracks[HL_LABELS_HYPERVISOR].want);
	l->tracks[HL_LABELS_HYPERVISOR].sent = l->tracks[HL_LABELS_HYPERVISOR].want;
	for (size_t i = 1; i < l->n_tracks && n + 1 < cap; i++) {
		struct track *t = &l->tracks[i];
		t->sent = t->want;
		if (t->want == LABEL_NONE)
			continue;
		snprintf(l->args[i - 1], sizeof(l->args[i - 1]), "%s=%s", t->key, label_text(t->want));
		argv[n++] = l->args[i - 1];
	}
	argv[n] = NULL;
}

static int on_retry(dp_source *s, void *userdata)
{
	hl_labels *l = userdata;
	char *argv[6 + HL_LABELS_COMPANIONS_MAX + 1];
	char e[128], more[COMPANIONS_TEXT_SIZE];
	int r;

	l->retry_armed = false;
	if (l->wait || !pending(l))
		return 0;
	attempt_argv(l, argv, DP_ELEMENTSOF(argv));
	companions_text(l, more, sizeof(more));
	l->attempts++;
	dp_debug("node labels: attempt started", "attempt=%u url=%s " HL_LABEL_ENABLED "=%s%s", l->attempts, l->url,
		 argv[5], more);
	r = dp_helper_set_argv(l->helper, argv);
	if (r >= 0)
		r = dp_helper_request(l->helper, on_attempt_done, l, &l->wait);
	if (r < 0) {
		snprintf(e, sizeof(e), "cannot start the label helper: %s", strerror(-r));
		attempt_failed(l, e);
	}
	return 0;
}

/* The verdict held for hold_usec: it is the label now. */
static int on_hold(dp_source *s, void *userdata)
{
	struct track *t = userdata;
	hl_labels *l = t->l;
	char q[3 * HL_LABELS_REASON_MAX + 8];

	t->hold_armed = false;
	t->want = t->healthy ? LABEL_TRUE : LABEL_FALSE;
	dp_info("node label follows the device", "node=%s %s=%s held=%llus reason=%s", l->node, t->key,
		label_text(t->want), (unsigned long long)(l->hold_usec / DP_USEC_PER_SEC),
		dp_logq(q, sizeof(q), t->reason));
	kick(l);
	return 0;
}

void hl_labels_verdict(hl_labels *l, size_t which, bool healthy, const char *reason)
{
	int v = healthy ? LABEL_TRUE : LABEL_FALSE;
	struct track *t;

	if (!l || which >= l->n_tracks)
		return;
	t = &l->tracks[which];
	t->healthy = healthy;
	snprintf(t->reason, sizeof(t->reason), "%s", reason ? reason : "");
	if (t->want == LABEL_NONE) { /* the first verdict: the label at once */
		t->want = v;
		kick(l);
	} else if (v == t->want) { /* back before the hold ended: nothing changes */
		if (t->hold_armed && dp_timer_set(t->hold, 0, 0) >= 0) {
			t->hold_armed = false;
			dp_debug("node labels: verdict back within the hold", "node=%s %s=%s", l->node, t->key,
				 label_text(v));
		}
	} else if (l->hold_usec == 0) {
		on_hold(t->hold, t);
	} else if (!t->hold_armed) {
		t->hold_armed = dp_timer_set(t->hold, l->hold_usec, 0) >= 0;
		if (!t->hold_armed) /* no timer: follow at once rather than never */
			on_hold(t->hold, t);
	}
}

/* ---------------------------------------------------------------- API */

static int helper_new(hl_labels *l, const hl_labels_params *p)
{
	char *argv[] = { HL_LABEL_HELPER, l->url, l->token_path, l->ca_path, l->hypervisor, "true", NULL };
	uint64_t deadline = p && p->deadline_usec ? p->deadline_usec : HL_LABELS_DEADLINE_USEC;

	return dp_helper_new(l->loop, p ? p->exe : NULL, argv, deadline, HL_LABELS_KILL_GRACE_USEC, &l->helper);
}

/* The tracks' keys: hyperlight.dev/enabled, then the companions' (each a valid label key
 * under hyperlight.dev/, none of the plugin's own, no two alike). */
static int set_tracks(hl_labels *l, const char *const *companions, size_t n)
{
	if (n > HL_LABELS_COMPANIONS_MAX || (n && !companions))
		return -EINVAL;
	l->n_tracks = 1 + n;
	for (size_t i = 0; i < l->n_tracks; i++) {
		struct track *t = &l->tracks[i];
		const char *key = i ? companions[i - 1] : HL_LABEL_ENABLED;
		if (i && !hl_labels_companion_key(key))
			return -EINVAL;
		for (size_t j = 1; j < i; j++)
			if (strcmp(l->tracks[j].key, key) == 0)
				return -EINVAL;
		snprintf(t->key, sizeof(t->key), "%s", key);
		t->l = l;
		t->want = t->sent = t->applied = LABEL_NONE;
	}
	return 0;
}

int hl_labels_start(dp_loop *loop, const char *hypervisor, const char *const *companions, size_t n_companions,
		    const hl_labels_params *params, hl_labels **ret)
{
	_cleanup_(hl_labels_freep) hl_labels *l = NULL;
	char why[256], q[300];
	int r;

	if (!loop || !ret || !label_value(hypervisor) || (params && params->exe && !*params->exe))
		return -EINVAL;
	if (!(l = calloc(1, sizeof(*l))))
		return -ENOMEM;
	l->loop = loop;
	l->backoff_usec = BACKOFF_FIRST_USEC;
	snprintf(l->hypervisor, sizeof(l->hypervisor), "%s", hypervisor);
	if ((r = set_tracks(l, companions, n_companions)) < 0)
		return r;
	r = load_config(l, why, sizeof(why));
	if (r < 0)
		return r;
	if (r > 0) {
		dp_log(r == 1 ? DP_LOG_INFO : DP_LOG_WARN, "node labelling disabled", "reason=%s",
		       dp_logq(q, sizeof(q), why));
		*ret = NULL;
		return 0;
	}
	if ((r = helper_new(l, params)) < 0)
		return r;
	/* The first attempt waits for the hypervisor's first verdict (hl_labels_verdict): nothing
	 * is spawned here, and a node whose device is unusable from the start is never labelled
	 * "true". */
	if ((r = dp_timer_add_disarmed(loop, on_retry, l, &l->retry)) < 0)
		return r;
	for (size_t i = 0; i < l->n_tracks; i++)
		if ((r = dp_timer_add_disarmed(loop, on_hold, &l->tracks[i], &l->tracks[i].hold)) < 0)
			return r;
	log_enabled(l);
	*ret = TAKE_PTR(l);
	return 0;
}

hl_labels *hl_labels_free(hl_labels *l)
{
	if (!l)
		return NULL;
	l->helper = dp_helper_free(l->helper); /* kills a running child; the loop reaps it */
	l->retry = dp_source_free(l->retry);
	for (size_t i = 0; i < l->n_tracks; i++)
		l->tracks[i].hold = dp_source_free(l->tracks[i].hold);
	free(l->url);
	free(l->node);
	free(l);
	return NULL;
}

bool hl_labels_done(const hl_labels *l)
{
	return l && !pending(l) && l->tracks[HL_LABELS_HYPERVISOR].want != LABEL_NONE;
}

int hl_labels_exe_fd(const hl_labels *l)
{
	int fd = l ? dp_helper_exe_fd(l->helper) : -1;
	return fd >= 0 ? fd : -1;
}
