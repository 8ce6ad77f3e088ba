/* SPDX-License-Identifier: Apache-2.0 */
/* test_list: the intrusive list macros (dp/list.h) keep both directions and the head right. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "dp/list.h"

typedef struct item {
	int v;
	DP_LIST_FIELDS(struct item);
} item;

/* The list from head matches want[0..n) forwards, and backwards through prev. */
static void expect_list(const item *head, const int *want, size_t n)
{
	const item *last = NULL;
	size_t i = 0;

	assert_true(!head || head->prev == NULL);
	for (const item *it = head; it; it = it->next) {
		assert_true(i < n);
		assert_int_equal(it->v, want[i++]);
		assert_ptr_equal(it->prev, last);
		last = it;
	}
	assert_int_equal(i, n);
}

static void test_prepend_and_remove(void **state)
{
	item a = { .v = 1 }, b = { .v = 2 }, c = { .v = 3 };
	item *head = NULL;

	DP_LIST_PREPEND(head, &a);
	DP_LIST_PREPEND(head, &b);
	DP_LIST_PREPEND(head, &c);
	expect_list(head, (const int[]){ 3, 2, 1 }, 3);

	DP_LIST_REMOVE(head, &b); /* middle */
	expect_list(head, (const int[]){ 3, 1 }, 2);
	assert_null(b.prev);
	assert_null(b.next);

	DP_LIST_REMOVE(head, &c); /* first */
	expect_list(head, (const int[]){ 1 }, 1);
	DP_LIST_REMOVE(head, &a); /* last and only */
	assert_null(head);
}

static void test_insert_after(void **state)
{
	item a = { .v = 1 }, b = { .v = 2 }, c = { .v = 3 }, d = { .v = 4 };
	item *head = NULL, *tail = NULL;

	/* appending through a tail pointer, as a FIFO does */
	DP_LIST_INSERT_AFTER(head, tail, &a);
	tail = &a;
	DP_LIST_INSERT_AFTER(head, tail, &b);
	tail = &b;
	DP_LIST_INSERT_AFTER(head, tail, &c);
	tail = &c;
	expect_list(head, (const int[]){ 1, 2, 3 }, 3);

	DP_LIST_INSERT_AFTER(head, &a, &d); /* in the middle */
	expect_list(head, (const int[]){ 1, 4, 2, 3 }, 4);
	DP_LIST_REMOVE(head, &c); /* the tail */
	expect_list(head, (const int[]){ 1, 4, 2 }, 3);
	DP_LIST_INSERT_AFTER(head, (item *)NULL, &c); /* NULL: first */
	expect_list(head, (const int[]){ 3, 1, 4, 2 }, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prepend_and_remove),
		cmocka_unit_test(test_insert_after),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
