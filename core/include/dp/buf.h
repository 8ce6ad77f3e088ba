/* SPDX-License-Identifier: Apache-2.0 */
/*
 * buf: a growable byte buffer and the JSON / YAML string emitters used to render CDI specs.
 * Appends never overflow: when memory (or size_t) runs out the buffer keeps what it had, sets
 * oom and ignores every later append, so a renderer checks oom once at the end.
 * data is NUL-terminated whenever it is non-NULL (the NUL is not counted in len).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "dp/macro.h"

typedef struct dp_buf {
	char *data;
	size_t len;
	size_t cap;
	bool oom; /* an append failed; the content is incomplete */
} dp_buf;

/* Free the data and reset to the empty state (oom cleared). */
void dp_buf_done(dp_buf *b);
void dp_buf_append(dp_buf *b, const void *p, size_t n);
void dp_buf_puts(dp_buf *b, const char *s);
void dp_buf_printf(dp_buf *b, const char *fmt, ...) _printf_(2, 3);
/* A JSON string literal with quotes (RFC 8259): escapes " and \ as \" \\, the control chars
 * \b \f \n \r \t by name and every other byte < 0x20 as \u00xx; DEL and bytes >= 0x80 pass
 * through unchanged (UTF-8). NULL is written as "". */
void dp_buf_json_string(dp_buf *b, const char *s);
/* A YAML double-quoted scalar, valid YAML 1.1 and 1.2, whose value is s: \" \\ \b \f \n \r \t,
 * other C0 controls and DEL as \xXX; the input is read as UTF-8 and every code point YAML does
 * not allow raw in a stream (C1 controls incl. U+0085, U+2028, U+2029, U+FEFF, U+FFFE, U+FFFF)
 * is escaped as \xXX / \uXXXX; each byte that is not part of valid UTF-8 is written as \uFFFD
 * (a YAML stream must be valid UTF-8; Go's JSON decoder gives such bytes the same value).
 * NULL is written as "". */
void dp_buf_yaml_string(dp_buf *b, const char *s);
