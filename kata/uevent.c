/* SPDX-License-Identifier: Apache-2.0 */
/* uevent: PCI bind/unbind/add/remove events from the kernel's uevent netlink socket (uevent.h). */
#include "uevent.h"

#include <errno.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp/log.h"

#define MSG_MAX 8192 /* a uevent is at most UEVENT_BUFFER_SIZE (2048) + its header */
#define BATCH_MAX 64 /* messages read per wake-up, at most (the socket is level-triggered) */

struct kata_uevent {
	int fd;
	dp_source *src;
	kata_uevent_fn fn;
	void *userdata;
};

static bool is_action(const char *a)
{
	return strcmp(a, "bind") == 0 || strcmp(a, "unbind") == 0 || strcmp(a, "add") == 0 ||
	       strcmp(a, "remove") == 0;
}

bool kata_uevent_parse(const char *buf, size_t n, const char **action, const char **devpath)
{
	const char *end = buf + n;
	bool pci = false;
	if (n == 0 || buf[n - 1] != '\0' || !memchr(buf, '@', strlen(buf)))
		return false; /* not a kernel message ("libudev" ones have no '@' header) */
	for (const char *p = buf + strlen(buf) + 1; p < end; p += strlen(p) + 1) {
		if (strcmp(p, "SUBSYSTEM=pci") == 0)
			pci = true;
		else if (strncmp(p, "ACTION=", 7) == 0)
			*action = p + 7;
		else if (strncmp(p, "DEVPATH=", 8) == 0)
			*devpath = p + 8;
	}
	return pci && *action && *devpath && is_action(*action);
}

static int on_readable(dp_source *s, int fd, uint32_t revents, void *userdata)
{
	kata_uevent *u = userdata;
	static char buf[MSG_MAX];
	for (int i = 0; i < BATCH_MAX; i++) {
		struct sockaddr_nl sa = { 0 };
		socklen_t sl = sizeof(sa);
		ssize_t n = recvfrom(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT, (struct sockaddr *)&sa, &sl);
		if (n < 0) {
			if (errno == ENOBUFS) /* events were lost: say so as a change of unknown kind */
				u->fn("overrun", "", u->userdata);
			return 0;
		}
		buf[n] = '\0'; /* every string of the message ends, the last one too */
		const char *action = NULL, *devpath = NULL;
		if (n == 0 || sa.nl_pid != 0 || !kata_uevent_parse(buf, (size_t)n + 1, &action, &devpath))
			continue; /* only the kernel's (port 0) */
		dp_debug("PCI uevent", "action=%s devpath=%s", action, devpath);
		u->fn(action, devpath, u->userdata);
	}
	return 0;
}

int kata_uevent_new(dp_loop *loop, kata_uevent_fn fn, void *userdata, kata_uevent **ret)
{
	_cleanup_(kata_uevent_freep) kata_uevent *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->fn = fn;
	u->userdata = userdata;
	u->fd = -1;
	u->fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
	if (u->fd < 0)
		/* u is freed by its _cleanup_ attribute, which the analyzers do not model */
		// cppcheck-suppress memleak
		return -errno; // NOLINT(clang-analyzer-unix.Malloc)
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = 1 /* the kernel's */ };
	if (bind(u->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		// cppcheck-suppress memleak ; u is freed by its _cleanup_ attribute
		return -errno; // NOLINT(clang-analyzer-unix.Malloc)
	int r = dp_io_add(loop, u->fd, EPOLLIN, on_readable, u, &u->src);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(u);
	return 0;
}

kata_uevent *kata_uevent_free(kata_uevent *u)
{
	if (!u)
		return NULL;
	dp_source_free(u->src);
	if (u->fd >= 0)
		close(u->fd);
	free(u);
	return NULL;
}
