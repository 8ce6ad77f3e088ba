/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (d): protobuf-c decoding of every message the plugins receive or send
 * (RegisterRequest, AllocateRequest, PreferredAllocationRequest, PreStartContainerRequest,
 * HealthCheckRequest, Empty, ListAndWatchResponse and the responses; the plugin registration's
 * InfoRequest, PluginInfo, RegistrationStatus and its response; DRA's NodePrepareResources and
 * NodeUnprepareResources requests and responses, NodeWatchResources'), each input decoded as
 * every type. Round trip: when x unpacks, y = pack(unpack(x)) must unpack again and re-pack to
 * exactly y (unknown fields included).
 *
 * Known library quirk, not ours: protobuf-c 1.4 accepts a field number 0 when its tag is a
 * non-minimal varint (85 00), keeps it as an unknown field, re-packs it minimally (05) and then
 * refuses its own output. Such a message cannot reach a handler differently (unknown fields are
 * ignored), so the re-unpack check is skipped when an unknown field numbered 0 is present.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "dra.pb-c.h"
#include "dra_health.pb-c.h"
#include "fuzz.h"
#include "health.pb-c.h"
#include "pluginregistration.pb-c.h"

static const ProtobufCMessageDescriptor *const types[] = {
	&v1beta1__register_request__descriptor,
	&v1beta1__allocate_request__descriptor,
	&v1beta1__preferred_allocation_request__descriptor,
	&v1beta1__pre_start_container_request__descriptor,
	&grpc__health__v1__health_check_request__descriptor,
	&v1beta1__empty__descriptor,
	&v1beta1__list_and_watch_response__descriptor,
	&v1beta1__device_plugin_options__descriptor,
	&v1beta1__allocate_response__descriptor,
	&v1beta1__preferred_allocation_response__descriptor,
	&v1beta1__pre_start_container_response__descriptor,
	&grpc__health__v1__health_check_response__descriptor,
	&pluginregistration__info_request__descriptor,
	&pluginregistration__plugin_info__descriptor,
	&pluginregistration__registration_status__descriptor,
	&pluginregistration__registration_status_response__descriptor,
	&k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__descriptor,
	&k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__descriptor,
	&k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__descriptor,
	&k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__descriptor,
	&v1__node_watch_resources_request__descriptor,
	&v1__node_watch_resources_response__descriptor,
};

static uint8_t *pack(const ProtobufCMessage *m, size_t *ret_len)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = malloc(n ? n : 1);
	FUZZ_CHECK(buf != NULL);
	FUZZ_CHECK(protobuf_c_message_pack(m, buf) == n);
	*ret_len = n;
	return buf;
}

static bool has_tag0(const ProtobufCMessage *m)
{
	for (unsigned i = 0; i < m->n_unknown_fields; i++)
		if (m->unknown_fields[i].tag == 0)
			return true;
	const ProtobufCMessageDescriptor *d = m->descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		const char *base = (const char *)m;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
			for (size_t j = 0; j < n; j++)
				if (has_tag0(v[j]))
					return true;
		} else {
			const ProtobufCMessage *v = *(const ProtobufCMessage *const *)(base + f->offset);
			if (v && has_tag0(v))
				return true;
		}
	}
	return false;
}

static void round_trip(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t size)
{
	ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size, data);
	if (!m)
		return;
	FUZZ_CHECK(protobuf_c_message_check(m));
	size_t n1, n2;
	uint8_t *p1 = pack(m, &n1);
	bool quirk = has_tag0(m);
	protobuf_c_message_free_unpacked(m, NULL);
	ProtobufCMessage *m2 = protobuf_c_message_unpack(d, NULL, n1, p1);
	if (!m2 && quirk) {
		free(p1);
		return;
	}
	FUZZ_CHECK(m2 != NULL);
	uint8_t *p2 = pack(m2, &n2);
	FUZZ_CHECK(n1 == n2 && memcmp(p1, p2, n1) == 0);
	protobuf_c_message_free_unpacked(m2, NULL);
	free(p1);
	free(p2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		round_trip(types[i], data, size);
	return 0;
}
