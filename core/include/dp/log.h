/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log: logfmt lines on stderr:
 *   time=2026-12-02T11:00:00.123Z level=info msg="registered with kubelet" resource=hyperlight.dev/hypervisor
 * Level from LOG_LEVEL (debug, info, warn, error; default info; an invalid value keeps info and
 * logs one warning). Library code (core/) logs only at debug; daemons' main paths log above.
 */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "dp/macro.h"

enum dp_log_level { DP_LOG_DEBUG, DP_LOG_INFO, DP_LOG_WARN, DP_LOG_ERROR };

/* Read LOG_LEVEL. Returns 0, or -EINVAL when the value was invalid (info is kept; a warning is logged). */
int dp_log_init(void);
void dp_log_set_level(enum dp_log_level lvl);
bool dp_log_enabled(enum dp_log_level lvl);

/* msg is quoted as needed; kv (printf format, may be NULL) is appended as is, and must be
 * "key=value key2=value2" with values passed through dp_logq() when they may contain spaces. */
void dp_log(enum dp_log_level lvl, const char *msg, const char *kv, ...) _printf_(3, 4);
void dp_logv(enum dp_log_level lvl, const char *msg, const char *kv, va_list ap) _printf_(3, 0);

/* logfmt-quote s into buf when needed (spaces, quotes, '=', control chars, empty); returns buf. */
const char *dp_logq(char *buf, size_t size, const char *s);

/* The symbolic name of an errno value, for an "error=" field: err or -err (ENOENT for 2 and
 * -2), "none" for 0, "errno<N>" for a number without a name (in a static buffer, valid until
 * the next call). Never NULL, never with spaces. */
const char *dp_errname(int err);

#define dp_debug(msg, ...) dp_log(DP_LOG_DEBUG, msg, __VA_ARGS__)
#define dp_info(msg, ...) dp_log(DP_LOG_INFO, msg, __VA_ARGS__)
#define dp_warn(msg, ...) dp_log(DP_LOG_WARN, msg, __VA_ARGS__)
#define dp_error(msg, ...) dp_log(DP_LOG_ERROR, msg, __VA_ARGS__)
