/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics registry and its text exposition (core/src/metrics/metrics.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/metrics.h"

static char out[DP_METRICS_RENDER_MAX + 1];

static const char *render(void)
{
	size_t n = 0;
	assert_int_equal(dp_metrics_render(out, sizeof(out) - 1, &n), 0);
	out[n] = '\0';
	assert_int_equal(strlen(out), n);
	return out;
}

static int setup(void **state)
{
	dp_metrics_reset();
	return 0;
}

/* The line "name{labels} value" is present, whole. */
static void assert_line(const char *text, const char *line)
{
	char want[1024];
	snprintf(want, sizeof(want), "\n%s\n", line);
	if (!strstr(text, want) && strncmp(text, line + 0, strlen(line)) != 0) {
		print_error("missing line: %s\nin:\n%s\n", line, text);
		fail();
	}
}

static void test_empty_registry(void **state)
{
	const char *t = render();
	/* only the dropped-series counter, always present */
	assert_string_equal(t, "# HELP sdp_metrics_series_dropped_total Updates of series that did not fit the "
			       "registry's fixed table.\n# TYPE sdp_metrics_series_dropped_total counter\n"
			       "sdp_metrics_series_dropped_total 0\n");
}

static void test_gauges_and_counters(void **state)
{
	dp_metrics_build_info("kata-device-plugin", "0.1.0");
	dp_metrics_devices("nvidia.com/gpu", 4, 4);
	dp_metrics_devices("nvidia.com/gpu", 4, 0); /* a gauge is set, not added */
	dp_metrics_allocate("nvidia.com/gpu", "OK");
	dp_metrics_allocate("nvidia.com/gpu", "OK");
	dp_metrics_allocate("nvidia.com/gpu", "INVALID_ARGUMENT");
	dp_metrics_registration("nvidia.com/gpu", "ok");
	dp_metrics_registered("nvidia.com/gpu", true);
	dp_metrics_cdi_repair("kata.nvidia.com-gpu.yaml");
	dp_metrics_cdi_write_failure("kata.nvidia.com-gpu.yaml");
	const char *t = render();
	assert_line(t, "sdp_build_info{daemon=\"kata-device-plugin\",version=\"0.1.0\"} 1");
	assert_line(t, "# TYPE sdp_build_info gauge");
	assert_line(t, "sdp_devices_advertised{resource=\"nvidia.com/gpu\"} 4");
	assert_line(t, "sdp_devices_healthy{resource=\"nvidia.com/gpu\"} 0");
	assert_line(t, "sdp_allocate_total{resource=\"nvidia.com/gpu\",result=\"OK\"} 2");
	assert_line(t, "sdp_allocate_total{resource=\"nvidia.com/gpu\",result=\"INVALID_ARGUMENT\"} 1");
	assert_line(t, "# TYPE sdp_allocate_total counter");
	assert_line(t, "sdp_registrations_total{resource=\"nvidia.com/gpu\",result=\"ok\"} 1");
	assert_line(t, "sdp_registered{resource=\"nvidia.com/gpu\"} 1");
	assert_line(t, "sdp_cdi_spec_repairs_total{spec=\"kata.nvidia.com-gpu.yaml\"} 1");
	assert_line(t, "sdp_cdi_spec_write_failures_total{spec=\"kata.nvidia.com-gpu.yaml\"} 1");
	/* one HELP/TYPE pair per family, before its samples */
	const char *type = strstr(t, "# TYPE sdp_allocate_total counter\n");
	assert_non_null(type);
	assert_true(type < strstr(t, "sdp_allocate_total{"));
	assert_null(strstr(type + 1, "# TYPE sdp_allocate_total"));
}

/* The gRPC layer's counters: unknown methods without a label, limit hits by limit. */
static void test_grpc_counters(void **state)
{
	dp_metrics_grpc_unimplemented();
	dp_metrics_grpc_unimplemented();
	dp_metrics_grpc_limit("input");
	dp_metrics_grpc_limit("input");
	dp_metrics_grpc_limit("fds");
	const char *t = render();
	assert_line(t, "# TYPE sdp_grpc_unimplemented_total counter");
	assert_line(t, "sdp_grpc_unimplemented_total 2");
	assert_line(t, "# TYPE sdp_grpc_limit_hits_total counter");
	assert_line(t, "sdp_grpc_limit_hits_total{what=\"input\"} 2");
	assert_line(t, "sdp_grpc_limit_hits_total{what=\"fds\"} 1");
	assert_null(strstr(t, "what=\"output\"")); /* a limit never hit has no series yet */
}

static void test_transitions_by_reason_class(void **state)
{
	dp_metrics_health_transition("hyperlight.dev/hypervisor", false,
				     "host device /host-dev/kvm has device number 10:233, expected 10:232");
	dp_metrics_health_transition("hyperlight.dev/hypervisor", true, NULL);
	dp_metrics_health_transition("hyperlight.dev/hypervisor", false,
				     "host device /host-dev/kvm has device number 10:234, expected 10:232");
	const char *t = render();
	assert_line(t, "sdp_health_transitions_total{resource=\"hyperlight.dev/hypervisor\",to=\"unhealthy\","
		       "reason=\"host device\"} 2");
	assert_line(t, "sdp_health_transitions_total{resource=\"hyperlight.dev/hypervisor\",to=\"healthy\","
		       "reason=\"\"} 1");
}

static void test_reason_class(void **state)
{
	char c[64];
	dp_metrics_reason_class("EACCES opening /dev/kvm", c, sizeof(c));
	assert_string_equal(c, "EACCES opening");
	dp_metrics_reason_class("KVM_CREATE_VM: ENOMEM", c, sizeof(c));
	assert_string_equal(c, "KVM_CREATE_VM");
	dp_metrics_reason_class("timeout after 2 s", c, sizeof(c));
	assert_string_equal(c, "timeout after");
	dp_metrics_reason_class("/dev/kvm is gone", c, sizeof(c));
	assert_string_equal(c, "unknown");
	dp_metrics_reason_class(NULL, c, sizeof(c));
	assert_string_equal(c, "unknown");
	dp_metrics_reason_class("a very long reason made of letters only and spaces that goes on and on", c,
				sizeof(c));
	assert_true(strlen(c) <= 48);
	dp_metrics_reason_class("abcdef", c, 4); /* cut to the buffer */
	assert_string_equal(c, "abc");
}

/* A reason per transition never grows the label set past the bound: then "other". */
static void test_reason_bound(void **state)
{
	char reason[64];
	const char *words[] = { "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
				"juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo" };
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		snprintf(reason, sizeof(reason), "%s failed", words[i]);
		dp_metrics_health_transition("r", false, reason);
		dp_metrics_probe(false, reason, 1000);
	}
	const char *t = render();
	assert_line(t, "sdp_health_transitions_total{resource=\"r\",to=\"unhealthy\",reason=\"alpha failed\"} 1");
	assert_line(t, "sdp_health_transitions_total{resource=\"r\",to=\"unhealthy\",reason=\"other\"} 2");
	assert_line(t, "sdp_probe_failures_total{reason=\"other\"} 2");
	assert_null(strstr(t, "quebec"));
	assert_null(strstr(t, "romeo"));
}

