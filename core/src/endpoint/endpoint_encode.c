/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_encode: ListAndWatchResponse wire bytes (see endpoint_encode.h). */
#include "endpoint_encode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dp/endpoint.h"
#include "dp/grpc.h"

/*
 * api.proto (proto3): ListAndWatchResponse { repeated Device devices = 1; }
 * Device { string ID = 1; string health = 2; TopologyInfo topology = 3; }
 * TopologyInfo { repeated NUMANode nodes = 1; }  NUMANode { int64 ID = 1; }
 * Fields are written in number order, as protobuf-c does; a proto3 scalar equal to 0 is omitted
 * (NUMA node 0 is an empty NUMANode), strings and sub-messages are length-delimited.
 */
#define TAG_LEN(field) ((uint8_t)((field) << 3 | 2))
#define TAG_VARINT(field) ((uint8_t)((field) << 3 | 0))
#define MAX_ID_LEN 63

static size_t varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* Size of NUMANode's body for node id (>= 0). */
static size_t numa_body_size(int64_t node)
{
	return node == 0 ? 0 : 1 + varint_size((uint64_t)node);
}

static size_t topo_body_size(int64_t node)
{
	size_t nb = numa_body_size(node);
	return 1 + varint_size(nb) + nb;
}

static size_t device_body_size(size_t idlen, size_t hlen, int64_t node)
{
	size_t s = 1 + varint_size(idlen) + idlen + 1 + varint_size(hlen) + hlen;
	if (node >= 0) {
		size_t tb = topo_body_size(node);
		s += 1 + varint_size(tb) + tb;
	}
	return s;
}

static uint8_t *put_device(uint8_t *p, const char *id, size_t idlen, const char *health, size_t hlen,
			   int64_t node)
{
	size_t body = device_body_size(idlen, hlen, node);
	*p++ = TAG_LEN(1);
	p = put_varint(p, body);
	*p++ = TAG_LEN(1);
	p = put_varint(p, idlen);
	memcpy(p, id, idlen);
	p += idlen;
	*p++ = TAG_LEN(2);
	p = put_varint(p, hlen);
	memcpy(p, health, hlen);
	p += hlen;
	if (node >= 0) {
		size_t nb = numa_body_size(node);
		*p++ = TAG_LEN(3);
		p = put_varint(p, topo_body_size(node));
		*p++ = TAG_LEN(1);
		p = put_varint(p, nb);
		if (node != 0) {
			*p++ = TAG_VARINT(1);
			p = put_varint(p, (uint64_t)node);
		}
	}
	return p;
}

int dp_ep_encode_list(const char *ids, size_t n, const int64_t *numa, bool healthy, const bool *down,
		      uint8_t **ret, size_t *ret_len)
{
	static const char good[] = "Healthy", bad[] = "Unhealthy";
	size_t total = 0;
	const char *id = ids;

	for (size_t i = 0; i < n; i++) {
		size_t idlen = strlen(id);
		if (idlen == 0 || idlen > MAX_ID_LEN)
			return -EINVAL;
		bool ok = healthy && !(down && down[i]);
		size_t body = device_body_size(idlen, ok ? sizeof(good) - 1 : sizeof(bad) - 1, numa ? numa[i] : -1);
		total += 1 + varint_size(body) + body;
		id += idlen + 1;
	}
	uint8_t *buf = malloc(total ? total : 1);
	if (!buf)
		return -ENOMEM;
	uint8_t *p = buf;
	id = ids;
	for (size_t i = 0; i < n; i++) {
		size_t idlen = strlen(id);
		bool ok = healthy && !(down && down[i]);
		p = put_device(p, id, idlen, ok ? good : bad, ok ? sizeof(good) - 1 : sizeof(bad) - 1,
			       numa ? numa[i] : -1);
		id += idlen + 1;
	}
	*ret = buf;
	*ret_len = total;
	return 0;
}

/* Every ID with the same number of decimal digits has the same size: fill the message one digit
 * count at a time (a few steps, not one ID per device: daemons call this at every start). The
 * message is full long before the count could overflow; IDs longer than 63 are invalid. */
size_t dp_endpoint_max_devices(const char *id_prefix)
{
	size_t prefix = strlen(id_prefix), hlen = strlen("Unhealthy"), total = 0, first = 0, end = 10;

	for (size_t digits = 1; prefix + digits <= MAX_ID_LEN; digits++) {
		size_t body = device_body_size(prefix + digits, hlen, -1);
		size_t each = 1 + varint_size(body) + body;
		size_t fit = (DP_GRPC_MAX_MESSAGE - total) / each;
		if (fit < end - first)
			return first + fit;
		total += (end - first) * each;
		first = end;
		end *= 10;
	}
	return first;
}
