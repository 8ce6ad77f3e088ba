/* SPDX-License-Identifier: Apache-2.0 */
/* endpoint_driver: the driver boilerplate the core owns for the daemons: the health-change event
 * and its log lines, the first check's hold, the CDI Allocate answer, the device-count ceiling
 * and the owned CDI spec in one step. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "requests/endpoint_decode.h"
#include "endpoint/endpoint_encode.h"
#include "endpoint/endpoint_internal.h"
#include "dp/cdi.h"
#include "dp/endpoint.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp_test.h"
#include "endpoint_alloc_test.h"

static char dir[64];
static int failures, accepted, told;
static int held_conn = -1;
static bool told_healthy;
static struct dpt_capture log_cap;
static char told_reason[512];

static int setup(void **state)
{
	dpt_stub_reset();
	failures = accepted = told = 0;
	held_conn = -1;
	return dpt_tmpdir(dir, sizeof(dir), "test_endpoint_driver");
}

static int teardown(void **state)
{
	if (held_conn >= 0)
		close(held_conn);
	return dpt_rmtree(dir);
}

/* ---- the health-change event ---- */

static void on_health(dp_endpoint *ep, bool healthy, const char *reason, void *ud)
{
	told++;
	told_healthy = healthy;
	snprintf(told_reason, sizeof(told_reason), "%s", reason);
}

/* Told the first verdict and every change of the verdict or its reason, never a repeat. */
static void health_change_told_once(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_health_changed = on_health };
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	dp_endpoint_set_events(ep, &ev);

	dp_endpoint_set_health(ep, true, "probe ok");
	assert_int_equal(told, 1);
	assert_true(told_healthy);
	assert_string_equal(told_reason, "probe ok");
	dp_endpoint_set_health(ep, true, "probe ok");
	assert_int_equal(told, 1);
	dp_endpoint_set_health(ep, false, "node gone");
	assert_int_equal(told, 2);
	assert_false(told_healthy);
	assert_string_equal(told_reason, "node gone");
	dp_endpoint_set_health(ep, false, "node gone");
	assert_int_equal(told, 2);
	dp_endpoint_set_health(ep, false, "node replaced"); /* another reason: told */
	assert_int_equal(told, 3);
	assert_string_equal(told_reason, "node replaced");
	dp_endpoint_set_health(ep, false, NULL);
	assert_int_equal(told, 4);
	assert_string_equal(told_reason, "unhealthy");
	dp_endpoint_set_health(ep, true, NULL);
	assert_int_equal(told, 5);
	assert_true(told_healthy);
	assert_string_equal(told_reason, "");
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* dp_endpoint_log_events: the configured wording, once per change; the defaults without one. */
static void health_lines_in_configured_wording(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL, *plain = NULL;
	dp_endpoint_config c = dpt_stub_config();
	c.healthy_message = "device usable";
	c.unhealthy_message = "device unusable, advertising every device Unhealthy";
	c.healthy_fields = "device=/dev/kvm";
	c.healthy_detail = "probe";
	c.events = &dp_endpoint_log_events; /* in the configuration, or set after: */
	dp_endpoint_config d = dpt_stub_config();
	d.socket_prefix = "plain";
	dp_log_set_level(DP_LOG_INFO);
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &d, &plain), 0);
	dp_endpoint_set_events(plain, &dp_endpoint_log_events);

	dpt_capture_start(&log_cap, STDERR_FILENO);
	dp_endpoint_set_health(ep, true, "KVM API version 12, VM created");
	dp_endpoint_set_health(ep, true, "KVM API version 12, VM created");
	dp_endpoint_set_health(ep, false, "KVM_CREATE_VM: ENOMEM");
	dp_endpoint_set_health(ep, false, "KVM_CREATE_VM: ENOMEM");
	dp_endpoint_set_health(plain, true, NULL);
	dp_endpoint_set_health(plain, false, "a cdev is gone");
	const char *log = dpt_capture_end(&log_cap);

	assert_int_equal(dpt_count(log, "level=info msg=\"device usable\" resource=example.com/thing "
				    "device=/dev/kvm probe=\"KVM API version 12, VM created\"\n"), 1);
	assert_int_equal(dpt_count(log, "level=warn msg=\"device unusable, advertising every device Unhealthy\" "
				    "resource=example.com/thing reason=\"KVM_CREATE_VM: ENOMEM\"\n"), 1);
	assert_int_equal(dpt_count(log, "level=info msg=\"devices usable\" resource=example.com/thing devices=2\n"), 1);
	assert_int_equal(dpt_count(log, "level=warn msg=\"devices unusable, advertising every device Unhealthy\" "
				    "resource=example.com/thing reason=\"a cdev is gone\"\n"), 1);
	assert_int_equal(dpt_count(log, "\n"), 4);
	dp_endpoint_free(ep);
	dp_endpoint_free(plain);
	dp_loop_free(loop);
}

