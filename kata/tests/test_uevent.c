/* SPDX-License-Identifier: Apache-2.0 */
/* kata's PCI uevents (uevent.c): the message parser on good and hostile input, and the socket on
 * the running kernel: a forged message from user space is ignored, a kernel PCI uevent arrives.
 * Needs root (a synthetic uevent is written to /sys/bus/pci/devices/<function>/uevent). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp/loop.h"
#include "dp_test.h"
#include "uevent.h"

/* A message as the kernel sends it: header and KEY=VALUE strings, each ending in NUL. */
static size_t msg(char *buf, size_t size, const char *const *parts)
{
	size_t n = 0;
	for (; *parts; parts++) {
		size_t l = strlen(*parts) + 1;
		assert_true(n + l <= size);
		memcpy(buf + n, *parts, l);
		n += l;
	}
	return n;
}

/* *action and *devpath point into the message: it outlives the call. */
static bool parse(const char *const *parts, const char **action, const char **devpath)
{
	static char buf[512];
	size_t n = msg(buf, sizeof(buf), parts);
	*action = *devpath = NULL;
	return kata_uevent_parse(buf, n, action, devpath);
}

static void parses_pci_driver_changes(void **state)
{
	(void)state;
	const char *a, *d;
	static const char *const bind[] = { "bind@/devices/pci0000:00/0000:00:03.0", "ACTION=bind",
					    "DEVPATH=/devices/pci0000:00/0000:00:03.0", "SUBSYSTEM=pci",
					    "DRIVER=vfio-pci", "SEQNUM=1234", NULL };
	assert_true(parse(bind, &a, &d));
	assert_string_equal(a, "bind");
	assert_string_equal(d, "/devices/pci0000:00/0000:00:03.0");
	static const char *const actions[] = { "unbind", "add", "remove" };
	for (size_t i = 0; i < 3; i++) {
		char act[32];
		snprintf(act, sizeof(act), "ACTION=%s", actions[i]);
		const char *const m[] = { "x@/devices/p", act, "DEVPATH=/devices/p", "SUBSYSTEM=pci", NULL };
		assert_true(parse(m, &a, &d));
		assert_string_equal(a, actions[i]);
	}
}

static void ignores_the_rest(void **state)
{
	(void)state;
	const char *a, *d;
	static const char *const change[] = { "change@/devices/p", "ACTION=change", "DEVPATH=/devices/p",
					      "SUBSYSTEM=pci", NULL };
	static const char *const usb[] = { "bind@/devices/u", "ACTION=bind", "DEVPATH=/devices/u", "SUBSYSTEM=usb",
					   NULL };
	static const char *const udev[] = { "libudev", "ACTION=bind", "DEVPATH=/devices/p", "SUBSYSTEM=pci", NULL };
	static const char *const no_path[] = { "bind@/devices/p", "ACTION=bind", "SUBSYSTEM=pci", NULL };
	static const char *const no_action[] = { "bind@/devices/p", "DEVPATH=/devices/p", "SUBSYSTEM=pci", NULL };
	static const char *const prefix[] = { "bind@/devices/p", "ACTION=bind", "DEVPATH=/devices/p",
					      "SUBSYSTEM=pcie", NULL };
	assert_false(parse(change, &a, &d));
	assert_false(parse(usb, &a, &d));
	assert_false(parse(udev, &a, &d)); /* udev's re-broadcast: no "action@path" header */
	assert_false(parse(no_path, &a, &d));
	assert_false(parse(no_action, &a, &d));
	assert_false(parse(prefix, &a, &d));
	/* not NUL-terminated, or empty */
	char raw[] = { 'b', 'i', 'n', 'd', '@', '/' };
	a = d = NULL;
	assert_false(kata_uevent_parse(raw, sizeof(raw), &a, &d));
	assert_false(kata_uevent_parse("", 0, &a, &d));
}

static int calls;
static char last_action[32];

static void on_event(const char *action, const char *devpath, void *userdata)
{
	(void)devpath;
	(void)userdata;
	calls++;
	snprintf(last_action, sizeof(last_action), "%s", action);
}

static bool called(void)
{
	return calls > 0;
}

/* A forged "bind" sent to the kernel's multicast group from user space (root may). */
static void forge(void)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
	assert_true(fd >= 0);
	struct sockaddr_nl to = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	static const char *const m[] = { "bind@/devices/forged", "ACTION=bind", "DEVPATH=/devices/forged",
					 "SUBSYSTEM=pci", NULL };
	char buf[256];
	size_t n = msg(buf, sizeof(buf), m);
	ssize_t r = sendto(fd, buf, n, 0, (struct sockaddr *)&to, sizeof(to));
	assert_int_equal(r, (ssize_t)n);
	close(fd);
}

/* "add" written to a PCI function's uevent file: the kernel emits ACTION=add SUBSYSTEM=pci. */
static void kernel_event(void)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	assert_non_null(d);
	struct dirent *de;
	char path[512] = "";
	while ((de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/uevent", de->d_name);
			break;
		}
	closedir(d);
	assert_true(path[0]); /* a machine without PCI cannot drive this test: fail, never skip */
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "add", 3), 3);
	close(fd);
}

static void kernel_events_only(void **state)
{
	(void)state;
	_cleanup_(dp_loop_freep) dp_loop *l = NULL;
	_cleanup_(kata_uevent_freep) kata_uevent *u = NULL;
	assert_int_equal(dp_loop_new(&l), 0);
	assert_int_equal(kata_uevent_new(l, on_event, NULL, &u), 0);
	forge();
	assert_false(dpt_run_until_cond(l, called, DP_USEC_PER_SEC / 5));
	assert_int_equal(calls, 0);
	kernel_event();
	assert_true(dpt_run_until_cond(l, called, 5 * DP_USEC_PER_SEC));
	assert_string_equal(last_action, "add");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parses_pci_driver_changes),
		cmocka_unit_test(ignores_the_rest),
		cmocka_unit_test(kernel_events_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
