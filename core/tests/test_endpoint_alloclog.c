/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/log.h"
#include "dp/loop.h"
#include "dp_test.h"
#include "endpoint_alloc_test.h"
#include "endpoint/endpoint_alloclog.h"
#include "endpoint/endpoint_internal.h"
#include "requests/endpoint_decode.h"

static struct dpt_capture cap;

static const char *list(char *buf, size_t size, size_t n_groups, const char *const *items, const size_t *groups,
			size_t n)
{
	dp_ep_loglist l;
	dp_ep_loglist_init(&l, buf, size);
	for (size_t i = 0; i < n; i++)
		dp_ep_loglist_add(&l, groups[i], items[i]);
	return dp_ep_loglist_end(&l, n_groups);
}

/* Items of a group joined by ',', groups by ' ', an empty group "-". */
static void test_list_groups(void **state)
{
	char buf[64];
	assert_string_equal(list(buf, sizeof(buf), 1, (const char *[]){ "1", "3" }, (size_t[]){ 0, 0 }, 2), "1,3");
	assert_string_equal(list(buf, sizeof(buf), 2, (const char *[]){ "a", "b", "c" }, (size_t[]){ 0, 1, 1 }, 3),
			    "a b,c");
	assert_string_equal(list(buf, sizeof(buf), 3, (const char *[]){ "b" }, (size_t[]){ 1 }, 1), "- b -");
	assert_string_equal(list(buf, sizeof(buf), 2, NULL, NULL, 0), "- -");
	assert_string_equal(list(buf, sizeof(buf), 0, NULL, NULL, 0), "");
}

