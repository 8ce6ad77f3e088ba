/* SPDX-License-Identifier: Apache-2.0 */
/* kata table: the two compiled-in rows classify their vendor/class combinations and reject the
 * neighbours; table validation; derived names; and a third row added here works end to end:
 * fake tree -> scan -> per-resource devices -> CDI spec on disk -> endpoint registered with
 * its resource name and socket prefix -> Allocate answered with its CDI names. Needs root. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "api.pb-c.h"
#include "dp/grpc.h"
#include "dp/log.h"
#include "dp/paths.h"
#include "dp_test.h"
#include "plugin.h"
#include "scan.h"
#include "spec.h"
#include "table.h"

/* ---- the compiled-in rows ---- */

struct combo {
	uint16_t vendor;
	uint32_t cls;
	int row; /* -1: no row */
};

static void rows_classify(void **state)
{
	static const struct combo combos[] = {
		{ 0x10de, 0x030200, 0 }, /* 3D controller */
		{ 0x10de, 0x030201, 0 }, /* any prog-if */
		{ 0x10de, 0x0302ff, 0 },
		{ 0x10de, 0x068000, 1 }, /* bridge: other */
		{ 0x10de, 0x0680ff, 1 },
		{ 0x10de, 0x030000, -1 }, /* VGA controller: not a gpu row */
		{ 0x10de, 0x030100, -1 }, /* XGA */
		{ 0x10de, 0x038000, -1 }, /* display: other */
		{ 0x10de, 0x040300, -1 }, /* HD audio of a GPU */
		{ 0x10de, 0x060400, -1 }, /* PCI bridge */
		{ 0x10de, 0x068100, -1 },
		{ 0x10de, 0x0c0330, -1 }, /* USB */
		{ 0x10de, 0x000000, -1 },
		{ 0x10de, 0x130200, -1 }, /* a neighbour in the base class byte */
		{ 0x1002, 0x030200, -1 }, /* AMD 3D controller: not nvidia */
		{ 0x10df, 0x030200, -1 },
		{ 0x10dd, 0x068000, -1 },
		{ 0x8086, 0x020000, -1 },
		{ 0x0000, 0x030200, -1 },
		{ 0xffff, 0xffffff, -1 },
	};
	assert_int_equal(kata_table_len, 2);
	assert_string_equal(kata_table[0].resource, "nvidia.com/gpu");
	assert_string_equal(kata_table[1].resource, "nvidia.com/nvswitch");
	for (size_t i = 0; i < DP_ELEMENTSOF(combos); i++) {
		int r = kata_table_match(kata_table, kata_table_len, combos[i].vendor, combos[i].cls);
		if (r != combos[i].row)
			fprintf(stderr, "0x%04x/0x%06x: row %d, want %d\n", combos[i].vendor, combos[i].cls, r,
				combos[i].row);
		assert_int_equal(r, combos[i].row);
	}
}

static void table_validation(void **state)
{
	char err[256] = "";
	assert_int_equal(kata_table_validate(kata_table, kata_table_len, err, sizeof(err)), 0);
	static const struct kata_row bad[][1] = {
		{ { "gpu", 0x10de, 0x030200, 0xffff00 } },
		{ { "Nvidia.com/gpu", 0x10de, 0x030200, 0xffff00 } },
		{ { "nvidia.com/gpu/x", 0x10de, 0x030200, 0xffff00 } },
		{ { "nvidia.com/-gpu", 0x10de, 0x030200, 0xffff00 } },
		{ { "nvidia.com/gpu", 0x10de, 0x030200, 0 } },
		{ { "nvidia.com/gpu", 0x10de, 0x030201, 0xffff00 } },
		{ { "nvidia.com/gpu", 0x10de, 0x030200, 0x1ffff00 } },
		{ { "a23456789012345678901234567890.example.com/abcdefghijklmnopqrstuv", 1, 0, 1 } },
		{ { NULL, 0x10de, 0x030200, 0xffff00 } },
	};
	for (size_t i = 0; i < DP_ELEMENTSOF(bad); i++) {
		err[0] = '\0';
		assert_int_equal(kata_table_validate(bad[i], 1, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "PCI table row 0"));
	}
	const struct kata_row dup[] = { kata_table[0], kata_table[1], kata_table[0] };
	assert_int_equal(kata_table_validate(dup, 3, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "row 2 (nvidia.com/gpu): duplicate"));
	assert_int_equal(kata_table_validate(kata_table, 0, err, sizeof(err)), -EINVAL);
}

