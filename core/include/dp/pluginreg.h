/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pluginreg: the kubelet's plugin registration (pluginregistration v1), the way DRA drivers
 * (and CSI drivers) register: a socket in the kubelet's plugins_registry directory, which its
 * plugin watcher finds (inotify, and a walk of the directory when the kubelet starts), dials
 * and asks GetInfo; the kubelet's handler for the plugin's type validates what it got and
 * answers NotifyRegistrationStatus (registered, or why not). The kubelet keeps the plugin
 * registered while the socket file is there; the plugin's service is on its own socket (the
 * endpoint it names).
 *
 * The socket is "<dir>/<name>-reg.sock" (as the kubelet's own kubeletplugin helper names it),
 * mode 0600, served by the core's gRPC server: GetInfo answers the configuration, whatever the
 * request holds (InfoRequest has no field; unknown ones are skipped); NotifyRegistrationStatus
 * records the kubelet's word and tells on_status each time (a kubelet restart asks again).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/loop.h"
#include "dp/macro.h"

#define DP_PLUGINREG_TYPE_DRA "DRAPlugin"
#define DP_PLUGINREG_SUFFIX "-reg.sock"
/* Longest name: a DNS subdomain label's 63 bytes; the kubelet takes the driver name as a DNS
 * subdomain, and the socket's path must fit a sockaddr_un. */
#define DP_PLUGINREG_NAME_MAX 63
#define DP_PLUGINREG_VERSIONS_MAX 8

#define DP_PLUGINREG_GETINFO_PATH "/pluginregistration.Registration/GetInfo"
#define DP_PLUGINREG_NOTIFY_PATH "/pluginregistration.Registration/NotifyRegistrationStatus"

typedef struct dp_pluginreg dp_pluginreg;

/* The kubelet's word: registered, or not with its error (never NULL, may be empty). */
typedef void (*dp_pluginreg_status_fn)(bool registered, const char *error, void *userdata);

typedef struct dp_pluginreg_config {
	const char *type;            /* DP_PLUGINREG_TYPE_DRA */
	const char *name;            /* [a-z0-9] with '-' and '.' inside, 1..DP_PLUGINREG_NAME_MAX */
	const char *endpoint;        /* the plugin service's socket, an absolute path */
	const char *const *versions; /* 1..DP_PLUGINREG_VERSIONS_MAX non-empty ("v1.DRAPlugin") */
	size_t n_versions;
	dp_pluginreg_status_fn on_status; /* may be NULL */
	void *userdata;
} dp_pluginreg_config;

/*
 * Serve dir/<name>-reg.sock. A stale socket of that name (nobody listens) is replaced; a live
 * one is -EADDRINUSE (another instance of the plugin). The configuration is copied. -EINVAL for
 * a bad configuration, -ENAMETOOLONG when the path does not fit a sockaddr_un, -ENOMEM, socket
 * errors. *ret written only on success.
 */
int dp_pluginreg_new(dp_loop *loop, const char *dir, const dp_pluginreg_config *c, dp_pluginreg **ret);
/* Stop serving (open calls end UNAVAILABLE) and remove the socket if it is still the one
 * created (same inode): the kubelet then deregisters the plugin. Accepts NULL; returns NULL. */
dp_pluginreg *dp_pluginreg_free(dp_pluginreg *r);
DP_DEFINE_CLEANUP(dp_pluginreg, dp_pluginreg_free)

/* The socket's path. */
const char *dp_pluginreg_socket(const dp_pluginreg *r);
/* The kubelet's last word: 1 registered, 0 refused (*error its message, if error is not NULL),
 * -1 none yet. */
int dp_pluginreg_status(const dp_pluginreg *r, const char **error);
