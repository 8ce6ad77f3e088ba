/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cdi: names and versions, compare / replace on real directories (including a read-only and a
 * full file system, mounted in a private mount namespace set up by main()), and the watched
 * file on a real loop.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <ftw.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cdi/cdi_backoff.h"
#include "dp/cdi.h"
#include "dp/log.h"
#include "dp/loop.h"

#define NAME "hyperlight.json"
#define OLD "{\"cdiVersion\":\"0.3.0\",\"old\":true}\n"
#define NEW "{\"cdiVersion\":\"0.3.0\",\"kind\":\"hyperlight.dev/hypervisor\",\"devices\":[]}\n"

static int ns_errno;           /* 0 when main() entered a private mount namespace */
static const char *ns_step = ""; /* the step that failed */

/* ---- helpers ---- */

static char *make_tmpdir(void)
{
	char *d = strdup("/tmp/test_cdi.XXXXXX");
	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(p) < 0 ? -1 : 0;
}

static void rm_rf(char *d)
{
	if (!d)
		return;
	assert_int_equal(nftw(d, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
	free(d);
}

static char *join(const char *a, const char *b)
{
	char *p;
	assert_true(asprintf(&p, "%s/%s", a, b) > 0);
	return p;
}

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char *p = join(dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
	free(p);
}

static void write_str(const char *dir, const char *name, const char *s)
{
	write_file(dir, name, s, strlen(s));
}

static void assert_file_bytes(const char *dir, const char *name, const void *data, size_t len)
{
	char *p = join(dir, name);
	struct stat st;
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, (off_t)len);
	char *buf = malloc(len + 1);
	assert_non_null(buf);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, len + 1), (ssize_t)len);
	close(fd);
	assert_memory_equal(buf, data, len);
	free(buf);
	free(p);
}

static void assert_file_str(const char *dir, const char *name, const char *s)
{
	assert_file_bytes(dir, name, s, strlen(s));
}

static int open_dir(const char *d)
{
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	return fd;
}

static int count_entries(const char *d, const char *containing)
{
	DIR *dir = opendir(d);
	struct dirent *e;
	int n = 0;

	assert_non_null(dir);
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    (!containing || strstr(e->d_name, containing)))
			n++;
	closedir(dir);
	return n;
}

static void assert_no_temp(const char *d)
{
	assert_int_equal(count_entries(d, ".tmp-"), 0);
}

static ino_t inode_of(const char *dir, const char *name)
{
	char *p = join(dir, name);
	struct stat st;
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	return st.st_ino;
}

static mode_t mode_of(const char *dir, const char *name)
{
	char *p = join(dir, name);
	struct stat st;
	assert_int_equal(lstat(p, &st), 0);
	free(p);
	return st.st_mode;
}

static void make_socket(const char *dir, const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_true((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name) <
		    sizeof(sa.sun_path));
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

/* ---- names and versions ---- */

static void test_min_version(void **state)
{
	static const struct {
		dp_cdi_features f;
		const char *want;
	} cases[] = {
		{ { 0 }, "0.3.0" },
		{ { .mount_type = true }, "0.4.0" },
		{ { .device_node_host_path = true }, "0.5.0" },
		{ { .device_name_starts_with_digit = true }, "0.5.0" },
		{ { .annotations = true }, "0.6.0" },
		{ { .class_has_dot = true }, "0.6.0" },
		{ { .additional_gids = true }, "0.7.0" },
		{ { .intel_rdt = true }, "0.7.0" },
		{ { .net_devices = true }, "1.1.0" },
		{ { .intel_rdt_schemata = true }, "1.1.0" },
		{ { .mount_type = true, .device_name_starts_with_digit = true }, "0.5.0" },
		{ { .mount_type = true, .class_has_dot = true, .device_node_host_path = true },
		  "0.6.0" },
		{ { .annotations = true, .intel_rdt = true, .mount_type = true }, "0.7.0" },
		{ { .net_devices = true, .mount_type = true, .additional_gids = true }, "1.1.0" },
	};

	for (size_t i = 0; i < DP_ELEMENTSOF(cases); i++)
		if (strcmp(dp_cdi_min_version(&cases[i].f), cases[i].want) != 0)
			fail_msg("case %zu: %s, want %s", i, dp_cdi_min_version(&cases[i].f),
				 cases[i].want);
	assert_string_equal(dp_cdi_min_version(NULL), "0.3.0");
}

static void test_kind_valid(void **state)
{
	static const char *const good[] = {
		"hyperlight.dev/hypervisor", "nvidia.com/gpu", "nvidia.com/nvswitch", "a/b",
		"vendor.com/class.with.dot", "Vendor_1.x-y/Class_2-z", "v1/c2",
	};
	static const char *const bad[] = {
		"", "foo", "/foo", "vendor.com/", "vendor.com/foo/", "vendor.com/foo/bar",
		"1vendor.com/foo", "vendor.com/1foo", "vendor-/foo", "vendor.com/foo-",
		"vendor.com/foo.", "_vendor/foo", "vendor/-foo", "ven dor/foo", "vendor/fo:o",
		"vendor/foo=bar", "vendor/caf\xc3\xa9", "vendor//foo",
	};

	for (size_t i = 0; i < DP_ELEMENTSOF(good); i++)
		if (!dp_cdi_kind_valid(good[i]))
			fail_msg("%s should be valid", good[i]);
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++)
		if (dp_cdi_kind_valid(bad[i]))
			fail_msg("\"%s\" should be invalid", bad[i]);
	assert_false(dp_cdi_kind_valid(NULL));
}

static void test_device_name_valid(void **state)
{
	static const char *const good[] = {
		"0", "a", "Z", "gpu0", "0000:3b:00.0", "dev_1-2.3:4", "hyperlight-0", "1999",
	};
	static const char *const bad[] = {
		"", "-a", "a-", ":a", "a:", ".a", "a.", "_a", "a_", "a/b", "a b", "a=b",
		"caf\xc3\xa9", "a\n",
	};

	for (size_t i = 0; i < DP_ELEMENTSOF(good); i++)
		if (!dp_cdi_device_name_valid(good[i]))
			fail_msg("%s should be valid", good[i]);
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++)
		if (dp_cdi_device_name_valid(bad[i]))
			fail_msg("\"%s\" should be invalid", bad[i]);
	assert_false(dp_cdi_device_name_valid(NULL));
}

/* ---- compare ---- */

