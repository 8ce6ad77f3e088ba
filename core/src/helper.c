/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helper: one deadline-bounded child process at a time, joined by concurrent requests.
 *
 * States of the helper:
 *   idle     no child; a request starts a run.
 *   running  a child runs; requests join h->run_waiters; ends with the reap (result parsed from
 *            the exit status and stdout) or the deadline (SIGKILL, "timeout after ...").
 *   dying    killed at its deadline, result already delivered, not reaped yet. Requests wait
 *            in h->pending until the reap (then a new run starts for them) or until the grace
 *            period after the SIGKILL passed: from then on the helper is blocked and every
 *            request fails at once, until the reap.
 * Results reach requesters only from loop callbacks: waits whose result is known are queued on
 * h->ready, and a "kick" timer (or the loop callback that produced the result) delivers them.
 */
#include "dp/helper.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "dp/list.h"
#include "dp/log.h"
#include "helper_internal.h"

#define OUTPUT_MAX 4096
#define SHOWN_MAX 64

typedef struct wait_list {
	dp_helper_wait *head, *tail;
} wait_list;

struct dp_helper_wait {
	dp_helper *h;
	wait_list *list; /* the list it is on */
	DP_LIST_FIELDS(dp_helper_wait);
	dp_helper_done_fn done;
	void *userdata;
	dp_helper_result result; /* valid on h->ready */
};

struct dp_helper {
	dp_loop *loop;
	char **argv; /* {exe, DP_HELPER_ARG, name, args..., NULL} */
	int exe_fd;  /* O_PATH fd of argv[0], or -1 */
	uint64_t deadline_usec, kill_grace_usec;

	dp_source *deadline, *grace, *kick; /* timers */
	dp_source *child;                   /* pidfd of the child until it is reaped */
	dp_source *out;                     /* its stdout pipe */
	int out_fd;
	pid_t pid;
	char buf[OUTPUT_MAX + 1];
	size_t len;
	bool overflow;

	bool running, dying;
	uint64_t killed_at;

	wait_list run_waiters, pending, ready;

	dp_helper_result last;
	bool has_last;
	unsigned runs;
	uint64_t run_started; /* when the run in flight started */

	unsigned busy; /* >0 while a helper callback runs */
	bool freed;    /* dp_helper_free() called while busy: release memory on leave */
};

/* ---------------------------------------------------------------- child side */

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

/* ---------------------------------------------------------------- wait lists */

static void list_append(wait_list *l, dp_helper_wait *w)
{
	w->list = l;
	DP_LIST_INSERT_AFTER(l->head, l->tail, w);
	l->tail = w;
}

static void list_unlink(dp_helper_wait *w)
{
	wait_list *l = w->list;

	if (!l)
		return;
	if (l->tail == w)
		l->tail = w->prev;
	DP_LIST_REMOVE(l->head, w);
	w->list = NULL;
}

static void list_free_all(wait_list *l)
{
	while (l->head) {
		dp_helper_wait *w = l->head;
		/* a wait at l->head has w->list == l: list_unlink takes it off before the free */
		list_unlink(w); // NOLINT(clang-analyzer-unix.Malloc)
		free(w);
	}
}

/* Give every wait on l the result r and queue it for delivery. */
static void list_complete(dp_helper *h, wait_list *l, const dp_helper_result *r)
{
	while (l->head) {
		dp_helper_wait *w = l->head;
		list_unlink(w);
		w->result = *r;
		list_append(&h->ready, w);
	}
}

/* Call back every ready wait. A callback may cancel other waits, make requests or free h. */
static void deliver_ready(dp_helper *h)
{
	while (!h->freed && h->ready.head) {
		dp_helper_wait *w = h->ready.head;
		/* a wait at ready.head has w->list == &h->ready: list_unlink takes it off before the free */
		dp_helper_result r = w->result; // NOLINT(clang-analyzer-unix.Malloc)
		dp_helper_done_fn done = w->done;
		void *userdata = w->userdata;

		list_unlink(w);
		free(w);
		done(&r, userdata);
	}
}

