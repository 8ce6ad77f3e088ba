/* SPDX-License-Identifier: Apache-2.0 */
/* prefer: placeholder ordering (prefer.h). */
#include "prefer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "dp/macro.h"

int kata_prefer(const struct kata_topo *topo, size_t n, const size_t *avail, size_t n_avail,
		const size_t *must, size_t n_must, size_t size, size_t *out)
{
	(void)topo;
	for (size_t i = 0; i < n_avail; i++)
		if (avail[i] >= n)
			return -EINVAL;
	for (size_t i = 0; i < n_must; i++)
		if (must[i] >= n)
			return -EINVAL;
	_cleanup_free_ bool *used = calloc(n ? n : 1, sizeof(*used));
	if (!used)
		return -ENOMEM;
	size_t r = 0;
	for (size_t i = 0; i < n_must && r < size; i++)
		if (!used[must[i]])
			used[out[r++] = must[i]] = true;
	for (size_t i = 0; i < n_avail && r < size; i++)
		if (!used[avail[i]])
			used[out[r++] = avail[i]] = true;
	return (int)r;
}
