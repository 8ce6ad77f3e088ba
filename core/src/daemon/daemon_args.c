/* SPDX-License-Identifier: Apache-2.0 */
/* daemon_args: a daemon's command line and its --help text (daemon.h, step 3). */
#include <string.h>

#include "dp/daemon.h"
#include "dp/usage.h"
#include "dp_version.h"

/* The exit-status paragraph is word-wrapped at this column: the widest line both daemons'
 * --help had when they wrote it by hand, so that the text is unchanged. */
#define USAGE_WIDTH 87

static void print_wrapped(FILE *f, const char *text)
{
	size_t col = 0;
	while (*text) {
		size_t n = strcspn(text, " ");
		if (col && col + 1 + n > USAGE_WIDTH) {
			(void)fputc('\n', f);
			col = 0;
		} else if (col) {
			(void)fputc(' ', f);
			col++;
		}
		(void)fwrite(text, 1, n, f);
		col += n;
		text += n;
		text += strspn(text, " ");
	}
	(void)fputc('\n', f);
}

void dp_daemon_usage(const dp_daemon *d, FILE *f)
{
	char exits[1024];
	fprintf(f, "Usage: %s", d->prog);
	for (size_t i = 0; i < d->n_flags; i++)
		fprintf(f, " [%s]", d->flags[i].name);
	(void)fputs(" [--health-check[=readiness]] [--version] [-h|--help]\n", f);
	if (d->usage)
		d->usage(f);
	(void)fputs("  --version                 print version and git commit\n"
	            "  -h, --help                print this help\n"
	            "\n"
	            "Environment:\n",
	            f);
	if (d->usage_env)
		d->usage_env(f);
	(void)fputs(DP_USAGE_ENV_COMMON "\n", f);
	snprintf(exits, sizeof(exits),
		 "Exit status: 0 after SIGTERM or SIGINT; 1 for a startup error (%s); 2 for a bad argument or "
		 "an invalid %s%sMETRICS_ADDRESS%s%s. --health-check: 0 healthy, 1 not.",
		 d->exit_startup ? d->exit_startup : "", d->exit_invalid ? d->exit_invalid : "",
		 d->exit_invalid ? " or " : "", d->exit_more ? "; " : "", d->exit_more ? d->exit_more : "");
	print_wrapped(f, exits);
}

/* The index of the daemon's flag named arg, or -1. */
static int find_flag(const dp_daemon *d, const char *arg)
{
	for (size_t i = 0; i < d->n_flags && i < DP_DAEMON_MAX_FLAGS; i++)
		if (strcmp(d->flags[i].name, arg) == 0)
			return (int)i;
	return -1;
}

dp_daemon_parse_result dp_daemon_parse(const dp_daemon *d, int argc, char **argv, FILE *out, FILE *err,
				       dp_daemon_args *ret)
{
	dp_daemon_args a = { 0 };
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		int flag;
		if (strcmp(arg, "--version") == 0) {
			fprintf(out, "%s %s (commit %s)\n", d->prog, DP_VERSION, DP_GIT_COMMIT);
			return DP_DAEMON_DONE;
		} else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			dp_daemon_usage(d, out);
			return DP_DAEMON_DONE;
		} else if (strcmp(arg, "--health-check") == 0) {
			a.health_check = true;
		} else if (strcmp(arg, "--health-check=readiness") == 0) {
			a.health_check = a.readiness = true;
		} else if ((flag = find_flag(d, arg)) >= 0) {
			a.flags |= 1u << flag;
		} else {
			fprintf(err, "%s: unknown argument '%s'\n", d->prog, arg);
			dp_daemon_usage(d, err);
			return DP_DAEMON_BAD_ARGUMENT;
		}
	}
	*ret = a;
	return DP_DAEMON_RUN;
}
