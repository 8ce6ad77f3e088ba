/* SPDX-License-Identifier: Apache-2.0 */
/* hyperlight-device-plugin: advertises the host hypervisor (/dev/kvm or /dev/mshv) to kubelet. */
#include "daemon.h"
#include "probe.h"

static void usage(FILE *f)
{
	(void)fputs("Advertises the host hypervisor device as the kubelet resource " HL_RESOURCE ",\n"
	            "owns the CDI spec /var/run/cdi/hyperlight.json and answers Allocate with its CDI name;\n"
	            "with COMPANIONS the same for each companion (hyperlight.dev/<name>,\n"
	            "/var/run/cdi/hyperlight-<name>.json).\n"
	            "\n"
	            "  --device-access           bootstrap mode: advertise one " HL_ACCESS_RESOURCE "\n"
	            "                            whose Allocate grants only the device node (stat only,\n"
	            "                            no CDI, no probe)\n"
	            "  --health-check            exit 0 if the plugin answers gRPC health (liveness)\n"
	            "  --health-check=readiness  exit 0 if registered, streaming to kubelet and healthy\n"
	            "                            (with COMPANIONS: every resource)\n"
	            "                            (with --device-access: asks the bootstrap plugin)\n",
	            f);
}

static void usage_env(FILE *f)
{
	fprintf(f,
		"  DEVICE_COUNT          devices advertised (default 2000; 1..%u)\n"
		"  DEVICE_UID, DEVICE_GID  owner of the device node in containers (default 65534)\n"
		"  DEVICE_MODE           its permission bits in containers, octal (default 0660: only\n"
		"                        DEVICE_UID and DEVICE_GID may open it; 0666: every uid)\n"
		"  HOST_DEVICE_DIR       the host's /dev mounted read-only, e.g. /host-dev\n"
		"  NODE_NAME             label this node through the in-cluster service account (the\n"
		"                        hypervisor's two labels, each companion's hyperlight.dev/<resource>)\n"
		"  NODE_LABELS           false: do not label it (default: label it when NODE_NAME is set)\n"
		"  NODE_LABELS_HOLD      seconds a new device verdict must hold before its label\n"
		"                        follows it (default 10; 0..3600)\n"
		"  PLUGIN_API            device-plugin (default) or dra: serve the hypervisor through\n"
		"                        DRA as driver hyperlight.dev (needs NODE_NAME, the service\n"
		"                        account and the kubelet's plugins and plugins_registry dirs)\n"
		"  COMPANIONS            devices a micro-VM sandbox needs beside the hypervisor, each\n"
		"                        its own resource and CDI spec: comma-separated tun,\n"
		"                        vhost-net, vhost-vsock (default none; not with PLUGIN_API=dra)\n"
		"  TUN_RESOURCE, VHOST_NET_RESOURCE, VHOST_VSOCK_RESOURCE\n"
		"                        a listed companion's resource and node label name under\n"
		"                        hyperlight.dev/ (default tun, vhost-net, vhost-vsock)\n"
		"  TUN_COUNT, VHOST_NET_COUNT, VHOST_VSOCK_COUNT\n"
		"                        a listed companion's devices advertised (default 2000;\n"
		"                        1..the ceiling of DEVICE_COUNT for its IDs)\n",
		hl_device_count_ceiling());
}

static const dp_daemon_flag flags[] = {
	[HL_FLAG_DEVICE_ACCESS] = { .name = "--device-access", .mode = "device-access", .no_metrics = true },
};

int main(int argc, char **argv)
{
	struct hl_daemon d = { 0 };
	const dp_daemon hyperlight = {
		.prog = "hyperlight-device-plugin",
		/* The probe helper children: this binary re-executed with --dp-helper (the
		 * node-label helper is its own program, HL_LABEL_EXE). */
		.helpers = hl_probe_helpers,
		.n_helpers = hl_probe_n_helpers,
		.flags = flags,
		.n_flags = DP_ELEMENTSOF(flags),
		.mode = "hypervisor",
		.usage = usage,
		.usage_env = usage_env,
		.exit_startup = "invalid DEVICE_COUNT, HOST_DEVICE_DIR, COMPANIONS or a companion's "
				"variable, no usable hypervisor device, the seccomp filter refused by the kernel",
		.health_prefixes = hl_daemon_health_prefixes,
		.health_dir = hl_daemon_health_dir,
		.configure = hl_daemon_configure,
		.start = hl_daemon_start,
		.seccomp = hl_daemon_seccomp,
		.stop = hl_daemon_stop,
	};
	return dp_daemon_main(&hyperlight, &d, argc, argv);
}