/* Too many items: the list stops within its size and says how many it left out. */
static void test_list_truncated(void **state)
{
	char buf[DP_EP_ALLOCLOG_VALUE_MAX + 1], item[32];
	dp_ep_loglist l;
	size_t shown;

	dp_ep_loglist_init(&l, buf, sizeof(buf));
	for (size_t i = 0; i < 1000; i++) {
		snprintf(item, sizeof(item), "hyperlight-%zu", i);
		dp_ep_loglist_add(&l, i < 600 ? 0 : 1, item);
	}
	const char *v = dp_ep_loglist_end(&l, 2);
	assert_true(strlen(v) <= DP_EP_ALLOCLOG_VALUE_MAX);
	assert_true(strncmp(v, "hyperlight-0,hyperlight-1,", 26) == 0);
	const char *m = strstr(v, ",...+");
	assert_non_null(m);
	shown = dpt_count(v, "hyperlight-");
	assert_int_equal(strtoul(m + 5, NULL, 10), 1000 - shown);
	assert_null(strchr(v, ' ')); /* cut inside the first group */
	/* one item longer than the value: left out, said so */
	char huge[400];
	memset(huge, 'x', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';
	assert_string_equal(list(buf, sizeof(buf), 1, (const char *[]){ huge }, (size_t[]){ 0 }, 1), "...+1");
}

struct fixture {
	dp_loop *loop;
	dp_endpoint *ep;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	dp_endpoint_config c = dpt_stub_config();
	assert_non_null(f);
	assert_int_equal(dp_loop_new(&f->loop), 0);
	assert_int_equal(dp_endpoint_new(f->loop, "/tmp/sdp-alloclog", &c, &f->ep), 0);
	dp_log_set_level(DP_LOG_DEBUG);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	dp_log_set_level(DP_LOG_INFO);
	dp_endpoint_free(f->ep);
	dp_loop_free(f->loop);
	free(f);
	return 0;
}

/* The line's fields: the IDs per container request, the CDI names answered, the status. */
static void test_line_fields(void **state)
{
	struct fixture *f = *state;
	char *ids0[] = { "3", "1" }, *ids1[] = { "0" };
	dp_alloc *a = dpt_make_alloc(f->ep, ids0, 2, ids1, 1);

	assert_int_equal(dp_alloc_add_cdi_answer(a, "kata.nvidia.com-gpu", "nvidia.com/gpu", NULL), 0);
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_ep_alloclog_answered(f->ep, a, "OK", NULL);
	dp_ep_alloclog_answered(f->ep, a, "UNAVAILABLE", "/dev/kvm is not usable: API version 11");
	dp_ep_alloclog_refused(f->ep, "INVALID_ARGUMENT", "unknown device IDs for example.com/thing: \"x y\"");
	dp_alloc_finish(a, DP_GRPC_OK, NULL); /* nobody to answer: the requester went away */
	const char *out = dpt_capture_end(&cap);
	assert_int_equal(dpt_count(out, " level=debug msg=\"Allocate answered\" resource=example.com/thing containers=2 "
				  "ids=\"3,1 0\" cdi=\"nvidia.com/gpu=3,nvidia.com/gpu=1 nvidia.com/gpu=0\" status=OK\n"), 1);
	assert_int_equal(dpt_count(out, " msg=\"Allocate answered\" resource=example.com/thing containers=2 "
				  "ids=\"3,1 0\" status=UNAVAILABLE message=\"/dev/kvm is not usable: API version 11\"\n"), 1);
	assert_int_equal(dpt_count(out, " msg=\"Allocate answered\" resource=example.com/thing status=INVALID_ARGUMENT "
				  "message=\"unknown device IDs for example.com/thing: \\\"x y\\\"\"\n"), 1);
	assert_int_equal(dpt_count(out, " ids=\"3,1 0\" status=CANCELLED message=\"the requester went away\"\n"), 1);
	assert_int_equal(dpt_count(out, "\n"), 4);
}

/* Device nodes answered (hyperlight's device-access) are named; no CDI names: "-". */
static void test_line_devices(void **state)
{
	struct fixture *f = *state;
	char *ids0[] = { "device-access" }, *ids1[] = { "device-access-1" };
	dp_alloc *a = dpt_make_alloc(f->ep, ids0, 1, ids1, 1);

	assert_int_equal(dp_alloc_add_device(a, 0, "/dev/kvm", "/dev/kvm", "rw"), 0);
	assert_int_equal(dp_alloc_add_device(a, 1, "/dev/kvm", "/dev/kvm", "rw"), 0);
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_ep_alloclog_answered(f->ep, a, "OK", NULL);
	const char *out = dpt_capture_end(&cap);
	dp_log_set_level(DP_LOG_INFO);
	dp_alloc_finish(a, DP_GRPC_OK, NULL);
	assert_int_equal(dpt_count(out, " ids=\"device-access device-access-1\" cdi=\"- -\" "
				  "devices=\"/dev/kvm /dev/kvm\" status=OK\n"), 1);
}

/* The loop runs for its whole bound: the summary comes from the endpoint's timer meanwhile. */
static bool never(void)
{
	return false;
}

/* A flood: the first DP_EP_ALLOCLOG_BURST lines, then one summary line once the window is over. */
static void test_flood_bounded(void **state)
{
	struct fixture *f = *state;
	dpt_capture_start(&cap, STDERR_FILENO);
	for (int i = 0; i < 1000; i++)
		dp_ep_alloclog_refused(f->ep, "INVALID_ARGUMENT", "no container requests");
	(void)dpt_run_until_cond(f->loop, never, DP_EP_ALLOCLOG_WINDOW_USEC + 300000);
	const char *out = dpt_capture_end(&cap);
	assert_int_equal(dpt_count(out, "msg=\"Allocate answered\""), DP_EP_ALLOCLOG_BURST);
	assert_int_equal(dpt_count(out, " level=debug msg=\"Allocate lines suppressed\" resource=example.com/thing "
				  "suppressed=990 window_ms=1000 burst=10\n"), 1);
	assert_int_equal(dpt_count(out, "\n"), DP_EP_ALLOCLOG_BURST + 1);
	/* the next window has lines again */
	dpt_capture_start(&cap, STDERR_FILENO);
	dp_ep_alloclog_refused(f->ep, "INVALID_ARGUMENT", "again");
	out = dpt_capture_end(&cap);
	assert_int_equal(dpt_count(out, "message=again\n"), 1);
}

/* At info nothing is logged nor counted. */
static void test_info_silent(void **state)
{
	struct fixture *f = *state;

	dp_log_set_level(DP_LOG_INFO);
	dpt_capture_start(&cap, STDERR_FILENO);
	for (int i = 0; i < 100; i++)
		dp_ep_alloclog_refused(f->ep, "INVALID_ARGUMENT", "no container requests");
	const char *out = dpt_capture_end(&cap);
	assert_string_equal(out, "");
	assert_int_equal(f->ep->alloclog_rl.suppressed, 0);
	assert_null(f->ep->alloclog_timer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_list_groups),
		cmocka_unit_test(test_list_truncated),
		cmocka_unit_test_setup_teardown(test_line_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_line_devices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_info_silent, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
