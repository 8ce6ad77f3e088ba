/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (c): the gRPC message deframer fed in chunks chosen by the input, the
 * grpc-timeout parser and the grpc-message percent decoder.
 * Input: byte 0 picks the deframer's maximum (0..255 bytes, or DP_GRPC_MAX_MESSAGE when odd
 * and above 127); then records <len byte><chunk> feed the deframer until the input ends.
 * The whole input is also parsed as a grpc-timeout and percent-decoded.
 * Checks: messages come out in order with the declared length; a failed feed stays failed with
 * the same error; nothing above max is delivered; a percent-encode/decode round trip is exact.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "fuzz.h"
#include "grpc/grpc_internal.h"

struct sink {
	size_t max;
	unsigned n;
	int stop_at; /* stop (return 1) at this message, -1: never */
};

static int on_msg(void *ud, const uint8_t *msg, size_t len)
{
	struct sink *s = ud;
	FUZZ_CHECK(msg != NULL);
	FUZZ_CHECK(len <= s->max);
	if (len) {
		volatile uint8_t touch = msg[0] ^ msg[len - 1]; /* readable (ASan) */
		(void)touch;
	}
	if ((int)s->n++ == s->stop_at)
		return 1;
	return 0;
}

static void fuzz_deframer(const uint8_t *data, size_t size)
{
	if (size < 1)
		return;
	size_t max = (data[0] & 0x80) && (data[0] & 1) ? DP_GRPC_MAX_MESSAGE : data[0];
	dp_grpc_deframer d;
	dp_grpc_deframer_init(&d, max);
	struct sink s = { .max = max, .stop_at = (data[0] & 0x40) ? (data[0] & 7) : -1 };
	int sticky = 0;
	size_t i = 1;
	while (i < size) {
		size_t n = data[i++];
		if (n > size - i)
			n = size - i;
		int r = dp_grpc_deframer_feed(&d, data + i, n, on_msg, &s);
		if (sticky)
			FUZZ_CHECK(r == sticky);
		else if (r < 0)
			sticky = r;
		FUZZ_CHECK(r == 0 || r == 1 || r == -EMSGSIZE || r == -EPROTONOSUPPORT ||
			   r == -EBADMSG || r == -ENOMEM);
		if (r == 1)
			s.stop_at = -1; /* the rest of that chunk is dropped; go on with the next */
		FUZZ_CHECK(d.n_msgs == s.n);
		i += n;
	}
	(void)dp_grpc_deframer_idle(&d);
	dp_grpc_deframer_done(&d);
}

static void fuzz_timeout(const uint8_t *data, size_t size)
{
	uint64_t usec = 12345;
	int r = dp_grpc_parse_timeout((const char *)data, size, &usec);
	FUZZ_CHECK(r == 0 || r == -EINVAL);
	if (r == 0) {
		/* What we format parses back to at least the same deadline (grpc-go's encoding). */
		char buf[16];
		dp_grpc_format_timeout(usec, buf);
		uint64_t again;
		FUZZ_CHECK(dp_grpc_parse_timeout(buf, strlen(buf), &again) == 0);
		FUZZ_CHECK(again >= usec || usec > 99999999ull * 3600 * 1000000);
	} else {
		FUZZ_CHECK(usec == 12345); /* untouched on error */
	}
}

static void fuzz_percent(const uint8_t *data, size_t size)
{
	char *dec = dp_grpc_percent_decode((const char *)data, size);
	FUZZ_CHECK(dec != NULL);
	FUZZ_CHECK(strlen(dec) <= size);
	free(dec);
	/* encode(s) decodes back to s for any NUL-free s */
	char *s = fuzz_string(data, size);
	FUZZ_CHECK(s != NULL);
	char *enc = dp_grpc_percent_encode(s);
	FUZZ_CHECK(enc != NULL);
	char *back = dp_grpc_percent_decode(enc, strlen(enc));
	FUZZ_CHECK(back != NULL && strcmp(back, s) == 0);
	free(back);
	free(enc);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_deframer(data, size);
	fuzz_timeout(data, size);
	fuzz_percent(data, size);
	return 0;
}
