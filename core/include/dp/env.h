/* SPDX-License-Identifier: Apache-2.0 */
/*
 * env: strict parsing of integer configuration values (and of one hex digit). Accepted: decimal digits only (no sign,
 * no whitespace, no leading '+', no "0x", no trailing garbage; leading zeros are fine: "007" is
 * 7), at most the range given. On error, *ret is untouched and err (if given) holds a clear
 * message naming the variable and the offending value, e.g.
 *   DEVICE_COUNT="12a" is not a decimal integer
 *   DEVICE_COUNT=0 is out of range 1..12345
 * (the invalid value is quoted with \" \\ \n \t \xNN escapes and cut after 64 bytes).
 * err is left untouched on success.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Parse s as an unsigned decimal in [min, max]. -EINVAL (NULL, empty, not a number, or
 * min > max), -ERANGE (outside [min, max], including overflow of uint64). ret may be NULL
 * to validate only. */
int dp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);

/* getenv(name): unset -> *ret = def, return 0 ("" counts as invalid, -EINVAL).
 * Otherwise parse as dp_parse_u64 and write a message into err on failure (err may be NULL).
 * def is not checked against the range. -EINVAL also for a NULL name or ret. */
int dp_env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, char *err,
	       size_t errlen);
int dp_env_u32(const char *name, uint32_t def, uint32_t min, uint32_t max, uint32_t *ret, char *err,
	       size_t errlen);

/* value quoted for a message as the errors above show it: "..." with \" \\ \n \t \xNN escapes,
 * cut after 64 bytes ("..." then). size DP_ENV_QUOTED_SIZE holds any value. */
#define DP_ENV_QUOTED_SIZE 264
void dp_env_quote(char *buf, size_t size, const char *value);

/* PLUGIN_API, which Kubernetes API a daemon serves its devices through: unset, "" or
 * "device-plugin" -> *ret_dra false, "dra" -> true; anything else -EINVAL with err
 * 'PLUGIN_API="x" is neither device-plugin nor dra' (*ret_dra untouched). */
int dp_env_plugin_api(bool *ret_dra, char *err, size_t errlen);

/* The value of one hexadecimal digit, either case ('7' -> 7, 'b' and 'B' -> 11), or -1. */
int dp_hex_digit(char c);