static void test_compare_contents(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);

	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 1); /* missing */
	write_str(d, NAME, NEW);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 0);
	/* same length, one byte differs (the last one) */
	char other[] = NEW;
	other[strlen(other) - 1] = ' ';
	assert_int_equal(dp_cdi_compare(dfd, NAME, other, strlen(other)), 1);
	/* the file is longer / shorter than our bytes */
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW) - 1), 1);
	write_str(d, NAME, NEW "x");
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 1);
	/* truncated (a prefix of ours) */
	write_file(d, NAME, NEW, 10);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 1);
	/* empty file */
	write_str(d, NAME, "");
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 1);
	assert_int_equal(dp_cdi_compare(dfd, NAME, "", 0), 0);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NULL, 0), 0);
	write_str(d, NAME, "x");
	assert_int_equal(dp_cdi_compare(dfd, NAME, "", 0), 1);
	/* a large file crossing the read chunks: equal, then differing near the end */
	size_t big = 100000;
	char *data = malloc(big);
	assert_non_null(data);
	for (size_t i = 0; i < big; i++)
		data[i] = (char)('a' + i % 26);
	write_file(d, NAME, data, big);
	assert_int_equal(dp_cdi_compare(dfd, NAME, data, big), 0);
	data[big - 3] = '!';
	assert_int_equal(dp_cdi_compare(dfd, NAME, data, big), 1);
	free(data);
	/* bad names */
	assert_int_equal(dp_cdi_compare(dfd, "", "", 0), -EINVAL);
	assert_int_equal(dp_cdi_compare(dfd, ".", "", 0), -EINVAL);
	assert_int_equal(dp_cdi_compare(dfd, "..", "", 0), -EINVAL);
	assert_int_equal(dp_cdi_compare(dfd, "a/b", "", 0), -EINVAL);
	assert_int_equal(dp_cdi_compare(dfd, NULL, "", 0), -EINVAL);
	close(dfd);
	rm_rf(d);
}

static void test_compare_refuses(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);

	/* a symlink to a file holding exactly our bytes is still refused */
	write_str(d, "target", NEW);
	assert_int_equal(symlinkat("target", dfd, NAME), 0);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), -ELOOP);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);
	assert_int_equal(symlinkat("/nonexistent/x", dfd, NAME), 0); /* dangling */
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), -ELOOP);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);

	assert_int_equal(mkdirat(dfd, NAME, 0755), 0);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	assert_int_equal(unlinkat(dfd, NAME, AT_REMOVEDIR), 0);

	/* a FIFO without writer: must not block */
	assert_int_equal(mkfifoat(dfd, NAME, 0644), 0);
	alarm(10); /* a blocking open would hang the test: fail it instead */
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	alarm(0);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);

	make_socket(d, NAME);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);

	assert_int_equal(mknodat(dfd, NAME, S_IFCHR | 0644, makedev(1, 3)), 0); /* /dev/null */
	assert_int_equal(dp_cdi_compare(dfd, NAME, "", 0), -EEXIST);
	close(dfd);
	rm_rf(d);
}

/* ---- replace ---- */

static void test_replace_creates_and_replaces(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);

	assert_int_equal(dp_cdi_replace(dfd, NAME, OLD, strlen(OLD)), 0);
	assert_file_str(d, NAME, OLD);
	assert_int_equal(mode_of(d, NAME) & 07777, 0644);
	assert_no_temp(d);
	assert_int_equal(count_entries(d, NULL), 1);

	ino_t before = inode_of(d, NAME);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), 0);
	assert_file_str(d, NAME, NEW);
	assert_int_not_equal(inode_of(d, NAME), before); /* renamed into place, not rewritten */
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 0);
	assert_no_temp(d);

	/* empty content */
	assert_int_equal(dp_cdi_replace(dfd, NAME, "", 0), 0);
	assert_file_str(d, NAME, "");
	assert_int_equal(count_entries(d, NULL), 1);
	close(dfd);
	rm_rf(d);
}

static void test_replace_mode_ignores_umask(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);
	mode_t old = umask(077);

	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), 0);
	assert_int_equal(mode_of(d, NAME) & 07777, 0644);
	/* an existing file with a narrower mode ends up 0644 too */
	char *p = join(d, NAME);
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, OLD, strlen(OLD)), 0);
	assert_int_equal(mode_of(d, NAME) & 07777, 0644);
	umask(old);
	free(p);
	close(dfd);
	rm_rf(d);
}

static void test_replace_refuses_symlink(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);
	char link[64];

	write_str(d, "target", OLD);
	assert_int_equal(symlinkat("target", dfd, NAME), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -ELOOP);
	assert_true(S_ISLNK(mode_of(d, NAME)));
	ssize_t n = readlinkat(dfd, NAME, link, sizeof(link));
	assert_int_equal(n, 6);
	assert_memory_equal(link, "target", 6);
	assert_file_str(d, "target", OLD);
	assert_no_temp(d);

	/* a dangling symlink: its target is not created */
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);
	assert_int_equal(symlinkat("created-through-link", dfd, NAME), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -ELOOP);
	assert_true(S_ISLNK(mode_of(d, NAME)));
	assert_int_equal(faccessat(dfd, "created-through-link", F_OK, AT_SYMLINK_NOFOLLOW), -1);
	assert_int_equal(count_entries(d, NULL), 2);
	close(dfd);
	rm_rf(d);
}

static void test_replace_refuses_non_regular(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);
	ino_t ino;

	/* a directory (with a file in it) */
	assert_int_equal(mkdirat(dfd, NAME, 0755), 0);
	char *sub = join(d, NAME);
	write_str(sub, "inside", OLD);
	ino = inode_of(d, NAME);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	assert_true(S_ISDIR(mode_of(d, NAME)));
	assert_int_equal(inode_of(d, NAME), ino);
	assert_file_str(sub, "inside", OLD);
	assert_int_equal(count_entries(sub, NULL), 1);
	assert_no_temp(d);
	char *inside = join(sub, "inside");
	assert_int_equal(unlink(inside), 0);
	free(inside);
	free(sub);
	assert_int_equal(unlinkat(dfd, NAME, AT_REMOVEDIR), 0);

	/* a FIFO */
	assert_int_equal(mkfifoat(dfd, NAME, 0644), 0);
	ino = inode_of(d, NAME);
	alarm(10);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	alarm(0);
	assert_true(S_ISFIFO(mode_of(d, NAME)));
	assert_int_equal(inode_of(d, NAME), ino);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);

	/* a socket */
	make_socket(d, NAME);
	ino = inode_of(d, NAME);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	assert_true(S_ISSOCK(mode_of(d, NAME)));
	assert_int_equal(inode_of(d, NAME), ino);
	assert_int_equal(unlinkat(dfd, NAME, 0), 0);

	/* a device node */
	assert_int_equal(mknodat(dfd, NAME, S_IFCHR | 0644, makedev(1, 3)), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -EEXIST);
	assert_true(S_ISCHR(mode_of(d, NAME)));
	assert_no_temp(d);
	assert_int_equal(count_entries(d, NULL), 1);
	close(dfd);
	rm_rf(d);
}