static void derived_names(void **state)
{
	char b[KATA_NAME_MAX], tiny[8] = "keep";
	assert_int_equal(kata_socket_prefix("nvidia.com/gpu", b, sizeof(b)), 0);
	assert_string_equal(b, "kata-pp49l5"); /* "kata-<hash>", dp_socket_prefix */
	assert_int_equal(kata_socket_prefix("nvidia.com/nvswitch", b, sizeof(b)), 0);
	assert_string_equal(b, "kata-ocpspg");
	assert_int_equal(kata_plugin_name("nvidia.com/nvswitch", b, sizeof(b)), 0);
	assert_string_equal(b, "kata.nvidia.com-nvswitch");
	assert_int_equal(kata_spec_file("nvidia.com/gpu", b, sizeof(b)), 0);
	assert_string_equal(b, "kata.nvidia.com-gpu.yaml");
	assert_int_equal(kata_dra_spec_file("nvidia.com/gpu", b, sizeof(b)), 0);
	assert_string_equal(b, "kata-dra.nvidia.com-gpu.yaml");
	assert_int_equal(kata_spec_file("nvidia.com/gpu", tiny, sizeof(tiny)), -ENAMETOOLONG);
	assert_string_equal(tiny, "keep");
	assert_int_equal(kata_socket_prefix("gpu", b, sizeof(b)), -EINVAL);
	assert_int_equal(kata_socket_prefix("nvidia.com/gpu", tiny, sizeof(tiny)), -ENAMETOOLONG);
	assert_string_equal(tiny, "keep");
}

/* PLUGIN_API=dra's names: "<class>-<PCI address>", a DNS label of at most 63 characters (the
 * class cut, every other character '-'), and the spec under those names. */
static void dra_names(void **state)
{
	struct kata_device d[3] = {
		{ .pci = "0000:41:00.0", .path = "/dev/vfio/12", .group = 12 },
		{ .pci = "0000:41:00.1", .path = "/dev/vfio/12", .group = 12 },
		{ .pci = "0000:c3:00.0", .path = "/dev/vfio/devices/vfio3", .group = 13 },
	};
	char b[KATA_UNIT_NAME_MAX + 1], cls[120];
	dp_buf spec = { 0 };

	kata_unit_name("nvidia.com/gpu", &d[0], b, sizeof(b));
	assert_string_equal(b, "gpu-0000-41-00-0");
	kata_unit_name("example.com/Smart_NIC.v2", &d[2], b, sizeof(b));
	assert_string_equal(b, "smart-nic-v2-0000-c3-00-0");
	snprintf(cls, sizeof(cls), "example.com/%s", "a123456789b123456789c123456789d123456789e123456789f123456789");
	kata_unit_name(cls, &d[2], b, sizeof(b));
	assert_int_equal(strlen(b), KATA_UNIT_NAME_MAX);
	assert_string_equal(b, "a123456789b123456789c123456789d123456789e123456789-0000-c3-00-0");
	/* legacy: the group node once, then the container node; the name starts with a letter */
	kata_spec_render_dra("nvidia.com/gpu", d, 2, &spec);
	assert_false(spec.oom);
	assert_string_equal(spec.data, "cdiVersion: \"0.3.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n"
					"  - name: \"gpu-0000-41-00-0\"\n    containerEdits:\n      deviceNodes:\n"
					"        - path: \"/dev/vfio/12\"\n          type: \"c\"\n"
					"        - path: \"/dev/vfio/vfio\"\n          type: \"c\"\n");
	dp_buf_done(&spec);
	kata_spec_render_dra("nvidia.com/gpu", &d[2], 1, &spec);
	assert_non_null(strstr(spec.data, "  - name: \"gpu-0000-c3-00-0\"\n    containerEdits:\n      deviceNodes:\n"
					  "        - path: \"/dev/vfio/devices/vfio3\"\n"));
	dp_buf_done(&spec);
}

/* ---- a third row, end to end ---- */

static char root[64];

static int setup(void **state)
{
	if (dpt_tmpdir(root, sizeof(root), "test_table") < 0)
		return -1;
	setenv(DP_TEST_ROOT_ENV, root, 1);
	dp_paths_reset();
	return 0;
}

static int teardown(void **state)
{
	return dpt_rmtree(root);
}

_printf_(1, 2) static void run(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	assert_int_equal(system(cmd), 0);
}

