/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spec: the CDI spec of one resource, rendered to canonical bytes (YAML, double-quoted scalars,
 * trailing newline):
 *   cdiVersion: "0.5.0"
 *   kind: "nvidia.com/gpu"
 *   devices:
 *     - name: "0"
 *       containerEdits:
 *         deviceNodes:
 *           - path: "/dev/vfio/devices/vfio3"
 *             type: "c"
 * kind = the resource name, one device per ID ("0".."n-1" in the order given), whose only edit
 * is the cdev at the same path in the container (the runtime stats the host node for the
 * numbers). cdiVersion is the minimum the content requires: 0.5.0 (names start with a digit),
 * 0.6.0 if the resource's class half holds a '.'.
 */
#pragma once

#include <stddef.h>

#include "dp/buf.h"
#include "scan.h"

/* Appends to out (check out->oom). n >= 1. */
void kata_spec_render(const char *resource, const struct kata_device *devs, size_t n, dp_buf *out);
