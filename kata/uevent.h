/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uevent: the kernel's PCI driver bind and unbind events (NETLINK_KOBJECT_UEVENT), so that a
 * group member bound to or unbound from a host driver is seen within milliseconds: a bind or
 * unbind changes no file inotify could watch in sysfs. Messages of SUBSYSTEM=pci with
 * ACTION=bind, unbind, add or remove call fn once per loop batch that holds any. The kernel
 * broadcasts these events (they carry no network namespace) to every network namespace owned by
 * the initial user namespace: a pod's own namespace gets them, not one in a user namespace.
 * Without the socket (refused, or in a user namespace) the periodic check (30 s) is the path.
 */
#pragma once

#include "dp/loop.h"
#include "dp/macro.h"

typedef struct kata_uevent kata_uevent;
typedef void (*kata_uevent_fn)(const char *action, const char *devpath, void *userdata);

/* Open and bind the socket (before the seccomp filter: it allows AF_UNIX sockets only).
 * -errno of socket() or bind(), -ENOMEM. */
int kata_uevent_new(dp_loop *loop, kata_uevent_fn fn, void *userdata, kata_uevent **ret);
kata_uevent *kata_uevent_free(kata_uevent *u);
DP_DEFINE_CLEANUP(kata_uevent, kata_uevent_free)

/* Whether one uevent message (buf, n bytes: "action@devpath\0KEY=VALUE\0...") is a PCI driver
 * binding change; *action and *devpath point into buf. */
bool kata_uevent_parse(const char *buf, size_t n, const char **action, const char **devpath);
