/* SPDX-License-Identifier: Apache-2.0 */
/* draside_claims: NodePrepareResources / NodeUnprepareResources: checkpoints, fetches, answers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/claimfile.h"
#include "dp/draapi.h"
#include "dp/kubeenv.h"
#include "dp/log.h"
#include "dp/macro.h"
#include "dp/metrics.h"
#include "draside_internal.h"

#define WHY_MAX 320
#define CLAIM_PATH_MAX (PATH_MAX + DP_DRA_STRING_MAX + 16)

static void claim_path(const dp_draside *s, const char *uid, bool fetch, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s%s%s", s->claims, fetch ? "." : "", uid, fetch ? ".fetch" : "");
}

/* A UID as the kubelet sends it: it names a file here, so [0-9A-Za-z-] only. */
static bool uid_ok(const char *uid)
{
	return dp_kube_uid(uid, 128);
}

/* Answer c with claim's devices, each resolved; 0, or negative with the claim answered an error. */
static int answer(dp_draside *s, dp_dra_claim *c, const dp_draclaim *claim, bool answer_ok)
{
	char cdi[DP_DRACLAIM_RESULTS_MAX][DP_DRASIDE_CDI_MAX], why[WHY_MAX], msg[WHY_MAX + 128];
	const char *ids[DP_DRACLAIM_RESULTS_MAX], *reqs[DP_DRACLAIM_RESULTS_MAX];
	dp_dra_device devs[DP_DRACLAIM_RESULTS_MAX];
	int r;

	for (size_t i = 0; i < claim->n; i++) {
		const dp_draclaim_result *x = &claim->results[i];
		why[0] = '\0';
		if ((r = s->cfg.resolve(x->device, cdi[i], sizeof(cdi[i]), why, sizeof(why), s->cfg.userdata)) < 0) {
			snprintf(msg, sizeof(msg), "device %s of claim %s/%s cannot be prepared: %s", x->device,
				 dp_dra_claim_namespace(c), dp_dra_claim_name(c), why[0] ? why : strerror(-r));
			dp_warn("claim not prepared", "claim=%s/%s uid=%s device=%s reason=\"%s\"", dp_dra_claim_namespace(c),
				dp_dra_claim_name(c), dp_dra_claim_uid(c), x->device, why[0] ? why : strerror(-r));
			dp_dra_done(c, NULL, 0, msg);
			dp_metrics_dra_prepare(s->driver, "error", 0);
			return r;
		}
		ids[i] = cdi[i];
		reqs[i] = x->request;
		devs[i] = (dp_dra_device){ .pool = s->env.node, .device = x->device, .requests = &reqs[i],
					   .n_requests = 1, .cdi_ids = &ids[i], .n_cdi_ids = 1,
					   .share_id = x->share_id[0] ? x->share_id : NULL };
	}
	if (answer_ok)
		dp_dra_done(c, devs, claim->n, NULL);
	return 0;
}

static void prepare(dp_dra_claim *c, void *userdata)
{
	dp_draside *s = userdata;
	dp_draclaim claim_buf, *claim = &claim_buf;
	char path[CLAIM_PATH_MAX], why[WHY_MAX] = "";
	const char *uid = dp_dra_claim_uid(c);
	int r;

	if (!uid_ok(uid) || !dp_kube_dns_label(dp_dra_claim_namespace(c)) || !dp_kube_dns_subdomain(dp_dra_claim_name(c))) {
		dp_dra_done(c, NULL, 0, "invalid claim UID, namespace or name");
		return;
	}
	claim_path(s, uid, false, path, sizeof(path));
	r = dp_claimfile_read(path, claim, why, sizeof(why));
	if (r == 0) {
		if (answer(s, c, claim, true) == 0) {
			s->repeats++;
			dp_metrics_dra_prepare(s->driver, "checkpoint", 0);
			dp_debug("claim prepared again, from its checkpoint", "claim=%s/%s uid=%s",
				 dp_dra_claim_namespace(c), dp_dra_claim_name(c), uid);
		}
		return;
	}
	if (r != -ENOENT) {
		dp_warn("claim checkpoint unreadable, fetching the claim again", "path=\"%s\" reason=\"%s\"", path,
			r == -EBADMSG ? why : strerror(-r));
		(void)unlink(path);
	}
	struct job *j = calloc(1, sizeof(*j));
	if (!j) {
		dp_dra_done(c, NULL, 0, "out of memory");
		return;
	}
	j->kind = JOB_CLAIM;
	j->claim = c;
	snprintf(j->uid, sizeof(j->uid), "%s", uid);
	draside_enqueue(s, j);
}

