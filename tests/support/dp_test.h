/* SPDX-License-Identifier: Apache-2.0 */
/* dp_test: what several C unit tests need (stderr capture, a temporary directory, the loop run
 * until a condition within a bound, a loopback listener, open descriptors counted, a stub
 * endpoint driver). Each helper
 * fails the running cmocka test on a system error rather than return it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/endpoint.h"
#include "dp/loop.h"

/* A stub driver for endpoint tests: its check counts calls in dpt_stub.checks and reports
 * dpt_stub.verdict (reason "test says no" when false); its Allocate answers with no device. */
struct dpt_stub {
	int checks;
	bool verdict;
};
extern struct dpt_stub dpt_stub;
/* checks 0, verdict true. */
void dpt_stub_reset(void);
/* Resource example.com/thing, socket prefix "thing", devices "a" (no NUMA node) and "b" (node
 * 0), the stub driver. */
dp_endpoint_config dpt_stub_config(void);

/* What was written to a file descriptor (stdout, stderr) between start and end, through a memfd. */
struct dpt_capture {
	int target, fd, saved;
	char text[16384];
};

void dpt_capture_start(struct dpt_capture *c, int target);
/* Restore the descriptor and return what was written (c->text, NUL-terminated, truncated to
 * its size). */
const char *dpt_capture_end(struct dpt_capture *c);

/* How many times needle occurs in text (overlapping occurrences counted). */
size_t dpt_count(const char *text, const char *needle);

/* The process's open file descriptors (without the one used to count them). */
int dpt_count_fds(void);

/* Run the loop (10 ms turns) until *flag is true or bound_usec pass; returns *flag. */
bool dpt_run_until(dp_loop *l, const bool *flag, uint64_t bound_usec);
/* The same until cond() is true. */
bool dpt_run_until_cond(dp_loop *l, bool (*cond)(void), uint64_t bound_usec);

/* A new directory /tmp/<name>.XXXXXX into buf (at least 64 bytes); 0 or -1. */
int dpt_tmpdir(char *buf, size_t size, const char *name);
/* Remove dir and all below it; 0 or -1. */
int dpt_rmtree(const char *dir);

/* A TCP socket listening on 127.0.0.1 (backlog 4, type_flags added to SOCK_STREAM |
 * SOCK_CLOEXEC), its port in *port. */
int dpt_listener(int type_flags, int *port);
/* A TCP port on 127.0.0.1 where nothing listens (bound once, then closed). */
int dpt_closed_port(void);

/* Where no seccomp filter can be loaded on purpose: make test-arm64 runs the unit tests under
 * qemu-user and sets SDP_SECCOMP_UNAVAILABLE=qemu-user; qemu 7.2 answers prctl(PR_SET_SECCOMP)
 * and prctl(PR_GET_SECCOMP) with EINVAL and has no seccomp(2) (docs/security.md). True, with
 * the reason printed, only when both hold: the variable is set and PR_GET_SECCOMP fails with
 * EINVAL; a test that loads a filter then skips (cmocka's skip()). A kernel without seccomp
 * still fails those tests. */
bool dpt_seccomp_unavailable(void);

/* Run a seccomp classic-BPF program (prog, n instructions, as dp_seccomp_export_bpf writes
 * it) on one system call, as the kernel does: the SECCOMP_RET_* value it returns (action and
 * data). A program that runs past its end, loads outside struct seccomp_data or divides by zero
 * gives SECCOMP_RET_KILL_PROCESS (the kernel's checker would have refused it). */
struct sock_filter;
uint32_t dpt_seccomp_run(const struct sock_filter *prog, size_t n, uint32_t arch, int nr,
			 const uint64_t args[6]);
