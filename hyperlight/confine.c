/* SPDX-License-Identifier: Apache-2.0 */
#include "confine.h"

#include <assert.h>
#include <sched.h>
#include <sys/socket.h>

#include "dp/macro.h"
#include "probe.h"

#define ALL32 0xffffffffu
/* pthread_create's clone (libcurl's threaded DNS resolver), nothing else */
#define THREAD_FLAGS                                                                          \
	(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |   \
	 CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)

/* Always: futex, for the C library's locks (and valgrind's, in the forked helper child before
 * its exec: "The futex facility returned an unexpected error code" under make valgrind). */
static const dp_seccomp_rule base_rules[] = {
	DP_SC("futex"),
};

/* The label child: HTTPS to the API server (libcurl, OpenSSL), DNS through the resolver thread.
 * Loading libcurl (openat, mmap, mprotect, ...) is in the core list already. */
static const dp_seccomp_rule label_rules[] = {
	DP_SC_ARG("socket", 0, ALL32, AF_INET), DP_SC_ARG("socket", 0, ALL32, AF_INET6),
	DP_SC("poll"), DP_SC("ppoll"), DP_SC("sendmmsg"), DP_SC("uname"),
	DP_SC_ARG("clone", 0, ALL32, THREAD_FLAGS), DP_SC("sched_getaffinity"),
};
static_assert(DP_ELEMENTSOF(base_rules) + 3 + DP_ELEMENTSOF(label_rules) + 1 <= HL_SECCOMP_RULES_MAX,
	      "HL_SECCOMP_RULES_MAX");

size_t hl_seccomp_rules(bool probe, int label_exe_fd, dp_seccomp_rule *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < DP_ELEMENTSOF(base_rules) && n < cap; i++)
		out[n++] = base_rules[i];
	for (size_t i = 0; probe && i < hl_probe_n_ioctl_rules && n < cap; i++)
		out[n++] = hl_probe_ioctl_rules[i];
	if (label_exe_fd < 0)
		return n;
	for (size_t i = 0; i < DP_ELEMENTSOF(label_rules) && n < cap; i++)
		out[n++] = label_rules[i];
	if (n < cap)
		out[n++] = dp_seccomp_exec_rule(label_exe_fd);
	return n;
}
