/* SPDX-License-Identifier: Apache-2.0 */
/* usage: the --help lines of the environment variables every daemon reads through the core. */
#pragma once

/* LOG_LEVEL (log.c), METRICS_ADDRESS (metrics_http.c), SDP_SECCOMP (seccomp.c); one string
 * literal, in every daemon's --help after its own variables (dp_daemon_usage, daemon.h). */
#define DP_USAGE_ENV_COMMON                                                                         \
	"  LOG_LEVEL             debug, info (default), warn, error\n"                              \
	"  METRICS_ADDRESS       serve Prometheus metrics on HOST:PORT, :PORT or [IPv6]:PORT\n"     \
	"                        (unset or empty: off, the default)\n"                              \
	"  SDP_SECCOMP           the seccomp allow-list applied after start-up: enforce (default:\n" \
	"                        other calls fail with EPERM), log (allowed, logged by the\n"       \
	"                        kernel) or off; an invalid value keeps enforce, with a warning\n"