static void test_replace_leaves_others(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);
	static const char *const names[] = {
		"other.json", "other.yaml", "hyperlight.json.bak", ".hyperlight.json.tmp-Stale1",
	};
	ino_t inos[DP_ELEMENTSOF(names)];
	struct stat st_before[DP_ELEMENTSOF(names)];

	for (size_t i = 0; i < DP_ELEMENTSOF(names); i++) {
		write_str(d, names[i], names[i]);
		inos[i] = inode_of(d, names[i]);
		assert_int_equal(fstatat(dfd, names[i], &st_before[i], 0), 0);
	}
	assert_int_equal(mkdirat(dfd, "sub", 0700), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, OLD, strlen(OLD)), 0);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), 0);
	for (size_t i = 0; i < DP_ELEMENTSOF(names); i++) {
		struct stat st;
		assert_file_str(d, names[i], names[i]);
		assert_int_equal(inode_of(d, names[i]), inos[i]);
		assert_int_equal(fstatat(dfd, names[i], &st, 0), 0);
		assert_int_equal(st.st_mtim.tv_sec, st_before[i].st_mtim.tv_sec);
		assert_int_equal(st.st_mtim.tv_nsec, st_before[i].st_mtim.tv_nsec);
		assert_int_equal(st.st_mode, st_before[i].st_mode);
	}
	assert_true(S_ISDIR(mode_of(d, "sub")));
	assert_int_equal(mode_of(d, "sub") & 07777, 0700);
	/* everything before, plus our file; the stale temp of someone else stays */
	assert_int_equal(count_entries(d, NULL), (int)DP_ELEMENTSOF(names) + 2);
	close(dfd);
	rm_rf(d);
}

static void test_replace_bad_names(void **state)
{
	char *d = make_tmpdir();
	int dfd = open_dir(d);
	char longname[256];

	assert_int_equal(dp_cdi_replace(dfd, "", "x", 1), -EINVAL);
	assert_int_equal(dp_cdi_replace(dfd, ".", "x", 1), -EINVAL);
	assert_int_equal(dp_cdi_replace(dfd, "..", "x", 1), -EINVAL);
	assert_int_equal(dp_cdi_replace(dfd, "sub/x.json", "x", 1), -EINVAL);
	assert_int_equal(dp_cdi_replace(dfd, NULL, "x", 1), -EINVAL);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NULL, 1), -EINVAL);
	memset(longname, 'a', 250);
	longname[250] = '\0'; /* a valid name, but ".<name>.tmp-XXXXXX" would exceed NAME_MAX */
	assert_int_equal(dp_cdi_replace(dfd, longname, "x", 1), -ENAMETOOLONG);
	assert_int_equal(count_entries(d, NULL), 0);
	assert_int_equal(dp_cdi_replace(-1, NAME, "x", 1), -EBADF);
	close(dfd);
	rm_rf(d);
}

/* ---- read-only and full file systems (private mount namespace from main()) ---- */

static void require_private_ns(void)
{
	if (ns_errno)
		fail_msg("no private mount namespace (%s: %s): these tests mount tmpfs file "
			 "systems and need root (CAP_SYS_ADMIN)",
			 ns_step, strerror(ns_errno));
}

/* A tmpdir with a fresh tmpfs on it (only in our private namespace). */
static char *mount_tmpfs(const char *opts)
{
	char *d = make_tmpdir();
	if (mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		fail_msg("mount tmpfs on %s: %s", d, strerror(errno));
	return d;
}

static void unmount_tmpfs(char *d)
{
	assert_int_equal(umount2(d, MNT_DETACH), 0);
	assert_int_equal(rmdir(d), 0);
	free(d);
}

static void test_replace_read_only(void **state)
{
	require_private_ns();
	char *d = mount_tmpfs("mode=0755");
	write_str(d, NAME, OLD);
	ino_t ino = inode_of(d, NAME);
	if (mount(NULL, d, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0)
		fail_msg("remount %s read-only: %s", d, strerror(errno));

	int dfd = open_dir(d);
	assert_int_equal(dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)), 1);
	assert_int_equal(dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)), -EROFS);
	assert_file_str(d, NAME, OLD);
	assert_int_equal(inode_of(d, NAME), ino);
	assert_int_equal(count_entries(d, NULL), 1);
	close(dfd);
	unmount_tmpfs(d);
}

/* Write filler blocks until the file system is full. */
static void fill_fs(const char *d)
{
	char *p = join(d, "filler");
	char block[4096];
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	memset(block, 'f', sizeof(block));
	for (int i = 0; i < 1000; i++) {
		ssize_t n = write(fd, block, sizeof(block));
		if (n < 0) {
			assert_int_equal(errno, ENOSPC);
			break;
		}
		assert_true(i < 999); /* a 16k file system must fill up */
	}
	close(fd);
	free(p);
}

static void test_replace_full_fs(void **state)
{
	require_private_ns();
	char *d = mount_tmpfs("size=16k,mode=0755");
	char bigger[6000];
	int dfd = open_dir(d);

	write_str(d, NAME, OLD);
	fill_fs(d);
	memset(bigger, 'n', sizeof(bigger));
	int r = dp_cdi_replace(dfd, NAME, bigger, sizeof(bigger));
	if (r != -ENOSPC && r != -EDQUOT)
		fail_msg("replace on a full file system: %d (%s), want -ENOSPC", r, strerror(-r));
	assert_file_str(d, NAME, OLD);
	assert_no_temp(d);
	assert_int_equal(count_entries(d, NULL), 2);

	char *filler = join(d, "filler");
	assert_int_equal(unlink(filler), 0);
	free(filler);
	assert_int_equal(dp_cdi_replace(dfd, NAME, bigger, sizeof(bigger)), 0);
	assert_file_bytes(d, NAME, bigger, sizeof(bigger));
	assert_no_temp(d);
	close(dfd);
	unmount_tmpfs(d);
}

/* ---- the watched file ---- */

typedef struct watch_ctx {
	dp_loop *loop;
	dp_cdi_file *f;
	char *parent; /* tmpdir */
	char *dir;    /* parent/cdi */
	int calls;
	bool do_sync;
	bool free_in_callback;
	int syncs_ok, repairs;
	int last_sync;
} watch_ctx;

static void on_changed(dp_cdi_file *f, void *userdata)
{
	watch_ctx *c = userdata;
	bool repaired = false;

	assert_ptr_equal(f, c->f);
	c->calls++;
	if (c->free_in_callback) {
		c->f = dp_cdi_file_free(f);
		return;
	}
	if (!c->do_sync)
		return;
	c->last_sync = dp_cdi_file_sync(f, &repaired);
	if (c->last_sync == 0)
		c->syncs_ok++;
	if (repaired)
		c->repairs++;
}

