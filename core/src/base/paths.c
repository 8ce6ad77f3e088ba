/* SPDX-License-Identifier: Apache-2.0 */
/* paths: host paths under the SDP_TEST_ROOT prefix (read once, cached until dp_paths_reset). */
#include "dp/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static struct {
	bool loaded;
	int error; /* 0, or the negative errno dp_path() returns for an unusable root */
	char root[PATH_MAX];
} cache;

static void load(void)
{
	const char *v = getenv(DP_TEST_ROOT_ENV);
	size_t n;

	cache.loaded = true;
	cache.error = 0;
	cache.root[0] = '\0';
	if (!v || !*v)
		return;
	if (v[0] != '/') {
		cache.error = -EINVAL;
		return;
	}
	n = strlen(v);
	while (n > 0 && v[n - 1] == '/')
		n--; /* "/tmp/x/" -> "/tmp/x"; "/" -> "" */
	if (n >= sizeof(cache.root)) {
		cache.error = -ENAMETOOLONG;
		return;
	}
	memcpy(cache.root, v, n);
	cache.root[n] = '\0';
}

void dp_paths_reset(void)
{
	cache.loaded = false;
}

const char *dp_root(void)
{
	if (!cache.loaded)
		load();
	return cache.root;
}

int dp_path(char *buf, size_t size, const char *abs_path)
{
	const char *root = dp_root();
	size_t rn, pn;

	if (cache.error < 0)
		return cache.error;
	if (!buf || !abs_path || abs_path[0] != '/')
		return -EINVAL;
	rn = strlen(root);
	pn = strlen(abs_path);
	if (rn + pn >= size)
		return -ENAMETOOLONG;
	memcpy(buf, root, rn);
	memcpy(buf + rn, abs_path, pn + 1);
	return 0;
}
