/* SPDX-License-Identifier: Apache-2.0 */
/* loop_internal.h: the event source as loop.c, loop_timer.c and loop_child.c share it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "dp/list.h"
#include "dp/loop.h"

enum source_type { SOURCE_IO, SOURCE_TIMER, SOURCE_SIGNAL, SOURCE_CHILD, SOURCE_INOTIFY };

typedef union source_fn {
	dp_io_fn io;
	dp_timer_fn timer;
	dp_signal_fn signal;
	dp_child_fn child;
	dp_inotify_fn inotify;
} source_fn;

struct dp_source {
	dp_loop *loop;
	enum source_type type;
	int fd;
	bool owns_fd;
	bool in_epoll;
	bool dead;
	void *userdata;
	source_fn fn;
	pid_t pid;     /* SOURCE_CHILD */
	bool reaped;   /* SOURCE_CHILD */
	bool polled;   /* SOURCE_CHILD without pidfd: fd is a polling interval timerfd (loop_child.c) */
	bool ignored;  /* SOURCE_INOTIFY: IN_IGNORED seen, fn is not called again */
	bool asap;     /* SOURCE_TIMER: armed by dp_timer_set_asap, not fired (nor re-armed) since */
	DP_LIST_FIELDS(dp_source); /* on the live list, or the dead list */
};

/* ---- loop.c ---- */

/* Allocate a source around fd calling fn and register it for events. Returns the source, or NULL with
 * the negative errno in *ret_error (-ENOMEM, or epoll_ctl's); on failure an owned fd is closed.
 * Returning the pointer lets callers test it directly (the analyzers then see it is non-NULL). */
dp_source *loop_source_new(dp_loop *l, enum source_type type, int fd, bool owns_fd, uint32_t events,
			   source_fn fn, void *userdata, int *ret_error);
/* The fd just made by a call (fd < 0: that call's errno) as an owned EPOLLIN source in *ret. */
int loop_source_add_owned(dp_loop *l, enum source_type type, int fd, source_fn fn, void *userdata,
			  dp_source **ret);
/* Take the source's fd out of epoll (once). */
void loop_source_epoll_del(dp_source *s);

/* ---- loop_timer.c, loop_child.c: one ready event of the source ---- */

void loop_dispatch_timer(dp_source *s);
void loop_dispatch_child(dp_source *s);
