/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hyperlight-label-node: the hyperlight daemon's API-server helper executable. The daemon starts
 * it beside itself (labels.h: HL_LABEL_EXE, in the daemon's own directory) as
 *   hyperlight-label-node --dp-helper label-node <url> <token path> <ca path> <hypervisor>
 * for each attempt to patch its node's labels (label_patch.h), and with PLUGIN_API=dra for its
 * DRA calls (dp/draapi.h: dra-claim, dra-slices; the same entries as kata's sdp-kube-api, so the
 * image holds one copy of Mbed TLS). A program of its own, so the HTTP, TLS and JSON code
 * (core/src/https, Mbed TLS, jansson) is not even mapped into the long-lived daemon.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dp/draapi.h"
#include "dp/helper.h"
#include "dp_version.h"
#include "label_patch.h"

int main(int argc, char **argv)
{
	const dp_helper_entry entries[] = { hl_label_helper, dp_draapi_claim_entry, dp_draapi_slices_entry };

	dp_helper_main(argc, argv, entries, 3);
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("%s %s (commit %s)\n", HL_LABEL_EXE, DP_VERSION, DP_GIT_COMMIT);
		return 0;
	}
	bool help = argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
	fprintf(help ? stdout : stderr, "%s: the hyperlight device plugin's API-server helper; it runs as\n"
		"  %s --dp-helper " HL_LABEL_HELPER " <url> <token path> <ca path> <hypervisor> <true|false>\n"
		"  %s --dp-helper " DP_DRAAPI_CLAIM " <api> <token> <ca> <namespace> <name> <uid> <driver> <pool> <out>\n"
		"  %s --dp-helper " DP_DRAAPI_SLICES " <api> <token> <ca> <driver> <node> <desired>\n"
		"started by hyperlight-device-plugin (docs/architecture.md, \"Node labels\"; docs/dra.md).\n",
		HL_LABEL_EXE, HL_LABEL_EXE, HL_LABEL_EXE, HL_LABEL_EXE);
	return help ? 0 : 2;
}
