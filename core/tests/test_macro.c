/* SPDX-License-Identifier: Apache-2.0 */
/* test_macro: the ownership helpers of dp/macro.h (DP_FREE_MANY frees every pointer it is given). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

/* cmocka's allocator: a block not freed by the end of a test fails it. */
#define free(p) test_free(p)
#include "dp/macro.h"

struct holder {
	char *a, *b;
	const char *c;
};

static void test_free_many(void **state)
{
	struct holder *h = test_malloc(sizeof(*h));

	h->a = test_malloc(8);
	h->b = NULL; /* NULL is skipped, as free(NULL) */
	h->c = test_malloc(16);
	DP_FREE_MANY(h->a, h->b, h->c, h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
