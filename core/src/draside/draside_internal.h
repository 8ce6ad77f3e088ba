/* SPDX-License-Identifier: Apache-2.0 */
/* draside_internal: the state draside.c (setup, the helper's queue, slices) and draside_claims.c share. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "dp/dra.h"
#include "dp/draside.h"
#include "dp/health.h"
#include "dp/helper.h"
#include "dp/pluginreg.h"

enum job_kind { JOB_SLICES, JOB_CLAIM };

/* One call of the helper, queued or running. */
struct job {
	enum job_kind kind;
	dp_dra_claim *claim; /* JOB_CLAIM; NULL once cancelled */
	char uid[DP_DRA_STRING_MAX + 1];
	uint64_t queued_usec;
	struct job *next;
};

struct dp_draside {
	dp_loop *loop;
	dp_draside_config cfg;
	dp_kubeenv env;
	char driver[DP_KUBE_NODE_MAX + 1];
	char dir[PATH_MAX];        /* <kubelet>/plugins/<driver> */
	char claims[PATH_MAX];     /* <dir>/claims */
	char socket[PATH_MAX];     /* <dir>/dra-<n>.sock (dp_socket_name: one per instance) */
	char desired[PATH_MAX];    /* <dir>/slices.json */
	dp_dra *dra;
	struct dp_health *health;  /* served on the DRA socket: --health-check in DRA mode */
	dp_pluginreg *reg;
	dp_helper *helper;
	dp_helper_wait *wait;      /* the running job's */
	struct job *running, *queue;
	dp_source *retry;          /* the slices' retry and resync */
	char *devices;             /* the last set given */
	uint64_t backoff_usec;
	bool slices_queued, slices_dirty, published, registered;
	unsigned prepared, repeats;
};

/* Queue a job (the slices job at most once); start it when the helper is idle. */
void draside_enqueue(dp_draside *s, struct job *j);
/* The running job's call is over: start the next. */
void draside_next(dp_draside *s);

/* The DRA service's driver (draside_claims.c). */
extern const dp_dra_driver draside_dra_driver;
/* A claim job's argv (count in *n), into argv (12 entries). */
void draside_claim_argv(dp_draside *s, const struct job *j, char *out, size_t out_size, char **argv);
/* The claim job's file paths' size. */
#define DRASIDE_OUT_MAX (PATH_MAX + DP_DRA_STRING_MAX + 16)
/* A claim job's helper result. */
void draside_claim_done(dp_draside *s, struct job *j, const dp_helper_result *r);
