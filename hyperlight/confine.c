/* SPDX-License-Identifier: Apache-2.0 */
/* confine: what the hyperlight daemon adds to libdp's seccomp allow-list (confine.h). */
#include "confine.h"

#include <assert.h>
#include <sys/socket.h>

#include "dp/macro.h"
#include "probe.h"

#define ALL32 0xffffffffu

/* Always: futex, for the C library's locks (and valgrind's, in the forked helper child before
 * its exec: "The futex facility returned an unexpected error code" under make valgrind). */
static const dp_seccomp_rule base_rules[] = {
	DP_SC("futex"),
};

/* The label child (label-node/label_patch.c, https.c): TCP to the API server and waiting on
 * it, and the C library's resolver when the host is a name (glibc sends its A and AAAA queries
 * with sendmmsg; musl with sendto). Reading the CA file and the token is in the core list;
 * musl's open() is added below. */
static const dp_seccomp_rule label_rules[] = {
	DP_SC_ARG("socket", 0, ALL32, AF_INET), DP_SC_ARG("socket", 0, ALL32, AF_INET6),
	DP_SC("poll"), DP_SC("ppoll"), DP_SC("sendmmsg"), DP_SC("uname"),
};
static_assert(DP_ELEMENTSOF(base_rules) + 3 + DP_ELEMENTSOF(label_rules) + 2 <= HL_SECCOMP_RULES_MAX,
	      "HL_SECCOMP_RULES_MAX");

size_t hl_seccomp_rules(bool probe, int label_exe_fd, int kubeapi_exe_fd, dp_seccomp_rule *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < DP_ELEMENTSOF(base_rules) && n < cap; i++)
		out[n++] = base_rules[i];
	for (size_t i = 0; probe && i < hl_probe_n_ioctl_rules && n < cap; i++)
		out[n++] = hl_probe_ioctl_rules[i];
	if (label_exe_fd < 0 && kubeapi_exe_fd < 0)
		return n;
	for (size_t i = 0; i < DP_ELEMENTSOF(label_rules) && n < cap; i++)
		out[n++] = label_rules[i];
	if (label_exe_fd >= 0 && n < cap)
		out[n++] = dp_seccomp_exec_rule(label_exe_fd);
	if (kubeapi_exe_fd >= 0 && n < cap)
		out[n++] = dp_seccomp_exec_rule(kubeapi_exe_fd);
	return n;
}
