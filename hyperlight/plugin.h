/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin: the hyperlight.dev/hypervisor driver. One check: the device node is still the
 * character device detected at start, the owned CDI spec holds exactly the rendered bytes
 * (repaired when it differs), then the usability probe in the helper child (2 s deadline; with
 * HOST_DEVICE_DIR the host's node is verified there too). Concurrent checks (the period,
 * inotify, every Allocate) join the probe in flight; each finished check updates every stream.
 * inotify on the device's directory and on the CDI directory asks for a check at once; the
 * endpoint adds the 30 s period and the backoff while unhealthy.
 */
#pragma once

#include "config.h"
#include "detect.h"
#include "dp/cdi.h"
#include "dp/endpoint.h"
#include "dp/helper.h"
#include "dp/loop.h"

struct hl_plugin {
	dp_loop *loop;
	struct hl_config cfg;
	struct hl_device dev;
	char cdi_name[128]; /* "hyperlight.dev/hypervisor=kvm" */
	dp_endpoint *ep;
	dp_cdi_file *cdi;
	struct hl_node_watch watch;
	dp_helper *probe;
	struct hl_waiter *waiters; /* requesters of the probe in flight */
	bool last_healthy;
	bool reported;
	char last_reason[512];
};

int hl_plugin_start(struct hl_plugin *p, dp_loop *loop, const struct hl_config *cfg,
		    const struct hl_device *dev);
void hl_plugin_stop(struct hl_plugin *p);