/* ---- the first check's hold ---- */

static bool checked(void) { return dpt_stub.checks > 0; }
static bool accepted_one(void) { return accepted > 0; }

static void on_failed(dp_endpoint *ep, const char *reason, void *ud)
{
	failures++;
}

/* A kubelet.sock that accepts and never answers: the connection is held until the test closes it. */
static int on_accept_hold(dp_source *s, int fd, uint32_t ev, void *ud)
{
	int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
	if (c >= 0) {
		accepted++;
		if (held_conn >= 0)
			close(held_conn);
		held_conn = c;
	}
	return 0;
}

/* An endpoint with this hold started against a kubelet.sock that accepts and never answers. */
struct held {
	dp_loop *loop;
	dp_endpoint *ep;
	dp_source *src;
	int fd;
};

static void start_held(struct held *h, uint64_t hold_usec)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	dp_endpoint_config c = dpt_stub_config();
	dp_endpoint_events ev = { .on_register_failed = on_failed };
	c.first_check_hold_usec = hold_usec;
	c.events = &ev;
	assert_int_equal(dp_loop_new(&h->loop), 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/kubelet.sock", dir);
	h->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	assert_true(h->fd >= 0);
	assert_int_equal(bind(h->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(h->fd, 8), 0);
	assert_int_equal(dp_io_add(h->loop, h->fd, EPOLLIN, on_accept_hold, NULL, &h->src), 0);
	assert_int_equal(dp_endpoint_new(h->loop, dir, &c, &h->ep), 0);
	assert_int_equal(dp_endpoint_start(h->ep), 0);
}

static void stop_held(struct held *h)
{
	dp_endpoint_free(h->ep);
	dp_source_free(h->src);
	close(h->fd);
	dp_loop_free(h->loop);
}

/* The first check waits while the first Register is in flight, and runs as soon as it ends. */
static void first_check_waits_for_registration(void **state)
{
	struct held h;
	start_held(&h, 600 * DP_USEC_PER_SEC); /* longer than the test */
	assert_true(dpt_run_until_cond(h.loop, accepted_one, 5 * DP_USEC_PER_SEC));
	for (int i = 0; i < 10; i++) /* the check asked for at start has had its turn */
		dp_loop_run_once(h.loop, 0);
	assert_int_equal(dpt_stub.checks, 0);
	assert_false(dp_endpoint_healthy(h.ep));
	assert_int_equal(failures, 0);

	close(held_conn); /* the attempt ends, cut off: the held check runs */
	held_conn = -1;
	assert_true(dpt_run_until_cond(h.loop, checked, 5 * DP_USEC_PER_SEC));
	assert_int_equal(failures, 0); /* a first cut-off is no failure (test_endpoint.c) */
	assert_int_equal(dpt_stub.checks, 1);
	assert_true(dp_endpoint_healthy(h.ep));
	stop_held(&h);
}

/* Bounded: with Register never answered the check runs after the hold's bound. */
static void first_check_hold_is_bounded(void **state)
{
	struct held h;
	start_held(&h, 100 * DP_USEC_PER_MSEC);
	assert_true(dpt_run_until_cond(h.loop, checked, 5 * DP_USEC_PER_SEC));
	assert_int_equal(failures, 0); /* the attempt is still in flight (20 s deadline) */
	assert_false(dp_endpoint_registered(h.ep));
	stop_held(&h);
}

/* Without kubelet.sock the first attempt ends at once: no wait, however long the hold. */
static void first_check_not_held_without_kubelet(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	c.first_check_hold_usec = 600 * DP_USEC_PER_SEC;
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	assert_int_equal(dp_endpoint_start(ep), 0);
	assert_true(dpt_run_until_cond(loop, checked, 5 * DP_USEC_PER_SEC));
	assert_true(dp_endpoint_healthy(ep));
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* ---- the CDI Allocate answer ---- */

static void assert_answer(const V1beta1__ContainerAllocateResponse *r, const char *const *names, size_t n,
			  const char *key, const char *value)
{
	assert_int_equal(r->n_cdi_devices, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(r->cdi_devices[i]->name, names[i]);
	assert_int_equal(r->n_annotations, 1);
	assert_string_equal(r->annotations[0]->key, key);
	assert_string_equal(r->annotations[0]->value, value);
	assert_int_equal(r->n_devices, 0);
	assert_int_equal(r->n_envs, 0);
}

static void cdi_answer(void **state)
{
	dp_loop *loop = NULL;
	dp_endpoint *ep = NULL;
	dp_endpoint_config c = dpt_stub_config();
	char *ids0[] = { "3", "1" }, *ids1[] = { "0" };
	assert_int_equal(dp_loop_new(&loop), 0);
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);

	/* kata: one CDI device per requested ID */
	dp_alloc *a = dpt_make_alloc(ep, ids0, 2, ids1, 1);
	assert_int_equal(dp_alloc_add_cdi_answer(a, "kata.nvidia.com-gpu", "nvidia.com/gpu", NULL), 0);
	assert_answer(&a->resp[0], (const char *const[]){ "nvidia.com/gpu=3", "nvidia.com/gpu=1" }, 2,
		      "cdi.k8s.io/kata.nvidia.com-gpu_3", "nvidia.com/gpu=3,nvidia.com/gpu=1");
	assert_answer(&a->resp[1], (const char *const[]){ "nvidia.com/gpu=0" }, 1,
		      "cdi.k8s.io/kata.nvidia.com-gpu_0", "nvidia.com/gpu=0");
	/* the other fields go where they belong (one generic push per field), not past the end */
	assert_int_equal(dp_alloc_add_env(a, 0, "K", "V"), 0);
	assert_int_equal(dp_alloc_add_device(a, 1, "/dev/x", "/dev/y", "rw"), 0);
	assert_int_equal(dp_alloc_add_env(a, 2, "K", "V"), -EINVAL);
	assert_int_equal(a->resp[0].n_envs, 1);
	assert_string_equal(a->resp[0].envs[0]->key, "K");
	assert_string_equal(a->resp[0].envs[0]->value, "V");
	assert_int_equal(a->resp[1].n_devices, 1);
	assert_string_equal(a->resp[1].devices[0]->host_path, "/dev/y");
	assert_int_equal(a->resp[0].n_annotations + a->resp[1].n_annotations, 2);
	dp_alloc_finish(a, DP_GRPC_OK, NULL); /* nobody to answer: frees it */

	/* hyperlight: every ID is the one device */
	a = dpt_make_alloc(ep, ids0, 2, ids1, 1);
	assert_int_equal(dp_alloc_add_cdi_answer(a, "hyperlight.dev-hypervisor", "hyperlight.dev/hypervisor", "kvm"), 0);
	assert_answer(&a->resp[0], (const char *const[]){ "hyperlight.dev/hypervisor=kvm" }, 1,
		      "cdi.k8s.io/hyperlight.dev-hypervisor_3", "hyperlight.dev/hypervisor=kvm");
	assert_answer(&a->resp[1], (const char *const[]){ "hyperlight.dev/hypervisor=kvm" }, 1,
		      "cdi.k8s.io/hyperlight.dev-hypervisor_0", "hyperlight.dev/hypervisor=kvm");
	assert_int_equal(dp_alloc_add_cdi_answer(a, NULL, "x/y", NULL), -EINVAL);
	dp_alloc_finish(a, DP_GRPC_OK, NULL);
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* ---- per-device health and the prefer hook ---- */

static const dp_device four[] = { { "d0", 0 }, { "d1", 0 }, { "d2", 1 }, { "d3", -1 } };

/* The hook's scripted answer: n indices of out_script, or err when negative. */
static size_t script[8], script_n;
static int script_err, hook_calls;
static size_t seen_size, seen_avail, seen_must;

static int scripted_prefer(dp_endpoint *ep, const size_t *avail, size_t n_avail, const size_t *must, size_t n_must,
			   size_t size, size_t *out, void *ud)
{
	hook_calls++;
	seen_size = size;
	seen_avail = n_avail;
	seen_must = n_must;
	for (size_t i = 0; i < n_avail; i++)
		assert_true(avail[i] < 4);
	for (size_t i = 0; i < n_must; i++)
		assert_true(must[i] < 4);
	if (script_err < 0)
		return script_err;
	for (size_t i = 0; i < script_n && i < size; i++)
		out[i] = script[i];
	return (int)script_n;
}

static dp_endpoint *four_devices(dp_loop *loop, bool hook)
{
	static dp_driver drv;
	dp_endpoint_config c = dpt_stub_config();
	drv = *c.driver;
	drv.prefer = hook ? scripted_prefer : NULL;
	c.driver = &drv;
	c.devices = four;
	c.n_devices = 4;
	c.preferred_allocation = true;
	dp_endpoint *ep = NULL;
	assert_int_equal(dp_endpoint_new(loop, dir, &c, &ep), 0);
	return ep;
}

/* The ID pointer of device i, as the decoder gives it (into the endpoint's arena). */
static char *id_ptr(dp_endpoint *ep, size_t i)
{
	char *id = ep->ids;
	while (i--)
		id += strlen(id) + 1;
	return id;
}

/* Ask for size devices of avail (and must), expect the IDs want (a NULL-ended list). */
static void expect_prefer(dp_endpoint *ep, const size_t *avail, size_t na, const size_t *must, size_t nm, int size,
			  const char *const *want)
{
	char *a[4], *m[4], **got = NULL;
	size_t n = 0, nw = 0;
	for (size_t i = 0; i < na; i++)
		a[i] = id_ptr(ep, avail[i]);
	for (size_t i = 0; i < nm; i++)
		m[i] = id_ptr(ep, must[i]);
	struct dp_ep_container c = { { a, na }, { m, nm }, size };
	assert_int_equal(dp_ep_prefer_answer(ep, &c, &got, &n), 0);
	while (want[nw])
		nw++;
	assert_int_equal(n, nw);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(got[i], want[i]);
	free(got);
}

static void prefer_hook_answer_or_default(void **state)
{
	dp_loop *loop = NULL;
	assert_int_equal(dp_loop_new(&loop), 0);
	dp_endpoint *ep = four_devices(loop, true);
	const size_t all[] = { 0, 1, 2, 3 }, two[] = { 3, 1 };
	script_err = 0;

	/* the hook's choice, by index, in its order */
	script_n = 2, script[0] = 2, script[1] = 0;
	expect_prefer(ep, all, 4, NULL, 0, 2, (const char *const[]){ "d2", "d0", NULL });
	assert_int_equal(seen_size, 2);
	/* must-include IDs also available: the hook decides */
	script_n = 2, script[0] = 1, script[1] = 3;
	expect_prefer(ep, all, 4, two, 2, 2, (const char *const[]){ "d1", "d3", NULL });
	/* size capped at what both lists hold; every distinct offered device is the whole answer */
	script_n = 4, script[0] = 3, script[1] = 1, script[2] = 2, script[3] = 0;
	expect_prefer(ep, all, 4, two, 2, 9, (const char *const[]){ "d3", "d1", "d2", "d0", NULL });
	assert_int_equal(seen_size, 6);
	assert_int_equal(seen_avail, 4);
	assert_int_equal(seen_must, 2);

	/* answers kubelet would not take are replaced by the default (must first, then in order) */
	script_n = 2, script[0] = 0, script[1] = 0; /* twice the same */
	expect_prefer(ep, all, 4, NULL, 0, 2, (const char *const[]){ "d0", "d1", NULL });
	script_n = 2, script[0] = 0, script[1] = 3; /* not offered */
	expect_prefer(ep, (const size_t[]){ 0, 1, 2 }, 3, NULL, 0, 2, (const char *const[]){ "d0", "d1", NULL });
	script_n = 2, script[0] = 0, script[1] = 2; /* a must-include one left out */
	expect_prefer(ep, all, 4, two, 2, 2, (const char *const[]){ "d3", "d1", NULL });
	script_n = 1, script[0] = 2; /* too few */
	expect_prefer(ep, all, 4, NULL, 0, 2, (const char *const[]){ "d0", "d1", NULL });
	script_err = -EIO; /* an error */
	expect_prefer(ep, all, 4, NULL, 0, 1, (const char *const[]){ "d0", NULL });
	script_err = 0;
	script_n = 0; /* size 0 */
	expect_prefer(ep, all, 4, NULL, 0, 0, (const char *const[]){ NULL });
	dp_endpoint_free(ep);

	/* no hook: the default, the hook never called */
	hook_calls = 0;
	ep = four_devices(loop, false);
	expect_prefer(ep, all, 4, two, 2, 3, (const char *const[]){ "d3", "d1", "d0", NULL });
	assert_int_equal(hook_calls, 0);
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* The health every device is advertised with: the encoder's bytes, as the streams get them. */
static void expect_health(dp_endpoint *ep, const char *want)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	assert_int_equal(dp_ep_encode_list(ep->ids, ep->n_devices, ep->numa, ep->checked && ep->healthy, ep->down,
					   &buf, &len), 0);
	V1beta1__ListAndWatchResponse *r = v1beta1__list_and_watch_response__unpack(NULL, len, buf);
	assert_non_null(r);
	assert_int_equal(r->n_devices, strlen(want));
	for (size_t i = 0; i < r->n_devices; i++)
		assert_string_equal(r->devices[i]->health, want[i] == 'H' ? "Healthy" : "Unhealthy");
	v1beta1__list_and_watch_response__free_unpacked(r, NULL);
	free(buf);
}

static void devices_down_per_device(void **state)
{
	dp_loop *loop = NULL;
	assert_int_equal(dp_loop_new(&loop), 0);
	dp_endpoint *ep = four_devices(loop, false);
	const bool one[] = { false, true, false, false }, none[4] = { false };
	assert_false(dp_endpoint_device_down(ep, 1));
	assert_int_equal(dp_endpoint_set_devices_down(ep, one, 3), -EINVAL); /* not the device count */
	assert_false(dp_endpoint_device_down(ep, 1));
	assert_int_equal(dp_endpoint_set_devices_down(ep, one, 4), 0);
	assert_true(dp_endpoint_device_down(ep, 1));
	assert_false(dp_endpoint_device_down(ep, 0));
	assert_false(dp_endpoint_device_down(ep, 4)); /* out of range: not down */
	expect_health(ep, "UUUU");                     /* no verdict yet: all Unhealthy */
	dp_endpoint_set_health(ep, true, NULL);
	assert_true(dp_endpoint_healthy(ep)); /* the endpoint's own health stays the verdict's */
	expect_health(ep, "HUHH");
	dp_endpoint_set_health(ep, false, "gone");
	expect_health(ep, "UUUU");
	dp_endpoint_set_health(ep, true, NULL);
	assert_int_equal(dp_endpoint_set_devices_down(ep, none, 4), 0);
	expect_health(ep, "HHHH");
	dp_endpoint_free(ep);
	dp_loop_free(loop);
}

/* ---- the device-count ceiling ---- */

/* The encoded size of "<prefix>0".."<prefix><n-1>", every device Unhealthy. */
static size_t list_size(const char *prefix, size_t n)
{
	size_t plen = strlen(prefix), cap = n * (plen + 21) + 1, off = 0, len = 0;
	char *ids = malloc(cap);
	uint8_t *buf = NULL;
	assert_non_null(ids);
	for (size_t i = 0; i < n; i++)
		off += (size_t)snprintf(ids + off, cap - off, "%s%zu", prefix, i) + 1;
	assert_int_equal(dp_ep_encode_list(ids, n, NULL, false, NULL, &buf, &len), 0);
	free(ids);
	free(buf);
	return len;
}

/* The ceiling's list fits one gRPC message, one device more does not. */
static void device_ceiling(void **state)
{
	static const char *const prefixes[] = { "hyperlight-", "" };
	for (size_t i = 0; i < DP_ELEMENTSOF(prefixes); i++) {
		size_t n = dp_endpoint_max_devices(prefixes[i]);
		assert_true(n > 0);
		assert_true(list_size(prefixes[i], n) <= DP_GRPC_MAX_MESSAGE);
		assert_true(list_size(prefixes[i], n + 1) > DP_GRPC_MAX_MESSAGE);
	}
	assert_int_equal(dp_endpoint_max_devices("hyperlight-"), 134544); /* --help and the docs say so */
	/* IDs longer than 63 characters are invalid: a 61-character prefix stops at 100 devices */
	char prefix[62];
	memset(prefix, 'p', 61);
	prefix[61] = '\0';
	assert_int_equal(dp_endpoint_max_devices(prefix), 100);
}

/* ---- the owned CDI spec in one step ---- */

static void on_cdi_changed(dp_cdi_file *f, void *ud) {}

static void cdi_owned_file(void **state)
{
	dp_loop *loop = NULL;
	dp_cdi_file *f = NULL;
	dp_buf spec = { 0 };
	char path[128], buf[64], rival[128];
	assert_int_equal(dp_loop_new(&loop), 0);

	spec.oom = true;
	assert_int_equal(dp_cdi_file_new_owned(loop, dir, "x.json", &spec, on_cdi_changed, NULL, &f), -ENOMEM);
	assert_null(f);
	spec.oom = false;
	dp_buf_puts(&spec, "{\"ours\":true}\n");
	assert_int_equal(dp_cdi_file_new_owned(loop, dir, "x.json", &spec, on_cdi_changed, NULL, &f), 0);
	assert_non_null(f);
	assert_int_equal(dp_cdi_file_sync(f, NULL), 0);
	snprintf(path, sizeof(path), "%s/x.json", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	assert_int_equal(n, (ssize_t)spec.len);
	assert_memory_equal(buf, spec.data, spec.len);

	/* another writer keeps replacing it: the fight is logged (dp_cdi_log_fight), once */
	snprintf(rival, sizeof(rival), "%s/.rival", dir);
	dpt_capture_start(&log_cap, STDERR_FILENO);
	for (int i = 0; i < 8; i++) {
		fd = open(rival, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		assert_int_equal(write(fd, "{}\n", 3), 3);
		close(fd);
		assert_int_equal(rename(rival, path), 0);
		(void)dp_cdi_file_sync(f, NULL);
	}
	const char *log = dpt_capture_end(&log_cap);
	assert_int_equal(dpt_count(log, "level=warn msg=\"CDI spec keeps being replaced by another writer"), 1);
	dp_cdi_file_free(f);
	dp_buf_done(&spec);
	dp_loop_free(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(health_change_told_once, setup, teardown),
		cmocka_unit_test_setup_teardown(health_lines_in_configured_wording, setup, teardown),
		cmocka_unit_test_setup_teardown(first_check_waits_for_registration, setup, teardown),
		cmocka_unit_test_setup_teardown(first_check_hold_is_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(first_check_not_held_without_kubelet, setup, teardown),
		cmocka_unit_test_setup_teardown(cdi_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(prefer_hook_answer_or_default, setup, teardown),
		cmocka_unit_test_setup_teardown(devices_down_per_device, setup, teardown),
		cmocka_unit_test(device_ceiling),
		cmocka_unit_test_setup_teardown(cdi_owned_file, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