static void enter(dp_helper *h)
{
	h->busy++;
}

static int leave(dp_helper *h)
{
	if (--h->busy == 0 && h->freed)
		free(h);
	return 0;
}

/* ---------------------------------------------------------------- results */

static void result_set(dp_helper_result *r, bool ok, const char *fmt, ...) _printf_(3, 4);
static void result_set(dp_helper_result *r, bool ok, const char *fmt, ...)
{
	va_list ap;

	r->ok = ok;
	r->run = 0; /* finish_run sets the run */
	r->run_usec = 0;
	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(r->reason, sizeof(r->reason), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
}

/* "2 s", "150 ms", "1500 us". */
static void format_duration(char *buf, size_t size, uint64_t usec)
{
	if (usec % DP_USEC_PER_SEC == 0)
		snprintf(buf, size, "%" PRIu64 " s", (uint64_t)(usec / DP_USEC_PER_SEC));
	else if (usec % DP_USEC_PER_MSEC == 0)
		snprintf(buf, size, "%" PRIu64 " ms", (uint64_t)(usec / DP_USEC_PER_MSEC));
	else
		snprintf(buf, size, "%" PRIu64 " us", usec);
}

static void describe_signal(char *buf, size_t size, int sig)
{
	const char *abbrev = sigabbrev_np(sig);

	if (abbrev)
		snprintf(buf, size, "SIG%s", abbrev);
	else
		snprintf(buf, size, "%s", strsignal(sig));
}

/* The first SHOWN_MAX bytes of s[0..n) with every non-printable byte replaced by '?'. */
static void sanitise(char *out, size_t size, const char *s, size_t n)
{
	size_t i, m = n < SHOWN_MAX ? n : SHOWN_MAX;

	for (i = 0; i < m && i + 1 < size; i++) {
		unsigned char c = (unsigned char)s[i];
		out[i] = (char)((c < ' ' || c >= 0x7f) ? '?' : c);
	}
	out[i] = '\0';
}

/* Replace control characters of a reason taken from the child's output by '?'. */
static void sanitise_reason(dp_helper_result *r)
{
	for (char *p = r->reason; *p; p++)
		if ((unsigned char)*p < ' ' || *p == 0x7f)
			*p = '?';
}

/* Parse the output of a child that exited 0: exactly one line "ok[ detail]" or "fail reason". */
static void parse_output(const dp_helper *h, dp_helper_result *r)
{
	const char *nl = memchr(h->buf, '\n', h->len);
	char shown[SHOWN_MAX + 1];
	size_t n;

	if (h->len == 0) {
		result_set(r, false, "helper exited without a result");
		return;
	}
	if (h->overflow) {
		result_set(r, false, "helper printed more than %d bytes", OUTPUT_MAX);
		return;
	}
	n = nl ? (size_t)(nl - h->buf) : 0;
	if (nl && n + 1 == h->len && memchr(h->buf, '\0', n) == NULL) {
		if (n == 2 && memcmp(h->buf, "ok", 2) == 0) {
			result_set(r, true, "%s", "");
			return;
		}
		if (n > 3 && memcmp(h->buf, "ok ", 3) == 0) {
			result_set(r, true, "%.*s", (int)(n - 3), h->buf + 3);
			sanitise_reason(r);
			return;
		}
		if (n > 5 && memcmp(h->buf, "fail ", 5) == 0) {
			result_set(r, false, "%.*s", (int)(n - 5), h->buf + 5);
			sanitise_reason(r);
			return;
		}
	}
	sanitise(shown, sizeof(shown), h->buf, h->len);
	result_set(r, false, "helper printed an invalid result: %s", shown);
}

static void make_result(const dp_helper *h, const siginfo_t *si, dp_helper_result *r)
{
	char sig[64];

	switch (si->si_code) {
	case CLD_EXITED:
		if (si->si_status == 0) {
			parse_output(h, r);
		} else if (h->len > 5 && !h->overflow && memcmp(h->buf, "fail ", 5) == 0 &&
			   h->buf[h->len - 1] == '\n' && memchr(h->buf, '\n', h->len) == h->buf + h->len - 1) {
			result_set(r, false, "helper exited with status %d: %.*s", si->si_status,
				   (int)(h->len - 6), h->buf + 5);
			sanitise_reason(r);
		} else {
			result_set(r, false, "helper exited with status %d", si->si_status);
		}
		break;
	case CLD_KILLED:
	case CLD_DUMPED:
		describe_signal(sig, sizeof(sig), si->si_status);
		result_set(r, false, "helper killed by signal %d (%s)", si->si_status, sig);
		break;
	default:
		result_set(r, false, "helper (pid %d) was reaped elsewhere; no result", (int)h->pid);
		break;
	}
}

/* ---------------------------------------------------------------- running a child */

static void close_output(dp_helper *h)
{
	h->out = dp_source_free(h->out);
	if (h->out_fd >= 0) {
		close(h->out_fd);
		h->out_fd = -1;
	}
}

/* Read what the pipe holds now; keep OUTPUT_MAX bytes, discard (and flag) the rest. */
static void drain_output(dp_helper *h)
{
	char scratch[1024];

	while (h->out_fd >= 0) {
		bool keep = h->len < OUTPUT_MAX;
		ssize_t n = keep ? read(h->out_fd, h->buf + h->len, OUTPUT_MAX - h->len)
				 : read(h->out_fd, scratch, sizeof(scratch));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			if (errno != EAGAIN)
				close_output(h); /* never spin on a broken pipe */
			return;
		}
		if (n == 0) {
			close_output(h); /* EOF */
			return;
		}
		if (keep)
			h->len += (size_t)n;
		else
			h->overflow = true;
	}
}

