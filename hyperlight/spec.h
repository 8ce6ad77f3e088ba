/* SPDX-License-Identifier: Apache-2.0 */
/* spec: render the exact bytes of /var/run/cdi/hyperlight.json. */
#pragma once

#include <stdint.h>

#include "detect.h"
#include "dp/cdi.h"

#define HL_CDI_FILE "hyperlight.json"

/* Canonical JSON: 2-space indentation, trailing newline, minimum cdiVersion (0.3.0). */
void hl_spec_render(const struct hl_device *d, uint32_t uid, uint32_t gid, dp_buf *out);
