/* SPDX-License-Identifier: Apache-2.0 */
/* draclaim: a ResourceClaim's JSON read for one driver and pool; every way it is refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dp/draclaim.h"

#define HEAD "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"name\":\"c\",\"namespace\":\"ns\",\"uid\":\"uid-1\"},"
#define RESULT(drv, pool, dev) "{\"request\":\"gpus\",\"driver\":\"" drv "\",\"pool\":\"" pool "\",\"device\":\"" dev "\"}"
#define ALLOC(results) HEAD "\"status\":{\"allocation\":{\"devices\":{\"results\":[" results "]}}}}"

static char why[256];

/* read json for kata.nvidia.com on node-a as claim uid-1; a refusal must leave out untouched */
static int rd(const char *json, dp_draclaim *out)
{
	dp_draclaim before;
	memset(out, 0x5a, sizeof(*out));
	memcpy(&before, out, sizeof(before));
	why[0] = '\0';
	int r = dp_draclaim_read(json, strlen(json), "uid-1", "kata.nvidia.com", "node-a", out, why, sizeof(why));
	if (r < 0) {
		assert_memory_equal(out, &before, sizeof(before));
		assert_true(why[0] != '\0');
	}
	return r;
}

static void refused(const char *json, int err, const char *said)
{
	dp_draclaim c;
	assert_int_equal(rd(json, &c), err);
	if (!strstr(why, said))
		fail_msg("refusal says \"%s\", want \"%s\" in it", why, said);
}

static void allocated_pair(void **state)
{
	dp_draclaim c;
	assert_int_equal(rd(ALLOC(RESULT("kata.nvidia.com", "node-a", "gpu-101") ","
				  "{\"request\":\"gpus/a100\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\","
				  "\"device\":\"gpu-102\",\"adminAccess\":true,\"unknown\":[1,{}]}"),
			    &c),
			 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.results[0].request, "gpus");
	assert_string_equal(c.results[0].device, "gpu-101");
	assert_string_equal(c.results[0].share_id, "");
	assert_false(c.results[0].admin_access);
	assert_string_equal(c.results[1].request, "gpus/a100");
	assert_string_equal(c.results[1].device, "gpu-102");
	assert_true(c.results[1].admin_access);
}

/* Another driver's results are skipped; a share ID is kept. */
static void other_drivers_skipped(void **state)
{
	dp_draclaim c;
	assert_int_equal(rd(ALLOC(RESULT("hyperlight.dev", "elsewhere", "kvm") ","
				  "{\"request\":\"g\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-103\","
				  "\"shareID\":\"6b1f2c3d-0a4e-4f5b-9c8d-7e6f5a4b3c2d\"}"),
			    &c),
			 0);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.results[0].device, "gpu-103");
	assert_string_equal(c.results[0].share_id, "6b1f2c3d-0a4e-4f5b-9c8d-7e6f5a4b3c2d");
	refused(ALLOC(RESULT("hyperlight.dev", "node-a", "kvm")), -ENODATA, "no device of driver kata.nvidia.com");
}

static void identity(void **state)
{
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"uid-2\"}}",
		-ESTALE, "claim.metadata.uid is uid-2, not uid-1");
	refused("{\"apiVersion\":\"resource.k8s.io/v1beta1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"uid-1\"}}",
		-EBADMSG, "not a resource.k8s.io/v1 ResourceClaim");
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"Pod\",\"metadata\":{\"uid\":\"uid-1\"}}", -EBADMSG,
		"not a resource.k8s.io/v1 ResourceClaim: resource.k8s.io/v1 Pod");
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\"}", -EBADMSG, "claim.metadata: missing");
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":7}}", -EBADMSG,
		"claim.metadata.uid: not a string");
}

static void not_allocated(void **state)
{
	refused(HEAD "\"status\":{}}", -ENODATA, "not allocated");
	refused(HEAD "\"spec\":{}}", -ENODATA, "not allocated");
	refused(HEAD "\"status\":{\"allocation\":{\"devices\":{\"results\":[]}}}}", -ENODATA, "no device allocated");
	refused(HEAD "\"status\":{\"allocation\":{}}}", -ENODATA, "no device allocated");
	refused(HEAD "\"status\":[]}", -EBADMSG, "claim.status: not an object");
	refused(HEAD "\"status\":{\"allocation\":{\"devices\":{\"results\":{}}}}}", -EBADMSG,
		"results: not an array");
}

/* A result of this driver in another pool: another node's device, never prepared here. */
static void other_pool(void **state)
{
	refused(ALLOC(RESULT("kata.nvidia.com", "node-a", "gpu-101") "," RESULT("kata.nvidia.com", "node-b", "gpu-7")),
		-EXDEV, "results[1]: device gpu-7 of pool node-b, not this node's pool node-a");
}

