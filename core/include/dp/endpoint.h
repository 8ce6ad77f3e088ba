/* SPDX-License-Identifier: Apache-2.0 */
/*
 * endpoint: one advertised resource. Owns the plugin's gRPC server on a socket with a fresh
 * name per server instance ("<prefix>-<n>.sock" in the device-plugins directory, at most
 * DP_SOCKET_NAME_MAX bytes, <n> starting at a random value per process: endpoint_socket.c), the
 * registration life cycle with kubelet, the ListAndWatch streams, the device list, the health
 * service and the periodic/backoff check timers. Hardware knowledge stays in the driver.
 *
 * Life cycle (design decision 4): serve, then Register (deadline 20 s > kubelet's 10 s dial).
 * On failure: stop that server, remove our socket, back off (100 ms doubling, capped at 5 s),
 * retry with a fresh server. kubelet restarts are seen by inotify on the device-plugins
 * directory (kubelet.sock created, our socket deleted, directory removed, replaced or created:
 * dp_watch re-arms itself) plus a stat backstop (30 s, 5 s without inotify), and by kubelet's
 * ListAndWatch stream ending: old streams are closed, a fresh server is created and registered
 * at once, except when streams keep ending soon after registering (another plugin registers the
 * same resource): then 100 ms doubling to 60 s, reset by a registration that stayed up 30 s.
 * Causes that come while a restart is scheduled join it (one restart, told once, for the stream
 * end, the deleted sockets and the new kubelet.sock of one kubelet restart). kubelet.sock created
 * again before the registration that followed its last creation succeeded (no kubelet starts
 * that fast: something recreates it in a loop) restarts 100 ms after the previous such restart,
 * doubling to 5 s, until a registration succeeds: the server keeps serving in between.
 * Only sockets this endpoint created are deleted, and stale ones of our prefix (nobody
 * listening, exact name pattern): at start, and when one holds the name we bind.
 *
 * Health (decision 7): devices start Unhealthy until the driver reports its first check; the
 * first ListAndWatch response is sent only after it. Later responses only on change, to every
 * open stream. While unhealthy the endpoint asks the driver to check again with a backoff
 * (1 s doubling to the periodic interval); healthy: every check_interval_usec. Each change of
 * the verdict or its reason is told once (on_health_changed; dp_endpoint_log_events logs it).
 * The first check may wait for the first registration attempt (first_check_hold_usec).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dp/loop.h"

typedef struct dp_endpoint dp_endpoint;
typedef struct dp_alloc dp_alloc;

typedef struct dp_device {
	const char *id;    /* at most 63 characters */
	int64_t numa_node; /* -1: unknown (no TopologyInfo sent) */
} dp_device;

typedef struct dp_driver {
	/* Start a check. Answer with dp_endpoint_set_health(), now or later. */
	void (*check)(dp_endpoint *ep, void *userdata);
	/* Every requested ID is known. Answer with dp_alloc_finish(), now or later. */
	void (*allocate)(dp_endpoint *ep, dp_alloc *a, void *userdata);
	/*
	 * GetPreferredAllocation for one container request (only with preferred_allocation; NULL:
	 * the must-include IDs first, then the available ones in the order given). Devices are
	 * indices into the configured list: avail and must as kubelet sent them (an ID may be in
	 * both; none twice in one list), size already capped at n_avail + n_must. Write at most
	 * size indices to out, each from avail or must and none twice, and return how many, or
	 * -errno. An answer that breaks these rules, or an error, is replaced by the default one
	 * (logged at debug): kubelet always gets a valid answer.
	 */
	int (*prefer)(dp_endpoint *ep, const size_t *avail, size_t n_avail, const size_t *must,
		      size_t n_must, size_t size, size_t *out, void *userdata);
} dp_driver;

