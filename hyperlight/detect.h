/* SPDX-License-Identifier: Apache-2.0 */
/* detect: find the hypervisor device node (/dev/mshv, then /dev/kvm) under the root prefix. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "dp/endpoint.h"
#include "dp/loop.h"
#include "dp/watch.h"

struct hl_device {
	const char *name;      /* "kvm" or "mshv": the CDI device name and HYPERLIGHT_HYPERVISOR;
				* a companion's name ("tun") */
	const char *path;      /* "/dev/kvm": the path inside containers and on the host */
	const char *node;      /* its last component ("kvm", "tun"): the name watched in host_dir */
	char host_path[PATH_MAX]; /* path resolved under the root prefix */
	char host_dir[PATH_MAX];  /* its directory (watched) */
	dev_t rdev;
	/* A companion (companion.h): rdev is the kernel's fixed number, not one seen at start; the
	 * node may be missing; a symlink is not the node (lstat, not stat). */
	bool fixed;
};

/* Look in dir ("/dev", or HOST_DEVICE_DIR for the bootstrap mode), under the root prefix.
 * -ENOENT: neither exists; -ENOTTY: the path exists but is not a character device (err says
 * which); other negative errno from stat. path is always the canonical "/dev/<name>". */
int hl_detect(const char *dir, struct hl_device *ret, char *err, size_t errlen);
/* A companion's device (companion.h) under dir ("/dev"), by name only: nothing is looked at. */
struct hl_companion_type;
int hl_companion_device(const struct hl_companion_type *t, const char *dir, struct hl_device *ret);
/* 0 when host_path is still a character device with the same number; else -errno and reason.
 * A companion's (fixed): the node itself, never a symlink, with the kernel's number; reasons
 * "/dev/net/tun missing", "... is a symbolic link, not the device node", "... is not a
 * character device", "... has device number 10:201, expected 10:200". */
int hl_device_verify(const struct hl_device *d, char *reason, size_t size);

/* A watch (dp_watch) on the node's directory: the node created, deleted, replaced or changed,
 * or the directory itself gone, replaced or back, asks ep for a check at once (logged at debug
 * with the event). hl_node_watch_ensure() adds it, or re-arms what could not be added; the
 * caller's periodic check is its backstop. dir and name are borrowed. */
struct hl_node_watch {
	dp_loop *loop;
	dp_endpoint *ep;
	const char *dir;  /* resolved under the root prefix */
	const char *name; /* the node in dir: "kvm" or "mshv" */
	void (*changed)(void *userdata); /* called instead of asking ep for a check, when set */
	void *userdata;
	dp_watch *src;
	bool failed; /* the last dp_watch_new failed (said once) */
};

void hl_node_watch_ensure(struct hl_node_watch *w);
void hl_node_watch_stop(struct hl_node_watch *w);