/* Run the loop until c->calls reaches target, at most 5 s. */
static bool run_until_calls(watch_ctx *c, int target)
{
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;

	while (c->calls < target && dp_now_usec() < end)
		assert_true(dp_loop_run_once(c->loop, 10) >= 0);
	return c->calls >= target;
}

/* Run the loop until nothing happens for 100 ms; false when it never goes quiet (a loop). */
static bool run_until_quiet(watch_ctx *c)
{
	for (int i = 0; i < 100; i++) {
		int r = dp_loop_run_once(c->loop, 100);
		assert_true(r >= 0);
		if (r == 0)
			return true;
	}
	return false;
}

static int watch_setup(void **state)
{
	watch_ctx *c = calloc(1, sizeof(*c));
	assert_non_null(c);
	assert_int_equal(dp_loop_new(&c->loop), 0);
	c->parent = make_tmpdir();
	c->dir = join(c->parent, "cdi");
	assert_int_equal(mkdir(c->dir, 0755), 0);
	assert_int_equal(dp_cdi_file_new(c->loop, c->dir, NAME, on_changed, c, &c->f), 0);
	assert_int_equal(dp_cdi_file_set_content(c->f, NEW, strlen(NEW)), 0);
	c->do_sync = true;
	*state = c;
	return 0;
}

static int watch_teardown(void **state)
{
	watch_ctx *c = *state;
	dp_cdi_file_free(c->f);
	dp_loop_free(c->loop);
	free(c->dir);
	rm_rf(c->parent);
	free(c);
	return 0;
}

/* Sync once from the test and check the file; the sync's own write causes no callback. */
static void initial_sync(watch_ctx *c)
{
	bool repaired = false;

	assert_int_equal(dp_cdi_file_sync(c->f, &repaired), 0);
	assert_true(repaired);
	assert_string_equal(dp_cdi_file_error(c->f), "");
	assert_file_str(c->dir, NAME, NEW);
	assert_int_equal(mode_of(c->dir, NAME) & 07777, 0644);
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 0);
	assert_int_equal(dp_cdi_file_sync(c->f, &repaired), 0);
	assert_false(repaired);
}

static void test_file_new_args(void **state)
{
	dp_loop *l = NULL;
	dp_cdi_file *f = NULL;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_cdi_file_new(l, "var/run/cdi", NAME, on_changed, NULL, &f), -EINVAL);
	assert_int_equal(dp_cdi_file_new(l, "/x", "a/b.json", on_changed, NULL, &f), -EINVAL);
	assert_int_equal(dp_cdi_file_new(l, "/x", "..", on_changed, NULL, &f), -EINVAL);
	assert_int_equal(dp_cdi_file_new(NULL, "/x", NAME, on_changed, NULL, &f), -EINVAL);
	assert_int_equal(dp_cdi_file_new(l, "/x", NAME, NULL, NULL, &f), -EINVAL);
	assert_null(f);
	assert_int_equal(dp_cdi_file_new(l, "/x/var/run/cdi//", NAME, on_changed, NULL, &f), 0);
	assert_string_equal(dp_cdi_file_path(f), "/x/var/run/cdi/" NAME);
	/* no content yet */
	assert_int_equal(dp_cdi_file_sync(f, NULL), -EINVAL);
	assert_string_equal(dp_cdi_file_error(f), "no content set for /x/var/run/cdi/" NAME);
	f = dp_cdi_file_free(f);
	assert_null(dp_cdi_file_free(NULL));
	dp_loop_free(l);
}

static void test_file_delete_and_truncate_repaired(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	/* deleted */
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_int_equal(c->last_sync, 0);
	assert_int_equal(c->repairs, 1);
	assert_file_str(c->dir, NAME, NEW);
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 1);

	/* truncated in place */
	assert_int_equal(truncate(p, 5), 0);
	assert_true(run_until_calls(c, 2));
	assert_int_equal(c->repairs, 2);
	assert_file_str(c->dir, NAME, NEW);

	/* rewritten in place with other bytes of the same length */
	char other[] = NEW;
	other[0] = '[';
	write_str(c->dir, NAME, other);
	assert_true(run_until_quiet(c));
	assert_true(c->calls >= 3);
	assert_int_equal(c->repairs, 3);
	assert_file_str(c->dir, NAME, NEW);

	/* replaced by rename, as an editor does */
	int calls = c->calls;
	write_str(c->dir, "edit.tmp", OLD);
	char *tmp = join(c->dir, "edit.tmp");
	assert_int_equal(rename(tmp, p), 0);
	free(tmp);
	assert_true(run_until_calls(c, calls + 1));
	assert_int_equal(c->repairs, 4);
	assert_file_str(c->dir, NAME, NEW);

	/* attributes changed: the bytes are ours, nothing to write */
	calls = c->calls;
	assert_int_equal(chmod(p, 0600), 0);
	assert_true(run_until_calls(c, calls + 1));
	assert_int_equal(c->repairs, 4);
	assert_true(run_until_quiet(c));
	assert_no_temp(c->dir);
	free(p);
}

static void test_file_no_repair_loop(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_int_equal(c->repairs, 1);
	ino_t ino = inode_of(c->dir, NAME);
	/* bounded run with no external change: at most one extra call, which writes nothing */
	assert_true(run_until_quiet(c));
	assert_true(c->calls <= 2);
	assert_int_equal(c->repairs, 1);
	assert_int_equal(inode_of(c->dir, NAME), ino);
	free(p);
}

static void test_file_burst_coalesced(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	c->do_sync = false;
	/* many events, all queued before the loop runs: one call */
	for (int i = 0; i < 50; i++) {
		write_str(c->dir, NAME, i % 2 ? OLD : NEW);
		assert_int_equal(chmod(p, i % 2 ? 0600 : 0644), 0);
	}
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 1);
	free(p);
}

static void test_file_ignores_other_names(void **state)
{
	watch_ctx *c = *state;

	initial_sync(c);
	write_str(c->dir, "other.json", "{}");
	write_str(c->dir, "other.json", "{\"x\":1}");
	write_str(c->dir, "." NAME ".tmp-abcdef", "not ours"); /* looks like a temp of ours */
	char *o = join(c->dir, "other.json"), *o2 = join(c->dir, "renamed.yaml");
	assert_int_equal(rename(o, o2), 0);
	assert_int_equal(unlink(o2), 0);
	assert_int_equal(mkdir(o, 0755), 0);
	assert_int_equal(rmdir(o), 0);
	/* and in the parent directory, other names than ours */
	write_str(c->parent, "cdi2", "x");
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 0);
	assert_file_str(c->dir, "." NAME ".tmp-abcdef", "not ours");

	/* the watch is alive: our file deleted -> a call */
	char *p = join(c->dir, NAME);
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_file_str(c->dir, NAME, NEW);
	free(p);
	free(o);
	free(o2);
}