typedef struct dp_endpoint_config {
	const char *resource_name;   /* "hyperlight.dev/hypervisor" */
	const char *socket_prefix;   /* dp_socket_prefix(): "hl-9thpct" (at most DP_SOCKET_PREFIX_MAX) */
	const dp_device *devices;    /* copied */
	size_t n_devices;
	bool preferred_allocation;   /* advertise GetPreferredAllocation */
	bool pre_start_required;
	/* DRA (dp/draside.h) serves these devices instead: the endpoint checks them and keeps their
	 * health (verdicts, events, metrics) but neither serves the device-plugin API nor registers
	 * with the kubelet, nor watches its directory. */
	bool no_kubelet;
	uint64_t check_interval_usec; /* 0: 30 s */
	/* The first check waits for the first registration attempt to end (registered or failed),
	 * at most this long (0: it does not wait; none when kubelet.sock is absent, as that attempt
	 * ends at once): kubelet dials back inside Register, and answering it must not queue behind
	 * a first check's blocking work. The devices stay Unhealthy until that check. */
	uint64_t first_check_hold_usec;
	/* The wording of on_health_changed's lines in dp_endpoint_log_events (NULL: the default in
	 * brackets): healthy at info "<healthy_message> resource=R[ <healthy_fields>][ <detail>=<the
	 * verdict's reason>]", unhealthy at warn "<unhealthy_message> resource=R reason=<reason>".
	 * Kept, not copied: literals, or storage that outlives the endpoint. */
	const char *healthy_message;   /* ["devices usable"] */
	const char *unhealthy_message; /* ["devices unusable, advertising every device Unhealthy"] */
	const char *healthy_fields;    /* "device=/dev/kvm" ["devices=<n_devices>"] */
	const char *healthy_detail;    /* "probe": the healthy verdict's reason is its proof [none] */
	const struct dp_endpoint_events *events; /* copied; NULL: none (dp_endpoint_set_events) */
	const dp_driver *driver;
	void *userdata;
} dp_endpoint_config;

/* Validates the configuration (-EINVAL: empty or too long IDs, duplicates, bad resource name,
 * a socket prefix empty or longer than DP_SOCKET_PREFIX_MAX; -ENAMETOOLONG: kubelet_dir longer
 * than DP_SOCKET_DIR_MAX). */
int dp_endpoint_new(dp_loop *loop, const char *kubelet_dir, const dp_endpoint_config *cfg,
		    dp_endpoint **ret);
/* Serve and register; asks the driver for the first check. */
int dp_endpoint_start(dp_endpoint *ep);
/* GOAWAY, close streams, remove our socket. Accepts NULL, returns NULL. */
dp_endpoint *dp_endpoint_free(dp_endpoint *ep);
DP_DEFINE_CLEANUP(dp_endpoint, dp_endpoint_free)

/* The driver's verdict for every device. reason: why unhealthy, or what a healthy verdict rests
 * on (NULL: none); on_health_changed is told the first verdict and each change of the verdict or
 * of its reason, so a daemon that opts into dp_endpoint_log_events logs it once per change. */
void dp_endpoint_set_health(dp_endpoint *ep, bool healthy, const char *reason);
/*
 * Per device, on top of the verdict: down[i] advertises device i Unhealthy even while the
 * verdict is healthy (one GPU of eight unbound, say); n must be the configured device count
 * (-EINVAL otherwise, nothing changed), -ENOMEM. A change is sent to every open stream (after
 * the first check) and counted in sdp_devices_healthy; the endpoint's own health (readiness,
 * on_health_changed) stays the verdict's. Logging a device's change is the driver's.
 */
int dp_endpoint_set_devices_down(dp_endpoint *ep, const bool *down, size_t n);
/* Device i is advertised Unhealthy by dp_endpoint_set_devices_down (false: not, or i too big). */
bool dp_endpoint_device_down(const dp_endpoint *ep, size_t i);
/* Ask the driver for a check soon (coalesced into one per loop batch). */
void dp_endpoint_request_check(dp_endpoint *ep);

bool dp_endpoint_healthy(const dp_endpoint *ep);
bool dp_endpoint_registered(const dp_endpoint *ep);
bool dp_endpoint_ready(const dp_endpoint *ep);
const char *dp_endpoint_resource(const dp_endpoint *ep);
/* Current socket file name (base name), NULL when not serving. */
const char *dp_endpoint_socket(const dp_endpoint *ep);

