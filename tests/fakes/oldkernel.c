/* SPDX-License-Identifier: Apache-2.0 */
/*
 * oldkernel: run a program as on a kernel before Linux 4.14, as far as seccomp's actions go:
 * a seccomp filter (loaded here, inherited across the exec and by every child) answers
 * seccomp(SECCOMP_GET_ACTION_AVAIL, ...) with EINVAL, as a kernel without that operation does;
 * such a kernel has no SECCOMP_RET_LOG either ("log" missing from
 * /proc/sys/kernel/seccomp/actions_avail). Every other call is allowed, so the program can still
 * load filters of its own (of the other actions).
 *
 *   oldkernel PROGRAM [ARG...]
 *
 * Exit 127 with a message when the filter cannot be loaded or the exec fails.
 */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef SECCOMP_GET_ACTION_AVAIL
#define SECCOMP_GET_ACTION_AVAIL 2
#endif

static int load_filter(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	int r;

	if (!ctx)
		return -ENOMEM;
	r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(seccomp), 1,
			     SCMP_A0(SCMP_CMP_EQ, SECCOMP_GET_ACTION_AVAIL, 0));
	if (r >= 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}

int main(int argc, char **argv)
{
	int r;

	if (argc < 2) {
		fprintf(stderr, "usage: oldkernel PROGRAM [ARG...]\n");
		return 127;
	}
	r = load_filter();
	if (r < 0) {
		fprintf(stderr, "oldkernel: cannot load the seccomp filter: %s\n", strerror(-r));
		return 127;
	}
	execv(argv[1], argv + 1);
	fprintf(stderr, "oldkernel: exec %s: %s\n", argv[1], strerror(errno));
	return 127;
}
