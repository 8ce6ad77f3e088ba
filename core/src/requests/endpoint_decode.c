/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_decode: device-plugin and health requests read from the wire and checked. */
#include "endpoint_decode.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp/grpc.h"
#include "pbwire.h"

#define SHOW_MAX 64 /* bytes of an ID shown in a message */
#define NOT_FOUND SIZE_MAX

/* Where the IDs are in each request: field 1 of the top level holds the container requests
 * (nested) or the top level is the one container; fields 1..lists of a container are ID lists;
 * size_field (0: none) is GetPreferredAllocation's int32 allocation_size. */
struct shape {
	const char *name;
	bool nested;
	uint32_t lists;
	uint32_t size_field;
	bool need_ids;    /* at least one container, each naming at least one ID */
	bool request_dup; /* duplicates over the whole request (else per list) */
	size_t max_factor; /* IDs over the whole request: at most max_factor x devices */
};

static const struct shape shapes[] = {
	[DP_EP_ALLOCATE] = { "AllocateRequest", true, 1, 0, true, true, 1 },
	[DP_EP_PREFERRED] = { "PreferredAllocationRequest", true, 2, 3, false, false, 2 },
	[DP_EP_PRESTART] = { "PreStartContainerRequest", false, 1, 0, false, false, 1 },
};

struct walk {
	const struct shape *s;
	const struct dp_ep_index *x;
	dp_buf *why;
	bool failed;
	size_t containers, ids, max_ids;
	size_t counts[DP_EP_MAX_CONTAINERS][2]; /* IDs per container and list */
	/* second pass */
	struct dp_ep_request *req;
	char **next[DP_EP_MAX_CONTAINERS][2]; /* where the next pointer of each list goes */
	uint32_t *stamps; /* per device and list (one per device for request_dup): the scope that
			   * named it last; one slot per list, as the lists' fields may interleave */
	size_t unknown, dups;
	dp_buf unknown_names, dup_names;
};

/* An ID as a JSON string, at most SHOW_MAX bytes of it (NUL and controls as \u00xx). */
static void quote_id(dp_buf *b, const uint8_t *s, size_t n)
{
	size_t k = n < SHOW_MAX ? n : SHOW_MAX;
	dp_buf_puts(b, "\"");
	for (size_t i = 0; i < k; i++) {
		if (s[i] == '"' || s[i] == '\\')
			dp_buf_printf(b, "\\%c", s[i]);
		else if (s[i] < 0x20)
			dp_buf_printf(b, "\\u%04x", s[i]);
		else
			dp_buf_append(b, &s[i], 1);
	}
	dp_buf_puts(b, "\"");
	if (k < n)
		dp_buf_printf(b, "... (%zu bytes)", n);
}