static void unprepare(dp_dra_claim *c, void *userdata)
{
	dp_draside *s = userdata;
	char path[CLAIM_PATH_MAX], msg[CLAIM_PATH_MAX + 64];
	const char *uid = dp_dra_claim_uid(c);

	if (!uid_ok(uid)) {
		dp_dra_done(c, NULL, 0, "invalid claim UID");
		return;
	}
	claim_path(s, uid, false, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT) {
		snprintf(msg, sizeof(msg), "cannot remove the checkpoint %s: %s", path, strerror(errno));
		dp_warn("claim not unprepared", "claim=%s/%s uid=%s reason=\"%s\"", dp_dra_claim_namespace(c),
			dp_dra_claim_name(c), uid, msg);
		dp_dra_done(c, NULL, 0, msg);
		dp_metrics_dra_unprepare(s->driver, false);
		return;
	}
	dp_metrics_dra_unprepare(s->driver, true);
	dp_info("claim unprepared", "claim=%s/%s uid=%s", dp_dra_claim_namespace(c), dp_dra_claim_name(c), uid);
	dp_dra_done(c, NULL, 0, NULL);
}

static void cancel(dp_dra_claim *c, void *userdata)
{
	dp_draside *s = userdata;

	for (struct job *j = s->running; j; j = NULL)
		if (j->claim == c)
			j->claim = NULL;
	for (struct job **p = &s->queue; *p;) {
		struct job *j = *p;
		if (j->kind == JOB_CLAIM && j->claim == c) {
			*p = j->next;
			free(j);
		} else {
			p = &j->next;
		}
	}
}

const dp_dra_driver draside_dra_driver = { .prepare = prepare, .unprepare = unprepare, .cancel = cancel };

void draside_claim_argv(dp_draside *s, const struct job *j, char *out, size_t out_size, char **argv)
{
	dp_dra_claim *c = j->claim;
	claim_path(s, j->uid, true, out, out_size);
	char *v[] = { DP_DRAAPI_CLAIM, s->env.api, s->env.token_path, s->env.ca_path,
		      (char *)dp_dra_claim_namespace(c), (char *)dp_dra_claim_name(c), (char *)j->uid,
		      s->driver, s->env.node, out, NULL };
	memcpy(argv, v, sizeof(v));
}

void draside_claim_done(dp_draside *s, struct job *j, const dp_helper_result *r)
{
	dp_draclaim claim_buf, *claim = &claim_buf;
	char fetch[CLAIM_PATH_MAX], path[CLAIM_PATH_MAX], why[WHY_MAX] = "", msg[CLAIM_PATH_MAX + 64];
	dp_dra_claim *c = j->claim;

	claim_path(s, j->uid, true, fetch, sizeof(fetch));
	claim_path(s, j->uid, false, path, sizeof(path));
	if (!c) { /* the kubelet gave up meanwhile: it asks again */
		(void)unlink(fetch);
		return;
	}
	if (!r->ok) {
		dp_warn("claim not prepared", "claim=%s/%s uid=%s reason=\"%s\"", dp_dra_claim_namespace(c),
			dp_dra_claim_name(c), j->uid, r->reason);
		(void)unlink(fetch);
		dp_dra_done(c, NULL, 0, r->reason);
		dp_metrics_dra_prepare(s->driver, "error", 0);
		return;
	}
	if (dp_claimfile_read(fetch, claim, why, sizeof(why)) < 0) {
		dp_warn("claim not prepared", "claim=%s/%s uid=%s reason=\"the helper's claim file: %s\"",
			dp_dra_claim_namespace(c), dp_dra_claim_name(c), j->uid, why);
		(void)unlink(fetch);
		dp_dra_done(c, NULL, 0, "the claim could not be read back from the helper");
		dp_metrics_dra_prepare(s->driver, "error", 0);
		return;
	}
	if (answer(s, c, claim, false) < 0) { /* answered with the reason */
		(void)unlink(fetch);
		return;
	}
	if (rename(fetch, path) < 0) {
		snprintf(msg, sizeof(msg), "cannot checkpoint the claim at %s: %s", path, strerror(errno));
		dp_warn("claim not prepared", "claim=%s/%s uid=%s reason=\"%s\"", dp_dra_claim_namespace(c),
			dp_dra_claim_name(c), j->uid, msg);
		(void)unlink(fetch);
		dp_dra_done(c, NULL, 0, msg);
		dp_metrics_dra_prepare(s->driver, "error", 0);
		return;
	}
	s->prepared++;
	char devices[DP_DRACLAIM_RESULTS_MAX * (DP_DRACLAIM_DEVICE_MAX + 1) + 1] = "";
	for (size_t i = 0; i < claim->n; i++)
		snprintf(devices + strlen(devices), sizeof(devices) - strlen(devices), "%s%s", i ? "," : "",
			 claim->results[i].device);
	dp_info("claim prepared", "claim=%s/%s uid=%s devices=%s", dp_dra_claim_namespace(c), dp_dra_claim_name(c),
		j->uid, devices);
	if (answer(s, c, claim, true) == 0)
		dp_metrics_dra_prepare(s->driver, "prepared", dp_now_usec() - j->queued_usec);
}
