/* SPDX-License-Identifier: Apache-2.0 */
/* confine: what the hyperlight daemon adds to libdp's seccomp allow-list (confine.h). */
#include "confine.h"

#include "dp/macro.h"
#include "probe.h"

/* Always: futex, for the C library's locks (and valgrind's, in the forked helper child before
 * its exec: "The futex facility returned an unexpected error code" under make valgrind). */
static const dp_seccomp_rule base_rules[] = {
	DP_SC("futex"),
};

/* The label child and the DRA side's sdp-kube-api entries call the API server:
 * dp_seccomp_api_client_rules. */

size_t hl_seccomp_rules(bool probe, const int *companion_exe_fds, size_t n_companions, int label_exe_fd, int kubeapi_exe_fd, dp_seccomp_rule *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < DP_ELEMENTSOF(base_rules) && n < cap; i++)
		out[n++] = base_rules[i];
	for (size_t i = 0; probe && i < hl_probe_n_ioctl_rules && n < cap; i++)
		out[n++] = hl_probe_ioctl_rules[i];
	for (size_t i = 0; probe && n_companions && i < hl_probe_n_companion_ioctl_rules && n < cap; i++)
		out[n++] = hl_probe_companion_ioctl_rules[i];
	for (size_t i = 0; probe && i < n_companions && n < cap; i++)
		if (companion_exe_fds[i] >= 0)
			out[n++] = dp_seccomp_exec_rule(companion_exe_fds[i]);
	if (label_exe_fd < 0 && kubeapi_exe_fd < 0)
		return n;
	for (size_t i = 0; i < dp_seccomp_n_api_client_rules && n < cap; i++)
		out[n++] = dp_seccomp_api_client_rules[i];
	if (label_exe_fd >= 0 && n < cap)
		out[n++] = dp_seccomp_exec_rule(label_exe_fd);
	if (kubeapi_exe_fd >= 0 && n < cap)
		out[n++] = dp_seccomp_exec_rule(kubeapi_exe_fd);
	return n;
}
