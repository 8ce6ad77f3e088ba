/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint_socket: the plugin socket's name, its creation and removal, and the removal of our
 * own stale sockets.
 *
 * Names are "<prefix>-<n>.sock" (the form dp_health_probe looks for), at most
 * DP_SOCKET_NAME_MAX bytes: the prefix is "<tag>-<hash of the key>" (dp_socket_prefix), so a
 * long resource name never makes a long name, and <n> is 6 base32hex digits: a 30-bit counter
 * of the server instances of this process that starts at a random value drawn once per
 * process, so a daemon restarted with the same PID (PID 1 of its container after kill -9 or an
 * OOM kill) does not reuse its dead predecessor's names. Two processes of one prefix (a
 * misconfiguration) that draw the same name: the bind meets a live socket and takes the next.
 *
 * Stale: a socket file named exactly "<prefix>-<6 base32hex digits>.sock" for our prefix that
 * no one listens on (connect fails with ECONNREFUSED). dp_ep_socket_sweep removes those at
 * start, and a bind that meets one with our own name (EADDRINUSE) removes it and binds again at
 * once. A live socket (connect succeeds or its backlog is full), another prefix, a non-socket
 * and an unexpected error are never touched.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dp/log.h"
#include "endpoint_internal.h"

#define NAME_ATTEMPTS 4
#define SUFFIX ".sock"
#define MASK30 0x3fffffffu

static_assert(sizeof(((struct sockaddr_un *)0)->sun_path) == DP_SOCKET_SUN_PATH, "sun_path");
static_assert(DP_SOCKET_NAME_MAX >= sizeof("kubelet.sock") - 1, "kubelet.sock is checked with our names");
static_assert(DP_SOCKET_HASH_LEN * 5 == 30 && DP_SOCKET_N_LEN * 5 == 30, "30 bits in base32hex");

static const char b32hex[] = "0123456789abcdefghijklmnopqrstuv";

static bool next_drawn;
static uint32_t next_n;

static uint32_t socket_n(void)
{
	if (!next_drawn) {
		uint32_t r = 0;
		if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
			struct timespec ts = { 0 };
			(void)clock_gettime(CLOCK_REALTIME, &ts);
			r = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec ^ ((uint32_t)getpid() << 12);
		}
		next_n = r;
		next_drawn = true;
	}
	return next_n++ & MASK30;
}

/* 30 bits as 6 base32hex digits, most significant first, and a NUL. */
static void b32hex30(uint32_t v, char out[static 7])
{
	for (int i = 5; i >= 0; i--, v >>= 5)
		out[i] = b32hex[v & 31];
	out[6] = '\0';
}

/* FNV-1a (32 bits), xor-folded to 30. */
static uint32_t hash30(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return ((h >> 30) ^ h) & MASK30;
}

static bool is_b32hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'v');
}

static bool valid_tag(const char *tag)
{
	size_t n = tag ? strlen(tag) : 0;
	if (n == 0 || n > DP_SOCKET_TAG_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((tag[i] >= 'a' && tag[i] <= 'z') || (tag[i] >= '0' && tag[i] <= '9')))
			return false;
	return true;
}

int dp_socket_prefix(char *buf, size_t size, const char *tag, const char *key)
{
	char h[DP_SOCKET_HASH_LEN + 1];
	if (!valid_tag(tag) || !key || !key[0])
		return -EINVAL;
	if (strlen(tag) + 1 + DP_SOCKET_HASH_LEN >= size)
		return -ENAMETOOLONG;
	b32hex30(hash30(key), h);
	snprintf(buf, size, "%s-%s", tag, h);
	return 0;
}

int dp_socket_dir_check(const char *dir)
{
	return strlen(dir) > DP_SOCKET_DIR_MAX ? -ENAMETOOLONG : 0;
}

bool dp_ep_socket_ours(const char *prefix, const char *name)
{
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl) != 0 || name[pl] != '-')
		return false;
	const char *p = name + pl + 1;
	for (int i = 0; i < DP_SOCKET_N_LEN; i++)
		if (!is_b32hex(*p++))
			return false;
	return strcmp(p, SUFFIX) == 0;
}

int dp_socket_stale(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISSOCK(st.st_mode))
		return 0;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int r = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
	close(fd);
	if (r == -ECONNREFUSED)
		return 1;
	/* connected, or EAGAIN (a full backlog): someone listens */
	return r == 0 || r == -EAGAIN || r == -EINPROGRESS ? 0 : r;
}

