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
#include "dp/loop.h"
#include "dp/macro.h"

#define HL_ACCESS_RESOURCE "hyperlight.dev/device-access"
#define HL_ACCESS_DEVICE_ID "device-access"

typedef struct hl_access hl_access;

/* Serve and register the one device-access device for dev (copied). Negative errno; *ret
 * written only on success. */
int hl_access_new(dp_loop *loop, const struct hl_device *dev, hl_access **ret);
/* Removes our socket. Accepts NULL, returns NULL. */
hl_access *hl_access_free(hl_access *a);
DP_DEFINE_CLEANUP(hl_access, hl_access_free)