static void test_file_dir_removed_and_recreated(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	c->do_sync = false;
	assert_int_equal(unlink(p), 0);
	assert_int_equal(rmdir(c->dir), 0);
	assert_true(run_until_calls(c, 1));
	assert_true(run_until_quiet(c));
	int calls = c->calls;

	/* recreated by someone else: noticed through the parent */
	assert_int_equal(mkdir(c->dir, 0755), 0);
	assert_true(run_until_calls(c, calls + 1));
	assert_int_equal(dp_cdi_file_sync(c->f, NULL), 0);
	assert_file_str(c->dir, NAME, NEW);
	assert_true(run_until_quiet(c));
	calls = c->calls;

	/* the new directory is watched */
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, calls + 1));
	c->do_sync = true;
	assert_int_equal(dp_cdi_file_sync(c->f, NULL), 0);
	assert_file_str(c->dir, NAME, NEW);
	free(p);
}

static void test_file_dir_replaced(void **state)
{
	watch_ctx *c = *state;
	char *old = join(c->parent, "cdi.old");
	char *p = join(c->dir, NAME);

	initial_sync(c);
	/* the directory moved away and a new one put in its place */
	assert_int_equal(rename(c->dir, old), 0);
	assert_int_equal(mkdir(c->dir, 0755), 0);
	assert_true(run_until_calls(c, 1));
	assert_true(run_until_quiet(c));
	assert_file_str(c->dir, NAME, NEW); /* the callback's sync wrote into the new one */
	int calls = c->calls;

	/* changes in the old directory no longer concern us */
	char *oldp = join(old, NAME);
	assert_int_equal(unlink(oldp), 0);
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, calls);

	/* the new one is watched */
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, calls + 1));
	assert_file_str(c->dir, NAME, NEW);
	free(oldp);
	free(old);
	free(p);
}

static void test_file_dir_missing_at_start(void **state)
{
	watch_ctx *c = *state;
	bool repaired = false;
	mode_t old = umask(077);

	assert_int_equal(rmdir(c->dir), 0);
	assert_int_equal(dp_cdi_file_sync(c->f, &repaired), 0);
	umask(old);
	assert_true(repaired);
	assert_true(S_ISDIR(mode_of(c->parent, "cdi")));
	assert_int_equal(mode_of(c->parent, "cdi") & 07777, 0755);
	assert_file_str(c->dir, NAME, NEW);
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 0);

	/* watched from then on */
	char *p = join(c->dir, NAME);
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_file_str(c->dir, NAME, NEW);
	free(p);
}

static void test_file_parent_missing(void **state)
{
	dp_loop *l = NULL;
	dp_cdi_file *f = NULL;
	char *d = make_tmpdir();
	char *dir = join(d, "missing/cdi");
	char *want;

	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_cdi_file_new(l, dir, NAME, on_changed, NULL, &f), 0);
	assert_int_equal(dp_cdi_file_set_content(f, NEW, strlen(NEW)), 0);
	assert_int_equal(dp_cdi_file_sync(f, NULL), -ENOENT);
	assert_true(asprintf(&want, "cannot create directory %s: No such file or directory", dir) >
		    0);
	assert_string_equal(dp_cdi_file_error(f), want);
	assert_int_equal(count_entries(d, NULL), 0);
	free(want);

	/* a file where the directory should be */
	write_str(d, "missing", "x");
	assert_int_equal(dp_cdi_file_sync(f, NULL), -ENOTDIR);
	assert_true(asprintf(&want, "cannot open directory %s: Not a directory", dir) > 0);
	assert_string_equal(dp_cdi_file_error(f), want);
	free(want);
	dp_cdi_file_free(f);
	dp_loop_free(l);
	free(dir);
	rm_rf(d);
}

static void test_file_refusals(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);
	char *want;

	write_str(c->dir, "target", OLD);
	assert_int_equal(symlink("target", p), 0);
	c->do_sync = false;
	assert_int_equal(dp_cdi_file_sync(c->f, NULL), -ELOOP);
	assert_true(asprintf(&want, "refusing symlink at %s", p) > 0);
	assert_string_equal(dp_cdi_file_error(c->f), want);
	free(want);
	assert_true(S_ISLNK(mode_of(c->dir, NAME)));
	assert_file_str(c->dir, "target", OLD);

	/* the watch is armed despite the refusal: removing the link -> a call -> repaired */
	c->do_sync = true;
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_int_equal(c->last_sync, 0);
	assert_string_equal(dp_cdi_file_error(c->f), "");
	assert_file_str(c->dir, NAME, NEW);
	assert_true(run_until_quiet(c));

	/* a directory at our path */
	c->do_sync = false;
	assert_int_equal(unlink(p), 0);
	assert_int_equal(mkdir(p, 0755), 0);
	assert_int_equal(dp_cdi_file_sync(c->f, NULL), -EEXIST);
	assert_true(asprintf(&want, "refusing non-regular file at %s", p) > 0);
	assert_string_equal(dp_cdi_file_error(c->f), want);
	free(want);
	assert_true(S_ISDIR(mode_of(c->dir, NAME)));
	assert_int_equal(rmdir(p), 0);
	free(p);
}

static void test_file_free_in_callback(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	c->free_in_callback = true;
	assert_int_equal(unlink(p), 0);
	assert_true(run_until_calls(c, 1));
	assert_null(c->f);
	/* nothing left to call */
	write_str(c->dir, NAME, OLD);
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 1);
	free(p);
}

static void test_file_free_with_pending_events(void **state)
{
	watch_ctx *c = *state;
	char *p = join(c->dir, NAME);

	initial_sync(c);
	assert_int_equal(unlink(p), 0);
	c->f = dp_cdi_file_free(c->f); /* events queued, never delivered */
	assert_true(run_until_quiet(c));
	assert_int_equal(c->calls, 0);
	free(p);
}

