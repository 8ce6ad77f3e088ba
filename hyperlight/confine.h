/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confine: what the hyperlight daemon adds to libdp's seccomp allow-list (dp/seccomp.h). The
 * probe helper narrows it further (probe.c). docs/security.md explains each group.
 *
 * The daemon itself needs nothing beyond the core list; its helper children do, and they
 * inherit the daemon's filter (a filter can only take rights away): the probe helper's three
 * hypervisor ioctls (probe.c) and, with COMPANIONS, the companions' two, and, only when labelling is on, the label child's calls
 * (label-node/: TCP to the API server through Mbed TLS, the C library's DNS resolver) and the
 * exec of the label helper's own fd; with PLUGIN_API=dra the same calls for sdp-kube-api and
 * the exec of its fd.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/seccomp.h"

/* Enough for hl_seccomp_rules' output. */
#define HL_SECCOMP_RULES_MAX 24

/* The daemon's rules into out[cap]; returns how many. probe: the probe helper runs (not in
 * --device-access mode); companion_exe_fds[0..n_companions): with COMPANIONS, the companions'
 * ioctls too (TUNGETFEATURES, VHOST_GET_FEATURES) and execveat through each companion's probe
 * helper fd (the hypervisor's is the daemon's own exec rule). label_exe_fd >= 0: labelling is on, the label child's calls and
 * execveat through label_exe_fd (the label helper's O_PATH fd, dp_helper_exe_fd). kubeapi_exe_fd
 * >= 0: DRA is on, the same calls and execveat through it (dp_draside_exe_fd). */
size_t hl_seccomp_rules(bool probe, const int *companion_exe_fds, size_t n_companions, int label_exe_fd, int kubeapi_exe_fd, dp_seccomp_rule *out, size_t cap);
