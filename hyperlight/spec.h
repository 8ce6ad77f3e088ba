/* SPDX-License-Identifier: Apache-2.0 */
/* spec: render the exact bytes of /var/run/cdi/hyperlight.json. */
#pragma once

#include <stdint.h>

#include "detect.h"
#include "dp/cdi.h"

#define HL_CDI_FILE "hyperlight.json"

/* Canonical JSON: 2-space indentation, trailing newline, minimum cdiVersion (0.3.0). The device
 * node is owned uid:gid with the permission bits mode, its "fileMode" (a decimal number, as Go's
 * os.FileMode marshals; in the CDI spec since 0.3.0, no newer cdiVersion needed). */
void hl_spec_render(const struct hl_device *d, uint32_t uid, uint32_t gid, uint32_t mode, dp_buf *out);
