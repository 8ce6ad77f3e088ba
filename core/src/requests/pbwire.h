/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pbwire: a reader of the protobuf wire format, field by field, straight from the received
 * bytes: no allocation, nothing copied. The request decoders (endpoint_decode.c, health.c) use it
 * instead of protobuf-c's unpack, whose memory grows with the number of fields (a message of
 * many small unknown fields unpacks into many times its size) and whose strings end at the
 * first NUL.
 *
 * Accepted: wire types 0 (varint, at most 10 bytes, no bit beyond 64), 1 (8 bytes), 2 (a length
 * varint, then that many bytes) and 5 (4 bytes), field numbers 1..2^29-1 with a tag of at most
 * 5 bytes. Malformed (the reader stops): a truncated field, a length beyond the end, groups
 * (wire types 3 and 4, which protobuf-c refuses too), wire types 6 and 7, field number 0.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

enum dp_pb_wire { DP_PB_VARINT = 0, DP_PB_I64 = 1, DP_PB_LEN = 2, DP_PB_I32 = 5 };

typedef struct dp_pbfield {
	uint32_t number;
	enum dp_pb_wire wire;
	uint64_t varint;     /* DP_PB_VARINT: the value */
	const uint8_t *data; /* DP_PB_LEN: the payload; DP_PB_I64/I32: the 8 or 4 bytes */
	size_t len;
} dp_pbfield;

typedef struct dp_pbreader {
	const uint8_t *start, *p, *end;
} dp_pbreader;

void dp_pb_reader_init(dp_pbreader *r, const uint8_t *data, size_t len);
/* 1 with *ret the next field, 0 at the end, -EBADMSG when malformed (the reader stays there:
 * dp_pb_offset says where, every later call returns -EBADMSG). */
int dp_pb_next(dp_pbreader *r, dp_pbfield *ret);
/* Bytes consumed so far (on -EBADMSG: the offset of the malformed field). */
size_t dp_pb_offset(const dp_pbreader *r);
