/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: hyperlight-device-plugin's part of its dp_daemon (main.c holds the description): the
 * configuration and the hypervisor device found before the loop, then either the plugin (with
 * node labels) or, with --device-access, the bootstrap plugin; their seccomp rules; their stop.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "access.h"
#include "config.h"
#include "dra.h"
#include "detect.h"
#include "dp/daemon.h"
#include "labels.h"
#include "plugin.h"

#define HL_FLAG_DEVICE_ACCESS 0 /* the index of --device-access in main.c's flags */

struct hl_daemon;
/* A companion's verdict's way to its node label. */
struct hl_companion_track {
	struct hl_daemon *d;
	size_t which; /* hl_labels_verdict's */
};

/* Zero-initialised by main(); the dp_daemon callbacks' userdata. */
struct hl_daemon {
	bool device_access;
	struct hl_config cfg;
	struct hl_device dev;
	hl_plugin *plugin;
	hl_plugin *companions[HL_COMPANION_TYPES]; /* cfg.companions' endpoints */
	struct hl_companion_track tracks[HL_COMPANION_TYPES];
	hl_access *access;
	hl_labels *labels;
	hl_dra *dra; /* PLUGIN_API=dra */
	char start_why[320]; /* why the start failed, when more than its errno says */
};

int hl_daemon_health_prefixes(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max,
			      size_t *ret_n);
/* With PLUGIN_API=dra the exec probe asks the DRA socket (dp/draside.h) in the driver's plugin
 * directory: 1 with it in buf; else 0 (the device-plugins directory). */
int hl_daemon_health_dir(const dp_daemon_args *a, char *buf, size_t size);
int hl_daemon_configure(const dp_daemon_args *a, void *userdata);
int hl_daemon_start(dp_loop *loop, void *userdata);
size_t hl_daemon_seccomp(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd);
void hl_daemon_stop(void *userdata);
