/* SPDX-License-Identifier: Apache-2.0 */
/*
 * confine: what the hyperlight daemon adds to libdp's seccomp allow-list (dp/seccomp.h). The
 * probe helper narrows it further (probe.c). docs/security.md explains each group.
 */
#pragma once

#include <stddef.h>

#include "dp/seccomp.h"

extern const dp_seccomp_rule hl_seccomp_rules[];
extern const size_t hl_n_seccomp_rules;