/* A VFIO device vfio<n> (cdev 237:n) for the PCI function bdf. */
static void device(unsigned n, const char *bdf, const char *vendor, const char *cls, int numa)
{
	char p[PATH_MAX];
	run("set -e; cd %s; mkdir -p dev/vfio/devices sys/devices/pci0000:00/%s sys/class/vfio-dev/vfio%u; "
	    "echo %s > sys/devices/pci0000:00/%s/vendor; echo %s > sys/devices/pci0000:00/%s/class; "
	    "echo %d > sys/devices/pci0000:00/%s/numa_node; echo 237:%u > sys/class/vfio-dev/vfio%u/dev; "
	    "ln -s ../../../devices/pci0000:00/%s sys/class/vfio-dev/vfio%u/device; "
	    "mkdir -p sys/kernel/iommu_groups/%u/devices; "
	    "ln -s ../../../../devices/pci0000:00/%s sys/kernel/iommu_groups/%u/devices/%s; "
	    "ln -s ../../../kernel/iommu_groups/%u sys/devices/pci0000:00/%s/iommu_group; "
	    "ln -s ../../../bus/pci/drivers/vfio-pci sys/devices/pci0000:00/%s/driver",
	    root, bdf, n, vendor, bdf, cls, bdf, numa, bdf, n, n, bdf, n, n, bdf, n, bdf, n, bdf, bdf);
	snprintf(p, sizeof(p), "%s/dev/vfio/devices/vfio%u", root, n);
	assert_int_equal(mknod(p, S_IFCHR | 0600, makedev(237, n)), 0);
}

static const struct kata_row three[] = {
	{ "nvidia.com/gpu", 0x10de, 0x030200, 0xffff00 },
	{ "nvidia.com/nvswitch", 0x10de, 0x068000, 0xffff00 },
	{ "example.com/nic", 0x8086, 0x020000, 0xffff00 }, /* the new row: nothing else changes */
};

/* The fake kubelet: Register recorded and answered at once (no dial-back). */
struct kubelet {
	char resource[8][64];
	char endpoint[8][128];
	int n;
};

static void on_register(dp_grpc_call *call, const uint8_t *msg, size_t len, void *userdata)
{
	struct kubelet *k = userdata;
	V1beta1__RegisterRequest *req = v1beta1__register_request__unpack(NULL, len, msg);
	assert_non_null(req);
	assert_true(k->n < 8);
	assert_string_equal(req->version, "v1beta1");
	snprintf(k->resource[k->n], sizeof(k->resource[0]), "%s", req->resource_name);
	snprintf(k->endpoint[k->n], sizeof(k->endpoint[0]), "%s", req->endpoint);
	k->n++;
	v1beta1__register_request__free_unpacked(req, NULL);
	V1beta1__Empty e = V1BETA1__EMPTY__INIT;
	dp_grpc_call_send_pb(call, &e.base);
}

struct reply {
	bool done;
	int status;
	char message[512];
	V1beta1__AllocateResponse *resp;
};

static void on_reply(void *userdata, int status, const char *message, const uint8_t *resp, size_t len)
{
	struct reply *r = userdata;
	r->done = true;
	r->status = status;
	snprintf(r->message, sizeof(r->message), "%s", message);
	if (status == DP_GRPC_OK)
		r->resp = v1beta1__allocate_response__unpack(NULL, len, resp);
}

static void spin(dp_loop *loop, const bool *flag)
{
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;
	while (!*flag && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
}

static void allocate(dp_loop *loop, const char *socket, char **ids, size_t n, struct reply *r)
{
	V1beta1__ContainerAllocateRequest c = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
	V1beta1__ContainerAllocateRequest *cs[] = { &c };
	V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
	c.devices_ids = ids;
	c.n_devices_ids = n;
	req.container_requests = cs;
	req.n_container_requests = 1;
	dp_grpc_client_call *call; /* freed once done ran */
	*r = (struct reply){ 0 };
	assert_int_equal(dp_grpc_client_call_pb(loop, socket, "localhost", "/v1beta1.DevicePlugin/Allocate",
						&req.base, 5 * DP_USEC_PER_SEC, on_reply, r, &call),
			 0);
	spin(loop, &r->done);
	assert_true(r->done);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char *s = calloc(1, 65536);
	assert_non_null(s);
	size_t n = fread(s, 1, 65535, f);
	s[n] = '\0';
	fclose(f);
	return s;
}

/* "<prefix>-<6 base32hex digits>.sock" */
static bool socket_of(const char *name, const char *prefix)
{
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl) != 0 || name[pl] != '-' || strlen(name) != pl + 1 + 6 + 5)
		return false;
	for (size_t i = pl + 1; i < pl + 7; i++)
		if (!strchr("0123456789abcdefghijklmnopqrstuv", name[i]))
			return false;
	return strcmp(name + pl + 7, ".sock") == 0;
}

