/* SPDX-License-Identifier: Apache-2.0 */
/*
 * paths: every host path (kubelet dir, /dev, /sys, CDI dir, host-dev) is resolved under one
 * root prefix taken from SDP_TEST_ROOT. Unset or empty (production) means "/". The variable is a
 * contract with the test suite; nothing else changes under test.
 *
 * The variable is read once, at the first call, and cached; dp_paths_reset() drops the cache
 * (tests that change SDP_TEST_ROOT call it). Trailing slashes are stripped ("/tmp/r/" is
 * "/tmp/r", "/" is ""). A relative value is refused: dp_root() returns "" and every dp_path()
 * fails with -EINVAL (-ENAMETOOLONG for a value of PATH_MAX bytes or more), so that a mistyped
 * test root never silently resolves to the real host.
 */
#pragma once

#include <stddef.h>

#define DP_TEST_ROOT_ENV "SDP_TEST_ROOT"
#define DP_KUBELET_DIR "/var/lib/kubelet/device-plugins"
#define DP_KUBELET_SOCKET "kubelet.sock"
#define DP_CDI_DIR "/var/run/cdi"

/* The prefix ("" in production, never ending in '/'). */
const char *dp_root(void);
/* Write root + abs_path into buf (written only on success). -ENAMETOOLONG when it does not fit,
 * -EINVAL when abs_path is NULL or not absolute, or SDP_TEST_ROOT is relative. */
int dp_path(char *buf, size_t size, const char *abs_path);
/* Forget the cached SDP_TEST_ROOT: the next call reads the variable again. */
void dp_paths_reset(void);
