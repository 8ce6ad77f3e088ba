/* SPDX-License-Identifier: Apache-2.0 */
#include "confine.h"

#include <sched.h>
#include <sys/socket.h>

#include "dp/macro.h"

#define ALL32 0xffffffffu
/* pthread_create's clone (libcurl's threaded DNS resolver), nothing else */
#define THREAD_FLAGS                                                                          \
	(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM |   \
	 CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)

const dp_seccomp_rule hl_seccomp_rules[] = {
	/* node labels: HTTPS to the API server (libcurl, OpenSSL), DNS through the resolver thread */
	DP_SC_ARG("socket", 0, ALL32, AF_INET), DP_SC_ARG("socket", 0, ALL32, AF_INET6),
	DP_SC("poll"), DP_SC("ppoll"), DP_SC("sendmmsg"), DP_SC("uname"),
	DP_SC_ARG("clone", 0, ALL32, THREAD_FLAGS), DP_SC("futex"), DP_SC("sched_getaffinity"),
};
const size_t hl_n_seccomp_rules = DP_ELEMENTSOF(hl_seccomp_rules);
