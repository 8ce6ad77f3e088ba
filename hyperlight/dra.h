/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dra: the hypervisor served through DRA (PLUGIN_API=dra; dp/draside.h does the kubelet and API
 * server sides): driver "hyperlight.dev", one pool per node (the node's name), one device named
 * as the hypervisor ("kvm" or "mshv") that many claims share: allowMultipleAllocations with the
 * consumable capacity "sandboxes" of DEVICE_COUNT (KEP-5075, DRAConsumableCapacity: beta and on
 * by default since 1.36), each claim taking 1 unless it asks for more. Attributes: type
 * "hypervisor", hypervisor "kvm"/"mshv", path the node's. Its health is the probe's verdict, as
 * with the device-plugin API: while Unhealthy the device carries the taint
 * hyperlight.dev/unhealthy:NoSchedule (device taints: DRADeviceTaints, GA in 1.37), so no new
 * claim is allocated it, and a claim is not prepared on it ("device kvm is unusable: <reason>").
 * A claim's device is prepared as the CDI device hyperlight.dev/hypervisor=<kvm|mshv> of
 * /var/run/cdi/hyperlight.json, the same spec the device-plugin API uses.
 */
#pragma once

#include <stdbool.h>

#include "config.h"
#include "detect.h"
#include "dp/loop.h"
#include "dp/macro.h"

#define HL_DRA_DRIVER "hyperlight.dev"
#define HL_DRA_CAPACITY "sandboxes"
#define HL_DRA_TAINT "hyperlight.dev/unhealthy"

typedef struct hl_dra hl_dra;

/* Start the DRA side for dev, its API calls made by exe (hyperlight-label-node's DRA entries). It needs the API server: without NODE_NAME, the service account or
 * KUBERNETES_SERVICE_HOST/PORT it fails (-ENOENT, -EINVAL; why says which), as a DRA driver
 * that cannot publish or read claims serves nothing. Nothing is published before the first
 * verdict (hl_dra_verdict). */
int hl_dra_new(dp_loop *loop, const struct hl_config *cfg, const struct hl_device *dev, const char *exe, hl_dra **ret,
	       char *why, size_t why_size);
/* The probe's verdict: the device published healthy, or tainted (once, at the first unhealthy
 * verdict of an episode: its timeAdded stays). */
void hl_dra_verdict(bool healthy, const char *reason, void *userdata);
hl_dra *hl_dra_free(hl_dra *d);
DP_DEFINE_CLEANUP(hl_dra, hl_dra_free)
int hl_dra_exe_fd(const hl_dra *d);
/* A count as the API server writes a Quantity (canonical decimal SI: 2000 is "2k", 1500 "1500"). */
void hl_dra_quantity(uint64_t v, char *buf, size_t size);
