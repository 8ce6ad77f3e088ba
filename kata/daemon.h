/* SPDX-License-Identifier: Apache-2.0 */
/*
 * daemon: kata-device-plugin's part of its dp_daemon (main.c holds the description): the
 * naming mode, VFIO backend setting and the table checked before the loop, the backend chosen
 * and the device-set watch before the scan, one plugin per present resource (or the idle
 * endpoint), new SKU models served as they appear, removed devices turned Unhealthy by their
 * plugin's check (asked for on the watch's removal and on every PCI uevent), any other change of
 * the device set ending the daemon with KATA_EXIT_DEVICE_SET_CHANGED.
 */
#pragma once

#include <stdio.h>

#include "dp/daemon.h"
#include "backend.h"
#include "dra.h"
#include "idle.h"
#include "naming.h"
#include "plugin.h"
#include "scan.h"
#include "table.h"
#include "uevent.h"
#include "watch.h"

#define KATA_EXIT_DEVICE_SET_CHANGED 3

/* Zero-initialised by main(); the dp_daemon callbacks' userdata. */
struct kata_daemon {
	dp_loop *loop;
	struct kata_scan_opts opts;
	struct kata_scan scan;
	enum kata_naming naming;
	struct kata_resources res;
	kata_plugin *plugins[KATA_MAX_ROWS];
	size_t n_plugins;
	kata_idle *idle;
	kata_watch *watch;
	enum kata_backend_setting backend; /* VFIO_BACKEND; the choice is in opts.backend */
	kata_uevent *uevent;
	bool dra;      /* PLUGIN_API=dra: the resources' devices through DRA (dra.h), no kubelet endpoint */
	kata_dra *dra_side;
};

/* --help's "Table:" lines: each row's resource, vendor and class pattern. */
void kata_daemon_usage_table(FILE *f);

int kata_daemon_health_prefixes(const dp_daemon_args *a, char (*names)[DP_DAEMON_PREFIX_MAX], size_t max,
				size_t *ret_n);
int kata_daemon_health_dir(const dp_daemon_args *a, char *buf, size_t size);
size_t kata_daemon_seccomp(void *userdata, dp_seccomp_rule *rules, size_t max, int *ret_exe_fd);
int kata_daemon_configure(const dp_daemon_args *a, void *userdata);
int kata_daemon_prepare(dp_loop *loop, void *userdata);
int kata_daemon_start(dp_loop *loop, void *userdata);
void kata_daemon_stop(void *userdata);
