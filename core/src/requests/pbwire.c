/* SPDX-License-Identifier: Apache-2.0 */
/* pbwire: a field-by-field reader of the protobuf wire format, no allocation (pbwire.h). */
#include "pbwire.h"

#include <errno.h>
#include <stdbool.h>

void dp_pb_reader_init(dp_pbreader *r, const uint8_t *data, size_t len)
{
	r->start = r->p = data;
	r->end = data + len;
}

size_t dp_pb_offset(const dp_pbreader *r) { return (size_t)(r->p - r->start); }

/* A varint of at most max bytes from *p (< end); advances *p. false: truncated or too long. */
static bool varint(const uint8_t **p, const uint8_t *end, size_t max, uint64_t *ret)
{
	uint64_t v = 0;
	for (size_t i = 0; i < max && *p + i < end; i++) {
		uint8_t b = (*p)[i];
		if (i == 9 && b > 1)
			return false; /* bits beyond 64 */
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80)) {
			*p += i + 1;
			*ret = v;
			return true;
		}
	}
	return false;
}

int dp_pb_next(dp_pbreader *r, dp_pbfield *ret)
{
	const uint8_t *p = r->p;
	uint64_t tag, n = 0;
	if (p == r->end)
		return 0;
	if (!varint(&p, r->end, 5, &tag) || tag > UINT32_MAX || (tag >> 3) == 0)
		return -EBADMSG;
	dp_pbfield f = { .number = (uint32_t)(tag >> 3), .wire = (enum dp_pb_wire)(tag & 7) };
	switch (tag & 7) {
	case DP_PB_VARINT:
		if (!varint(&p, r->end, 10, &f.varint))
			return -EBADMSG;
		break;
	case DP_PB_I64:
	case DP_PB_I32:
		n = (tag & 7) == DP_PB_I64 ? 8 : 4;
		break;
	case DP_PB_LEN:
		if (!varint(&p, r->end, 10, &n))
			return -EBADMSG;
		break;
	default:
		return -EBADMSG;
	}
	if (n > (uint64_t)(r->end - p))
		return -EBADMSG;
	if (f.wire != DP_PB_VARINT) {
		f.data = p;
		f.len = (size_t)n;
		p += n;
	}
	r->p = p;
	*ret = f;
	return 1;
}
