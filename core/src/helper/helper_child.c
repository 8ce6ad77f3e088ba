/* SPDX-License-Identifier: Apache-2.0 */
/* helper_child: the helper child's side: dispatch by name (dp_helper_main) and the one-line reply. */
#include "dp/helper.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void write_line(const char *line, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, line, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		line += n;
		len -= (size_t)n;
	}
}

/* Write "<word>[ text]\n" with newlines and other control chars in text turned into spaces. */
static void reply(const char *word, const char *text)
{
	char line[DP_HELPER_REASON_MAX + 16];
	int n = snprintf(line, sizeof(line) - 1, "%s%s%s", word, text && *text ? " " : "",
			 text ? text : "");

	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	for (int i = (int)strlen(word); i < n; i++)
		if ((unsigned char)line[i] < ' ' || line[i] == 0x7f)
			line[i] = ' ';
	line[n++] = '\n';
	write_line(line, (size_t)n);
}

void dp_helper_reply_ok(const char *detail)
{
	reply("ok", detail);
}

void dp_helper_reply_fail(const char *fmt, ...)
{
	char reason[DP_HELPER_REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(reason, sizeof(reason), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	reply("fail", *reason ? reason : "unknown failure");
}

void dp_helper_main(int argc, char **argv, const dp_helper_entry *entries, size_t n)
{
	if (argc < 2 || !argv[1] || strcmp(argv[1], DP_HELPER_ARG) != 0)
		return;
	if (argc < 3) {
		dp_helper_reply_fail("missing helper name");
		_exit(2);
	}
	for (size_t i = 0; i < n; i++)
		if (entries[i].name && strcmp(entries[i].name, argv[2]) == 0) {
			entries[i].fn(argc - 2, argv + 2);
			_exit(0);
		}
	dp_helper_reply_fail("unknown helper %s", argv[2]);
	_exit(2);
}
