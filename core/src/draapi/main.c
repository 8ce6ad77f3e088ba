/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-kube-api: the helper program both daemons start for their DRA work with the API server
 * (dp/draapi.h), one child per call, installed beside them. A program of its own so that the
 * HTTP, TLS and JSON code (Mbed TLS, jansson) is never mapped into a long-lived daemon.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dp/draapi.h"
#include "dp_version.h"

int main(int argc, char **argv)
{
	const dp_helper_entry entries[] = { dp_draapi_claim_entry, dp_draapi_slices_entry };

	dp_helper_main(argc, argv, entries, 2);
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("%s %s (commit %s)\n", DP_KUBEAPI_EXE, DP_VERSION, DP_GIT_COMMIT);
		return 0;
	}
	bool help = argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0);
	fprintf(help ? stdout : stderr, "%s: the device plugins' DRA helper for the API server; it runs as\n"
		"  %s --dp-helper " DP_DRAAPI_CLAIM " <api> <token> <ca> <namespace> <name> <uid> <driver> <pool> <out>\n"
		"  %s --dp-helper " DP_DRAAPI_SLICES " <api> <token> <ca> <driver> <node> <desired>\n"
		"started by the device plugins (docs/dra.md).\n", DP_KUBEAPI_EXE, DP_KUBEAPI_EXE, DP_KUBEAPI_EXE);
	return help ? 0 : 2;
}
