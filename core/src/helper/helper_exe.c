/* SPDX-License-Identifier: Apache-2.0 */
/* helper_exe: the binary a helper runs (our own, or a sibling of it) and its argv. */
#include "dp/helper.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helper_internal.h"

/* gcc 12 -fanalyzer loses the strings stored through v[i] and reports them leaked: they are
 * freed on failure below, or by helper_free_argv() with v. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-malloc-leak"
#endif
char **helper_copy_argv(const char *exe, char *const argv[])
{
	size_t n = 0;
	char **v;

	while (argv[n])
		n++;
	v = calloc(n + 3, sizeof(*v));
	if (!v)
		return NULL;
	v[0] = strdup(exe);
	v[1] = strdup(DP_HELPER_ARG);
	for (size_t i = 0; i < n; i++)
		v[i + 2] = strdup(argv[i]);
	for (size_t i = 0; i < n + 2; i++)
		if (!v[i]) {
			for (size_t j = 0; j < n + 2; j++)
				free(v[j]);
			free(v);
			return NULL;
		}
	return v;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void helper_free_argv(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/* The path of our own binary: what /proc/self/exe links to (valgrind answers the program's
 * path there, while exec of /proc/self/exe itself would start valgrind's tool), else the link
 * itself. Only the fallback exec where execveat is missing uses the path. */
const char *helper_self_exe(char *buf, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", buf, size - 1);

	if (n <= 0 || (size_t)n >= size - 1 || buf[0] != '/')
		return "/proc/self/exe";
	buf[n] = '\0';
	return buf;
}

int dp_helper_sibling(const char *name, char *buf, size_t size)
{
	char self[PATH_MAX];
	const char *p = helper_self_exe(self, sizeof(self));
	const char *slash = strrchr(p, '/');
	int n;

	if (!name || !*name || strchr(name, '/') || !buf || size == 0)
		return -EINVAL;
	if (p != self || !slash)
		return -ENOENT;
	n = snprintf(NULL, 0, "%.*s/%s", (int)(slash - p), p, name);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	snprintf(buf, size, "%.*s/%s", (int)(slash - p), p, name);
	return 0;
}
