/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kata-device-plugin: advertises the VFIO-bound PCI devices the compile-time table names
 * (IOMMUFD cdevs /dev/vfio/devices/vfioN or legacy group nodes /dev/vfio/<group>, classified
 * through sysfs) to kubelet, one resource per table row and one ID per IOMMU group, with a CDI
 * spec per resource for Kata's cold plug. The device set is fixed at start: a new or changed
 * device ends the daemon with status 3 so that the DaemonSet restarts it.
 */
#include "daemon.h"
#include "sku.h"

static void usage(FILE *f)
{
	(void)fputs("Advertises the VFIO-bound PCI devices that its compile-time table names to kubelet,\n"
	            "one resource per table row, one ID per IOMMU group (IDs 0..n-1 in PCI address order),\n"
	            "and owns one CDI spec per resource: /var/run/cdi/kata.<vendor>-<class>.yaml.\n"
	            "A device whose group is not viable, or that is unbound or removed, is Unhealthy until\n"
	            "it is usable again; a new or changed device makes the daemon exit with status 3.\n"
	            "\n",
	            f);
	kata_daemon_usage_table(f);
	(void)fputs("\n"
	            "  --health-check            exit 0 if every plugin socket of this daemon answers\n"
	            "                            gRPC health (liveness)\n"
	            "  --health-check=readiness  exit 0 if every advertised resource is registered,\n"
	            "                            streaming to kubelet and healthy\n",
	            f);
}

static void usage_env(FILE *f)
{
	fprintf(f,
		"  RESOURCE_NAMING       table (default: one resource per table row, as above) or sku\n"
		"                        (one resource per GPU/NVSwitch model, named from its PCI\n"
		"                        device ID in pci.ids %s, e.g. nvidia.com/GH100_H100_SXM5_80GB;\n"
		"                        a model that appears later is served at once)\n"
		"  VFIO_BACKEND          auto (default: iommufd when /dev/vfio/devices has cdevs, else\n"
		"                        legacy), iommufd (/dev/vfio/devices/vfioN) or legacy\n"
		"                        (/dev/vfio/<group> and /dev/vfio/vfio); never both\n"
		"  PLUGIN_API            device-plugin (default) or dra: each IOMMU group a DRA device\n"
		"                        of the driver kata.nvidia.com, published as ResourceSlices\n"
		"                        (needs NODE_NAME and the pod's service account; docs/dra.md)\n",
		kata_sku_ids_version);
}

int main(int argc, char **argv)
{
	struct kata_daemon d = { 0 };
	const dp_daemon kata = {
		.prog = "kata-device-plugin",
		.usage = usage,
		.usage_env = usage_env,
		.exit_startup = "/dev/vfio or /dev/vfio/devices unreadable, the seccomp filter refused by the kernel",
		.exit_invalid = "RESOURCE_NAMING, VFIO_BACKEND, PLUGIN_API",
		.exit_more = "3 when the VFIO device set changed (the DaemonSet restarts the daemon)",
		.health_prefixes = kata_daemon_health_prefixes,
		.health_dir = kata_daemon_health_dir,
		.health_present = true,
		.configure = kata_daemon_configure,
		.prepare = kata_daemon_prepare,
		.start = kata_daemon_start,
		.seccomp = kata_daemon_seccomp, /* the core list; PLUGIN_API=dra: its API helper */
		.stop = kata_daemon_stop,
	};
	return dp_daemon_main(&kata, &d, argc, argv);
}
