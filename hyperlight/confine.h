/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confine: what the hyperlight daemon adds to libdp's seccomp allow-list (dp/seccomp.h). The
 * probe helper narrows it further (probe.c). docs/security.md explains each group.
 *
 * The daemon itself needs nothing beyond the core list. Node labelling does: its child
 * (label_patch.c: libcurl, OpenSSL, the threaded DNS resolver) inherits the daemon's filter and
 * a filter can only take rights away, so the daemon's list carries the child's calls, and the
 * exec of the label helper's own fd, only when labelling is on.
 */
#pragma once

#include <stddef.h>

#include "dp/seccomp.h"

/* Enough for hl_seccomp_rules' output. */
#define HL_SECCOMP_RULES_MAX 16

/* The daemon's rules into out[cap]; returns how many. label_exe_fd < 0: labelling is off, no
 * rule at all; else the label child's calls and execveat through label_exe_fd (the label
 * helper's O_PATH fd, dp_helper_exe_fd). */
size_t hl_seccomp_rules(int label_exe_fd, dp_seccomp_rule *out, size_t cap);
