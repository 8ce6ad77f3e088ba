/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hyperlight-label-node: the node-label helper executable. The hyperlight daemon starts it
 * beside itself (labels.h: HL_LABEL_EXE, in the daemon's own directory) as
 *   hyperlight-label-node --dp-helper label-node <url> <token path> <ca path> <hypervisor>
 * for each attempt to patch its node's labels (label_patch.h). A program of its own, so the
 * HTTP and TLS code (https.c, Mbed TLS) is not even mapped into the long-lived daemon.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dp/helper.h"
#include "dp_version.h"
#include "label_patch.h"

int main(int argc, char **argv)
{
	dp_helper_main(argc, argv, &hl_label_helper, 1);
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("%s %s (commit %s)\n", HL_LABEL_EXE, DP_VERSION, DP_GIT_COMMIT);
		return 0;
	}
	bool help = argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
	fprintf(help ? stdout : stderr, "%s: the hyperlight device plugin's node-label helper; it runs as\n"
		"  %s --dp-helper " HL_LABEL_HELPER " <url> <token path> <ca path> <hypervisor>\n"
		"started by hyperlight-device-plugin (docs/architecture.md, \"Node labels\").\n",
		HL_LABEL_EXE, HL_LABEL_EXE);
	return help ? 0 : 2;
}
