/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics: the process's registry and its text exposition (dp/metrics.h). A fixed table, no
 * allocation: every series is a family, its rendered label set and a value. The hooks call it
 * from the loop (single thread). Label values are made safe and bounded here: printable ASCII
 * only (other bytes become '_'), at most DP_METRICS_LABEL_MAX bytes, and reasons by class.
 * Also the daemons' opt-in (dp_metrics_start): METRICS_ADDRESS parsed, the listener started,
 * its events logged above debug.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/log.h"
#include "dp/metrics.h"
#include "dp_version.h"

enum fam {
	F_BUILD,
	F_ADVERTISED,
	F_HEALTHY,
	F_REGISTERED,
	F_TRANSITIONS,
	F_REGISTRATIONS,
	F_ALLOCATE,
	F_PROBE_RUNS,
	F_PROBE_FAILURES,
	F_CDI_REPAIRS,
	F_CDI_WRITE_FAILURES,
	F_GRPC_UNIMPLEMENTED,
	F_GRPC_LIMITS,
	F_HTTP_REFUSED,
	F_DRA_PREPARE,
	F_DRA_UNPREPARE,
	F_DRA_SLICES,
	F_DROPPED,
	F_N
};

struct family {
	const char *name, *type, *help;
};

/* A row per family: its type and name, then its HELP text. */
#define GAUGE(f, name, help) [f] = { name, "gauge", help }
#define COUNTER(f, name, help) [f] = { name, "counter", help }
static const struct family fams[F_N] = {
	GAUGE(F_BUILD, "sdp_build_info",
	      "Build of the running daemon (always 1)."),
	GAUGE(F_ADVERTISED, "sdp_devices_advertised",
	      "Devices advertised to kubelet, per resource."),
	GAUGE(F_HEALTHY, "sdp_devices_healthy",
	      "Devices advertised Healthy, per resource."),
	GAUGE(F_REGISTERED, "sdp_registered",
	      "1 while the resource is registered with kubelet."),
	COUNTER(F_TRANSITIONS, "sdp_health_transitions_total",
		"Changes of the advertised health, by new state and reason class."),
	COUNTER(F_REGISTRATIONS, "sdp_registrations_total",
		"Registration attempts with kubelet, by result (ok or the failure kind)."),
	COUNTER(F_ALLOCATE, "sdp_allocate_total",
		"Allocate calls answered, by gRPC status."),
	COUNTER(F_PROBE_RUNS, "sdp_probe_runs_total",
		"Hypervisor probe runs (hyperlight)."),
	COUNTER(F_PROBE_FAILURES, "sdp_probe_failures_total",
		"Hypervisor probe runs that failed, by reason class (hyperlight)."),
	COUNTER(F_CDI_REPAIRS, "sdp_cdi_spec_repairs_total",
		"Owned CDI spec rewritten after it was found changed or missing."),
	COUNTER(F_CDI_WRITE_FAILURES, "sdp_cdi_spec_write_failures_total",
		"Owned CDI spec writes that failed (or were refused: symlink, non-regular file)."),
	COUNTER(F_GRPC_UNIMPLEMENTED, "sdp_grpc_unimplemented_total",
		"gRPC calls of a method the daemon does not serve (answered UNIMPLEMENTED)."),
	COUNTER(F_GRPC_LIMITS, "sdp_grpc_limit_hits_total",
		"Times a gRPC server limit acted (a request refused, a connection closed, accepting "
		"paused), by limit."),
	COUNTER(F_HTTP_REFUSED, "sdp_metrics_http_refused_total",
		"Metrics connections refused or cut short by the listener's limits, by reason."),
	COUNTER(F_DRA_PREPARE, "sdp_dra_prepare_total",
		"DRA claims prepared, by driver and result: prepared (fetched and checkpointed), "
		"checkpoint (asked again, answered from the checkpoint), error."),
	COUNTER(F_DRA_UNPREPARE, "sdp_dra_unprepare_total",
		"DRA claims unprepared, by driver and result (ok, error)."),
	COUNTER(F_DRA_SLICES, "sdp_dra_slice_syncs_total",
		"ResourceSlice syncs with the API server, by driver and result (published, unchanged, error)."),
	COUNTER(F_DROPPED, "sdp_metrics_series_dropped_total",
		"Updates of series that did not fit the registry's fixed table."),
};
#undef GAUGE
#undef COUNTER

#define LABELS_MAX ((size_t)3 * (16 + 2 * DP_METRICS_LABEL_MAX + 4))
#define CLASS_MAX 48

struct series {
	unsigned char fam;
	char labels[LABELS_MAX];
	uint64_t value;
};

