/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helper_spawn: start the helper child with clone(CLONE_VM | CLONE_VFORK) + execveat(exe_fd, "",
 * AT_EMPTY_PATH). The daemon opened its own binary (O_PATH) at start-up, so its seccomp filter
 * can allow exactly this exec and refuse execve/execveat of anything else. Where execveat does
 * not exist (ENOSYS: valgrind 3.19, kernels before 3.19) the path is exec'd instead.
 *
 * The child shares the parent's memory until its exec, on a stack of its own, while the parent
 * waits (as glibc's posix_spawn does): fork() copied the daemon's page tables and left its pages
 * copy-on-write, so the parent also paid the copy and page faults after each fork.
 * Valgrind runs such a clone as a fork (still correct: the child writes only its own stack and
 * reports through the pipe, not through memory).
 *
 * Between fork and exec the child makes only async-signal-safe calls: default dispositions,
 * stdin /dev/null, stdout the pipe, every other fd closed except the two it still needs (both
 * close-on-exec), empty signal mask, exec. An exec failure is written to a close-on-exec pipe
 * as the errno; the parent reads it, so "cannot start helper <path>: <reason>" stays precise.
 */
#include "helper_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dp/macro.h"

extern char **environ;

static void close_span(unsigned from, unsigned to)
{
	if (from > to)
		return;
	if (syscall(SYS_close_range, from, to, 0) == 0)
		return;
	/* Kernels before 5.9: close one by one up to the fd limit. */
	struct rlimit rl;
	unsigned max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (unsigned)rl.rlim_cur : 65536;
	for (unsigned fd = from; fd <= to && fd < max; fd++)
		(void)close((int)fd);
}

/* Close every fd from 3 up, except a and b (a < b). */
static void close_others(int a, int b)
{
	close_span(STDERR_FILENO + 1, (unsigned)a - 1);
	close_span((unsigned)a + 1, (unsigned)b - 1);
	close_span((unsigned)b + 1, ~0U);
}

/* The child's stack: its calls before the exec need a few hundred bytes (sanitizers: more). */
#define CHILD_STACK (64 * 1024)

struct spawn {
	int exe_fd, in, out, err_w;
	const char *path;
	char *const *argv;
};

static _Noreturn void child(int exe_fd, const char *path, char *const argv[], int in, int out,
			    int err_w)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t none;
	int e;

	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &dfl, NULL);
	if (dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0)
		goto fail;
	/* both are close-on-exec and above stderr (opened after it) */
	close_others(exe_fd < err_w ? exe_fd : err_w, exe_fd < err_w ? err_w : exe_fd);
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	syscall(SYS_execveat, exe_fd, "", argv, environ, AT_EMPTY_PATH);
	if (errno == ENOSYS)
		execve(path, argv, environ);
fail:
	e = errno;
	(void)!write(err_w, &e, sizeof(e));
	_exit(127);
}

static int child_main(void *arg)
{
	const struct spawn *s = arg;
	child(s->exe_fd, s->path, s->argv, s->in, s->out, s->err_w);
}

/* The child's exec errno (0: it exec'd); reads until EOF (the pipe closes at exec). */
static int exec_result(int err_r)
{
	int e = 0;
	ssize_t n;

	do
		n = read(err_r, &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(e) ? (e > 0 ? e : EIO) : 0;
}

int dp_helper_spawn(int exe_fd, const char *path, char *const argv[], int out_w, pid_t *ret_pid)
{
	_cleanup_close_ int devnull = -1, err_r = -1, err_w = -1;
	/* on the parent's stack, which the child's frames never reach: the parent is suspended
	 * below this frame until the child has exec'd or exited */
	_Alignas(16) char stack[CHILD_STACK];
	int p[2], e;
	pid_t pid;

	if (exe_fd <= STDERR_FILENO || out_w < 0 || !path || !argv || !ret_pid)
		return -EINVAL;
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0)
		return -errno;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	err_r = p[0];
	err_w = p[1];
	struct spawn s = { .exe_fd = exe_fd, .in = devnull, .out = out_w, .err_w = err_w, .path = path,
			   .argv = argv };
	pid = clone(child_main, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &s);
	if (pid < 0)
		return -errno;
	close(TAKE_FD(err_w));
	e = exec_result(err_r);
	if (e) {
		(void)waitpid(pid, NULL, 0);
		return -e;
	}
	*ret_pid = pid;
	return 0;
}
