#!/usr/bin/env python3
"""Helm post-renderer of make test-cluster (test-only, never shipped). One of:

    helm install ... --post-renderer tests/cluster/test-renderer.py \
        --post-renderer-args sysfs --post-renderer-args /var/lib/sdp-cluster/test/kata/sys
    helm install ... --post-renderer tests/cluster/test-renderer.py \
        --post-renderer-args hvshim --post-renderer-args /var/lib/sdp-cluster/test/libhvshim.so

sysfs DIR: the kata DaemonSet's pod sees the fake sysfs of sdp-katatree at /sys, read-only, in
place of the host's.

hvshim FILE: the hyperlight-device-plugin DaemonSet's container preloads FILE (the tests'
hypervisor stand-in, tests/fakes/hvshim.c, built for the image's musl by
scripts/build-static.sh) for /dev/kvm, on a host without KVM where the test made a /dev/kvm
node that has no driver: the daemon's real probe code runs against the stand-in; everything
else (the bootstrap plugin, the kubelet, CDI, containerd, runc, the device cgroup) is real.

Reads the rendered manifests on stdin, adds a hostPath volume and its read-only mount (and for
hvshim the environment) to the one container of the DaemonSet it patches, writes every document
back. Fails (exit 1, a message on stderr) unless exactly one such DaemonSet with exactly one
container is there: a chart that changed shape must not be installed half-patched.
"""
import sys

import yaml

SHIM_MOUNT = "/sdp-test/libhvshim.so"


def daemonset(docs, name):
    ds = [d for d in docs if d.get("kind") == "DaemonSet" and (name is None or d["metadata"]["name"] == name)]
    if len(ds) != 1:
        sys.exit(f"test-renderer: want exactly one DaemonSet{' ' + name if name else ''}, the chart rendered {len(ds)}")
    spec = ds[0]["spec"]["template"]["spec"]
    if len(spec.get("containers", [])) != 1:
        sys.exit("test-renderer: want exactly one container in the DaemonSet")
    return spec


def mount(spec, name, host, host_type, path):
    spec.setdefault("volumes", []).append({"name": name, "hostPath": {"path": host, "type": host_type}})
    spec["containers"][0].setdefault("volumeMounts", []).append({"name": name, "mountPath": path, "readOnly": True})


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("sysfs", "hvshim") or not sys.argv[2].startswith("/"):
        sys.exit("test-renderer: usage: test-renderer.py sysfs ABSOLUTE_SYSFS_DIR | hvshim ABSOLUTE_SHIM_FILE")
    mode, path = sys.argv[1:]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
    if mode == "sysfs":
        mount(daemonset(docs, None), "test-sysfs", path, "Directory", "/sys")
    else:
        spec = daemonset(docs, "hyperlight-device-plugin")
        mount(spec, "test-hvshim", path, "File", SHIM_MOUNT)
        spec["containers"][0].setdefault("env", []).extend(
            [{"name": "LD_PRELOAD", "value": SHIM_MOUNT}, {"name": "HVSHIM_DEVICE", "value": "/dev/kvm"}])
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
