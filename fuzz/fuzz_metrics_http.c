/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (m): the metrics listener's request parser (core/src/metrics/metrics_http.c), the
 * METRICS_ADDRESS parser and the exposition of label values taken from the input.
 * The input is a request head as received, parsed whole and at every prefix length a reader
 * could have at hand. Checks: a result is 0 or 1; 0 only below DP_METRICS_HTTP_HEAD_MAX bytes
 * and with the output untouched; on 1 the status is one of the answers the listener knows;
 * once a prefix parses, the longer ones give the same answer (bytes after the head are
 * ignored). The exposition: always rendered, printable ASCII and newlines only, every line a
 * comment or "name{...} value" with balanced quotes.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "dp/metrics.h"
#include "fuzz.h"

static void check_one(const uint8_t *data, size_t size, dp_metrics_request *first, bool *parsed)
{
	dp_metrics_request r;
	memset(&r, 0xa5, sizeof(r));
	int k = dp_metrics_http_parse((const char *)data, size, &r);

	FUZZ_CHECK(k == 0 || k == 1);
	if (k == 0) {
		FUZZ_CHECK(size < DP_METRICS_HTTP_HEAD_MAX && !*parsed);
		FUZZ_CHECK(((const unsigned char *)&r)[0] == 0xa5);
		return;
	}
	FUZZ_CHECK(r.status == 200 || r.status == 400 || r.status == 404 || r.status == 405 ||
		   r.status == 431 || r.status == 505);
	if (*parsed)
		FUZZ_CHECK(r.status == first->status && r.head == first->head);
	*first = r;
	*parsed = true;
}

static void check_exposition(const char *s)
{
	static char out[DP_METRICS_RENDER_MAX];
	size_t n = 0;

	dp_metrics_reset();
	dp_metrics_allocate(s, s);
	dp_metrics_health_transition(s, false, s);
	dp_metrics_probe(false, s, strlen(s));
	dp_metrics_cdi_repair(s);
	FUZZ_CHECK(dp_metrics_render(out, sizeof(out), &n) == 0);
	FUZZ_CHECK(n > 0 && out[n - 1] == '\n');
	bool in_quotes = false;
	for (size_t i = 0; i < n; i++) {
		char c = out[i];
		FUZZ_CHECK(c == '\n' || (c >= ' ' && c < 0x7f));
		if (c == '\\' && in_quotes) {
			FUZZ_CHECK(i + 1 < n && (out[i + 1] == '\\' || out[i + 1] == '"'));
			i++;
			continue;
		}
		if (c == '"')
			in_quotes = !in_quotes;
		FUZZ_CHECK(!(c == '\n' && in_quotes));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dp_metrics_request first = { 0 };
	bool parsed = false;

	if (size > 2 * DP_METRICS_HTTP_HEAD_MAX)
		return 0;
	for (size_t n = 0; n <= size; n += 1 + n / 8)
		check_one(data, n, &first, &parsed);
	check_one(data, size, &first, &parsed);

	char *s = fuzz_string(data, size);
	struct sockaddr_storage ss;
	socklen_t len = 0;
	char err[200];
	if (dp_metrics_parse_address(s, &ss, &len, err, sizeof(err)) == 0)
		FUZZ_CHECK(ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
	check_exposition(s);
	free(s);
	return 0;
}
