/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_internal: what the gRPC server, client and budget (grpc*.c) share and only the core's
 * tests (core/tests/test_grpc.c), the fuzz targets and the conformance test server
 * (tests/grpc) call besides: the pure helpers (grpc-timeout, grpc-message encoding, message
 * framing) and the counters the tests read. Not part of libdp's API (dp/grpc.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/grpc.h"

/* ---- pure helpers (unit-tested, fuzzed) ---- */

/* Parse a grpc-timeout value ("1S", "100m", "30000000u", at most 8 digits, units H M S m u n).
 * -EINVAL when malformed. The result saturates at UINT64_MAX microseconds; "n" rounds up. */
int dp_grpc_parse_timeout(const char *s, size_t len, uint64_t *ret_usec);
/* Encode usec as grpc-go does (finest unit whose value fits 8 digits). buf >= 16 bytes. */
void dp_grpc_format_timeout(uint64_t usec, char buf[static 16]);

/* Percent-encode a grpc-message: bytes 0x20..0x7E except '%' pass, others become %XX (upper
 * hex). Returns malloc'd string or NULL on ENOMEM. */
char *dp_grpc_percent_encode(const char *s);
/* Decode leniently: invalid escapes are kept verbatim. malloc'd, NULL on ENOMEM. */
char *dp_grpc_percent_decode(const char *s, size_t len);

/* Message framing: a decoder fed with arbitrary chunks. */
typedef struct dp_grpc_deframer {
	uint8_t hdr[5];
	size_t hdr_len;
	uint8_t *msg;
	size_t msg_len; /* declared length */
	size_t msg_have;
	size_t max;     /* maximum message size accepted */
	unsigned n_msgs; /* complete messages seen */
	int error;       /* sticky: once a feed failed, every later feed returns the same error */
} dp_grpc_deframer;

void dp_grpc_deframer_init(dp_grpc_deframer *d, size_t max);
void dp_grpc_deframer_done(dp_grpc_deframer *d);
/* Feed bytes. For each complete message fn(ud, msg, len) is called (msg owned by the deframer
 * and valid only during the call, never NULL, also for len 0); a non-zero return from fn stops
 * and is returned (the rest of the chunk is not consumed).
 * -EMSGSIZE: declared length above max (decided from the prefix, before allocating);
 * -EPROTONOSUPPORT: compressed flag set; -EBADMSG: flag neither 0 nor 1; -ENOMEM. These errors
 * are sticky. Nothing is buffered beyond max + 5 bytes. */
int dp_grpc_deframer_feed(dp_grpc_deframer *d, const uint8_t *data, size_t len,
			  int (*fn)(void *ud, const uint8_t *msg, size_t len), void *ud);
/* Inside fn only: take the message buffer (malloc'd, the caller frees it; NULL for an empty
 * message), so that it is not copied. */
uint8_t *dp_grpc_deframer_take(dp_grpc_deframer *d);
/* True when no partial message is pending. */
bool dp_grpc_deframer_idle(const dp_grpc_deframer *d);

/* Write the 5-byte prefix for a message of len bytes. */
void dp_grpc_frame_header(uint8_t out[static 5], size_t len);

/* ---- shared by server and client ---- */

/* content-type is "application/grpc" optionally followed by "+..." or ";..." (case-insensitive). */
bool dp_grpc_content_type_ok(const uint8_t *v, size_t len);
/* grpc-status: 1 to 10 decimal digits, at most INT32_MAX. -EINVAL otherwise. */
int dp_grpc_parse_status(const uint8_t *v, size_t len, int *ret_status);
/* The gRPC status a client reports for a non-200 HTTP :status (grpc-go's table). */
int dp_grpc_status_from_http(int http_status);
/* The gRPC status for a RST_STREAM error code received before any status (PROTOCOL-HTTP2.md). */
int dp_grpc_status_from_rst(uint32_t error_code);
/* The HTTP/2 error code name ("CANCEL"), or "UNKNOWN". */
const char *dp_grpc_h2_error_name(uint32_t error_code);

/* ---- counters (tests) ---- */

unsigned dp_grpc_server_connections(const dp_grpc_server *s);
/* Calls (streams) the server holds right now, including ended ones still being flushed. */
unsigned dp_grpc_server_calls(const dp_grpc_server *s);
/* Request and response bytes held now (all servers of the process). */
size_t dp_grpc_input_held(void);
size_t dp_grpc_output_held(void);
