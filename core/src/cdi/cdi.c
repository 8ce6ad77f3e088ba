/* SPDX-License-Identifier: Apache-2.0 */
/* cdi: the owned CDI spec file: compared byte for byte, replaced atomically, watched (dp/cdi.h). */
#include "dp/cdi.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cdi_backoff.h"
#include "dp/log.h"
#include "dp/metrics.h"
#include "dp/watch.h"

/* ---- compare and replace ---- */

#define TMP_SUFFIX ".tmp-"
#define TMP_RANDOM 6

/* A single path component we may create: not empty, not "." or "..", no '/'. */
static bool file_name_valid(const char *name)
{
	return name && *name && !strchr(name, '/') && strcmp(name, ".") != 0 &&
	       strcmp(name, "..") != 0;
}

/* -ELOOP for a symlink, -EEXIST for any other non-regular file, 0 for a regular file. */
static int check_type(const struct stat *st)
{
	if (S_ISLNK(st->st_mode))
		return -ELOOP;
	if (!S_ISREG(st->st_mode))
		return -EEXIST;
	return 0;
}

/* read() or write() once, again after EINTR: bytes moved, or negative errno. */
#define RETRY_EINTR(call)                                     \
	({                                                    \
		ssize_t _n;                                   \
		do                                            \
			_n = (call);                          \
		while (_n < 0 && errno == EINTR);             \
		_n < 0 ? (ssize_t)-errno : _n;                \
	})

/* Read fd to its end (at most len + 1 bytes) comparing with data: 0 equal, 1 different. One page
 * at a time: a spec is a few hundred bytes, and a stack page once touched stays resident. */
static int compare_content(int fd, const unsigned char *data, size_t len)
{
	unsigned char buf[4096];
	size_t off = 0;

	while (off <= len) {
		size_t want = len - off + 1 < sizeof(buf) ? len - off + 1 : sizeof(buf);
		ssize_t n = RETRY_EINTR(read(fd, buf, want));
		if (n < 0)
			return (int)n;
		if (n == 0)
			break;
		if ((size_t)n > len - off || memcmp(buf, data + off, (size_t)n) != 0)
			return 1;
		off += (size_t)n;
	}
	return off == len ? 0 : 1;
}

int dp_cdi_compare(int dirfd, const char *name, const void *data, size_t len)
{
	_cleanup_close_ int fd = -1;
	struct stat st;
	int r;

	if (!file_name_valid(name) || (!data && len))
		return -EINVAL;
	/* lstat first so a device node or FIFO planted at our path is never opened. */
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 1 : -errno;
	r = check_type(&st);
	if (r < 0)
		return r;
	fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		return errno == ENXIO ? -EEXIST : -errno; /* ENXIO: swapped for a socket */
	}
	if (fstat(fd, &st) < 0)
		return -errno;
	r = check_type(&st); /* it may have been swapped since the lstat */
	if (r < 0)
		return r;
	if (st.st_size < 0 || (unsigned long long)st.st_size != (unsigned long long)len)
		return 1;
	return compare_content(fd, data, len);
}

static void random_suffix(char out[static TMP_RANDOM + 1])
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
	static unsigned counter;
	unsigned char rnd[TMP_RANDOM];

	if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		unsigned long long x = (unsigned long long)ts.tv_nsec ^
				       ((unsigned long long)getpid() << 20) ^ (unsigned long long)(++counter * 2654435761u);
		for (size_t i = 0; i < sizeof(rnd); i++, x >>= 7)
			rnd[i] = (unsigned char)(x ^ (x >> 31));
	}
	for (size_t i = 0; i < TMP_RANDOM; i++)
		out[i] = alphabet[rnd[i] % (sizeof(alphabet) - 1)];
	out[TMP_RANDOM] = '\0';
}

