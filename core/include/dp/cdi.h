/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cdi: the owned CDI spec file (design decision 5). The driver renders the exact bytes; this
 * module compares the file on disk with them byte for byte and atomically replaces it when it
 * differs in any way. Replacement: temp file in the same directory through a directory fd,
 * named ".<name>.tmp-XXXXXX" (no .json/.yaml ending, so CDI readers ignore it), opened
 * O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC, mode 0644, fully written, fsync'ed, renameat()
 * over the target, then fsync of the directory. A symlink or a non-regular file at our path is
 * refused (-ELOOP / -EEXIST... see below), never followed or removed. No other file in the
 * directory is ever touched (a temp file of ours left by a failed write is removed).
 * The file is never deleted by this module.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/loop.h"
#include "dp/macro.h"

/* ---- growable byte buffer and emitters ---- */

typedef struct dp_buf {
	char *data;
	size_t len;
	size_t cap;
	bool oom; /* an append failed; the content is incomplete */
} dp_buf;

void dp_buf_done(dp_buf *b);
void dp_buf_append(dp_buf *b, const void *p, size_t n);
void dp_buf_puts(dp_buf *b, const char *s);
void dp_buf_printf(dp_buf *b, const char *fmt, ...) _printf_(2, 3);
/* A JSON string literal with quotes; escapes ", \, control chars (\n \t ... \u00XX); bytes
 * >= 0x80 pass through (UTF-8). */
void dp_buf_json_string(dp_buf *b, const char *s);
/* A YAML double-quoted scalar (same escaping rules, valid YAML 1.2 and 1.1). */
void dp_buf_yaml_string(dp_buf *b, const char *s);

/* ---- cdiVersion ---- */

typedef struct dp_cdi_features {
	bool device_name_starts_with_digit; /* 0.5.0 */
	bool device_node_host_path;         /* 0.5.0 */
	bool mount_type;                    /* 0.4.0 */
	bool annotations;                   /* 0.6.0 */
	bool class_has_dot;                 /* 0.6.0 */
	bool additional_gids;               /* 0.7.0 */
	bool intel_rdt;                     /* 0.7.0 */
	bool net_devices;                   /* 1.1.0 */
} dp_cdi_features;

/* The minimum cdiVersion the content requires ("0.3.0" when nothing newer is used). */
const char *dp_cdi_min_version(const dp_cdi_features *f);
/* Validation helpers for CDI names: vendor/class per the CDI library (first char a letter, last
 * alnum, middle [A-Za-z0-9_.-]); device name (first/last alnum, middle [A-Za-z0-9_.:-]). */
bool dp_cdi_kind_valid(const char *kind);
bool dp_cdi_device_name_valid(const char *name);

/* ---- compare and replace (directory fd based, no loop needed) ---- */

/* 0: the file holds exactly these bytes. 1: it differs, is missing, or cannot be parsed as
 * what we wrote (any difference). -ELOOP: a symlink at name. -EEXIST: not a regular file.
 * Other negative errno: could not read (e.g. -EACCES). Reads at most len + 1 bytes. */
int dp_cdi_compare(int dirfd, const char *name, const void *data, size_t len);
/* Atomically replace name with data as described above. -ELOOP / -EEXIST refuse as above (the
 * path is left untouched); other negative errno from the failed step (-ENOSPC, -EROFS,
 * -EACCES...); on any failure the old file is left intact and the temp file removed. */
int dp_cdi_replace(int dirfd, const char *name, const void *data, size_t len);

/* ---- the owned file, watched ---- */

typedef struct dp_cdi_file dp_cdi_file;
/* Called (from the loop) when something in the directory that concerns our file happened:
 * created, written, removed, renamed, attributes; or the directory itself was removed or
 * replaced (the watch is re-armed by this module). The receiver normally calls
 * dp_cdi_file_sync(). */
typedef void (*dp_cdi_changed_fn)(dp_cdi_file *f, void *userdata);

/* dir: absolute host path (already resolved under the test root), name: e.g. "hyperlight.json".
 * The directory need not exist yet. */
int dp_cdi_file_new(dp_loop *loop, const char *dir, const char *name, dp_cdi_changed_fn changed,
		    void *userdata, dp_cdi_file **ret);
dp_cdi_file *dp_cdi_file_free(dp_cdi_file *f);
DP_DEFINE_CLEANUP(dp_cdi_file, dp_cdi_file_free)
/* Set the exact bytes the file must hold (copied). */
int dp_cdi_file_set_content(dp_cdi_file *f, const void *data, size_t len);
/* Make the file match: compare, replace when it differs (creating the directory 0755 when
 * missing). 0 when the file now holds exactly our bytes (*ret_repaired, if given, says whether
 * it was written); negative errno otherwise, with a human reason in dp_cdi_file_error(). The
 * directory watch is (re)armed as a side effect. */
int dp_cdi_file_sync(dp_cdi_file *f, bool *ret_repaired);
/* Reason of the last failed sync ("refusing symlink at /var/run/cdi/hyperlight.json", ...). */
const char *dp_cdi_file_error(const dp_cdi_file *f);
const char *dp_cdi_file_path(const dp_cdi_file *f);
