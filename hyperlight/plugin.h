/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin: the hyperlight.dev/hypervisor driver. One check: the device node is still the
 * character device detected at start, the owned CDI spec holds exactly the rendered bytes
 * (repaired when it differs), then the usability probe in the helper child (2 s deadline; with
 * HOST_DEVICE_DIR the host's node is verified there too). Concurrent checks (the period,
 * inotify, every Allocate) join the probe in flight, except after a watched node changed while
 * it ran (it may have seen the old node): those wait for the next probe, started when the run
 * ends. Each finished check updates every stream.
 * A watch (dp_watch) on the device's directory, on HOST_DEVICE_DIR (the host's node: gone,
 * replaced or back) and on the CDI directory asks for a check at once; the endpoint adds the
 * 30 s period (the backstop) and the backoff while unhealthy.
 *
 * The first check waits for the first registration attempt to end (registered or failed; at
 * most HL_FIRST_CHECK_HOLD_USEC; not at all when kubelet.sock is absent): kubelet dials back
 * inside Register, and answering it must not queue behind the CDI write (two fsyncs) and the
 * probe child's spawn. The devices are Unhealthy until that check, as always, and the first
 * ListAndWatch response waits for it.
 */
#pragma once

#include <stdbool.h>

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
	struct hl_node_watch watch;      /* the node in the daemon's own /dev */
	char host_dir[PATH_MAX];         /* HOST_DEVICE_DIR resolved, "" without it */
	struct hl_node_watch host_watch; /* the host's node there (with HOST_DEVICE_DIR) */
	dp_helper *probe;
	struct hl_waiter *waiters; /* requesters of the probe in flight */
	struct hl_waiter *queued;  /* requesters of the next probe (stale: a node changed) */
	bool stale;                /* a node changed while the probe in flight ran */
	unsigned probe_counted;    /* the last probe run counted in the metrics */
	dp_endpoint_events events; /* the shared log lines, plus the release of the first check */
	dp_source *hold;           /* bounds the first check's wait for registration */
	bool holding;              /* the first check waits for the first registration attempt */
	bool check_held;           /* a check was asked for meanwhile */
	bool last_healthy;
	bool reported;
	char last_reason[512];
};

#define HL_FIRST_CHECK_HOLD_USEC (1 * DP_USEC_PER_SEC)

int hl_plugin_start(struct hl_plugin *p, dp_loop *loop, const struct hl_config *cfg,
		    const struct hl_device *dev);
void hl_plugin_stop(struct hl_plugin *p);