static int on_output(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	dp_helper *h = userdata;

	drain_output(h);
	return 0;
}

/* The run ends with result r: every waiter of the run gets it. */
static void finish_run(dp_helper *h, const dp_helper_result *res)
{
	dp_helper_result run = *res;
	const dp_helper_result *r = &run;
	run.run = h->runs;
	run.run_usec = dp_now_usec() - h->run_started;
	h->running = false;
	(void)dp_timer_set(h->deadline, 0, 0);
	close_output(h);
	h->last = *r;
	h->has_last = true;
	list_complete(h, &h->run_waiters, r);
	dp_debug("helper finished", "ok=%d runs=%u", r->ok, h->runs);
}

static int on_child(dp_source *s, const siginfo_t *si, void *userdata);

/* The binary to run, opened once (O_PATH): a daemon's seccomp filter allows exec through
 * this fd only. Reopened at the next run when it could not be opened before. */
static int open_exe(dp_helper *h)
{
	if (h->exe_fd >= 0)
		return 0;
	if (!h->argv || !h->argv[0]) /* copy_argv never leaves it so; for the analyzer */
		return -EINVAL;
	h->exe_fd = open(h->argv[0], O_PATH | O_CLOEXEC);
	return h->exe_fd < 0 ? -errno : 0;
}

static int spawn_child(dp_helper *h, int out_w, pid_t *ret_pid)
{
	int r = open_exe(h);

	if (r < 0)
		return r;
	return dp_helper_spawn(h->exe_fd, h->argv[0], h->argv, out_w, ret_pid);
}