static void test_label_values_escaped_and_cut(void **state)
{
	char long_name[300];
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	dp_metrics_allocate("a\"b\\c\nd\xc3\xa9", "OK");
	dp_metrics_cdi_repair(long_name);
	const char *t = render();
	assert_line(t, "sdp_allocate_total{resource=\"a\\\"b\\\\c_d__\",result=\"OK\"} 1");
	char want[200];
	snprintf(want, sizeof(want), "sdp_cdi_spec_repairs_total{spec=\"%.*s\"} 1", DP_METRICS_LABEL_MAX, long_name);
	assert_line(t, want);
}

static void test_probe_histogram(void **state)
{
	dp_metrics_probe(true, "", 3000);     /* 3 ms */
	dp_metrics_probe(true, "", 300000);   /* 0.3 s */
	dp_metrics_probe(false, "timeout after 2 s", 2000000);
	dp_metrics_probe(false, "timeout after 2 s", 2000001);
	const char *t = render();
	assert_line(t, "sdp_probe_runs_total 4");
	assert_line(t, "sdp_probe_failures_total{reason=\"timeout after\"} 2");
	assert_line(t, "# TYPE sdp_probe_duration_seconds histogram");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"0.0025\"} 0");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"0.005\"} 1");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"0.5\"} 2");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"2\"} 3");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"4\"} 4");
	assert_line(t, "sdp_probe_duration_seconds_bucket{le=\"+Inf\"} 4");
	assert_line(t, "sdp_probe_duration_seconds_sum 4.303001");
	assert_line(t, "sdp_probe_duration_seconds_count 4");
}

/* The table is fixed: series beyond it are counted as dropped, the rest still render. */
static void test_table_full(void **state)
{
	char name[32];
	for (int i = 0; i < DP_METRICS_MAX_SERIES + 10; i++) {
		snprintf(name, sizeof(name), "spec-%d", i);
		dp_metrics_cdi_repair(name);
	}
	const char *t = render();
	assert_line(t, "sdp_metrics_series_dropped_total 10");
	assert_line(t, "sdp_cdi_spec_repairs_total{spec=\"spec-0\"} 1");
	assert_null(strstr(t, "spec=\"spec-256\""));
}

/* The worst case (every series with three labels at their longest) fits the render bound. */
static void test_worst_case_fits(void **state)
{
	char r[DP_METRICS_LABEL_MAX * 2], why[DP_METRICS_LABEL_MAX];
	memset(why, 'w', sizeof(why) - 1);
	why[sizeof(why) - 1] = '\0';
	for (int i = 0; i < DP_METRICS_MAX_SERIES; i++) {
		memset(r, '"', sizeof(r) - 1); /* every byte escaped */
		snprintf(r, sizeof(r), "%d", i);
		r[strlen(r)] = '"';
		r[sizeof(r) - 1] = '\0';
		dp_metrics_health_transition(r, false, why);
	}
	dp_metrics_probe(true, "", 1);
	size_t n = 0;
	assert_int_equal(dp_metrics_render(out, DP_METRICS_RENDER_MAX, &n), 0);
	print_message("worst case: %zu bytes\n", n);
	assert_true(n > 75000);
	assert_int_equal(dp_metrics_render(out, 100, &n), -ENOBUFS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_empty_registry, setup),
		cmocka_unit_test_setup(test_gauges_and_counters, setup),
		cmocka_unit_test_setup(test_grpc_counters, setup),
		cmocka_unit_test_setup(test_transitions_by_reason_class, setup),
		cmocka_unit_test_setup(test_reason_class, setup),
		cmocka_unit_test_setup(test_reason_bound, setup),
		cmocka_unit_test_setup(test_label_values_escaped_and_cut, setup),
		cmocka_unit_test_setup(test_probe_histogram, setup),
		cmocka_unit_test_setup(test_table_full, setup),
		cmocka_unit_test_setup(test_worst_case_fits, setup),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