static void third_row_end_to_end(void **state)
{
	char kdir[PATH_MAX], cdir[PATH_MAX], sock[PATH_MAX + 256], err[256];
	struct kata_scan s, plain;
	struct kubelet k = { 0 };
	kata_plugin *plugins[3] = { NULL };
	dp_loop *loop = NULL;
	dp_grpc_server *kubelet = NULL;

	assert_int_equal(kata_table_validate(three, 3, err, sizeof(err)), 0);
	device(3, "0000:41:00.0", "0x10de", "0x030200", 0);
	device(7, "0000:a0:00.0", "0x8086", "0x020000", 1); /* NIC, created first */
	device(1, "0000:21:00.0", "0x10de", "0x030200", 0);
	device(6, "0000:30:00.0", "0x8086", "0x020000", 0); /* NIC */
	device(9, "0000:05:00.0", "0x10de", "0x068000", -1);
	device(2, "0000:06:00.0", "0x1af4", "0x010000", 0); /* virtio: still no row */

	/* The compiled-in table does not know the NICs; the injected one does. */
	struct kata_scan_opts o = { .table = kata_table, .n_rows = kata_table_len };
	assert_int_equal(kata_scan_run(&o, &plain, err, sizeof(err)), 0);
	assert_int_equal(plain.n_devices, 3);
	kata_scan_done(&plain);
	o = (struct kata_scan_opts){ .table = three, .n_rows = 3 };
	assert_int_equal(kata_scan_run(&o, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n_devices, 5);
	size_t first, counts[3];
	for (size_t row = 0; row < 3; row++)
		counts[row] = kata_scan_row(&s, row, &first);
	assert_int_equal(counts[0], 2);
	assert_int_equal(counts[1], 1);
	assert_int_equal(counts[2], 2);
	assert_int_equal(kata_scan_row(&s, 2, &first), 2);
	const struct kata_device *nics = &s.devices[first];
	assert_string_equal(nics[0].name, "vfio6"); /* 0000:30:00.0 before 0000:a0:00.0 */
	assert_string_equal(nics[1].name, "vfio7");
	assert_int_equal(nics[0].numa_node, 0);
	assert_int_equal(nics[1].numa_node, 1);

	/* Per present row: plugin with its endpoint and CDI spec, as the daemon does. */
	assert_int_equal(dp_path(kdir, sizeof(kdir), DP_KUBELET_DIR), 0);
	assert_int_equal(dp_path(cdir, sizeof(cdir), DP_CDI_DIR), 0);
	run("mkdir -p %s %s/var/run", kdir, root); /* the CDI module creates only the last level */
	assert_int_equal(dp_loop_new(&loop), 0);
	snprintf(sock, sizeof(sock), "%s/kubelet.sock", kdir);
	dp_grpc_method reg = { "/v1beta1.Registration/Register", DP_GRPC_METHOD_UNARY, on_register, &k };
	assert_int_equal(dp_grpc_server_new(loop, sock, &reg, 1, NULL, &kubelet), 0);
	for (size_t row = 0; row < 3; row++) {
		size_t n = kata_scan_row(&s, row, &first);
		assert_int_equal(kata_plugin_new(loop, three[row].resource, &s.devices[first], n, kdir, cdir,
						 &plugins[row]),
				 0);
		assert_int_equal(kata_plugin_start(plugins[row]), 0);
	}
	uint64_t end = dp_now_usec() + 5 * DP_USEC_PER_SEC;
	while ((k.n < 3 || !dp_endpoint_healthy(kata_plugin_endpoint(plugins[2]))) && dp_now_usec() < end)
		dp_loop_run_once(loop, 10);
	assert_int_equal(k.n, 3);

	/* Registered under the row's resource name and socket prefix. */
	const char *nic_socket = NULL;
	for (int i = 0; i < 3; i++) {
		char prefix[KATA_NAME_MAX];
		assert_int_equal(kata_socket_prefix(k.resource[i], prefix, sizeof(prefix)), 0);
		assert_true(socket_of(k.endpoint[i], prefix));
		if (strcmp(k.resource[i], "example.com/nic") == 0)
			nic_socket = k.endpoint[i];
	}
	assert_non_null(nic_socket);
	assert_true(socket_of(nic_socket, "kata-qp8rfg")); /* the hash of "example.com/nic" */
	assert_true(dp_endpoint_healthy(kata_plugin_endpoint(plugins[2])));

	/* The CDI spec on disk: the rendered bytes, kind = resource, IDs in PCI order. */
	dp_buf want = { 0 };
	kata_spec_render("example.com/nic", nics, 2, &want);
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/kata.example.com-nic.yaml", cdir);
	assert_string_equal(kata_plugin_spec_path(plugins[2]), path);
	char *spec = slurp(path);
	assert_string_equal(spec, want.data);
	assert_non_null(strstr(spec, "kind: \"example.com/nic\"\ndevices:\n  - name: \"0\"\n    containerEdits:\n"
				     "      deviceNodes:\n        - path: \"/dev/vfio/devices/vfio6\"\n"));
	assert_non_null(strstr(spec, "  - name: \"1\"\n    containerEdits:\n      deviceNodes:\n"
				     "        - path: \"/dev/vfio/devices/vfio7\"\n"));
	free(spec);
	dp_buf_done(&want);

	/* Allocate: the row's CDI names and the annotation. */
	struct reply r;
	char *ids[] = { (char *)"1", (char *)"0" };
	snprintf(sock, sizeof(sock), "%s/%s", kdir, nic_socket);
	allocate(loop, sock, ids, 2, &r);
	assert_int_equal(r.status, DP_GRPC_OK);
	assert_non_null(r.resp);
	assert_int_equal(r.resp->n_container_responses, 1);
	V1beta1__ContainerAllocateResponse *c = r.resp->container_responses[0];
	assert_int_equal(c->n_cdi_devices, 2);
	assert_string_equal(c->cdi_devices[0]->name, "example.com/nic=1");
	assert_string_equal(c->cdi_devices[1]->name, "example.com/nic=0");
	assert_int_equal(c->n_annotations, 1);
	assert_string_equal(c->annotations[0]->key, "cdi.k8s.io/kata.example.com-nic_1");
	assert_string_equal(c->annotations[0]->value, "example.com/nic=1,example.com/nic=0");
	assert_int_equal(c->n_devices, 0);
	assert_int_equal(c->n_envs, 0);
	v1beta1__allocate_response__free_unpacked(r.resp, NULL);

	/* An ID the row does not have. */
	char *unknown[] = { (char *)"2" };
	allocate(loop, sock, unknown, 1, &r);
	assert_int_equal(r.status, DP_GRPC_INVALID_ARGUMENT);
	assert_non_null(strstr(r.message, "example.com/nic"));

	/* A requested device's cdev gone: that ID is unusable and Unhealthy, and says why; the
	 * others stay usable. (Allocate checks the IDs it hands out; another device's node gone is
	 * the VFIO watch's to see.) */
	run("rm %s/dev/vfio/devices/vfio7", root);
	char *one[] = { (char *)"1" };
	allocate(loop, sock, one, 1, &r);
	assert_int_equal(r.status, DP_GRPC_UNAVAILABLE);
	assert_non_null(strstr(r.message, "ID 1: /dev/vfio/devices/vfio7: No such file or directory"));
	assert_true(dp_endpoint_device_down(kata_plugin_endpoint(plugins[2]), 1));
	assert_false(dp_endpoint_device_down(kata_plugin_endpoint(plugins[2]), 0));
	assert_true(dp_endpoint_healthy(kata_plugin_endpoint(plugins[2])));
	char *zero[] = { (char *)"0" };
	allocate(loop, sock, zero, 1, &r);
	assert_int_equal(r.status, DP_GRPC_OK);
	v1beta1__allocate_response__free_unpacked(r.resp, NULL);
	assert_true(dp_endpoint_healthy(kata_plugin_endpoint(plugins[0])));

	/* Stopping removes our sockets and keeps the specs. */
	for (size_t row = 0; row < 3; row++)
		plugins[row] = kata_plugin_free(plugins[row]);
	assert_int_equal(access(sock, F_OK), -1);
	assert_int_equal(access(path, F_OK), 0);
	kubelet = dp_grpc_server_free(kubelet);
	dp_loop_free(loop);
	kata_scan_done(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rows_classify),
		cmocka_unit_test(table_validation),
		cmocka_unit_test(derived_names),
		cmocka_unit_test(dra_names),
		cmocka_unit_test_setup_teardown(third_row_end_to_end, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