/* 1 when dir/name was a stale socket of prefix and is gone now, 0 when left alone. */
static int remove_if_stale(const char *dir, const char *prefix, const char *name)
{
	char path[PATH_MAX];
	struct stat before, after;
	if (!dp_ep_socket_ours(prefix, name) ||
	    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return 0;
	if (lstat(path, &before) < 0 || dp_socket_stale(path) != 1)
		return 0;
	/* Still the inode that refused the connection. */
	if (lstat(path, &after) < 0 || after.st_ino != before.st_ino || after.st_dev != before.st_dev)
		return 0;
	if (unlink(path) < 0) {
		dp_debug("cannot remove stale socket", "socket=%s error=%s", path, dp_errname(errno));
		return 0;
	}
	dp_debug("removed stale socket", "socket=%s", path);
	return 1;
}

unsigned dp_socket_sweep(const char *dir, const char *prefix, const char *keep,
			 void (*removed)(const char *name, void *userdata), void *userdata)
{
	unsigned n = 0;
	DIR *d = opendir(dir);
	if (!d) {
		dp_debug("cannot list device-plugins directory", "dir=%s error=%s", dir, dp_errname(errno));
		return 0;
	}
	for (struct dirent *de; (de = readdir(d));) {
		if ((de->d_type != DT_SOCK && de->d_type != DT_UNKNOWN) || (keep && strcmp(de->d_name, keep) == 0))
			continue;
		if (remove_if_stale(dir, prefix, de->d_name) > 0) {
			n++;
			if (removed)
				removed(de->d_name, userdata);
		}
	}
	closedir(d);
	return n;
}

static void ep_removed(const char *name, void *userdata)
{
	dp_endpoint *ep = userdata;
	if (ep->events.on_stale_removed)
		ep->events.on_stale_removed(ep, name, ep->events.userdata);
}

unsigned dp_ep_socket_sweep(dp_endpoint *ep)
{
	return dp_socket_sweep(ep->dir, ep->prefix, ep->socket_name, ep_removed, ep);
}

int dp_socket_name(char *buf, size_t size, const char *prefix)
{
	char n[DP_SOCKET_N_LEN + 1];
	size_t pl = strlen(prefix);
	if (pl > DP_SOCKET_PREFIX_MAX || pl + 1 + DP_SOCKET_N_LEN + strlen(SUFFIX) >= size)
		return -ENAMETOOLONG;
	b32hex30(socket_n(), n);
	snprintf(buf, size, "%s-%s" SUFFIX, prefix, n);
	return 0;
}

int dp_ep_socket_serve(dp_endpoint *ep, const dp_grpc_method *methods, size_t n_methods)
{
	char path[PATH_MAX];
	struct stat st;
	int r = -EADDRINUSE;
	bool fresh = true;

	for (int i = 0; i < NAME_ATTEMPTS && r == -EADDRINUSE; i++) {
		if (fresh && dp_socket_name(ep->socket_name, sizeof(ep->socket_name), ep->prefix) < 0) {
			r = -ENAMETOOLONG;
			break;
		}
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", ep->dir, ep->socket_name) >= sizeof(path)) {
			r = -ENAMETOOLONG;
			break;
		}
		r = dp_grpc_server_new(ep->loop, path, methods, n_methods, NULL, &ep->server);
		/* Our name is taken: a stale socket of ours is removed and the name bound again at
		 * once; anything else (live, not a socket) keeps its name and we take the next. */
		fresh = !(r == -EADDRINUSE && remove_if_stale(ep->dir, ep->prefix, ep->socket_name) > 0);
		if (!fresh)
			ep_removed(ep->socket_name, ep);
	}
	if (r < 0)
		return r; /* socket_name kept: the caller says which name failed */
	if (lstat(path, &st) == 0) {
		ep->socket_ino = st.st_ino;
		ep->socket_dev = st.st_dev;
	}
	return 0;
}

void dp_ep_socket_remove(dp_endpoint *ep)
{
	char path[PATH_MAX];
	struct stat st;
	if (!ep->socket_name[0])
		return;
	snprintf(path, sizeof(path), "%s/%s", ep->dir, ep->socket_name);
	/* Delete only the socket we created: same inode, still a socket. */
	if (ep->socket_ino && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == ep->socket_ino &&
	    st.st_dev == ep->socket_dev)
		(void)unlink(path);
	ep->socket_name[0] = '\0';
	ep->socket_ino = 0;
	ep->socket_dev = 0;
}
