/* SPDX-License-Identifier: Apache-2.0 */
/* fdreserve: fds held in reserve for the daemon's own work, released around it (dp/fdreserve.h). */
#include "dp/fdreserve.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static int held[DP_FD_RESERVE_MAX];
static unsigned n_held, n_wanted;

/* One more fd: a duplicate of a held one, or /dev/null opened when none is held. */
static int take_one(void)
{
	int fd = n_held ? fcntl(held[0], F_DUPFD_CLOEXEC, 0) : open("/dev/null", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	held[n_held++] = fd;
	return 0;
}

unsigned dp_fd_reserve_refill(void)
{
	while (n_held < n_wanted && take_one() == 0)
		;
	return n_held;
}

void dp_fd_reserve_release(void)
{
	while (n_held)
		(void)close(held[--n_held]);
}

int dp_fd_reserve(unsigned n)
{
	int r;

	if (n > DP_FD_RESERVE_MAX)
		return -EINVAL;
	dp_fd_reserve_release();
	n_wanted = n;
	if (n == 0)
		return 0;
	r = take_one();
	if (r < 0)
		return r;
	dp_fd_reserve_refill();
	return 0;
}

unsigned dp_fd_reserve_held(void)
{
	return n_held;
}

unsigned dp_fd_reserve_wanted(void)
{
	return n_wanted;
}
