/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sdp-qemu-user PROGRAM [ARGS...]: run a program of the arm64 build on this amd64 machine under
 * qemu-user, as the process it is (this program execs: the pid a test holds is the program's).
 * tests/arm64/run.sh sets it as SDP_EMULATOR, through which the scenario suites start every
 * program of the build directory, and runs the unit tests that start programs through it.
 *
 * qemu-aarch64-static runs PROGRAM explicitly. The programs PROGRAM starts in turn (hyperlight's
 * probe helper and node-label child: an exec of an arm64 binary) need the kernel's binfmt_misc
 * to hand them to qemu, and nothing may be assumed registered on the machine. So first this
 * program enters a user namespace of its own, every uid and gid mapped to itself (written by a
 * child left in the parent namespace, reaped before the exec), with a mount namespace, mounts a
 * binfmt_misc instance there (Linux 6.7 and later give each user namespace its own) and
 * registers qemu-aarch64-static for aarch64 ELF executables in it (flag F: the interpreter is
 * opened at once). The machine's binfmt_misc is not touched; the registration ends with the
 * namespace (on an older kernel, tests/arm64/run.sh registers the rule in the machine's
 * binfmt_misc for the run instead: --machine, below). A PROGRAM that is not an aarch64 ELF (unshare, in the PID-1 tests) is exec'd as it
 * is, and its arm64 child runs through that registration; the test's LD_PRELOAD (an arm64
 * library) is handed to that child through qemu's QEMU_SET_ENV instead of PROGRAM's loader.
 *
 * Static (glibc's libc.a), so that the test's LD_PRELOAD (the arm64 hypervisor shim, for the
 * daemon) is not tried by an amd64 loader on the way: qemu hands it to the guest's.
 * Exit status 125 and a line on stderr when the namespace or the registration fails.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#define QEMU "/usr/bin/qemu-aarch64-static"
#define BINFMT "/proc/sys/fs/binfmt_misc"
/* ELF, 64-bit, little-endian, version 1, e_type ET_EXEC or ET_DYN (mask 0xfe), e_machine
 * EM_AARCH64 (183): as Debian's qemu-user-static registers it system-wide. */
#define RULE_NAME "sdp-aarch64"
#define RULE                                                                                   \
	":" RULE_NAME ":M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00"   \
	"\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff" \
	"\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:" QEMU ":F"

extern char **environ;

static int fail(const char *what)
{
	fprintf(stderr, "sdp-qemu-user: %s: %s\n", what, strerror(errno));
	return 125;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* In the parent user namespace: map every id of process pid's new namespace to itself. */
static int map_ids(pid_t pid)
{
	static const char *const files[] = { "uid_map", "gid_map" };
	char path[64];

	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
		if (write_file(path, "0 0 4294967295\n") < 0)
			return -1;
	}
	return 0;
}

/* Enter the namespaces with the identity map; 0 or -1 (errno set). */
static int enter_namespaces(void)
{
	int go[2], status, e = 0;
	pid_t parent = getpid(), child;
	char c = 0;

	if (pipe2(go, O_CLOEXEC) < 0)
		return -1;
	child = fork();
	if (child < 0)
		return -1;
	if (child == 0) {
		close(go[1]);
		_exit(read(go[0], &c, 1) == 1 && map_ids(parent) == 0 ? 0 : 1);
	}
	close(go[0]);
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
		e = errno;
	else
		(void)!write(go[1], &c, 1);
	close(go[1]);
	if (waitpid(child, &status, 0) != child)
		return -1;
	if (e) {
		errno = e;
		return -1;
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		errno = EPERM;
		return -1;
	}
	return 0;
}

static int is_aarch64(const char *path)
{
	Elf64_Ehdr h;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, &h, sizeof(h));

	if (fd >= 0)
		close(fd);
	return n == (ssize_t)sizeof(h) && memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 &&
	       h.e_ident[EI_CLASS] == ELFCLASS64 && h.e_machine == EM_AARCH64;
}

