/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access: the --device-access bootstrap mode. It inventories the node's hypervisor device by
 * stat only (never opens it), registers exactly one hyperlight.dev/device-access device on its
 * own socket, and answers Allocate with only a read/write DeviceSpec for the detected path, so
 * the runtime grants the main plugin's container that device. No CDI, no usability claim:
 * Healthy means "the character device is there with the number seen at start".
 */
#pragma once

#include "detect.h"
#include "dp/endpoint.h"
#include "dp/loop.h"

#define HL_ACCESS_RESOURCE "hyperlight.dev/device-access"
#define HL_ACCESS_SOCKET_PREFIX "hyperlight-device-access"
#define HL_ACCESS_DEVICE_ID "device-access"

struct hl_access {
	dp_loop *loop;
	struct hl_device dev;
	dp_endpoint *ep;
	struct hl_node_watch watch;
	bool reported;
	bool last_healthy;
};

int hl_access_start(struct hl_access *a, dp_loop *loop, const struct hl_device *dev);
void hl_access_stop(struct hl_access *a);