static void test_file_sync_read_only(void **state)
{
	require_private_ns();
	char *d = mount_tmpfs("mode=0755");
	dp_loop *l = NULL;
	dp_cdi_file *f = NULL;
	char *want;

	write_str(d, NAME, OLD);
	assert_int_equal(mount(NULL, d, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL), 0);
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_cdi_file_new(l, d, NAME, on_changed, NULL, &f), 0);
	assert_int_equal(dp_cdi_file_set_content(f, NEW, strlen(NEW)), 0);
	assert_int_equal(dp_cdi_file_sync(f, NULL), -EROFS);
	assert_true(asprintf(&want, "cannot write %s/%s: Read-only file system", d, NAME) > 0);
	assert_string_equal(dp_cdi_file_error(f), want);
	free(want);
	assert_file_str(d, NAME, OLD);
	/* writable again: the next sync succeeds and clears the error */
	assert_int_equal(mount(NULL, d, NULL, MS_REMOUNT | MS_BIND, NULL), 0);
	assert_int_equal(dp_cdi_file_sync(f, NULL), 0);
	assert_string_equal(dp_cdi_file_error(f), "");
	assert_file_str(d, NAME, NEW);
	dp_cdi_file_free(f);
	dp_loop_free(l);
	unmount_tmpfs(d);
}

static void test_file_sync_full(void **state)
{
	require_private_ns();
	char *d = mount_tmpfs("size=16k,mode=0755");
	dp_loop *l = NULL;
	dp_cdi_file *f = NULL;
	char bigger[6000];
	char *want;

	write_str(d, NAME, OLD);
	fill_fs(d);
	memset(bigger, 'n', sizeof(bigger));
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(dp_cdi_file_new(l, d, NAME, on_changed, NULL, &f), 0);
	assert_int_equal(dp_cdi_file_set_content(f, bigger, sizeof(bigger)), 0);
	assert_int_equal(dp_cdi_file_sync(f, NULL), -ENOSPC);
	assert_true(asprintf(&want, "cannot write %s/%s: No space left on device", d, NAME) > 0);
	assert_string_equal(dp_cdi_file_error(f), want);
	free(want);
	assert_file_str(d, NAME, OLD);
	assert_no_temp(d);
	dp_cdi_file_free(f);
	dp_loop_free(l);
	unmount_tmpfs(d);
}

/* As an unprivileged user (a forked child drops to nobody): reading and writing refused. */
static int permission_child(const char *d)
{
	dp_loop *l = NULL;
	dp_cdi_file *f = NULL;
	char want[PATH_MAX + 64];
	int dfd;

	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		return 10;
	dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return 11;
	if (dp_cdi_compare(dfd, NAME, NEW, strlen(NEW)) != -EACCES)
		return 12;
	if (dp_cdi_replace(dfd, NAME, NEW, strlen(NEW)) != -EACCES)
		return 13;
	close(dfd);
	if (dp_loop_new(&l) < 0 || dp_cdi_file_new(l, d, NAME, on_changed, NULL, &f) < 0 ||
	    dp_cdi_file_set_content(f, NEW, strlen(NEW)) < 0)
		return 14;
	if (dp_cdi_file_sync(f, NULL) != -EACCES)
		return 15;
	snprintf(want, sizeof(want), "cannot read %s/%s: Permission denied", d, NAME);
	if (strcmp(dp_cdi_file_error(f), want) != 0)
		return 16;
	dp_cdi_file_free(f);
	dp_loop_free(l);
	return 0;
}

static void test_permission_denied(void **state)
{
	char *d = make_tmpdir();
	int st;

	assert_int_equal(chmod(d, 0755), 0); /* nobody may enter, not write */
	write_str(d, NAME, OLD);
	char *p = join(d, NAME);
	assert_int_equal(chmod(p, 0600), 0); /* nor read our file */
	free(p);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(permission_child(d));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0)
		fail_msg("unprivileged child failed check %d (10: cannot drop to uid 65534)",
			 WEXITSTATUS(st));
	assert_file_str(d, NAME, OLD);
	assert_int_equal(count_entries(d, NULL), 1);
	rm_rf(d);
}

/* ---- writers that disagree back off: the rule on made-up times (cdi_backoff.h) ---- */

#define SEC DP_USEC_PER_SEC
#define MS DP_USEC_PER_MSEC

/* Our write at *t, replaced 1 ms later: the time the repair may be written. */
static uint64_t overwrite_after_write(dp_cdi_backoff *b, uint64_t *t, dp_cdi_backoff_event *ev)
{
	dp_cdi_backoff_written(b, *t);
	*t += MS;
	return dp_cdi_backoff_foreign(b, *t, ev);
}

static void test_backoff_edits_repaired_at_once(void **state)
{
	dp_cdi_backoff b;
	dp_cdi_backoff_event ev;
	uint64_t t = 1000 * SEC;

	dp_cdi_backoff_init(&b);
	/* the first writer's file is replaced before we ever wrote: repaired at once */
	assert_int_equal(dp_cdi_backoff_foreign(&b, t, &ev), t);
	assert_int_equal(ev, DP_CDI_BACKOFF_NONE);
	/* four edits in a row, each right after our repair: all repaired at once */
	for (unsigned i = 1; i <= DP_CDI_BACKOFF_FREE; i++) {
		uint64_t at = overwrite_after_write(&b, &t, &ev);
		assert_int_equal(at, t);
		assert_int_equal(ev, DP_CDI_BACKOFF_NONE);
		assert_int_equal(dp_cdi_backoff_streak(&b), i);
	}
	assert_int_equal(dp_cdi_backoff_delay(&b), 0);
	/* edits 120 s or more after our write never add up, however many */
	dp_cdi_backoff_init(&b);
	for (int i = 0; i < 20; i++) {
		dp_cdi_backoff_written(&b, t);
		t += DP_CDI_BACKOFF_STABLE_USEC;
		assert_int_equal(dp_cdi_backoff_foreign(&b, t, &ev), t);
		assert_int_equal(ev, DP_CDI_BACKOFF_NONE);
		assert_int_equal(dp_cdi_backoff_in_place(&b, t, &ev), 0);
	}
	assert_int_equal(dp_cdi_backoff_streak(&b), 0);
}

static void test_backoff_doubles_up_to_max(void **state)
{
	static const uint64_t want[] = { 1, 2, 4, 8, 16, 32, 60, 60, 60 };
	dp_cdi_backoff b;
	dp_cdi_backoff_event ev;
	uint64_t t = 1000 * SEC, at;

	dp_cdi_backoff_init(&b);
	for (unsigned i = 0; i < DP_CDI_BACKOFF_FREE; i++)
		(void)overwrite_after_write(&b, &t, &ev);
	for (size_t i = 0; i < DP_ELEMENTSOF(want); i++) {
		at = overwrite_after_write(&b, &t, &ev);
		assert_int_equal(ev, i == 0 ? DP_CDI_BACKOFF_STARTED : DP_CDI_BACKOFF_NONE);
		assert_int_equal(dp_cdi_backoff_delay(&b), want[i] * SEC);
		assert_int_equal(at, t + want[i] * SEC);
		/* replaced again while we wait (our write was already counted): no change */
		assert_int_equal(dp_cdi_backoff_foreign(&b, t + 500 * MS, &ev), at);
		assert_int_equal(ev, DP_CDI_BACKOFF_NONE);
		t = at;
	}
	assert_int_equal(dp_cdi_backoff_streak(&b), DP_CDI_BACKOFF_FREE + DP_ELEMENTSOF(want));
}