/* Start a child. On failure nothing is left behind and the negative errno is returned. */
static int start_run(dp_helper *h)
{
	_cleanup_close_ int rd = -1, wr = -1;
	int p[2], r;
	pid_t pid = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	rd = p[0];
	wr = p[1];
	if (fcntl(rd, F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	r = spawn_child(h, wr, &pid);
	if (r < 0)
		return r;
	if (pid <= 0) /* set on success; never kill(0 or -1) below */
		return -ECHILD;
	h->runs++;
	h->run_started = dp_now_usec();
	r = dp_child_add(h->loop, pid, on_child, h, &h->child);
	if (r < 0) {
		/* Cannot track it: kill and reap it here (immediate after SIGKILL). */
		kill(pid, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return r;
	}
	r = dp_io_add(h->loop, rd, EPOLLIN, on_output, h, &h->out);
	if (r < 0) {
		(void)dp_child_kill(h->child, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		h->child = dp_source_free(h->child);
		return r;
	}
	h->out_fd = TAKE_FD(rd);
	h->pid = pid;
	h->len = 0;
	h->overflow = false;
	h->running = true;
	(void)dp_timer_set(h->deadline, h->deadline_usec, 0);
	dp_debug("helper started", "pid=%d name=%s", (int)pid, h->argv[2]);
	return 0;
}

/* Start a run for the waits on pending (moved to run_waiters); on failure they get the error. */
static void start_for_pending(dp_helper *h)
{
	dp_helper_result r;
	int e = start_run(h);

	if (e < 0) {
		result_set(&r, false, "cannot start helper %s: %s", h->argv[0], strerror(-e));
		h->last = r;
		h->has_last = true;
		list_complete(h, &h->pending, &r);
		return;
	}
	while (h->pending.head) {
		dp_helper_wait *w = h->pending.head;
		list_unlink(w);
		list_append(&h->run_waiters, w);
	}
}

static int on_child(dp_source *s, const siginfo_t *si, void *userdata)
{
	dp_helper *h = userdata;
	dp_helper_result r;

	enter(h);
	h->child = dp_source_free(h->child);
	if (h->dying) {
		dp_debug("helper reaped after SIGKILL", "pid=%d", (int)h->pid);
		h->dying = false;
		(void)dp_timer_set(h->grace, 0, 0);
		if (h->pending.head)
			start_for_pending(h);
	} else if (h->running) {
		drain_output(h);
		make_result(h, si, &r);
		finish_run(h, &r);
	}
	deliver_ready(h);
	return leave(h);
}

static void blocked_result(const dp_helper *h, dp_helper_result *r)
{
	result_set(r, false, "previous helper (pid %d) not reaped after SIGKILL; probes blocked",
		   (int)h->pid);
}

static int on_deadline(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;
	dp_helper_result r;
	char d[32];

	if (!h->running)
		return 0;
	enter(h);
	(void)dp_child_kill(h->child, SIGKILL);
	h->killed_at = dp_now_usec();
	h->dying = true;
	/* The grace timer makes the block visible to waits queued meanwhile. */
	if (h->kill_grace_usec > 0)
		(void)dp_timer_set(h->grace, h->kill_grace_usec, 0);
	else
		(void)dp_timer_set_asap(h->grace);
	format_duration(d, sizeof(d), h->deadline_usec);
	result_set(&r, false, "timeout after %s", d);
	dp_debug("helper timed out, killed", "pid=%d", (int)h->pid);
	finish_run(h, &r);
	deliver_ready(h);
	return leave(h);
}

static int on_grace(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;
	dp_helper_result r;

	if (!h->dying)
		return 0;
	enter(h);
	dp_debug("helper not reaped after SIGKILL: blocked", "pid=%d", (int)h->pid);
	blocked_result(h, &r);
	list_complete(h, &h->pending, &r);
	deliver_ready(h);
	return leave(h);
}

static int on_kick(dp_source *s, void *userdata)
{
	dp_helper *h = userdata;

	enter(h);
	deliver_ready(h);
	return leave(h);
}

/* ---------------------------------------------------------------- public API */

/* gcc 12 -fanalyzer loses the strings stored through v[i] and reports them leaked: they are
 * freed on failure below, or by free_argv() with v. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wanalyzer-malloc-leak"
#endif
static char **copy_argv(const char *exe, char *const argv[])
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

static void free_argv(char **v)
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
static const char *self_exe(char *buf, size_t size)
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
	const char *p = self_exe(self, sizeof(self));
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

int dp_helper_new(dp_loop *loop, const char *exe, char *const argv[], uint64_t deadline_usec,
		  uint64_t kill_grace_usec, dp_helper **ret)
{
	char self[PATH_MAX];
	dp_helper *h;
	int r;

	if (!loop || !argv || !argv[0] || !*argv[0] || deadline_usec == 0 || !ret ||
	    (exe && !*exe))
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->loop = loop;
	h->out_fd = -1;
	h->exe_fd = -1;
	h->deadline_usec = deadline_usec;
	h->kill_grace_usec = kill_grace_usec;
	h->argv = copy_argv(exe ? exe : self_exe(self, sizeof(self)), argv);
	if (!h->argv) {
		free(h);
		return -ENOMEM;
	}
	(void)open_exe(h); /* a failure is reported by the first run */
	r = dp_timer_add(loop, 0, 0, on_deadline, h, &h->deadline);
	if (r >= 0)
		r = dp_timer_add(loop, 0, 0, on_grace, h, &h->grace);
	if (r >= 0)
		r = dp_timer_add(loop, 0, 0, on_kick, h, &h->kick);
	if (r >= 0)
		r = dp_timer_set(h->deadline, 0, 0);
	if (r >= 0)
		r = dp_timer_set(h->grace, 0, 0);
	if (r >= 0)
		r = dp_timer_set(h->kick, 0, 0);
	if (r < 0) {
		dp_helper_free(h);
		return r;
	}
	*ret = h;
	return 0;
}

static int reap_orphan(dp_source *s, const siginfo_t *si, void *userdata)
{
	dp_source_free(s);
	return 0;
}

dp_helper *dp_helper_free(dp_helper *h)
{
	if (!h || h->freed)
		return NULL;
	if (h->child && !dp_child_reaped(h->child)) {
		dp_source *orphan;
		(void)dp_child_kill(h->child, SIGKILL);
		/* Not reaped yet, so the pid cannot be recycled: let the loop reap it. */
		if (dp_child_add(h->loop, h->pid, reap_orphan, NULL, &orphan) < 0)
			dp_debug("cannot track killed helper", "pid=%d", (int)h->pid);
	}
	h->child = dp_source_free(h->child);
	close_output(h);
	h->deadline = dp_source_free(h->deadline);
	h->grace = dp_source_free(h->grace);
	h->kick = dp_source_free(h->kick);
	list_free_all(&h->run_waiters);
	list_free_all(&h->pending);
	list_free_all(&h->ready);
	free_argv(h->argv);
	h->argv = NULL;
	if (h->exe_fd >= 0)
		close(TAKE_FD(h->exe_fd));
	h->freed = true;
	if (h->busy == 0)
		free(h);
	return NULL;
}

int dp_helper_exe_fd(const dp_helper *h)
{
	if (!h || h->freed)
		return -EINVAL;
	return h->exe_fd >= 0 ? h->exe_fd : -EBADF;
}

bool dp_helper_blocked(const dp_helper *h)
{
	return h && h->dying && dp_now_usec() >= h->killed_at + h->kill_grace_usec;
}

int dp_helper_request(dp_helper *h, dp_helper_done_fn done, void *userdata, dp_helper_wait **ret_wait)
{
	dp_helper_wait *w;

	if (!h || h->freed || !done)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->h = h;
	w->done = done;
	w->userdata = userdata;

	if (h->running) {
		list_append(&h->run_waiters, w); /* join the run in flight */
	} else if (h->dying && dp_helper_blocked(h)) {
		blocked_result(h, &w->result);
		list_append(&h->ready, w);
		(void)dp_timer_set_asap(h->kick);
	} else if (h->dying) {
		list_append(&h->pending, w); /* until the reap or the end of the grace period */
	} else {
		list_append(&h->pending, w);
		start_for_pending(h);
		if (h->ready.head)
			(void)dp_timer_set_asap(h->kick);
	}
	if (ret_wait)
		*ret_wait = w;
	return 0;
}

void dp_helper_wait_cancel(dp_helper_wait *w)
{
	if (!w)
		return;
	list_unlink(w);
	free(w);
}

bool dp_helper_running(const dp_helper *h)
{
	return h && h->running;
}

const dp_helper_result *dp_helper_last(const dp_helper *h)
{
	return h && h->has_last ? &h->last : NULL;
}

unsigned dp_helper_runs(const dp_helper *h)
{
	return h ? h->runs : 0;
}
