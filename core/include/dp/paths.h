/* SPDX-License-Identifier: Apache-2.0 */
/*
 * paths: every host path (kubelet dir, /dev, /sys, CDI dir, host-dev) is resolved under one
 * root prefix taken from SDP_TEST_ROOT. Unset (production) means "/". The variable is a
 * contract with the test suite; nothing else changes under test.
 */
#pragma once

#include <stddef.h>

#define DP_KUBELET_DIR "/var/lib/kubelet/device-plugins"
#define DP_KUBELET_SOCKET "kubelet.sock"
#define DP_CDI_DIR "/var/run/cdi"

/* The prefix ("" in production, never ending in '/'). */
const char *dp_root(void);
/* Write root + abs_path into buf. -ENAMETOOLONG when it does not fit, -EINVAL when abs_path is
 * not absolute. */
int dp_path(char *buf, size_t size, const char *abs_path);