static void test_backoff_episode_ends(void **state)
{
	dp_cdi_backoff b;
	dp_cdi_backoff_event ev;
	uint64_t t = 1000 * SEC, at;

	dp_cdi_backoff_init(&b);
	for (unsigned i = 0; i <= DP_CDI_BACKOFF_FREE; i++)
		at = overwrite_after_write(&b, &t, &ev);
	assert_int_equal(ev, DP_CDI_BACKOFF_STARTED);
	/* our repair after the wait stays: the episode lasts until it stayed 120 s */
	dp_cdi_backoff_written(&b, at);
	assert_int_equal(dp_cdi_backoff_in_place(&b, at, &ev), at + DP_CDI_BACKOFF_STABLE_USEC);
	assert_int_equal(dp_cdi_backoff_in_place(&b, at + DP_CDI_BACKOFF_STABLE_USEC - 1, &ev),
			 at + DP_CDI_BACKOFF_STABLE_USEC);
	assert_int_equal(ev, DP_CDI_BACKOFF_NONE);
	assert_int_equal(dp_cdi_backoff_in_place(&b, at + DP_CDI_BACKOFF_STABLE_USEC, &ev), 0);
	assert_int_equal(ev, DP_CDI_BACKOFF_ENDED);
	assert_int_equal(dp_cdi_backoff_delay(&b), 0);
	assert_int_equal(dp_cdi_backoff_streak(&b), 0);
	/* a later single edit is repaired at once */
	t = at + 200 * SEC;
	assert_int_equal(dp_cdi_backoff_foreign(&b, t, &ev), t);
	assert_int_equal(ev, DP_CDI_BACKOFF_NONE);

	/* or: no sync saw our bytes in place, but the next overwrite finds our write old enough */
	dp_cdi_backoff_init(&b);
	for (unsigned i = 0; i <= DP_CDI_BACKOFF_FREE; i++)
		at = overwrite_after_write(&b, &t, &ev);
	dp_cdi_backoff_written(&b, at);
	t = at + DP_CDI_BACKOFF_STABLE_USEC;
	assert_int_equal(dp_cdi_backoff_foreign(&b, t, &ev), t);
	assert_int_equal(ev, DP_CDI_BACKOFF_ENDED);
	assert_int_equal(dp_cdi_backoff_delay(&b), 0);
}

/* Two daemons that both back off, each repairing 1 ms after it sees the other's write (or at
 * the end of its wait), over a simulated hour: each episode starts once, never ends, and once
 * both wait the maximum each writes at most once a minute. */
static void test_backoff_two_writers_settle(void **state)
{
	dp_cdi_backoff w[2];
	dp_cdi_backoff_event ev;
	uint64_t start = 1000 * SEC, end = start + 3600 * SEC;
	uint64_t due[2] = { start, UINT64_MAX }; /* when each one writes next */
	unsigned writes[2] = { 0 }, late_writes[2] = { 0 }, started[2] = { 0 }, ended[2] = { 0 };

	dp_cdi_backoff_init(&w[0]);
	dp_cdi_backoff_init(&w[1]);
	for (;;) {
		int i = due[0] <= due[1] ? 0 : 1, o = 1 - i;
		uint64_t t = due[i];
		if (t >= end)
			break;
		dp_cdi_backoff_written(&w[i], t);
		writes[i]++;
		late_writes[i] += t >= start + 600 * SEC;
		(void)dp_cdi_backoff_in_place(&w[i], t, &ev);
		ended[i] += ev == DP_CDI_BACKOFF_ENDED;
		due[i] = UINT64_MAX;
		/* the other one sees our write 1 ms later */
		due[o] = dp_cdi_backoff_foreign(&w[o], t + MS, &ev);
		started[o] += ev == DP_CDI_BACKOFF_STARTED;
		ended[o] += ev == DP_CDI_BACKOFF_ENDED;
	}
	for (int i = 0; i < 2; i++) {
		assert_int_equal(started[i], 1);
		assert_int_equal(ended[i], 0);
		assert_int_equal(dp_cdi_backoff_delay(&w[i]), DP_CDI_BACKOFF_MAX_USEC);
		assert_true(writes[i] <= 3600 / 60 + DP_CDI_BACKOFF_FREE + 8);
		assert_true(late_writes[i] <= 3000 / 60 + 1);
	}
}

/* A file of ours with another uid on line 3, and the descriptions of other writers' files. */
static void test_backoff_describe(void **state)
{
	static const char ours[] = "{\n  \"kind\": \"x/y\",\n  \"uid\": 1000,\n  \"gid\": 7\n}\n";
	static const char theirs[] = "{\n  \"kind\": \"x/y\",\n  \"uid\": 2000,\n  \"gid\": 7\n}\n";
	char *d = make_tmpdir(), out[160], want[160];
	int dfd = open_dir(d);
	char long_line[200];

	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, sizeof(out));
	assert_string_equal(out, "no file");
	write_str(d, NAME, theirs);
	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, sizeof(out));
	/* its size and hash (the hash is checked against reference values below) */
	snprintf(want, sizeof(want), "%zu bytes, fnv1a ", strlen(theirs));
	assert_memory_equal(out, want, strlen(want));
	assert_string_equal(out + strlen(want) + 8, ", line 3: \"uid\": 2000,");
	/* a prefix of ours (truncated) */
	write_file(d, NAME, ours, 10);
	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, sizeof(out));
	assert_non_null(strstr(out, "10 bytes, fnv1a "));
	assert_non_null(strstr(out, ", ends early"));
	/* a long line is cut, control and non-ASCII bytes are shown as '?' */
	memset(long_line, 'a', sizeof(long_line));
	long_line[0] = '\x1b';
	long_line[1] = (char)0xc3;
	write_file(d, NAME, long_line, sizeof(long_line));
	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, sizeof(out));
	assert_non_null(strstr(out, ", line 1: ??aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..."));
	/* not a regular file */
	char *p = join(d, NAME);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(symlink("elsewhere", p), 0);
	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, sizeof(out));
	assert_string_equal(out, "not a regular file");
	/* a tiny buffer still gets a terminated string */
	dp_cdi_backoff_describe(dfd, NAME, ours, strlen(ours), out, 4);
	assert_string_equal(out, "not");
	free(p);
	close(dfd);
	rm_rf(d);
}