/* ---- one Allocate call ---- */

size_t dp_alloc_containers(const dp_alloc *a);
/* IDs of container c; *ret_n set. */
char **dp_alloc_ids(const dp_alloc *a, size_t c, size_t *ret_n);
/* Add to the response of container c. -ENOMEM, -EINVAL. */
int dp_alloc_add_cdi(dp_alloc *a, size_t c, const char *cdi_name);
int dp_alloc_add_annotation(dp_alloc *a, size_t c, const char *key, const char *value);
int dp_alloc_add_env(dp_alloc *a, size_t c, const char *key, const char *value);
int dp_alloc_add_device(dp_alloc *a, size_t c, const char *container_path, const char *host_path,
			const char *permissions);
/*
 * The CDI answer of the design's Allocate contract, for every container request of a: the CDI
 * device "<kind>=<device>", or with device NULL one "<kind>=<ID>" per requested ID, and the
 * annotation "cdi.k8s.io/<plugin_name>_<first ID>" = those names comma-separated (for runtimes
 * without the cdi_devices field; unique per container, as IDs are not shared). -ENOMEM (the
 * response may hold part of it: finish with an error), -EINVAL (NULL plugin_name or kind).
 */
int dp_alloc_add_cdi_answer(dp_alloc *a, const char *plugin_name, const char *kind, const char *device);
/* True when the requester went away; the driver may still finish (nothing is sent). */
bool dp_alloc_cancelled(const dp_alloc *a);
/* Deadline of the request (0: none). */
uint64_t dp_alloc_deadline(const dp_alloc *a);
/* Send the response (status OK) or the error; frees a. */
void dp_alloc_finish(dp_alloc *a, int status, const char *message);

/* The most devices "<id_prefix>0" .. "<id_prefix><n-1>" (decimal IDs, no NUMA node) whose
 * ListAndWatch response, every device "Unhealthy" (the longer word), fits one gRPC message
 * (DP_GRPC_MAX_MESSAGE, kubelet's receive limit): the ceiling of a daemon's device count. */
size_t dp_endpoint_max_devices(const char *id_prefix);

/* ---- events for the daemon's own (info-level) logging ---- */

/*
 * on_register_failed is told each reason once: when an attempt fails for another kind of reason
 * than the last one told (socket, kubelet.sock missing, connect refused, dial-back failed, no
 * answer, Register refused), and again every 5 minutes while the same kind keeps failing;
 * dp_endpoint_failures counts every failed attempt (in on_registered: the attempts before this
 * success, 0 when the first one worked). on_stale_removed: a stale socket of ours (no listener,
 * our exact name pattern) was deleted. on_contended: the ListAndWatch stream keeps ending soon
 * after registering (another plugin registers the same resource); re-registration backs off,
 * told once per episode with the first delay. on_request_refused: a DevicePlugin request on our
 * socket was answered with an error status before reaching the driver (bad or hostile input:
 * INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...); method is the gRPC path, message the status
 * message the client got. Told for every refusal: rate-limiting is the handler's.
 * on_health_changed: the driver's first verdict, and each change of the verdict or its reason
 * (without one from the driver: "" when healthy, "unhealthy" when not).
 */
typedef struct dp_endpoint_events {
	void (*on_registered)(dp_endpoint *ep, void *userdata);
	void (*on_register_failed)(dp_endpoint *ep, const char *reason, void *userdata);
	void (*on_restart)(dp_endpoint *ep, const char *why, void *userdata);
	void (*on_stale_removed)(dp_endpoint *ep, const char *socket, void *userdata);
	void (*on_contended)(dp_endpoint *ep, uint64_t delay_usec, void *userdata);
	void (*on_request_refused)(dp_endpoint *ep, const char *method, int status, const char *message,
				   void *userdata);
	void (*on_health_changed)(dp_endpoint *ep, bool healthy, const char *reason, void *userdata);
	void *userdata;
} dp_endpoint_events;

