/* SPDX-License-Identifier: Apache-2.0 */
/* config: the hyperlight daemon's environment: DEVICE_COUNT, DEVICE_UID/GID/MODE, HOST_DEVICE_DIR. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "companion.h"

#define HL_DEFAULT_COUNT 2000u
#define HL_DEFAULT_ID 65534u
/* The device node's permission bits in the workload: DEVICE_UID and DEVICE_GID read and write,
 * no one else. Without a fileMode in the spec the runtime picks one (containerd's CDI library
 * copies the host node's, 0666 under systemd's udev rule for /dev/kvm). */
#define HL_DEFAULT_MODE 0660u
#define HL_MODE_MAX 0777u /* no setuid, setgid or sticky bit */
#define HL_RESOURCE "hyperlight.dev/hypervisor"
/* Socket names "hl-<hash of the resource>-<n>.sock" (dp_socket_prefix): both modes, one tag. */
#define HL_SOCKET_TAG "hl"
#define HL_ID_PREFIX "hyperlight-"

struct hl_config {
	uint32_t device_count;
	uint32_t uid;
	uint32_t gid;
	uint32_t mode; /* DEVICE_MODE: the spec's fileMode, at most HL_MODE_MAX */
	char host_device_dir[PATH_MAX]; /* HOST_DEVICE_DIR ("" when unset): the host's /dev, read-only */
	bool dra; /* PLUGIN_API=dra: served through DRA (dra.h), not the device-plugin API */
	struct hl_companion companions[HL_COMPANION_TYPES]; /* COMPANIONS (companion.h) */
	size_t n_companions;
};

/* The largest DEVICE_COUNT whose ListAndWatch response (all devices "Unhealthy", the longer
 * health string) still fits the 4 MiB gRPC message limit. */
uint32_t hl_device_count_ceiling(void);
/* Read the environment. DEVICE_COUNT invalid or outside 1..ceiling: -EINVAL/-ERANGE with the
 * message in err (the daemon exits 1). DEVICE_UID/DEVICE_GID/DEVICE_MODE invalid: default kept,
 * a warning naming the value is logged (once, here). HOST_DEVICE_DIR not absolute or too long:
 * -EINVAL (exit 1). PLUGIN_API: "device-plugin" (the default, also when unset or empty) or
 * "dra"; anything else -EINVAL (exit 1): a daemon never guesses which API serves its devices.
 * COMPANIONS and their variables (companion.h): invalid, or COMPANIONS with PLUGIN_API=dra
 * (companions are device-plugin resources only): -EINVAL/-ERANGE (exit 1). */
int hl_config_load(struct hl_config *ret, char *err, size_t errlen);
/* A mode as DEVICE_MODE takes it: 3 or 4 octal digits ("660", "0660"), at most HL_MODE_MAX.
 * 0 with *ret set; -EINVAL (not 3 or 4 digits 0-7, "" included) or -ERANGE (above HL_MODE_MAX)
 * with a message naming name and the value in err, *ret untouched. */
int hl_parse_mode(const char *name, const char *value, uint32_t *ret, char *err, size_t errlen);
/* Device ID i ("hyperlight-<i>") into buf. */
void hl_device_id(uint32_t i, char *buf, size_t size);
