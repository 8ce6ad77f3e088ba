/* SPDX-License-Identifier: Apache-2.0 */
/*
 * idle: no device matches the table. Nothing is registered with kubelet; for the liveness probe
 * grpc.health.v1 is served on "<kubelet dir>/<prefix>-<n>.sock", the prefix
 * dp_socket_prefix(KATA_SOCKET_TAG, KATA_IDLE_SOCKET_KEY) (table.h): "" answers SERVING,
 * "readiness" NOT_SERVING (an idle daemon is never ready). The socket is re-created under a
 * fresh name when it is deleted (kubelet deletes every socket in the directory when it starts) or
 * the directory is re-created: a watch on the directory (dp_watch, which waits for a missing one),
 * plus a stat check as the backstop (5 s while not serving or without inotify, else 30 s on the
 * loop's grid). Only the socket this module created is ever deleted.
 */
#pragma once

#include "dp/loop.h"
#include "dp/macro.h"

typedef struct kata_idle kata_idle;

/* kubelet_dir: host path (under the root prefix). Serving starts at once when possible (a
 * failure is logged and retried). -ENOMEM, -ENAMETOOLONG (kubelet_dir longer than
 * DP_SOCKET_DIR_MAX), timer errors. */
int kata_idle_new(dp_loop *loop, const char *kubelet_dir, kata_idle **ret);
/* Stops serving and removes our socket. Accepts NULL, returns NULL. */
kata_idle *kata_idle_free(kata_idle *i);
DP_DEFINE_CLEANUP(kata_idle, kata_idle_free)
/* Current socket base name, NULL when not serving. */
const char *kata_idle_socket(const kata_idle *i);
