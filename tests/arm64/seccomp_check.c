/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-seccomp-check DAEMON < CALLS: are the system calls a daemon made all allowed by its
 * seccomp filter? Built for arm64 and run under qemu-user by tests/arm64/run.sh, it builds the
 * daemon's filter as the daemon does on the architecture it runs on (dp_seccomp_export_bpf,
 * architecture 0: the native one) and runs each call through the BPF interpreter the unit tests
 * use (tests/support/seccomp_run.c). DAEMON: hyperlight with the three companions, the widest of
 * its filters (libdp's list, the probe's ioctls and the companions', the label child's calls,
 * the exec of its fds: the scenario suite runs it with and without COMPANIONS) or kata as PLUGIN_API=dra builds it, the widest of
 * its filters (libdp's list, the sdp-kube-api child's calls, the exec of its fd: the scenario
 * suite runs it both ways, and qemu logs the child's calls under the daemon's name; with the
 * device-plugin API its filter is libdp's list alone).
 *
 * CALLS: one line per distinct call, "COUNT NAME [ARG0 [ARG1 ...]]" (decimal or 0x hex; a name
 * as libseccomp spells it, or #NUMBER), as tests/arm64/strace_calls.py writes them from qemu's
 * -strace logs; missing arguments are 0. Prints every refused call and one summary line;
 * exit 0 when every call is allowed, 1 when one is refused, 2 on bad input.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "confine.h"
#include "dp/draside.h"
#include "dp/macro.h"
#include "dp/seccomp.h"
#include "dp_test.h"

/* Any fd numbers: the recorded calls hold no execveat (qemu 7.2 has none: ENOSYS, and the
 * helper runner falls back to execve, which the filter refuses and strace_calls.py leaves out
 * as the emulator's). */
#define EXE_FD 3
#define LABEL_FD 4
static const int companion_fds[] = { 5, 6, 7 };

static struct sock_filter prog[8192];

static int load(const char *daemon, size_t *n)
{
	dp_seccomp_rule own[HL_SECCOMP_RULES_MAX], exec = dp_seccomp_exec_rule(EXE_FD);
	const dp_seccomp_rule *lists[] = { dp_seccomp_core_rules, own, &exec };
	size_t counts[] = { dp_seccomp_n_core_rules, 0, 0 }, got = 0;
	int p[2], r;
	ssize_t k;

	if (strcmp(daemon, "hyperlight") == 0) {
		counts[1] = hl_seccomp_rules(true, companion_fds, DP_ELEMENTSOF(companion_fds), LABEL_FD, -1, own, DP_ELEMENTSOF(own));
		counts[2] = 1;
	} else if (strcmp(daemon, "kata") == 0) {
		counts[1] = dp_draside_seccomp_rules(EXE_FD, own, DP_ELEMENTSOF(own));
	} else {
		return -EINVAL;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	r = dp_seccomp_export_bpf(lists, counts, 3, DP_SECCOMP_ENFORCE, 0, p[1], NULL);
	close(p[1]);
	while (r >= 0 && (k = read(p[0], (char *)prog + got, sizeof(prog) - got)) > 0)
		got += (size_t)k;
	close(p[0]);
	if (r < 0)
		return r;
	if (got == 0 || got % sizeof(prog[0]) || got == sizeof(prog))
		return -EIO;
	*n = got / sizeof(prog[0]);
	return 0;
}

int main(int argc, char **argv)
{
	char line[1024];
	size_t n = 0, distinct = 0, refused = 0;
	unsigned long long total = 0;
	int r;

	if (argc != 2 || (r = load(argv[1], &n)) < 0) {
		fprintf(stderr, "usage: sdp-seccomp-check hyperlight|kata < CALLS%s%s\n", argc == 2 ? ": " : "",
			argc == 2 ? strerror(EINVAL) : "");
		return 2;
	}
	while (fgets(line, sizeof(line), stdin)) {
		char *save = NULL, *count = strtok_r(line, " \t\n", &save), *name = strtok_r(NULL, " \t\n", &save);
		uint64_t args[6] = { 0 };
		int nr;
		uint32_t v;

		if (!count)
			continue;
		if (!name) {
			fprintf(stderr, "sdp-seccomp-check: a line without a name\n");
			return 2;
		}
		for (int i = 0; i < 6; i++) {
			char *a = strtok_r(NULL, " \t\n", &save);
			if (!a)
				break;
			args[i] = strtoull(a, NULL, 0);
		}
		nr = name[0] == '#' ? atoi(name + 1) : seccomp_syscall_resolve_name(name);
		if (nr < 0) {
			fprintf(stderr, "sdp-seccomp-check: no system call %s on this architecture\n", name);
			return 2;
		}
		v = dpt_seccomp_run(prog, n, seccomp_arch_native(), nr, args);
		distinct++;
		total += strtoull(count, NULL, 10);
		if (v != SECCOMP_RET_ALLOW) {
			char *real = seccomp_syscall_resolve_num_arch(seccomp_arch_native(), nr);
			printf("REFUSED %s (%d) args 0x%llx 0x%llx 0x%llx: filter answers 0x%x (%s calls)\n",
			       real ? real : name, nr, (unsigned long long)args[0], (unsigned long long)args[1],
			       (unsigned long long)args[2], (unsigned)v, count);
			free(real);
			refused++;
		}
	}
	printf("%s on %s: %zu distinct calls (%llu in all) checked against its %zu-instruction filter, %zu refused\n",
	       argv[1], seccomp_arch_native() == SCMP_ARCH_AARCH64 ? "aarch64" : "this architecture",
	       distinct, total, n, refused);
	return distinct == 0 ? 2 : refused ? 1 : 0;
}