static struct series table[DP_METRICS_MAX_SERIES];
static size_t n_series;
static uint64_t dropped;

/* Duration buckets (seconds): the probe's deadline is 2 s, a DRA prepare's the kubelet's 45 s. */
static const double bounds[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 10, 45 };
#define N_BOUNDS (sizeof(bounds) / sizeof(bounds[0]))
struct hist {
	const char *name, *help;
	unsigned after; /* rendered after this family's series */
	uint64_t buckets[N_BOUNDS], count, sum_usec;
};
enum { H_PROBE, H_DRA_PREPARE, H_N };
static struct hist hists[H_N] = {
	[H_PROBE] = { "sdp_probe_duration_seconds", "Duration of the hypervisor probe runs (hyperlight).",
		      F_PROBE_RUNS, { 0 }, 0, 0 },
	[H_DRA_PREPARE] = { "sdp_dra_prepare_duration_seconds",
			    "Time from NodePrepareResources to the claim's answer, for claims prepared from "
			    "the API server (fetched, resolved, checkpointed).", F_DRA_PREPARE, { 0 }, 0, 0 },
};

static void observe(struct hist *h, uint64_t usec)
{
	for (size_t i = 0; i < N_BOUNDS; i++)
		if ((double)usec <= bounds[i] * 1e6)
			h->buckets[i]++;
	h->count++;
	h->sum_usec += usec;
}

/* Reason classes seen per family (bounded, then "other"). */
static char reasons[2][DP_METRICS_MAX_REASONS][CLASS_MAX + 1];

void dp_metrics_reset(void)
{
	memset(table, 0, sizeof(table));
	n_series = 0;
	dropped = 0;
	for (size_t i = 0; i < H_N; i++) {
		memset(hists[i].buckets, 0, sizeof(hists[i].buckets));
		hists[i].count = hists[i].sum_usec = 0;
	}
	memset(reasons, 0, sizeof(reasons));
}

/* ---- labels ---- */

/* Append name="value" to out (size LABELS_MAX): value cut and made printable ASCII, escaped. */
static void label(char *out, const char *name, const char *value)
{
	size_t o = strlen(out);
	int n = snprintf(out + o, LABELS_MAX - o, "%s%s=\"", o ? "," : "", name);
	if (n < 0 || o + (size_t)n + 4 >= LABELS_MAX) {
		out[o] = '\0'; /* not reached: three short names and cut values fit */
		return;
	}
	o += (size_t)n;
	for (size_t i = 0; value && value[i] && i < DP_METRICS_LABEL_MAX && o + 3 < LABELS_MAX; i++) {
		char c = value[i];
		if (c == '"' || c == '\\')
			out[o++] = '\\';
		if (c < 0x20 || c == 0x7f || (unsigned char)c >= 0x80)
			c = '_';
		out[o++] = c;
	}
	out[o++] = '"';
	out[o] = '\0';
}