_printf_(2, 3) static void fail(struct walk *w, const char *fmt, ...)
{
	va_list ap;
	if (w->failed)
		return;
	w->failed = true;
	va_start(ap, fmt);
	char line[256];
	vsnprintf(line, sizeof(line), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	dp_buf_puts(w->why, line);
}

/* ---- first pass: structure, NULs and counts ---- */

static void count_container(struct walk *w, const uint8_t *data, size_t len, size_t base)
{
	const struct shape *s = w->s;
	size_t c = w->containers - 1;
	dp_pbreader r;
	dp_pbfield f;
	int k;

	dp_pb_reader_init(&r, data, len);
	while (!w->failed && (k = dp_pb_next(&r, &f)) > 0) {
		if (f.number >= 1 && f.number <= s->lists) {
			if (f.wire != DP_PB_LEN) {
				fail(w, "cannot decode %s: field %u of container request %zu is not a string "
					"(wire type %d)", s->name, f.number, c, (int)f.wire);
				return;
			}
			if (memchr(f.data, '\0', f.len)) {
				fail(w, "invalid device ID in container request %zu: it holds a NUL byte: ", c);
				quote_id(w->why, f.data, f.len);
				return;
			}
			if (++w->ids > w->max_ids) {
				fail(w, "%s names more than %zu device IDs (%s has %zu devices)", s->name,
				     w->max_ids, w->x->resource, w->x->n);
				return;
			}
			w->counts[c][f.number - 1]++;
		} else if (s->size_field && f.number == s->size_field && f.wire != DP_PB_VARINT) {
			fail(w, "cannot decode %s: allocation_size of container request %zu is not a varint",
			     s->name, c);
			return;
		}
	}
	if (!w->failed && k < 0)
		fail(w, "cannot decode %s: malformed field at byte %zu", s->name, base + dp_pb_offset(&r));
	if (!w->failed && s->need_ids && w->counts[c][0] == 0)
		fail(w, "container request %zu has no device IDs", c);
}

static void count_request(struct walk *w, const uint8_t *msg, size_t len)
{
	const struct shape *s = w->s;
	dp_pbreader r;
	dp_pbfield f;
	int k;

	if (!s->nested) {
		w->containers = 1;
		count_container(w, msg, len, 0);
		return;
	}
	dp_pb_reader_init(&r, msg, len);
	while (!w->failed && (k = dp_pb_next(&r, &f)) > 0) {
		if (f.number != 1)
			continue; /* unknown: skipped */
		if (f.wire != DP_PB_LEN) {
			fail(w, "cannot decode %s: container_requests is not a message (wire type %d)", s->name,
			     (int)f.wire);
			return;
		}
		if (++w->containers > DP_EP_MAX_CONTAINERS) {
			fail(w, "%s has more than %d container requests (kubelet sends one)", s->name,
			     DP_EP_MAX_CONTAINERS);
			return;
		}
		count_container(w, f.data, f.len, (size_t)(f.data - msg));
	}
	if (!w->failed && k < 0)
		fail(w, "cannot decode %s: malformed field at byte %zu", s->name, dp_pb_offset(&r));
	if (!w->failed && s->need_ids && w->containers == 0)
		fail(w, "Allocate request has no container requests");
}

/* ---- second pass: every ID looked up, pointers filled in ---- */

/* Position of the wire ID (no NUL inside) in x->sorted, or NOT_FOUND. */
static size_t lookup(const struct dp_ep_index *x, const uint8_t *id, size_t n)
{
	size_t lo = 0, hi = x->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *s = x->ids + x->sorted[mid];
		int c = strncmp((const char *)id, s, n);
		if (c == 0 && s[n] != '\0')
			c = -1; /* id is a proper prefix of s */
		if (c == 0)
			return mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NOT_FOUND;
}

static void name_id(dp_buf *b, size_t count, const uint8_t *id, size_t n)
{
	if (count > DP_EP_NAMED_IDS)
		return;
	if (count > 1)
		dp_buf_puts(b, ", ");
	quote_id(b, id, n);
}

static void resolve_id(struct walk *w, size_t c, uint32_t list, const uint8_t *id, size_t n)
{
	size_t pos = lookup(w->x, id, n);
	uint32_t scope = w->s->request_dup ? 1 : (uint32_t)(1 + c * 2 + list);
	if (pos == NOT_FOUND) {
		name_id(&w->unknown_names, ++w->unknown, id, n);
		return;
	}
	uint32_t *stamp = &w->stamps[w->s->request_dup ? pos : pos * w->s->lists + list];
	if (*stamp == scope) {
		name_id(&w->dup_names, ++w->dups, id, n);
		return;
	}
	*stamp = scope;
	*w->next[c][list]++ = w->x->ids + w->x->sorted[pos];
}

static void resolve_container(struct walk *w, size_t c, const uint8_t *data, size_t len)
{
	dp_pbreader r;
	dp_pbfield f;
	dp_pb_reader_init(&r, data, len);
	while (dp_pb_next(&r, &f) > 0) {
		if (f.number >= 1 && f.number <= w->s->lists)
			resolve_id(w, c, f.number - 1, f.data, f.len);
		else if (w->s->size_field && f.number == w->s->size_field)
			w->req->c[c].allocation_size = (int32_t)(uint32_t)f.varint; /* int32: low 32 bits */
	}
}

static void resolve_request(struct walk *w, const uint8_t *msg, size_t len)
{
	dp_pbreader r;
	dp_pbfield f;
	size_t c = 0;
	if (!w->s->nested) {
		resolve_container(w, 0, msg, len);
		return;
	}
	dp_pb_reader_init(&r, msg, len);
	while (dp_pb_next(&r, &f) > 0)
		if (f.number == 1)
			resolve_container(w, c++, f.data, f.len);
}

static void list_problem(struct walk *w, const char *what, size_t count, const dp_buf *names)
{
	fail(w, "%s device IDs for %s: ", what, w->x->resource);
	dp_buf_append(w->why, names->data, names->len);
	if (count > DP_EP_NAMED_IDS)
		dp_buf_printf(w->why, " (and %zu more)", count - DP_EP_NAMED_IDS);
}

/* The block: the request, its containers, then every list's pointers. */
static int build(struct walk *w, const uint8_t *msg, size_t len)
{
	size_t size = sizeof(*w->req) + w->containers * sizeof(*w->req->c) + w->ids * sizeof(char *);
	w->req = calloc(1, size);
	w->stamps = calloc(w->x->n ? w->x->n * w->s->lists : 1, sizeof(*w->stamps));
	if (!w->req || !w->stamps)
		return -ENOMEM;
	w->req->n = w->containers;
	w->req->size = size;
	w->req->c = (struct dp_ep_container *)(w->req + 1);
	char **p = (char **)(w->req->c + w->containers);
	for (size_t c = 0; c < w->containers; c++) {
		w->req->c[c].ids.ids = w->next[c][0] = p;
		p += w->counts[c][0];
		if (w->s->lists > 1) {
			w->req->c[c].must_include.ids = w->next[c][1] = p;
			p += w->counts[c][1];
		}
	}
	resolve_request(w, msg, len);
	for (size_t c = 0; c < w->containers; c++) {
		w->req->c[c].ids.n = (size_t)(w->next[c][0] - w->req->c[c].ids.ids);
		if (w->s->lists > 1)
			w->req->c[c].must_include.n =
				(size_t)(w->next[c][1] - w->req->c[c].must_include.ids);
	}
	return 0;
}

int dp_ep_decode(enum dp_ep_kind kind, const struct dp_ep_index *x, const uint8_t *msg, size_t len,
		 struct dp_ep_request **ret, dp_buf *why)
{
	struct walk w = { .s = &shapes[kind], .x = x, .why = why };
	w.max_ids = x->n * w.s->max_factor;
	count_request(&w, msg, len);
	if (w.failed)
		return DP_GRPC_INVALID_ARGUMENT;
	int status = DP_GRPC_OK;
	if (build(&w, msg, len) < 0) {
		dp_buf_puts(why, "out of memory");
		status = DP_GRPC_RESOURCE_EXHAUSTED;
	} else if (w.unknown || w.dups) {
		if (w.unknown)
			list_problem(&w, "unknown", w.unknown, &w.unknown_names);
		else
			list_problem(&w, "duplicate", w.dups, &w.dup_names);
		status = DP_GRPC_INVALID_ARGUMENT;
	}
	free(w.stamps);
	dp_buf_done(&w.unknown_names);
	dp_buf_done(&w.dup_names);
	if (status != DP_GRPC_OK) {
		free(w.req);
		return status;
	}
	*ret = w.req;
	return DP_GRPC_OK;
}

/* ---- GetPreferredAllocation's answer ---- */

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(char *const *)a, y = (uintptr_t)*(char *const *)b;
	return x < y ? -1 : x > y;
}

int dp_ep_prefer(const struct dp_ep_container *c, char ***ret, size_t *ret_n)
{
	const struct dp_ep_ids *must = &c->must_include, *avail = &c->ids;
	size_t want = c->allocation_size > 0 ? (size_t)c->allocation_size : 0, n = 0;
	if (want > must->n + avail->n)
		want = must->n + avail->n;
	char **out = calloc(want ? want : 1, sizeof(char *));
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < must->n && n < want; i++)
		out[n++] = must->ids[i];
	if (n < want) {
		/* every must-include ID is in: skip them in available, found by pointer */
		char **sorted = calloc(must->n ? must->n : 1, sizeof(char *));
		if (!sorted) {
			free(out);
			return -ENOMEM;
		}
		memcpy(sorted, must->ids, must->n * sizeof(char *));
		qsort(sorted, must->n, sizeof(char *), cmp_ptr);
		for (size_t i = 0; i < avail->n && n < want; i++)
			if (!bsearch(&avail->ids[i], sorted, must->n, sizeof(char *), cmp_ptr))
				out[n++] = avail->ids[i];
		free(sorted);
	}
	*ret = out;
	*ret_n = n;
	return 0;
}
