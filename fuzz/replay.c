/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay: run a fuzz target once on each input, without libFuzzer, so the committed corpus
 * runs in every `make test` (and under ASan+UBSan in `make asan`).
 *   replay_<target> FILE|DIR...   (a directory: every regular file in it, in name order)
 * Prints "ok <file>" per input; a crash aborts (the sanitizers say where). Exit 0 when every
 * input ran, 1 when one could not be read, 2 on usage errors.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rbe");
	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t cap = 4096, len = 0;
	uint8_t *buf = malloc(cap);
	size_t n;
	while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *nb = realloc(buf, cap *= 2);
			if (!nb)
				free(buf);
			buf = nb;
		}
	}
	int err = ferror(f);
	fclose(f);
	if (!buf || err) {
		fprintf(stderr, "replay: %s: read error\n", path);
		free(buf);
		return -1;
	}
	/* A copy of exactly len bytes, so ASan sees reads past the input. */
	uint8_t *in = malloc(len ? len : 1);
	if (!in) {
		free(buf);
		return -1;
	}
	memcpy(in, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(in, len);
	free(in);
	printf("ok %s\n", path);
	fflush(stdout);
	return 0;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_dir(const char *path)
{
	struct dirent **names;
	int n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	int r = 0;
	for (int i = 0; i < n; i++) {
		char p[4096];
		struct stat st;
		snprintf(p, sizeof(p), "%s/%s", path, names[i]->d_name);
		if (names[i]->d_name[0] != '.' && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
		    replay_file(p) < 0)
			r = -1;
		free(names[i]);
	}
	free(names);
	return r;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	qsort(argv + 1, (size_t)argc - 1, sizeof(char *), cmp);
	int r = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)) {
			if (replay_dir(argv[i]) < 0)
				r = 1;
		} else if (replay_file(argv[i]) < 0) {
			r = 1;
		}
	}
	return r;
}
