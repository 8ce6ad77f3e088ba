/* SPDX-License-Identifier: Apache-2.0 */
/* spec: render the exact bytes of /var/run/cdi/hyperlight.json and of the companions' specs. */
#pragma once

#include <stdint.h>

#include "companion.h"
#include "detect.h"
#include "dp/cdi.h"

#define HL_CDI_FILE "hyperlight.json"

/* Canonical JSON: 2-space indentation, trailing newline, minimum cdiVersion (0.3.0). The device
 * node is owned uid:gid with the permission bits mode, its "fileMode" (a decimal number, as Go's
 * os.FileMode marshals; in the CDI spec since 0.3.0, no newer cdiVersion needed). */
void hl_spec_render(const struct hl_device *d, uint32_t uid, uint32_t gid, uint32_t mode, dp_buf *out);
/* A companion's spec (hl_companion_cdi_file): kind its resource ("hyperlight.dev/tun"), one
 * device named after the companion ("tun") with its node ("/dev/net/tun") as above, no
 * environment. The CDI name a workload gets: "hyperlight.dev/tun=tun". */
void hl_spec_render_companion(const struct hl_companion *c, uint32_t uid, uint32_t gid, uint32_t mode,
			      dp_buf *out);
