/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc: the pure helpers of the gRPC layer (no I/O): grpc-timeout parse/format, grpc-message
 * percent-encoding, the 5-byte message framing and status names. The server lives in
 * grpc_server.c (connections), grpc_request.c and grpc_call.c (a call's two sides), the client
 * call in grpc_client.c.
 */
#include "dp/grpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp/env.h"
#include "grpc_internal.h"

/* ---- grpc-timeout ---- */

#define TIMEOUT_MAX_DIGITS 8
#define TIMEOUT_MAX_VALUE 99999999ULL

static int timeout_unit_usec(char unit, uint64_t *ret_mult, uint64_t *ret_div)
{
	*ret_div = 1;
	switch (unit) {
	case 'H': *ret_mult = 3600ULL * DP_USEC_PER_SEC; return 0;
	case 'M': *ret_mult = 60ULL * DP_USEC_PER_SEC; return 0;
	case 'S': *ret_mult = DP_USEC_PER_SEC; return 0;
	case 'm': *ret_mult = DP_USEC_PER_MSEC; return 0;
	case 'u': *ret_mult = 1; return 0;
	case 'n': *ret_mult = 1; *ret_div = 1000; return 0;
	default: return -EINVAL;
	}
}

int dp_grpc_parse_timeout(const char *s, size_t len, uint64_t *ret_usec)
{
	uint64_t v = 0, mult, div, r;

	if (!s || len < 2 || len > TIMEOUT_MAX_DIGITS + 1)
		return -EINVAL;
	if (timeout_unit_usec(s[len - 1], &mult, &div) < 0)
		return -EINVAL;
	for (size_t i = 0; i < len - 1; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (div > 1)
		r = v / div + (v % div != 0); /* nanoseconds round up to the next microsecond */
	else if (__builtin_mul_overflow(v, mult, &r))
		r = UINT64_MAX;
	*ret_usec = r;
	return 0;
}

void dp_grpc_format_timeout(uint64_t usec, char buf[static 16])
{
	/* grpc-go's EncodeDuration: the finest unit whose (rounded up) value fits 8 digits. */
	static const struct {
		uint64_t usec;
		char unit;
	} units[] = { { 1, 'u' }, { DP_USEC_PER_MSEC, 'm' }, { DP_USEC_PER_SEC, 'S' },
		      { 60 * DP_USEC_PER_SEC, 'M' }, { 3600 * DP_USEC_PER_SEC, 'H' } };

	if (usec == 0) {
		snprintf(buf, 16, "0n");
		return;
	}
	if (usec <= TIMEOUT_MAX_VALUE / 1000) {
		snprintf(buf, 16, "%llun", (unsigned long long)usec * 1000);
		return;
	}
	for (size_t i = 0; i < DP_ELEMENTSOF(units); i++) {
		uint64_t v = usec / units[i].usec + (usec % units[i].usec != 0);
		if (v <= TIMEOUT_MAX_VALUE) {
			snprintf(buf, 16, "%llu%c", (unsigned long long)v, units[i].unit);
			return;
		}
	}
	snprintf(buf, 16, "%lluH", (unsigned long long)TIMEOUT_MAX_VALUE);
}

/* ---- grpc-message percent-encoding ---- */

static bool pct_passes(unsigned char c)
{
	return c >= 0x20 && c <= 0x7e && c != '%';
}

char *dp_grpc_percent_encode(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;
	char *out, *p;

	if (!s)
		s = "";
	for (const unsigned char *q = (const unsigned char *)s; *q; q++)
		n += pct_passes(*q) ? 1 : 3;
	out = malloc(n + 1);
	if (!out)
		return NULL;
	p = out;
	for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
		if (pct_passes(*q)) {
			*p++ = (char)*q;
		} else {
			*p++ = '%';
			*p++ = hex[*q >> 4];
			*p++ = hex[*q & 0xf];
		}
	}
	*p = '\0';
	return out;
}

char *dp_grpc_percent_decode(const char *s, size_t len)
{
	char *out = malloc(len + 1), *p = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		int hi, lo;

		if (s[i] == '%' && i + 2 < len && (hi = dp_hex_digit(s[i + 1])) >= 0 &&
		    (lo = dp_hex_digit(s[i + 2])) >= 0) {
			*p++ = (char)(hi << 4 | lo);
			i += 2;
		} else {
			*p++ = s[i];
		}
	}
	*p = '\0';
	return out;
}

/* ---- message framing ---- */

void dp_grpc_frame_header(uint8_t out[static 5], size_t len)
{
	out[0] = 0;
	out[1] = (uint8_t)(len >> 24);
	out[2] = (uint8_t)(len >> 16);
	out[3] = (uint8_t)(len >> 8);
	out[4] = (uint8_t)len;
}

void dp_grpc_deframer_init(dp_grpc_deframer *d, size_t max)
{
	*d = (dp_grpc_deframer){ .max = max };
}

void dp_grpc_deframer_done(dp_grpc_deframer *d)
{
	free(d->msg);
	d->msg = NULL;
	d->hdr_len = d->msg_len = d->msg_have = 0;
	d->error = 0;
}

uint8_t *dp_grpc_deframer_take(dp_grpc_deframer *d)
{
	uint8_t *msg = d->msg;

	d->msg = NULL;
	return msg;
}

bool dp_grpc_deframer_idle(const dp_grpc_deframer *d)
{
	return d->hdr_len == 0;
}

