/* SPDX-License-Identifier: Apache-2.0 */
/*
 * access: the --device-access bootstrap mode. It inventories the node's hypervisor device by
 * stat only (never opens it), registers exactly one hyperlight.dev/device-access device on its
 * own socket, and answers Allocate with only a read/write DeviceSpec for the detected path, so
 * the runtime grants the main plugin's container that device. No CDI, no usability claim:
 * Healthy means "the character device is there with the number seen at start".
 * With COMPANIONS (companion.h) the grant also holds each companion's node that is there at the
 * Allocate (the node itself, with the kernel's number, in the same directory as the hypervisor's
 * node was found); one missing is left out with a warning naming it and why: the main plugin
 * then reports that companion Unhealthy until its pod is made again (the kubelet keeps a
 * container's grant across its restarts). Its health stays the hypervisor node's.
 */
#pragma once

#include "companion.h"
#include "detect.h"
#include "dp/loop.h"
#include "dp/macro.h"

#define HL_ACCESS_RESOURCE "hyperlight.dev/device-access"
#define HL_ACCESS_DEVICE_ID "device-access"

typedef struct hl_access hl_access;

/* Serve and register the one device-access device for dev (copied), found in dir (not resolved:
 * "/host-dev"), where the companions' nodes are looked for too. Negative errno; *ret
 * written only on success. */
int hl_access_new(dp_loop *loop, const struct hl_device *dev, const char *dir,
		  const struct hl_companion *companions, size_t n_companions, hl_access **ret);
/* Removes our socket. Accepts NULL, returns NULL. */
hl_access *hl_access_free(hl_access *a);
DP_DEFINE_CLEANUP(hl_access, hl_access_free)