void dp_endpoint_set_events(dp_endpoint *ep, const dp_endpoint_events *ev);
/* The daemons' life-cycle log lines (info/warn: "registered with kubelet", "registration failed,
 * retrying", "re-registering", "request refused" rate-limited per kind, the health changes in
 * the configured wording), for a daemon's main path to opt into. */
extern const dp_endpoint_events dp_endpoint_log_events;
/* Why the endpoint is unhealthy, or why registration is pending ("" otherwise). */
const char *dp_endpoint_reason(const dp_endpoint *ep);
size_t dp_endpoint_devices(const dp_endpoint *ep);
/*
 * Socket names in the device-plugins directory, for any socket a daemon serves there (the
 * endpoint uses them; kata's idle health socket can): "<prefix>-<n>.sock", at most
 * DP_SOCKET_NAME_MAX bytes whatever the resource, as kubelet dials "<dir>/<name>" through a
 * sockaddr_un (108 bytes, NUL included).
 *
 * dp_socket_prefix makes a prefix "<tag>-<h>": tag the daemon's (1..DP_SOCKET_TAG_MAX bytes of
 * [a-z0-9]: "hl", "kata"), <h> the 30-bit FNV-1a hash of key (the resource name, or a word for
 * a socket several endpoints share) in 6 base32hex digits [0-9a-v]: "kata-pp49l5" for
 * nvidia.com/gpu (docs/operations.md lists them all; tests/kubelet computes the same). -EINVAL for
 * a bad tag or an empty key, -ENAMETOOLONG when size is too small; buf written only on success.
 *
 * dp_socket_name: <n> is 6 base32hex digits counting this process's names (30 bits) from a
 * random start drawn once per process, so a daemon restarted with the same PID does not reuse
 * its dead predecessor's names. -ENAMETOOLONG for a prefix longer than DP_SOCKET_PREFIX_MAX or
 * a buffer too small (buf then unchanged).
 *
 * dp_socket_sweep removes every stale socket of prefix in dir: named exactly
 * "<prefix>-<6 base32hex digits>.sock", a socket, and nobody listening (connect:
 * ECONNREFUSED); keep (may be NULL) is skipped; removed (may be NULL) is called with each name
 * removed. Returns how many were.
 *
 * dp_socket_stale: 1 when path is a socket no one listens on (connect: ECONNREFUSED), 0 when
 * someone does or it is not a socket, else -errno (-ENOENT: no such file).
 *
 * dp_socket_dir_check: 0 when every name we make, and kubelet.sock, fits a sockaddr_un in dir
 * (strlen(dir) <= DP_SOCKET_DIR_MAX), else -ENAMETOOLONG.
 */
#define DP_SOCKET_TAG_MAX 4
#define DP_SOCKET_HASH_LEN 6
#define DP_SOCKET_N_LEN 6
#define DP_SOCKET_PREFIX_MAX (DP_SOCKET_TAG_MAX + 1 + DP_SOCKET_HASH_LEN) /* "kata-pp49l5" */
/* "kata-pp49l5-07m1fs.sock": 23 */
#define DP_SOCKET_NAME_MAX (DP_SOCKET_PREFIX_MAX + 1 + DP_SOCKET_N_LEN + 5)
#define DP_SOCKET_SUN_PATH 108 /* sizeof(((struct sockaddr_un *)0)->sun_path) on Linux */
/* The longest directory: "<dir>/<name>" and its NUL in sun_path: 83 */
#define DP_SOCKET_DIR_MAX (DP_SOCKET_SUN_PATH - 1 - DP_SOCKET_NAME_MAX - 1)
int dp_socket_prefix(char *buf, size_t size, const char *tag, const char *key);
int dp_socket_name(char *buf, size_t size, const char *prefix);
unsigned dp_socket_sweep(const char *dir, const char *prefix, const char *keep,
			 void (*removed)(const char *name, void *userdata), void *userdata);
int dp_socket_dir_check(const char *dir);
int dp_socket_stale(const char *path);
/* Failed registration attempts since the last successful one. */
unsigned dp_endpoint_failures(const dp_endpoint *ep);