void dp_metrics_reason_class(const char *reason, char *buf, size_t size)
{
	size_t n = 0;
	if (size == 0)
		return;
	for (const char *p = reason ? reason : ""; *p && n + 1 < size && n < CLASS_MAX; p++) {
		if (!isalpha((unsigned char)*p) && *p != '_' && *p != '-' && *p != ' ')
			break;
		buf[n++] = *p;
	}
	while (n && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	if (n == 0)
		snprintf(buf, size, "unknown");
}

/* The class of reason, or "other" once the family holds DP_METRICS_MAX_REASONS. */
static const char *reason_slot(unsigned which, const char *reason)
{
	char cls[CLASS_MAX + 1];
	dp_metrics_reason_class(reason, cls, sizeof(cls));
	for (size_t i = 0; i < DP_METRICS_MAX_REASONS; i++) {
		char *r = reasons[which][i];
		if (r[0] == '\0')
			memcpy(r, cls, sizeof(cls));
		if (strcmp(r, cls) == 0)
			return r;
	}
	return "other";
}

/* ---- series ---- */

static struct series *find(enum fam f, const char *labels)
{
	for (size_t i = 0; i < n_series; i++)
		if (table[i].fam == f && strcmp(table[i].labels, labels) == 0)
			return &table[i];
	if (n_series == DP_METRICS_MAX_SERIES) {
		dropped++;
		return NULL;
	}
	struct series *s = &table[n_series++];
	s->fam = (unsigned char)f;
	snprintf(s->labels, sizeof(s->labels), "%s", labels);
	s->value = 0;
	return s;
}

static void add(enum fam f, const char *labels, uint64_t n)
{
	struct series *s = find(f, labels);
	if (s)
		s->value += n;
}

static void set(enum fam f, const char *labels, uint64_t v)
{
	struct series *s = find(f, labels);
	if (s)
		s->value = v;
}

static void one_label(enum fam f, const char *name, const char *value, bool counter, uint64_t v)
{
	char l[LABELS_MAX] = "";
	label(l, name, value);
	if (counter)
		add(f, l, v);
	else
		set(f, l, v);
}

static void two_labels(enum fam f, const char *n1, const char *v1, const char *n2, const char *v2)
{
	char l[LABELS_MAX] = "";
	label(l, n1, v1);
	label(l, n2, v2);
	add(f, l, 1);
}

void dp_metrics_build_info(const char *daemon, const char *version)
{
	char l[LABELS_MAX] = "";
	label(l, "daemon", daemon);
	label(l, "version", version);
	set(F_BUILD, l, 1);
}

void dp_metrics_devices(const char *resource, size_t advertised, size_t healthy)
{
	one_label(F_ADVERTISED, "resource", resource, false, advertised);
	one_label(F_HEALTHY, "resource", resource, false, healthy);
}

void dp_metrics_registered(const char *resource, bool registered)
{
	one_label(F_REGISTERED, "resource", resource, false, registered);
}

void dp_metrics_health_transition(const char *resource, bool healthy, const char *reason)
{
	char l[LABELS_MAX] = "";
	label(l, "resource", resource);
	label(l, "to", healthy ? "healthy" : "unhealthy");
	label(l, "reason", healthy ? "" : reason_slot(0, reason));
	add(F_TRANSITIONS, l, 1);
}

void dp_metrics_registration(const char *resource, const char *result)
{
	two_labels(F_REGISTRATIONS, "resource", resource, "result", result);
}

void dp_metrics_allocate(const char *resource, const char *result)
{
	two_labels(F_ALLOCATE, "resource", resource, "result", result);
}

void dp_metrics_probe(bool ok, const char *reason, uint64_t usec)
{
	add(F_PROBE_RUNS, "", 1);
	if (!ok)
		one_label(F_PROBE_FAILURES, "reason", reason_slot(1, reason), true, 1);
	observe(&hists[H_PROBE], usec);
}

void dp_metrics_dra_prepare(const char *driver, const char *result, uint64_t usec)
{
	two_labels(F_DRA_PREPARE, "driver", driver, "result", result);
	if (strcmp(result, "prepared") == 0)
		observe(&hists[H_DRA_PREPARE], usec);
}

void dp_metrics_dra_unprepare(const char *driver, bool ok)
{
	two_labels(F_DRA_UNPREPARE, "driver", driver, "result", ok ? "ok" : "error");
}

void dp_metrics_dra_slices(const char *driver, const char *result)
{
	two_labels(F_DRA_SLICES, "driver", driver, "result", result);
}

void dp_metrics_cdi_repair(const char *spec)
{
	one_label(F_CDI_REPAIRS, "spec", spec, true, 1);
}

void dp_metrics_cdi_write_failure(const char *spec)
{
	one_label(F_CDI_WRITE_FAILURES, "spec", spec, true, 1);
}

void dp_metrics_grpc_unimplemented(void)
{
	add(F_GRPC_UNIMPLEMENTED, "", 1);
}

void dp_metrics_grpc_limit(const char *what)
{
	one_label(F_GRPC_LIMITS, "what", what, true, 1);
}

void dp_metrics_http_refused(const char *reason)
{
	one_label(F_HTTP_REFUSED, "reason", reason, true, 1);
}

/* ---- exposition ---- */

struct out {
	char *buf;
	size_t size, len;
	bool full;
};

static void put(struct out *o, const char *fmt, ...) _printf_(2, 3);
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	if (o->full)
		return;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive, as in helper_result.c) */
	int n = vsnprintf(o->buf + o->len, o->size - o->len, fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	if (n < 0 || (size_t)n >= o->size - o->len)
		o->full = true;
	else
		o->len += (size_t)n;
}

static void header(struct out *o, const char *name, const char *type, const char *help)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void render_histogram(struct out *o, const struct hist *h)
{
	if (h->count == 0)
		return;
	header(o, h->name, "histogram", h->help);
	for (size_t i = 0; i < N_BOUNDS; i++)
		put(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, bounds[i], (unsigned long long)h->buckets[i]);
	put(o, "%s_bucket{le=\"+Inf\"} %llu\n", h->name, (unsigned long long)h->count);
	put(o, "%s_sum %llu.%06llu\n", h->name, (unsigned long long)(h->sum_usec / 1000000),
	    (unsigned long long)(h->sum_usec % 1000000));
	put(o, "%s_count %llu\n", h->name, (unsigned long long)h->count);
}

