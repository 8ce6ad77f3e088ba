/* SPDX-License-Identifier: Apache-2.0 */
/* dp_test: the shared test support of the C unit tests (see dp_test.h). */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp_test.h"

struct dpt_stub dpt_stub = { .verdict = true };

static void stub_check(dp_endpoint *ep, void *ud)
{
	dpt_stub.checks++;
	dp_endpoint_set_health(ep, dpt_stub.verdict, dpt_stub.verdict ? NULL : "test says no");
}

static void stub_allocate(dp_endpoint *ep, dp_alloc *a, void *ud)
{
	dp_alloc_finish(a, 0, NULL);
}

void dpt_stub_reset(void)
{
	dpt_stub = (struct dpt_stub){ .verdict = true };
}

dp_endpoint_config dpt_stub_config(void)
{
	static const dp_driver driver = { .check = stub_check, .allocate = stub_allocate };
	static const dp_device two[] = { { "a", -1 }, { "b", 0 } };

	return (dp_endpoint_config){ .resource_name = "example.com/thing",
				     .socket_prefix = "thing",
				     .devices = two,
				     .n_devices = 2,
				     .driver = &driver };
}

void dpt_capture_start(struct dpt_capture *c, int target)
{
	fflush(NULL);
	c->target = target;
	c->fd = memfd_create("capture", MFD_CLOEXEC);
	assert_true(c->fd >= 0);
	c->saved = fcntl(target, F_DUPFD_CLOEXEC, 3);
	assert_true(c->saved >= 0);
	assert_int_equal(dup2(c->fd, target), target);
}

const char *dpt_capture_end(struct dpt_capture *c)
{
	fflush(NULL);
	assert_int_equal(dup2(c->saved, c->target), c->target);
	close(c->saved);
	ssize_t n = pread(c->fd, c->text, sizeof(c->text) - 1, 0);
	close(c->fd);
	assert_true(n >= 0);
	c->text[n] = '\0';
	return c->text;
}

size_t dpt_count(const char *text, const char *needle)
{
	size_t n = 0;
	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

int dpt_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own fd */
}

bool dpt_run_until(dp_loop *l, const bool *flag, uint64_t bound_usec)
{
	uint64_t end = dp_now_usec() + bound_usec;

	while (!*flag && dp_now_usec() < end)
		assert_true(dp_loop_run_once(l, 10) >= 0);
	return *flag;
}

bool dpt_run_until_cond(dp_loop *l, bool (*cond)(void), uint64_t bound_usec)
{
	uint64_t end = dp_now_usec() + bound_usec;

	while (!cond() && dp_now_usec() < end)
		dp_loop_run_once(l, 10);
	return cond();
}

int dpt_tmpdir(char *buf, size_t size, const char *name)
{
	int n = snprintf(buf, size, "/tmp/%s.XXXXXX", name);

	if (n < 0 || (size_t)n >= size)
		return -1;
	return mkdtemp(buf) ? 0 : -1;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path);
}

int dpt_rmtree(const char *dir)
{
	return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int dpt_listener(int type_flags, int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | type_flags, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

int dpt_closed_port(void)
{
	int port, fd = dpt_listener(0, &port);

	close(fd);
	return port;
}

bool dpt_seccomp_unavailable(void)
{
	const char *why = getenv("SDP_SECCOMP_UNAVAILABLE");

	if (!why || !*why || prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 || errno != EINVAL)
		return false;
	print_message("skipped: no seccomp filter can be loaded here (SDP_SECCOMP_UNAVAILABLE=%s, "
		      "prctl(PR_GET_SECCOMP) fails with EINVAL)\n", why);
	return true;
}

uint32_t dpt_seccomp_run(const struct sock_filter *prog, size_t n, uint32_t arch, int nr,
			 const uint64_t args[6])
{
	struct seccomp_data d = { .nr = nr, .arch = arch };
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };

	memcpy(d.args, args, sizeof(d.args));
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *f = &prog[pc];
		uint32_t k = f->k, v = BPF_SRC(f->code) == BPF_X ? x : f->k;
		bool t;

		switch (BPF_CLASS(f->code)) {
		case BPF_LD:
		case BPF_LDX: {
			uint32_t *dst = BPF_CLASS(f->code) == BPF_LD ? &a : &x;
			if (BPF_MODE(f->code) == BPF_ABS && BPF_SIZE(f->code) == BPF_W && k % 4 == 0 &&
			    k <= sizeof(d) - 4)
				memcpy(dst, (const char *)&d + k, 4);
			else if (BPF_MODE(f->code) == BPF_IMM)
				*dst = k;
			else if (BPF_MODE(f->code) == BPF_MEM && k < BPF_MEMWORDS)
				*dst = mem[k];
			else if (BPF_MODE(f->code) == BPF_LEN)
				*dst = sizeof(d);
			else
				return SECCOMP_RET_KILL_PROCESS;
			break;
		}
		case BPF_ST:
		case BPF_STX:
			if (k >= BPF_MEMWORDS)
				return SECCOMP_RET_KILL_PROCESS;
			mem[k] = BPF_CLASS(f->code) == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			switch (BPF_OP(f->code)) {
			case BPF_ADD: a += v; break;
			case BPF_SUB: a -= v; break;
			case BPF_MUL: a *= v; break;
			case BPF_DIV: if (!v) return SECCOMP_RET_KILL_PROCESS; a /= v; break;
			case BPF_MOD: if (!v) return SECCOMP_RET_KILL_PROCESS; a %= v; break;
			case BPF_OR: a |= v; break;
			case BPF_AND: a &= v; break;
			case BPF_XOR: a ^= v; break;
			case BPF_LSH: a = v < 32 ? a << v : 0; break;
			case BPF_RSH: a = v < 32 ? a >> v : 0; break;
			case BPF_NEG: a = -a; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			break;
		case BPF_JMP:
			switch (BPF_OP(f->code)) {
			case BPF_JA: pc += k; continue;
			case BPF_JEQ: t = a == v; break;
			case BPF_JGT: t = a > v; break;
			case BPF_JGE: t = a >= v; break;
			case BPF_JSET: t = (a & v) != 0; break;
			default: return SECCOMP_RET_KILL_PROCESS;
			}
			pc += t ? f->jt : f->jf;
			break;
		case BPF_RET:
			return BPF_RVAL(f->code) == BPF_A ? a : k;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		default:
			return SECCOMP_RET_KILL_PROCESS;
		}
	}
	return SECCOMP_RET_KILL_PROCESS;
}