/* Create ".<name>.tmp-XXXXXX" exclusively; its name goes to tmp. Returns the fd or -errno. */
static int create_temp(int dirfd, const char *name, char tmp[static NAME_MAX + 1])
{
	for (int attempt = 0; attempt < 64; attempt++) {
		char rnd[TMP_RANDOM + 1];
		random_suffix(rnd);
		snprintf(tmp, NAME_MAX + 1, ".%s" TMP_SUFFIX "%s", name, rnd);
		int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd >= 0)
			return fd;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static int write_all(int fd, const unsigned char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = RETRY_EINTR(write(fd, p, len));
		if (n < 0)
			return (int)n;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Fill the temp file, make it durable and close it (close errors count: NFS reports there). */
static int finish_temp(int fd, const void *data, size_t len)
{
	int r = 0;

	if (fchmod(fd, 0644) < 0) /* the umask must not narrow the mode */
		r = -errno;
	if (r == 0)
		r = write_all(fd, data, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0 && errno != EINTR)
		r = -errno;
	return r;
}

int dp_cdi_replace(int dirfd, const char *name, const void *data, size_t len)
{
	char tmp[NAME_MAX + 1];
	struct stat st;
	int fd, r;

	if (!file_name_valid(name) || (!data && len))
		return -EINVAL;
	if (strlen(name) + 1 + strlen(TMP_SUFFIX) + TMP_RANDOM > NAME_MAX)
		return -ENAMETOOLONG;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		r = check_type(&st);
		if (r < 0)
			return r;
	} else if (errno != ENOENT) {
		return -errno;
	}

	fd = create_temp(dirfd, name, tmp);
	if (fd < 0) {
		dp_debug("cdi: cannot create temp file", "name=%s error=%s", name, dp_errname(fd));
		return fd;
	}
	r = finish_temp(fd, data, len);
	if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
		r = -errno;
	if (r < 0) {
		dp_debug("cdi: replace failed", "name=%s error=%s", name, dp_errname(r));
		(void)unlinkat(dirfd, tmp, 0);
		return r;
	}
	if (fsync(dirfd) < 0)
		dp_debug("cdi: fsync of the directory failed", "name=%s error=%s", name, dp_errname(errno));
	return 0;
}

/* ---- the owned file, watched ---- */

struct dp_cdi_file {
	dp_loop *loop;
	char *dir;      /* absolute, no trailing '/' */
	char *parent;   /* dirname(dir), NULL for "/" */
	char *name;
	char *path;
	void *content;
	size_t len;
	bool has_content;
	dp_cdi_changed_fn changed;
	void *userdata;
	dp_watch *watch;         /* dir, and its parent for dir created / removed / replaced */
	dp_source *notify;       /* one-shot timer: coalesces a burst of events into one call */
	unsigned own_renames;    /* IN_MOVED_TO of name still expected from our own replaces */
	char error[PATH_MAX + 128];
	dp_cdi_backoff backoff; /* repairs of a file another writer keeps replacing */
	dp_source *retry;       /* one-shot timer: the wait or the episode is over -> changed */
	dp_cdi_fight_fn fight;
	char other[160];        /* the other writer's content, described when an episode starts */
	bool in_place;          /* these bytes were found or put in place: a later write repairs */
};

static int notify_fired(dp_source *s, void *userdata);

static void schedule_changed(dp_cdi_file *f)
{
	int r = f->notify ? dp_timer_set_asap(f->notify)
			  : dp_timer_add(f->loop, 0, 0, notify_fired, f, &f->notify);
	if (r < 0)
		dp_debug("cdi: cannot schedule the change callback", "path=%s error=%s", f->path, dp_errname(r));
}

static void on_watch(dp_watch *w, dp_watch_kind kind, const char *name, uint32_t mask,
		     void *userdata)
{
	dp_cdi_file *f = userdata;

	if (kind == DP_WATCH_ENTRY && (mask & IN_MOVED_TO) && f->own_renames > 0) {
		f->own_renames--; /* our own renameat(): the content is what we wrote */
		return;
	}
	if (kind != DP_WATCH_ENTRY)
		f->own_renames = 0; /* dir re-armed or events lost: our renames' events may be gone */
	schedule_changed(f);
}

/* Best effort: the watch waits for a missing directory (or parent) itself. */
static void arm_watches(dp_cdi_file *f)
{
	dp_watch_config cfg = { .dir = f->dir, .name = f->name, .mask = DP_WATCH_ENTRY_EVENTS,
				.watch_parent = true, .fn = on_watch, .userdata = f };
	int r;

	if (f->watch) {
		(void)dp_watch_rearm(f->watch);
		return;
	}
	f->own_renames = 0;
	r = dp_watch_new(f->loop, &cfg, &f->watch);
	if (r < 0)
		dp_debug("cdi: cannot watch directory", "path=%s error=%s", f->dir, dp_errname(r));
}

static int notify_fired(dp_source *s, void *userdata)
{
	dp_cdi_file *f = userdata;

	arm_watches(f);
	f->changed(f, f->userdata); /* may free f */
	return 0;
}

/* dir without trailing slashes; parent and base split off (none for "/"). */
static int split_dir(dp_cdi_file *f, const char *dir)
{
	size_t n = strlen(dir);

	while (n > 1 && dir[n - 1] == '/')
		n--;
	f->dir = strndup(dir, n);
	if (!f->dir)
		return -ENOMEM;
	if (n == 1)
		return 0; /* "/" */
	char *slash = strrchr(f->dir, '/');
	f->parent = slash == f->dir ? strdup("/") : strndup(f->dir, (size_t)(slash - f->dir));
	return f->parent ? 0 : -ENOMEM;
}

int dp_cdi_file_new(dp_loop *loop, const char *dir, const char *name, dp_cdi_changed_fn changed,
		    void *userdata, dp_cdi_file **ret)
{
	_cleanup_(dp_cdi_file_freep) dp_cdi_file *f = NULL;

	if (!loop || !dir || dir[0] != '/' || !file_name_valid(name) || !changed || !ret)
		return -EINVAL;
	if (strlen(name) + 1 + strlen(TMP_SUFFIX) + TMP_RANDOM > NAME_MAX)
		return -ENAMETOOLONG;
	f = malloc(sizeof(*f));
	if (!f)
		return -ENOMEM;
	*f = (dp_cdi_file){ .loop = loop, .changed = changed, .userdata = userdata };
	dp_cdi_backoff_init(&f->backoff);
	if (split_dir(f, dir) < 0)
		/* f is freed by its _cleanup_ attribute, which the analyzer does not model */
		return -ENOMEM; // NOLINT(clang-analyzer-unix.Malloc)
	f->name = strdup(name);
	if (!f->name || asprintf(&f->path, "%s%s%s", f->dir, f->parent ? "/" : "", name) < 0) {
		f->path = NULL;
		return -ENOMEM;
	}
	*ret = TAKE_PTR(f);
	return 0;
}

dp_cdi_file *dp_cdi_file_free(dp_cdi_file *f)
{
	if (!f)
		return NULL;
	dp_watch_free(f->watch);
	dp_source_free(f->notify);
	dp_source_free(f->retry);
	DP_FREE_MANY(f->dir, f->parent, f->name, f->path, f->content, f);
	return NULL;
}

int dp_cdi_file_set_content(dp_cdi_file *f, const void *data, size_t len)
{
	void *copy;

	if (!f || (!data && len))
		return -EINVAL;
	copy = malloc(len ? len : 1);
	if (!copy)
		return -ENOMEM;
	if (len)
		memcpy(copy, data, len);
	if (f->has_content && (len != f->len || memcmp(copy, f->content, len) != 0))
		f->in_place = false; /* new bytes: their first write is an update, not a repair */
	free(f->content);
	f->content = copy;
	f->len = len;
	f->has_content = true;
	return 0;
}

static int set_error(dp_cdi_file *f, int r, const char *fmt, ...) _printf_(3, 4);
static int set_error(dp_cdi_file *f, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	/* ap is va_start()ed just above (clang 14 false positive) */
	vsnprintf(f->error, sizeof(f->error), fmt, ap); // NOLINT(clang-analyzer-valist.Uninitialized)
	va_end(ap);
	dp_debug("cdi: sync failed", "path=%s error=%s", f->path, dp_errname(r));
	return r;
}

/* Open dir, creating it (0755 whatever the umask; not its parents) when missing. */
static int open_dir(dp_cdi_file *f)
{
	/* openat: musl's open() follows itself with an fcntl(FD_CLOEXEC) */
	int fd = openat(AT_FDCWD, f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT) {
		bool created = mkdir(f->dir, 0755) == 0;
		int e = errno;
		if (!created && e != EEXIST)
			return set_error(f, -e, "cannot create directory %s: %s", f->dir, strerror(e));
		fd = openat(AT_FDCWD, f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0 && created && fchmod(fd, 0755) < 0)
			dp_debug("cdi: cannot chmod directory", "path=%s error=%s", f->dir, dp_errname(errno));
	}
	if (fd < 0) {
		int e = errno;
		return set_error(f, -e, "cannot open directory %s: %s", f->dir, strerror(e));
	}
	return fd;
}

/* The message for a failed compare (reading) or replace (writing). */
static int file_error(dp_cdi_file *f, int r, const char *verb)
{
	if (r == -ELOOP || r == -EEXIST || strcmp(verb, "write") == 0)
		dp_metrics_cdi_write_failure(f->name); /* our bytes could not be put in place */
	if (r == -ELOOP)
		return set_error(f, r, "refusing symlink at %s", f->path);
	if (r == -EEXIST)
		return set_error(f, r, "refusing non-regular file at %s", f->path);
	return set_error(f, r, "cannot %s %s: %s", verb, f->path, strerror(-r));
}

/* ---- writers that disagree back off (the rule: cdi_backoff.h) ---- */

void dp_cdi_file_set_fight_fn(dp_cdi_file *f, dp_cdi_fight_fn fn)
{
	if (f)
		f->fight = fn;
}

static int retry_fired(dp_source *s, void *userdata)
{
	dp_cdi_file *f = userdata;

	f->changed(f, f->userdata); /* may free f */
	return 0;
}

/* changed is called at time at (0: disarm). */
static void arm_retry(dp_cdi_file *f, uint64_t at)
{
	uint64_t now = dp_now_usec(), usec = at > now ? at - now : 1;
	int r = 0;

	if (f->retry)
		r = dp_timer_set(f->retry, at ? usec : 0, 0);
	else if (at)
		r = dp_timer_add(f->loop, usec, 0, retry_fired, f, &f->retry);
	if (r < 0)
		dp_debug("cdi: cannot arm the retry timer", "path=%s error=%s", f->path, dp_errname(r));
}

static void tell(dp_cdi_file *f, dp_cdi_backoff_event ev)
{
	dp_cdi_fight fight = {
		.started = ev == DP_CDI_BACKOFF_STARTED,
		.other = f->other,
		.delay_usec = dp_cdi_backoff_delay(&f->backoff),
		.overwrites = dp_cdi_backoff_streak(&f->backoff),
	};

	if (ev == DP_CDI_BACKOFF_NONE)
		return;
	dp_debug(fight.started ? "cdi: another writer keeps replacing the spec, backing off"
			       : "cdi: the spec is no longer replaced, back-off over",
		 "path=%s overwrites=%u", f->path, fight.overwrites);
	if (f->fight)
		f->fight(f, &fight, f->userdata);
}

/* Other bytes were found: may our repair be written now? Otherwise the timer is armed. */
static bool repair_now(dp_cdi_file *f, int dirfd)
{
	dp_cdi_backoff_event ev;
	uint64_t now = dp_now_usec(), at = dp_cdi_backoff_foreign(&f->backoff, now, &ev);

	if (ev == DP_CDI_BACKOFF_STARTED)
		dp_cdi_backoff_describe(dirfd, f->name, f->content, f->len, f->other, sizeof(f->other));
	tell(f, ev);
	if (at <= now)
		return true;
	dp_debug("cdi: repair backed off", "path=%s delay_ms=%llu overwrites=%u", f->path,
		 (unsigned long long)(dp_cdi_backoff_delay(&f->backoff) / DP_USEC_PER_MSEC),
		 dp_cdi_backoff_streak(&f->backoff));
	arm_retry(f, at);
	return false;
}

/* Our bytes are in place: is the episode still on? The timer is armed for its end. */
static bool fighting(dp_cdi_file *f)
{
	dp_cdi_backoff_event ev;
	uint64_t end = dp_cdi_backoff_in_place(&f->backoff, dp_now_usec(), &ev);

	tell(f, ev);
	arm_retry(f, end);
	return end != 0;
}

static int fight_error(dp_cdi_file *f)
{
	return set_error(f, -EBUSY, "another writer keeps replacing %s; repairs backed off (its content: %s)",
			 f->path, f->other);
}

int dp_cdi_file_sync(dp_cdi_file *f, bool *ret_repaired)
{
	_cleanup_close_ int dirfd = -1;
	bool repaired = false;
	int r;

	if (!f)
		return -EINVAL;
	if (!f->has_content)
		return set_error(f, -EINVAL, "no content set for %s", f->path);
	dirfd = open_dir(f);
	if (dirfd < 0)
		return dirfd;
	arm_watches(f); /* before writing, so our own rename is seen and recognised */

	r = dp_cdi_compare(dirfd, f->name, f->content, f->len);
	if (r < 0)
		return file_error(f, r, "read");
	if (r == 1 && !repair_now(f, dirfd))
		return fight_error(f);
	if (r == 1) {
		r = dp_cdi_replace(dirfd, f->name, f->content, f->len);
		if (r < 0)
			return file_error(f, r, "write");
		if (dp_watch_dir_watched(f->watch))
			f->own_renames++;
		repaired = true;
		dp_debug("cdi: spec written", "path=%s bytes=%zu", f->path, f->len);
		if (f->in_place)
			dp_metrics_cdi_repair(f->name);
		dp_cdi_backoff_written(&f->backoff, dp_now_usec());
	}
	if (fighting(f))
		return fight_error(f);
	f->error[0] = '\0';
	f->in_place = true;
	if (ret_repaired)
		*ret_repaired = repaired;
	return 0;
}

const char *dp_cdi_file_error(const dp_cdi_file *f)
{
	return f ? f->error : "";
}

const char *dp_cdi_file_path(const dp_cdi_file *f)
{
	return f ? f->path : NULL;
}

uint64_t dp_cdi_file_backoff_usec(const dp_cdi_file *f)
{
	return f ? dp_cdi_backoff_delay(&f->backoff) : 0;
}

/* The daemons' opt-in lines (cdi.h); library code otherwise logs only at debug. */
void dp_cdi_log_fight(dp_cdi_file *f, const dp_cdi_fight *ev, void *userdata)
{
	char q[256];

	if (ev->started)
		dp_warn("CDI spec keeps being replaced by another writer, repairs backed off",
			"path=%s other=%s overwrites=%u retry_in_ms=%llu", dp_cdi_file_path(f),
			dp_logq(q, sizeof(q), ev->other), ev->overwrites,
			(unsigned long long)(ev->delay_usec / DP_USEC_PER_MSEC));
	else
		dp_info("CDI spec no longer replaced by another writer", "path=%s", dp_cdi_file_path(f));
}

int dp_cdi_file_new_owned(dp_loop *loop, const char *dir, const char *name, const dp_buf *spec,
			  dp_cdi_changed_fn changed, void *userdata, dp_cdi_file **ret)
{
	_cleanup_(dp_cdi_file_freep) dp_cdi_file *f = NULL;
	if (spec->oom)
		return -ENOMEM;
	int r = dp_cdi_file_new(loop, dir, name, changed, userdata, &f);
	if (r < 0)
		return r;
	dp_cdi_file_set_fight_fn(f, dp_cdi_log_fight);
	r = dp_cdi_file_set_content(f, spec->data, spec->len);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(f);
	return 0;
}