/* With SDP_QEMU_STRACE_DIR set (tests/arm64/run.sh): qemu logs every system call of its guest
 * (QEMU_STRACE) to DIR/<program>.<pid> (QEMU_LOG_FILENAME; <program>: the arm64 program's name,
 * the first aarch64 ELF argument), and so does every qemu the program starts (the variables are
 * inherited), for tests/arm64/strace_calls.py. */
static int record_argv(char **argv)
{
	const char *dir = getenv("SDP_QEMU_STRACE_DIR");
	char path[4096];

	if (!dir || !*dir)
		return 0;
	for (; *argv; argv++) {
		const char *base = strrchr(*argv, '/');
		if (!is_aarch64(*argv))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s.%%d", dir, base ? base + 1 : *argv) >= (int)sizeof(path) ||
		    strchr(dir, '%')) {
			errno = ENAMETOOLONG;
			return -1;
		}
		if (setenv("QEMU_STRACE", "1", 1) < 0 || setenv("QEMU_LOG_FILENAME", path, 1) < 0)
			return -1;
		return 0;
	}
	return 0;
}

/* --machine register|unregister: the fallback of tests/arm64/run.sh on a kernel without a
 * binfmt_misc per user namespace (before 6.7): the same rule in the machine's binfmt_misc
 * (mounted there first if it is not), for the run only; run.sh removes it when it ends and
 * sets SDP_QEMU_USER_BINFMT=machine, with which this program enters no namespace. */
static int machine(const char *op)
{
	if (strcmp(op, "unregister") == 0)
		return write_file(BINFMT "/" RULE_NAME, "-1") < 0 ? fail("remove " BINFMT "/" RULE_NAME) : 0;
	if (strcmp(op, "register") != 0) {
		fprintf(stderr, "usage: sdp-qemu-user --machine register|unregister\n");
		return 2;
	}
	if (access(BINFMT "/register", W_OK) < 0 && mount("binfmt_misc", BINFMT, "binfmt_misc", 0, NULL) < 0)
		return fail("mount the machine's binfmt_misc on " BINFMT);
	return write_file(BINFMT "/register", RULE) < 0 ? fail("register " QEMU " in the machine's " BINFMT) : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--machine") == 0)
		return machine(argv[2]);
	if (argc < 2) {
		fprintf(stderr, "usage: sdp-qemu-user PROGRAM [ARGS...]\n");
		return 2;
	}
	const char *where = getenv("SDP_QEMU_USER_BINFMT");
	if (!where || strcmp(where, "machine") != 0) {
		if (enter_namespaces() < 0)
			return fail("a user and mount namespace of its own");
		if (mount("sdp-binfmt", BINFMT, "binfmt_misc", 0, NULL) < 0)
			return fail("mount binfmt_misc on " BINFMT " (Linux 6.7 or later mounts one per user namespace)");
		if (write_file(BINFMT "/register", RULE) < 0)
			return fail("register " QEMU " in " BINFMT "/register");
	}
	if (record_argv(argv + 1) < 0)
		return fail("SDP_QEMU_STRACE_DIR");
	if (is_aarch64(argv[1])) {
		argv[0] = (char *)QEMU;
		execve(QEMU, argv, environ);
		return fail("exec " QEMU);
	}
	/* The test's LD_PRELOAD is an arm64 library for the arm64 program that PROGRAM starts: an
	 * amd64 PROGRAM's loader must not try it (it prints an error on stderr, which a test may
	 * hold full). qemu sets QEMU_SET_ENV's variables in its guest's environment. */
	const char *preload = getenv("LD_PRELOAD");
	if (preload && *preload) {
		char set[4096];
		if (strchr(preload, ',') || snprintf(set, sizeof(set), "LD_PRELOAD=%s", preload) >= (int)sizeof(set)) {
			errno = EINVAL;
			return fail("LD_PRELOAD for qemu's QEMU_SET_ENV");
		}
		if (setenv("QEMU_SET_ENV", set, 1) < 0 || unsetenv("LD_PRELOAD") < 0)
			return fail("QEMU_SET_ENV");
	}
	execve(argv[1], argv + 1, environ);
	return fail(argv[1]);
}
