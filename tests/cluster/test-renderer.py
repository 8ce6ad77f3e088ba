#!/usr/bin/env python3
"""Helm post-renderer of make test-cluster (test-only, never shipped): gives the kata chart's
pod the fake sysfs of sdp-katatree at /sys, read-only, in place of the host's.

    helm install ... --post-renderer tests/cluster/kata-sysfs-renderer.py \
        --post-renderer-args /var/lib/sdp-cluster/test/kata/sys

Reads the rendered manifests on stdin, adds a hostPath volume (type Directory) and its mount to
the kata DaemonSet's container, writes every document back. Fails (exit 1, a message on
stderr) unless exactly one DaemonSet with exactly one container is there: a chart that changed
shape must not be installed half-patched.
"""
import sys

import yaml


def main():
    if len(sys.argv) != 2 or not sys.argv[1].startswith("/"):
        sys.exit("kata-sysfs-renderer: usage: kata-sysfs-renderer.py ABSOLUTE_SYSFS_DIR")
    sysfs = sys.argv[1]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
    ds = [d for d in docs if d.get("kind") == "DaemonSet"]
    if len(ds) != 1:
        sys.exit(f"kata-sysfs-renderer: want exactly one DaemonSet, the chart rendered {len(ds)}")
    spec = ds[0]["spec"]["template"]["spec"]
    if len(spec.get("containers", [])) != 1:
        sys.exit("kata-sysfs-renderer: want exactly one container in the DaemonSet")
    spec.setdefault("volumes", []).append(
        {"name": "test-sysfs", "hostPath": {"path": sysfs, "type": "Directory"}})
    spec["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "test-sysfs", "mountPath": "/sys", "readOnly": True})
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