int dp_metrics_render(char *buf, size_t size, size_t *ret_len)
{
	struct out o = { buf, size, 0, size == 0 };

	for (unsigned f = 0; f < F_N; f++) {
		bool any = f == F_DROPPED;
		for (size_t i = 0; i < n_series && !any; i++)
			any = table[i].fam == f;
		if (!any)
			continue;
		header(&o, fams[f].name, fams[f].type, fams[f].help);
		if (f == F_DROPPED)
			put(&o, "%s %llu\n", fams[f].name, (unsigned long long)dropped);
		for (size_t i = 0; i < n_series; i++) {
			const struct series *s = &table[i];
			if (s->fam != f)
				continue;
			if (s->labels[0])
				put(&o, "%s{%s} %llu\n", fams[f].name, s->labels, (unsigned long long)s->value);
			else
				put(&o, "%s %llu\n", fams[f].name, (unsigned long long)s->value);
		}
		for (size_t h = 0; h < H_N; h++)
			if (hists[h].after == f)
				render_histogram(&o, &hists[h]); /* beside its counter: both are updated together */
	}
	if (o.full)
		return -ENOBUFS;
	*ret_len = o.len;
	return 0;
}

/* ---- the daemons' opt-in: METRICS_ADDRESS, the listener (metrics_http.c), its lines logged above
 * debug as dp_endpoint_log_events does ---- */

static dp_metrics_server *started;

static void log_limit(const char *what, const char *detail, void *userdata)
{
	char q[200];
	dp_warn("metrics limit reached",
		"what=%s action=%s max_connections=%d head_max=%d head_deadline_s=%llu deadline_s=%llu", what,
		dp_logq(q, sizeof(q), detail), DP_METRICS_HTTP_MAX_CONNS, DP_METRICS_HTTP_HEAD_MAX,
		(unsigned long long)(DP_METRICS_HTTP_HEAD_DEADLINE_USEC / DP_USEC_PER_SEC),
		(unsigned long long)(DP_METRICS_HTTP_DEADLINE_USEC / DP_USEC_PER_SEC));
}

/* Listening (info), or a bind that failed for a new reason (error; retried meanwhile). */
static void log_listen(dp_metrics_server *s, int error, uint64_t retry_usec, void *userdata)
{
	char addr[80], q[120];
	if (dp_metrics_server_address(s, addr, sizeof(addr)) < 0)
		snprintf(addr, sizeof(addr), "unknown");
	if (error == 0) {
		dp_info("metrics listening", "address=%s path=/metrics", addr);
		return;
	}
	dp_error("cannot listen for metrics",
		 "address=%s error=%s errno=%s retry_in_s=%llu max_retry_s=%llu action=\"devices are served "
		 "meanwhile; retried with back-off\"",
		 addr, dp_logq(q, sizeof(q), strerror(-error)), dp_errname(error),
		 (unsigned long long)(retry_usec / DP_USEC_PER_SEC),
		 (unsigned long long)(DP_METRICS_HTTP_RETRY_MAX_USEC / DP_USEC_PER_SEC));
}

int dp_metrics_start(dp_loop *loop, const char *daemon)
{
	const char *v = getenv("METRICS_ADDRESS");
	struct sockaddr_storage ss;
	socklen_t len;
	char err[200], q[300], q2[300];

	if (!v || !*v)
		return 0;
	int r = dp_metrics_parse_address(v, &ss, &len, err, sizeof(err));
	if (r < 0) {
		dp_error("invalid METRICS_ADDRESS", "value=%s error=%s", dp_logq(q, sizeof(q), v),
			 dp_logq(q2, sizeof(q2), err));
		return r;
	}
	dp_metrics_build_info(daemon, DP_VERSION);
	dp_metrics_stop();
	r = dp_metrics_server_new(loop, (const struct sockaddr *)&ss, len, log_listen, NULL, &started);
	if (r < 0) { /* no socket (no IPv6 for [IPv6]:PORT, no fds): off; never the daemon's end */
		dp_error("cannot listen for metrics",
			 "address=%s error=%s errno=%s action=\"metrics off, devices served\"",
			 dp_logq(q, sizeof(q), v), dp_logq(q2, sizeof(q2), strerror(-r)), dp_errname(r));
		return 0;
	}
	dp_metrics_server_set_limit_fn(started, log_limit, NULL);
	return 0;
}

void dp_metrics_stop(void)
{
	started = dp_metrics_server_free(started);
}