/* The 5-byte prefix is complete: check it. -EBADMSG, -EPROTONOSUPPORT, -EMSGSIZE. */
static int deframer_header_done(dp_grpc_deframer *d)
{
	uint32_t len = (uint32_t)d->hdr[1] << 24 | (uint32_t)d->hdr[2] << 16 |
		       (uint32_t)d->hdr[3] << 8 | d->hdr[4];

	if (d->hdr[0] > 1)
		return -EBADMSG;
	if (d->hdr[0] == 1)
		return -EPROTONOSUPPORT;
	if (len > d->max)
		return -EMSGSIZE;
	d->msg_len = len;
	d->msg_have = 0;
	if (len > 0) {
		d->msg = malloc(len);
		if (!d->msg)
			return -ENOMEM;
	}
	return 0;
}

/* A message is complete: hand it out and reset for the next one. */
static int deframer_emit(dp_grpc_deframer *d, int (*fn)(void *, const uint8_t *, size_t), void *ud)
{
	static const uint8_t empty[1];
	size_t len = d->msg_len;
	int r;

	d->hdr_len = d->msg_len = d->msg_have = 0;
	d->n_msgs++;
	r = fn ? fn(ud, d->msg ? d->msg : empty, len) : 0;
	free(d->msg); /* unless fn took it */
	d->msg = NULL;
	return r;
}

int dp_grpc_deframer_feed(dp_grpc_deframer *d, const uint8_t *data, size_t len,
			  int (*fn)(void *ud, const uint8_t *msg, size_t len), void *ud)
{
	if (d->error)
		return d->error;
	while (len > 0) {
		int r;

		if (d->hdr_len < 5) {
			size_t n = 5 - d->hdr_len < len ? 5 - d->hdr_len : len;
			memcpy(d->hdr + d->hdr_len, data, n);
			d->hdr_len += n;
			data += n;
			len -= n;
			if (d->hdr_len < 5)
				break;
			r = deframer_header_done(d);
			if (r < 0)
				return (d->error = r);
		} else {
			size_t n = d->msg_len - d->msg_have < len ? d->msg_len - d->msg_have : len;
			memcpy(d->msg + d->msg_have, data, n);
			d->msg_have += n;
			data += n;
			len -= n;
		}
		if (d->hdr_len == 5 && d->msg_have == d->msg_len) {
			r = deframer_emit(d, fn, ud);
			if (r != 0)
				return r;
		}
	}
	return 0;
}

/* ---- status names ---- */

/* Each name is its DP_GRPC_ constant's suffix. */
#define STATUS(name) [DP_GRPC_##name] = #name
static const char *const status_names[] = {
	STATUS(OK),
	STATUS(CANCELLED),
	STATUS(UNKNOWN),
	STATUS(INVALID_ARGUMENT),
	STATUS(DEADLINE_EXCEEDED),
	STATUS(NOT_FOUND),
	STATUS(ALREADY_EXISTS),
	STATUS(PERMISSION_DENIED),
	STATUS(RESOURCE_EXHAUSTED),
	STATUS(FAILED_PRECONDITION),
	STATUS(ABORTED),
	STATUS(OUT_OF_RANGE),
	STATUS(UNIMPLEMENTED),
	STATUS(INTERNAL),
	STATUS(UNAVAILABLE),
	STATUS(DATA_LOSS),
	STATUS(UNAUTHENTICATED),
};
#undef STATUS

const char *dp_grpc_status_name(int status)
{
	if (status < 0 || (size_t)status >= DP_ELEMENTSOF(status_names))
		return "INVALID_STATUS";
	return status_names[status];
}

/* ---- internal helpers shared by server and client ---- */

bool dp_grpc_content_type_ok(const uint8_t *v, size_t len)
{
	static const char base[] = "application/grpc";
	const size_t n = sizeof(base) - 1;

	if (len < n || strncasecmp((const char *)v, base, n) != 0)
		return false;
	return len == n || v[n] == '+' || v[n] == ';';
}

int dp_grpc_parse_status(const uint8_t *v, size_t len, int *ret_status)
{
	uint64_t s = 0;

	if (len == 0 || len > 10)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EINVAL;
		s = s * 10 + (uint64_t)(v[i] - '0');
	}
	if (s > INT32_MAX)
		return -EINVAL;
	*ret_status = (int)s;
	return 0;
}

int dp_grpc_status_from_http(int http_status)
{
	switch (http_status) {
	case 400: return DP_GRPC_INTERNAL;
	case 401: return DP_GRPC_UNAUTHENTICATED;
	case 403: return DP_GRPC_PERMISSION_DENIED;
	case 404: return DP_GRPC_UNIMPLEMENTED;
	case 429:
	case 502:
	case 503:
	case 504: return DP_GRPC_UNAVAILABLE;
	default: return DP_GRPC_UNKNOWN;
	}
}

static const char *const h2_error_names[] = {
	"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
	"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
	"CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
};

const char *dp_grpc_h2_error_name(uint32_t error_code)
{
	if (error_code >= DP_ELEMENTSOF(h2_error_names))
		return "UNKNOWN";
	return h2_error_names[error_code];
}

int dp_grpc_status_from_rst(uint32_t error_code)
{
	switch (error_code) {
	case 7: return DP_GRPC_UNAVAILABLE;         /* REFUSED_STREAM: safe to retry */
	case 8: return DP_GRPC_CANCELLED;           /* CANCEL */
	case 11: return DP_GRPC_RESOURCE_EXHAUSTED; /* ENHANCE_YOUR_CALM */
	case 12: return DP_GRPC_PERMISSION_DENIED;  /* INADEQUATE_SECURITY */
	default: return DP_GRPC_INTERNAL;
	}
}