static void test_backoff_fnv1a(void **state)
{
	char *d = make_tmpdir(), out[160];
	int dfd = open_dir(d);

	/* reference values of FNV-1a 32: "" 811c9dc5, "a" e40c292c, "foobar" bf9cf968 (the FNV test vectors) */
	write_str(d, NAME, "a");
	dp_cdi_backoff_describe(dfd, NAME, "b", 1, out, sizeof(out));
	assert_string_equal(out, "1 bytes, fnv1a e40c292c, line 1: a");
	write_str(d, NAME, "foobar");
	dp_cdi_backoff_describe(dfd, NAME, "foobaz", 6, out, sizeof(out));
	assert_string_equal(out, "6 bytes, fnv1a bf9cf968, line 1: foobar");
	write_str(d, NAME, "");
	dp_cdi_backoff_describe(dfd, NAME, "x", 1, out, sizeof(out));
	assert_string_equal(out, "0 bytes, fnv1a 811c9dc5, ends early");
	close(dfd);
	rm_rf(d);
}

/* ---- writers that disagree back off: the owned file on a real loop ---- */

typedef struct fight_ctx {
	int started, ended;
	char other[160];
	uint64_t delay;
} fight_ctx;

static fight_ctx fights;

static void on_fight(dp_cdi_file *f, const dp_cdi_fight *ev, void *userdata)
{
	if (ev->started) {
		fights.started++;
		snprintf(fights.other, sizeof(fights.other), "%s", ev->other);
		fights.delay = ev->delay_usec;
	} else {
		fights.ended++;
	}
}

static bool file_is(const char *dir, const char *name, const char *s)
{
	char *p = join(dir, name), buf[256];
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;

	if (fd >= 0)
		close(fd);
	free(p);
	return n == (ssize_t)strlen(s) && memcmp(buf, s, (size_t)n) == 0;
}

/* Another writer that puts its own bytes back (by rename, as a daemon does) every time it
 * finds ours, in the owner's loop: the owner writes 4 + 1 times at once, then waits 1 s, writes
 * once more and then waits 2 s. Counted, not timed: without the back-off the two would
 * alternate until the bound of 100 rival writes. */
static void test_file_rival_backed_off(void **state)
{
	watch_ctx *c = *state;
	char *tmp = join(c->dir, ".rival"), *p = join(c->dir, NAME), *want;
	int rival_writes = 0;
	uint64_t end = dp_now_usec() + 10 * SEC;

	memset(&fights, 0, sizeof(fights));
	dp_cdi_file_set_fight_fn(c->f, on_fight);
	initial_sync(c);
	while (dp_cdi_file_backoff_usec(c->f) < 2 * SEC && rival_writes < 100 && dp_now_usec() < end) {
		assert_true(dp_loop_run_once(c->loop, 10) >= 0);
		if (!file_is(c->dir, NAME, NEW))
			continue;
		write_str(c->dir, ".rival", OLD);
		assert_int_equal(rename(tmp, p), 0);
		rival_writes++;
	}
	/* the owner's writes: the initial one, 4 at once, 1 after the first wait */
	assert_int_equal(rival_writes, 1 + DP_CDI_BACKOFF_FREE + 1);
	assert_int_equal(dp_cdi_file_backoff_usec(c->f), 2 * SEC);
	assert_int_equal(fights.started, 1);
	assert_int_equal(fights.ended, 0);
	assert_int_equal(fights.delay, 1 * SEC);
	assert_string_equal(fights.other, "34 bytes, fnv1a ac6aa2ff, line 1: {\"cdiVersion\":\"0.3.0\",\"old\":true}");
	/* unhealthy meanwhile, with the reason; a sync while waiting writes nothing */
	assert_int_equal(c->last_sync, -EBUSY);
	assert_int_equal(dp_cdi_file_sync(c->f, NULL), -EBUSY);
	assert_true(asprintf(&want, "another writer keeps replacing %s; repairs backed off (its content: %s)",
			     p, fights.other) > 0);
	assert_string_equal(dp_cdi_file_error(c->f), want);
	assert_file_str(c->dir, NAME, OLD);
	/* the rival's changes during the wait neither write nor log again */
	write_str(c->dir, NAME, "{}\n");
	assert_true(run_until_quiet(c));
	assert_file_str(c->dir, NAME, "{}\n");
	assert_int_equal(fights.started, 1);
	assert_no_temp(c->dir);
	free(want);
	free(tmp);
	free(p);
}

/* Enter a private mount namespace so that no mount of these tests reaches the host. */
static void setup_private_ns(void)
{
	if (unshare(CLONE_NEWNS) < 0) {
		ns_errno = errno;
		ns_step = "unshare(CLONE_NEWNS)";
	} else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		ns_errno = errno;
		ns_step = "mount --make-rprivate /";
	}
}

#define WATCH_TEST(fn) cmocka_unit_test_setup_teardown(fn, watch_setup, watch_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_min_version),
		cmocka_unit_test(test_kind_valid),
		cmocka_unit_test(test_device_name_valid),
		cmocka_unit_test(test_compare_contents),
		cmocka_unit_test(test_compare_refuses),
		cmocka_unit_test(test_replace_creates_and_replaces),
		cmocka_unit_test(test_replace_mode_ignores_umask),
		cmocka_unit_test(test_replace_refuses_symlink),
		cmocka_unit_test(test_replace_refuses_non_regular),
		cmocka_unit_test(test_replace_leaves_others),
		cmocka_unit_test(test_replace_bad_names),
		cmocka_unit_test(test_replace_read_only),
		cmocka_unit_test(test_replace_full_fs),
		cmocka_unit_test(test_file_new_args),
		WATCH_TEST(test_file_delete_and_truncate_repaired),
		WATCH_TEST(test_file_no_repair_loop),
		WATCH_TEST(test_file_burst_coalesced),
		WATCH_TEST(test_file_ignores_other_names),
		WATCH_TEST(test_file_dir_removed_and_recreated),
		WATCH_TEST(test_file_dir_replaced),
		WATCH_TEST(test_file_dir_missing_at_start),
		cmocka_unit_test(test_file_parent_missing),
		WATCH_TEST(test_file_refusals),
		WATCH_TEST(test_file_free_in_callback),
		WATCH_TEST(test_file_free_with_pending_events),
		cmocka_unit_test(test_file_sync_read_only),
		cmocka_unit_test(test_file_sync_full),
		cmocka_unit_test(test_permission_denied),
		cmocka_unit_test(test_backoff_edits_repaired_at_once),
		cmocka_unit_test(test_backoff_doubles_up_to_max),
		cmocka_unit_test(test_backoff_episode_ends),
		cmocka_unit_test(test_backoff_two_writers_settle),
		cmocka_unit_test(test_backoff_describe),
		cmocka_unit_test(test_backoff_fnv1a),
		WATCH_TEST(test_file_rival_backed_off),
	};

	setup_private_ns();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
