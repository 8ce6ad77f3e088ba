/* SPDX-License-Identifier: Apache-2.0 */
/*
 * labels: the parent side of node labelling. Each attempt is one run of the "label-node"
 * helper child (label-node/label_patch.c); this module validates the configuration, starts
 * attempts from the loop, logs their outcome and schedules the retry. No HTTP or TLS here.
 */
#include "labels.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct hl_labels {
	dp_loop *loop;
	dp_helper *helper;    /* idle once labelled */
	dp_helper_wait *wait; /* the attempt in flight, or NULL */
	dp_source *retry;     /* the next attempt */
	char *node;
	char *url;
	char hypervisor[LABEL_VALUE_MAX + 1];
	char token_path[PATH_MAX];
	char ca_path[PATH_MAX];
	uint64_t backoff_usec;
	unsigned attempts;
	bool done;
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

/* Fills node, url, token_path and ca_path. Returns 0 (active), 1 / 2 (inactive, see
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
	snprintf(l->token_path, sizeof(l->token_path), "%s", e.token_path);
	snprintf(l->ca_path, sizeof(l->ca_path), "%s", e.ca_path);
	if (!(l->node = strdup(e.node)) || asprintf(&l->url, "%s/api/v1/nodes/%s", e.api, e.node) < 0) {
		l->url = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* ---------------------------------------------------------------- attempts */

static void schedule_retry(hl_labels *l)
{
	uint64_t delay = l->backoff_usec;
	int r;

	l->backoff_usec = delay >= BACKOFF_MAX_USEC / 2 ? BACKOFF_MAX_USEC : delay * 2;
	r = dp_timer_set(l->retry, delay, 0);
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

static void on_attempt_done(const dp_helper_result *r, void *userdata)
{
	hl_labels *l = userdata;

	l->wait = NULL;
	dp_debug("node labels: attempt finished", "attempt=%u ok=%d result=%s", l->attempts, r->ok, r->reason);
	if (!r->ok) {
		attempt_failed(l, r->reason);
		return;
	}
	l->done = true;
	dp_info("node labelled", "node=%s " HL_LABEL_ENABLED "=true " HL_LABEL_HYPERVISOR "=%s attempts=%u",
		l->node, l->hypervisor, l->attempts);
	/* Nothing more to send: no timer. The helper stays (idle: no child, no timer armed) so
	 * that the fd the daemon's seccomp filter lets it exec through is never reused. */
	l->retry = dp_source_free(l->retry);
}

static int on_retry(dp_source *s, void *userdata)
{
	hl_labels *l = userdata;
	char e[128];
	int r;

	if (l->wait || l->done)
		return 0;
	l->attempts++;
	dp_debug("node labels: attempt started", "attempt=%u url=%s", l->attempts, l->url);
	r = dp_helper_request(l->helper, on_attempt_done, l, &l->wait);
	if (r < 0) {
		snprintf(e, sizeof(e), "cannot start the label helper: %s", strerror(-r));
		attempt_failed(l, e);
	}
	return 0;
}

/* ---------------------------------------------------------------- API */

static int helper_new(hl_labels *l, const hl_labels_params *p)
{
	char *argv[] = { HL_LABEL_HELPER, l->url, l->token_path, l->ca_path, l->hypervisor, NULL };
	uint64_t deadline = p && p->deadline_usec ? p->deadline_usec : HL_LABELS_DEADLINE_USEC;

	return dp_helper_new(l->loop, p ? p->exe : NULL, argv, deadline, HL_LABELS_KILL_GRACE_USEC, &l->helper);
}

int hl_labels_start(dp_loop *loop, const char *hypervisor, const hl_labels_params *params, hl_labels **ret)
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
	/* The first attempt runs from the loop: nothing is spawned here. */
	r = dp_timer_add(loop, 0, 0, on_retry, l, &l->retry);
	if (r < 0)
		return r;
	dp_info("node labelling enabled", "node=%s api=%s " HL_LABEL_HYPERVISOR "=%s", l->node, l->url, hypervisor);
	*ret = TAKE_PTR(l);
	return 0;
}

hl_labels *hl_labels_free(hl_labels *l)
{
	if (!l)
		return NULL;
	l->helper = dp_helper_free(l->helper); /* kills a running child; the loop reaps it */
	l->retry = dp_source_free(l->retry);
	free(l->url);
	free(l->node);
	free(l);
	return NULL;
}

bool hl_labels_done(const hl_labels *l)
{
	return l && l->done;
}

int hl_labels_exe_fd(const hl_labels *l)
{
	int fd = l ? dp_helper_exe_fd(l->helper) : -1;
	return fd >= 0 ? fd : -1;
}
