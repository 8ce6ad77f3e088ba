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
 * most 1 s; not at all when kubelet.sock is absent): the endpoint's first_check_hold_usec, as
 * kubelet dials back inside Register, and answering it must not queue behind the CDI write (two
 * fsyncs) and the probe child's spawn. The devices are Unhealthy until that check, as always,
 * and the first ListAndWatch response waits for it.
 */
#pragma once

#include "companion.h"
#include "config.h"
#include "detect.h"
#include "dp/loop.h"
#include "dp/macro.h"

typedef struct hl_plugin hl_plugin;

/* Render and own the CDI spec, start the probe helper, serve and register (the endpoint's first
 * check follows). cfg and dev are copied. Negative errno; *ret written only on success. */
int hl_plugin_new(dp_loop *loop, const struct hl_config *cfg, const struct hl_device *dev,
		  hl_plugin **ret);
/* A companion's endpoint (companion.h): the same checks, watches and Allocate for its own
 * resource, CDI spec (hl_companion_cdi_file) and probe kind, its node at its path under /dev
 * (with HOST_DEVICE_DIR, the host's there too). Its node may be missing: the devices are then
 * Unhealthy with the reason until it comes. cfg and c are copied. */
int hl_plugin_new_companion(dp_loop *loop, const struct hl_config *cfg, const struct hl_companion *c,
			    hl_plugin **ret);
/* Answers the Allocates still waiting (UNAVAILABLE), stops the probe helper, removes our socket;
 * the CDI spec is kept. Accepts NULL, returns NULL. */
hl_plugin *hl_plugin_free(hl_plugin *p);
DP_DEFINE_CLEANUP(hl_plugin, hl_plugin_free)
/* Told every check's end (healthy, or why not); with PLUGIN_API=dra the endpoint neither serves
 * nor registers (dp_endpoint_config.no_kubelet) and this is how the DRA side learns the verdict. */
typedef void (*hl_plugin_verdict_fn)(bool healthy, const char *reason, void *userdata);
void hl_plugin_set_verdict_fn(hl_plugin *p, hl_plugin_verdict_fn fn, void *userdata);
/* The probe helper's executable fd (the seccomp allow-list's only exec). */
int hl_plugin_exe_fd(const hl_plugin *p);
