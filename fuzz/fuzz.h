/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz: shared declarations of the fuzz targets. Each target file defines
 * LLVMFuzzerTestOneInput; it is linked either with libFuzzer (clang -fsanitize=fuzzer, make
 * fuzz) or with replay.c, an ordinary main that runs every corpus file once (make test).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private directory under /tmp for this process, created on first use and removed (with
 * everything in it) at exit. Aborts when it cannot be created: the target cannot run. */
const char *fuzz_tmpdir(void);
/* Remove everything below path (not path itself). Symlinks are removed, never followed. */
void fuzz_clear_dir(const char *path);
/* Abort with a message when cond is false: a broken invariant is a finding. */
#define FUZZ_CHECK(cond)                                                                       \
	do {                                                                                   \
		if (!(cond))                                                                   \
			fuzz_fail(__FILE__, __LINE__, #cond);                                  \
	} while (0)
_Noreturn void fuzz_fail(const char *file, int line, const char *what);
/* The input as a C string (cut at its first NUL), malloc'd; reads exactly size bytes at most
 * (unlike strndup, which may look for a NUL past an unterminated buffer). */
char *fuzz_string(const uint8_t *data, size_t size);
