/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz target (f): the CDI compare path over arbitrary file contents. The input is written as
 * the file; dp_cdi_compare against a fixed rendered spec must say 0 exactly when the bytes are
 * equal and 1 otherwise; after dp_cdi_replace the compare must return 0 and the file hold the
 * spec byte for byte. The input's first byte also picks a few hostile shapes of the path
 * (a symlink, a directory, a FIFO) that must be refused and left alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp/cdi.h"
#include "fuzz.h"

#define NAME "hyperlight.json"

static const char spec[] =
	"{\"cdiVersion\":\"0.5.0\",\"kind\":\"hyperlight.dev/hypervisor\",\"devices\":[{\"name\":"
	"\"kvm\",\"containerEdits\":{\"deviceNodes\":[{\"path\":\"/dev/kvm\",\"hostPath\":"
	"\"/dev/kvm\",\"type\":\"c\",\"major\":10,\"minor\":232,\"permissions\":\"rw\","
	"\"uid\":65534,\"gid\":65534}]}}]}\n";

static int dirfd_get(void)
{
	static int fd = -1;
	if (fd < 0) {
		fd = open(fuzz_tmpdir(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		FUZZ_CHECK(fd >= 0);
	}
	return fd;
}

static void write_file(int dfd, const uint8_t *data, size_t size)
{
	int fd = openat(dfd, NAME, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	FUZZ_CHECK(fd >= 0);
	while (size) {
		ssize_t n = write(fd, data, size);
		FUZZ_CHECK(n > 0);
		data += n;
		size -= (size_t)n;
	}
	close(fd);
}

static void check_content(int dfd)
{
	char buf[sizeof(spec) + 1];
	int fd = openat(dfd, NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	FUZZ_CHECK(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	FUZZ_CHECK(n == (ssize_t)sizeof(spec) - 1 && memcmp(buf, spec, sizeof(spec) - 1) == 0);
}

static void hostile(int dfd, uint8_t kind)
{
	struct stat st;
	int r;
	switch (kind % 3) {
	case 0:
		FUZZ_CHECK(symlinkat("other.json", dfd, NAME) == 0);
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == -ELOOP);
		FUZZ_CHECK(dp_cdi_replace(dfd, NAME, spec, sizeof(spec) - 1) == -ELOOP);
		FUZZ_CHECK(fstatat(dfd, NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode));
		break;
	case 1:
		FUZZ_CHECK(mkdirat(dfd, NAME, 0755) == 0);
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == -EEXIST);
		r = dp_cdi_replace(dfd, NAME, spec, sizeof(spec) - 1);
		FUZZ_CHECK(r == -EEXIST);
		FUZZ_CHECK(fstatat(dfd, NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode));
		break;
	default:
		FUZZ_CHECK(mkfifoat(dfd, NAME, 0644) == 0);
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == -EEXIST);
		FUZZ_CHECK(fstatat(dfd, NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISFIFO(st.st_mode));
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int dfd = dirfd_get();
	fuzz_clear_dir(fuzz_tmpdir());
	if (size == 1 && data[0] >= 0xfd) {
		hostile(dfd, data[0]);
		return 0;
	}
	if (size == 1 && data[0] == 0xfc) { /* missing file */
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == 1);
	} else {
		write_file(dfd, data, size);
		bool same = size == sizeof(spec) - 1 && memcmp(data, spec, size) == 0;
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == (same ? 0 : 1));
		/* a spec that is a prefix or an extension of the file differs too */
		FUZZ_CHECK(dp_cdi_compare(dfd, NAME, data, size) == 0);
	}
	FUZZ_CHECK(dp_cdi_replace(dfd, NAME, spec, sizeof(spec) - 1) == 0);
	FUZZ_CHECK(dp_cdi_compare(dfd, NAME, spec, sizeof(spec) - 1) == 0);
	check_content(dfd);
	return 0;
}