static void bad_fields(void **state)
{
	char dev64[65];
	memset(dev64, 'd', 64);
	dev64[64] = '\0';
	char json[512];
	snprintf(json, sizeof(json), ALLOC("{\"request\":\"r\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"%s\"}"), dev64);
	refused(json, -EBADMSG, "results[0].device: longer than 63 bytes");
	refused(ALLOC("{\"request\":\"r\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":5}"), -EBADMSG,
		"results[0].device: not a string");
	refused(ALLOC("{\"request\":\"r\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\"}"), -EBADMSG,
		"results[0].device: missing");
	refused(ALLOC("{\"request\":\"\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"d\"}"), -EBADMSG,
		"an empty request or device name");
	refused(ALLOC("{\"request\":\"r\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"d\",\"adminAccess\":\"yes\"}"),
		-EBADMSG, "results[0].adminAccess: not a boolean");
	refused(ALLOC("7"), -EBADMSG, "results[0]: not an object");
	refused(ALLOC("{\"driver\":[],\"pool\":\"node-a\"}"), -EBADMSG, "results[0].driver: not a string");
}

/* Not JSON, not strict JSON, a duplicate key, a NUL: refused by the parser, saying where. */
static void not_json(void **state)
{
	refused("{", -EBADMSG, "not JSON");
	refused(ALLOC(RESULT("kata.nvidia.com", "node-a", "gpu-101")) " x", -EBADMSG, "not JSON");
	refused("{'apiVersion':1}", -EBADMSG, "line 1");
	refused("[]", -EBADMSG, "not a JSON object");
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"uid-1\",\"uid\":\"uid-2\"}}",
		-EBADMSG, "duplicate");
	refused("{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"uid\\u0000-1\"}}",
		-EBADMSG, "not JSON");
	refused("{\"a\":\"\xff\"}", -EBADMSG, "not JSON");
}

/* names the API would never write are refused, not carried into a file or a log line */
static void hostile_names(void **state)
{
	refused(ALLOC(RESULT("kata.nvidia.com", "node-a", "GPU-0")), -EBADMSG, "results[0]: device name \"GPU-0\" is not a DNS label");
	refused(ALLOC(RESULT("kata.nvidia.com", "node-a", "gpu\\t0")), -EBADMSG, "is not a DNS label");
	refused(ALLOC("{\"request\":\"a b\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-0\"}"),
		-EBADMSG, "request name \"a b\" is not one or two DNS labels");
	refused(ALLOC("{\"request\":\"a/b/c\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-0\"}"),
		-EBADMSG, "request name");
	refused(ALLOC("{\"request\":\"a\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-0\",\"shareID\":\"x y\"}"),
		-EBADMSG, "share ID \"x y\" is not a UID");
	dp_draclaim c;
	assert_int_equal(rd(ALLOC("{\"request\":\"gpus/big\",\"driver\":\"kata.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-0\",\"shareID\":\"0b5e-11\"}"), &c), 0);
	assert_string_equal(c.results[0].request, "gpus/big");
	assert_string_equal(c.results[0].share_id, "0b5e-11");
}

static void bounds(void **state)
{
	/* 33 results */
	size_t cap = 64 * 1024;
	char *json = malloc(cap);
	assert_non_null(json);
	int n = snprintf(json, cap, "%s", HEAD "\"status\":{\"allocation\":{\"devices\":{\"results\":[");
	for (int i = 0; i < 33; i++)
		n += snprintf(json + n, cap - (size_t)n, "%s" RESULT("kata.nvidia.com", "node-a", "gpu-%d"), i ? "," : "", i);
	snprintf(json + n, cap - (size_t)n, "]}}}}");
	refused(json, -EBADMSG, "more than 32");
	free(json);
	/* over the input bound: refused before parsing */
	size_t big = DP_DRACLAIM_INPUT_MAX + 1;
	json = malloc(big);
	assert_non_null(json);
	memset(json, ' ', big);
	dp_draclaim c;
	assert_int_equal(dp_draclaim_read(json, big, "uid-1", "kata.nvidia.com", "node-a", &c, why, sizeof(why)), -EFBIG);
	assert_non_null(strstr(why, "over the 2097152-byte bound"));
	free(json);
	/* the message is cut to its buffer, NUL-terminated */
	char small[8];
	assert_int_equal(dp_draclaim_read("{", 1, "uid-1", "d", "p", &c, small, sizeof(small)), -EBADMSG);
	assert_int_equal(strlen(small), sizeof(small) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(allocated_pair), cmocka_unit_test(other_drivers_skipped),
		cmocka_unit_test(identity),       cmocka_unit_test(not_allocated),
		cmocka_unit_test(other_pool),     cmocka_unit_test(bad_fields),
		cmocka_unit_test(not_json),       cmocka_unit_test(bounds),
		cmocka_unit_test(hostile_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
