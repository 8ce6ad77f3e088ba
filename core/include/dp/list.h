/* SPDX-License-Identifier: Apache-2.0 */
/*
 * list: intrusive doubly linked lists in the shape of systemd's list.h. An item has two fields,
 * `prev` and `next` (DP_LIST_FIELDS); a list is a head pointer, NULL when empty. Removing an item
 * leaves its fields NULL. The macros evaluate each argument once except `head`, which must be an
 * lvalue without side effects.
 */
#pragma once

#define DP_LIST_FIELDS(t) t *prev, *next

/* Put item first. */
#define DP_LIST_PREPEND(head, item)                    \
	do {                                           \
		__typeof__(item) _li = (item);         \
		_li->prev = NULL;                      \
		_li->next = (head);                    \
		if (_li->next)                         \
			_li->next->prev = _li;         \
		(head) = _li;                          \
	} while (0)

/* Insert item after after (first when after is NULL). */
#define DP_LIST_INSERT_AFTER(head, after, item)          \
	do {                                             \
		__typeof__(item) _ia = (after), _ib = (item); \
		if (!_ia) {                              \
			DP_LIST_PREPEND(head, _ib);      \
			break;                           \
		}                                        \
		_ib->prev = _ia;                         \
		_ib->next = _ia->next;                   \
		if (_ib->next)                           \
			_ib->next->prev = _ib;           \
		_ia->next = _ib;                         \
	} while (0)

/* Take item (which is on the list) off it. */
#define DP_LIST_REMOVE(head, item)                     \
	do {                                           \
		__typeof__(item) _lr = (item);         \
		if (_lr->next)                         \
			_lr->next->prev = _lr->prev;   \
		if (_lr->prev)                         \
			_lr->prev->next = _lr->next;   \
		else                                   \
			(head) = _lr->next;            \
		_lr->prev = _lr->next = NULL;          \
	} while (0)
