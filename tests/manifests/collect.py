#!/usr/bin/env python3
"""Collects the objects tests/manifests/run.sh validates and checks what the non-default values
change in the rendered charts. Prints "PASS name" / "FAIL name: why" lines; writes the
validate.mjs input ([{"where", "object", "expect"}]).

    collect.py SRC_DIR RENDER_DIR OUT_JSON
"""
import copy
import glob
import json
import os
import sys

import yaml

src, rdir, out = sys.argv[1:4]
items = []


def result(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


files = sorted(f for f in glob.glob(os.path.join(src, "deploy", "**", "*.yaml"), recursive=True)
               if "/deploy/helm/" not in f)
result("plain manifests found in deploy/", files, "none")
for f in files:
    rel = os.path.relpath(f, src)
    try:
        for i, doc in enumerate(load(f)):
            items.append({"where": "%s#%d" % (rel, i), "object": doc, "expect": "valid"})
    except yaml.YAMLError as e:
        result("parse " + rel, False, str(e).replace("\n", " "))

renders = {}
for chart in ("hyperlight-device-plugin", "kata-device-plugin"):
    for what in ("default", "nondefault", "badobject"):
        path = os.path.join(rdir, "%s-%s.yaml" % (chart, what))
        try:
            docs = load(path)
        except (OSError, yaml.YAMLError) as e:
            result("rendered %s (%s) parses" % (chart, what), False, str(e).replace("\n", " ")[:300])
            continue
        result("rendered %s (%s) parses: %d objects" % (chart, what, len(docs)), docs, "no object")
        renders[(chart, what)] = docs
        for i, doc in enumerate(docs):
            if what == "badobject":
                if doc.get("kind") == "DaemonSet":
                    items.append({"where": "helm template %s (a template copy with terminationGracePeriodSeconds \"ten\")#%d" % (chart, i),
                                  "object": doc, "expect": "invalid"})
            else:
                items.append({"where": "helm template %s (%s values)#%d" % (chart, what, i), "object": doc, "expect": "valid"})

ds = next((it["object"] for it in items if it["object"].get("kind") == "DaemonSet"), None)
if ds:
    broken = copy.deepcopy(ds)
    broken["spec"]["template"]["spec"]["containers"][0]["name"] = 5
    items.append({"where": "broken(containers[0].name is a number)", "object": broken, "expect": "invalid"})
    broken = copy.deepcopy(ds)
    del broken["spec"]["selector"]
    items.append({"where": "broken(spec.selector missing)", "object": broken, "expect": "invalid"})
    broken = copy.deepcopy(ds)
    broken["kind"] = "DaemonSett"
    items.append({"where": "broken(kind DaemonSett)", "object": broken, "expect": "invalid"})
mon = next((it["object"] for it in items if it["object"].get("kind") == "ServiceMonitor"), None)
if mon:
    broken = copy.deepcopy(mon)
    broken["spec"]["endpoints"][0]["interval"] = 30
    items.append({"where": "broken(ServiceMonitor interval is a number)", "object": broken, "expect": "invalid"})


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def pod(d):
    return d["spec"]["template"]["spec"]


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def check(name, fn):
    try:
        fn()
        result(name, True)
    except Exception as e:  # noqa: BLE001 - every error is a failed check
        result(name, False, "%s: %s" % (type(e).__name__, e))


def hyperlight_nondefault():
    docs = renders[("hyperlight-device-plugin", "nondefault")]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "DaemonSet", "DeviceClass", "PodMonitor",
                     "Service", "ServiceAccount", "ServiceMonitor", "ValidatingAdmissionPolicy",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                     "ValidatingAdmissionPolicyBinding"], kinds
    for d in docs:
        assert d["metadata"].get("namespace", "sandbox-plugins") == "sandbox-plugins", d["metadata"]
    img = "registry.example.com:5000/sandbox/hyperlight-device-plugin@sha256:" + "0123456789abcdef" * 4
    for d in find(docs, "DaemonSet"):
        p, c = pod(d), pod(d)["containers"][0]
        assert c["image"] == img and c["imagePullPolicy"] == "Always", c["image"]
        assert p["imagePullSecrets"] == [{"name": "regcred"}], p.get("imagePullSecrets")
        assert p["nodeSelector"] == {"node-role.example.com/sandbox": "true"}, p.get("nodeSelector")
        assert p["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "example.com/hypervisor"
        assert p["tolerations"] == [{"key": "example.com/sandbox", "operator": "Equal", "value": "only", "effect": "NoSchedule"}]
        assert p["priorityClassName"] == "sandbox-critical"
        meta = d["spec"]["template"]["metadata"]
        assert meta["annotations"] == {"example.com/owner": "platform"}, meta
        assert meta["labels"]["example.com/team"] == "sandbox", meta
        assert d["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": "25%", "maxSurge": 0}
        paths = [v["hostPath"]["path"] for v in p["volumes"]]
        assert "/var/lib/k0s/kubelet/device-plugins" in paths and "/var/lib/kubelet/device-plugins" not in paths, paths
        assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/var/lib/kubelet/device-plugins"}
        assert env(c)["LOG_LEVEL"] == "debug"
        assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    main = find(docs, "DaemonSet", "hyperlight-device-plugin")[0]
    c = pod(main)["containers"][0]
    e = env(c)
    # api=dra with nodeLabels=false: the token and NODE_NAME for DRA, labelling off
    p = pod(main)
    assert p["automountServiceAccountToken"] is True and p["serviceAccountName"] == "hyperlight-device-plugin", p
    assert "NODE_NAME" in e and e["NODE_LABELS"] == "false" and e["PLUGIN_API"] == "dra", e
    assert "NODE_LABELS_HOLD" not in e, e  # nodeLabelsHold means nothing without labels
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    paths = {v["name"]: v["hostPath"]["path"] for v in p["volumes"]}
    assert (mounts["plugins"], mounts["plugins-registry"]) == ("/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry"), mounts
    assert (paths["plugins"], paths["plugins-registry"]) == ("/var/lib/k0s/kubelet/plugins", "/var/lib/k0s/kubelet/plugins_registry"), paths
    rules = find(docs, "ClusterRole")[0]["rules"]
    assert [(r["apiGroups"], r["resources"], r["verbs"]) for r in rules] == [
        (["resource.k8s.io"], ["resourceslices"], ["list", "create", "update", "delete"]),
        (["resource.k8s.io"], ["resourceclaims"], ["get"])], rules
    dc = find(docs, "DeviceClass")[0]
    assert dc["metadata"]["name"] == "hyperlight.dev" and dc["spec"]["extendedResourceName"] == "hyperlight.dev/hypervisor", dc
    assert (e["DEVICE_COUNT"], e["DEVICE_UID"], e["DEVICE_GID"], e["DEVICE_MODE"]) == ("500", "1000", "1001", "0600"), e
    assert e["METRICS_ADDRESS"] == ":9500" and c["ports"] == [{"name": "metrics", "containerPort": 9500, "protocol": "TCP"}], c.get("ports")
    assert c["resources"]["limits"] == {"cpu": "500m", "memory": "96Mi", "hyperlight.dev/device-access": "1"}, c["resources"]
    acc = find(docs, "DaemonSet", "hyperlight-device-access")[0]
    ac = pod(acc)["containers"][0]
    assert "METRICS_ADDRESS" not in env(ac) and "ports" not in ac, "metrics on the bootstrap DaemonSet"
    assert ac["resources"]["limits"] == {"cpu": "200m", "memory": "56Mi"}, ac["resources"]
    assert pod(acc)["automountServiceAccountToken"] is False and "serviceAccountName" not in pod(acc)
    assert sorted(v["metadata"]["name"] for v in find(docs, "ValidatingAdmissionPolicy")) == [
        "hyperlight-dra-slices", "hyperlight-reserve-device-access"]
    b = find(docs, "ValidatingAdmissionPolicyBinding", "hyperlight-reserve-device-access")[0]
    assert b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["sandbox-plugins"]
    sm, pm = find(docs, "ServiceMonitor")[0], find(docs, "PodMonitor")[0]
    assert sm["metadata"]["labels"]["release"] == "prometheus" and sm["spec"]["endpoints"][0]["interval"] == "15s"
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus" and pm["spec"]["podMetricsEndpoints"][0]["interval"] == "1m"
    svc = find(docs, "Service")[0]
    assert svc["spec"]["ports"][0]["port"] == 9500 and svc["spec"]["selector"] == main["spec"]["selector"]["matchLabels"]


def kata_nondefault():
    docs = renders[("kata-device-plugin", "nondefault")]
    assert sorted(d["kind"] for d in docs) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "DeviceClass", "DeviceClass",
        "PodMonitor", "Service", "ServiceAccount", "ServiceMonitor", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding"], [d["kind"] for d in docs]
    d = find(docs, "DaemonSet")[0]
    p, c = pod(d), pod(d)["containers"][0]
    assert c["image"] == "registry.example.com/gpu/kata-device-plugin@sha256:" + "fedcba9876543210" * 4, c["image"]
    assert c["imagePullPolicy"] == "Never" and p["imagePullSecrets"] == [{"name": "regcred"}]
    assert p["nodeSelector"] == {"node.kubernetes.io/kata-vfio": "true", "kubernetes.io/os": "linux"}, p["nodeSelector"]
    assert "nodeAffinity" in p["affinity"] and p["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "priorityClassName" not in p, p.get("priorityClassName")
    assert d["spec"]["updateStrategy"] == {"type": "OnDelete"}, d["spec"]["updateStrategy"]
    meta = d["spec"]["template"]["metadata"]
    assert meta["annotations"] == {"example.com/owner": "gpu-platform"} and meta["labels"]["example.com/team"] == "gpu"
    e = env(c)
    # api=dra: PLUGIN_API, NODE_NAME from the pod's node, the token of its own account
    assert e.pop("NODE_NAME", None) == {"fieldRef": {"fieldPath": "spec.nodeName"}}, e
    assert e == {"LOG_LEVEL": "warn", "RESOURCE_NAMING": "sku", "VFIO_BACKEND": "legacy", "PLUGIN_API": "dra",
                 "METRICS_ADDRESS": ":9401"}, e
    assert p["automountServiceAccountToken"] is True and p["serviceAccountName"] == "kata-device-plugin", p
    sa = find(docs, "ServiceAccount")[0]["metadata"]
    binding = find(docs, "ClusterRoleBinding")[0]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}], binding
    rules = find(docs, "ClusterRole")[0]["rules"]
    assert rules == [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "create", "update", "delete"]},
                     {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}], rules
    classes = {c["metadata"]["name"]: c["spec"] for c in find(docs, "DeviceClass")}
    assert sorted(classes) == ["gpu.kata.nvidia.com", "nvswitch.kata.nvidia.com"], classes
    for name, spec in classes.items():
        r = "nvidia.com/" + name.split(".")[0]
        assert spec["extendedResourceName"] == r and ('.resource == "%s"' % r) in spec["selectors"][0]["cel"]["expression"], spec
    vap = find(docs, "ValidatingAdmissionPolicy")[0]
    assert "'kata.nvidia.com'" in vap["spec"]["variables"][1]["expression"], vap
    assert ("system:serviceaccount:%s:%s" % (sa["namespace"], sa["name"])) in vap["spec"]["matchConditions"][0]["expression"], vap
    assert c["ports"] == [{"name": "metrics", "containerPort": 9401, "protocol": "TCP"}]
    assert c["resources"]["limits"] == {"cpu": "200m", "memory": "128Mi"}
    paths = [v["hostPath"]["path"] for v in p["volumes"]]
    k = "/var/snap/microk8s/common/var/lib/kubelet"
    assert paths == [k + "/device-plugins", k + "/plugins", k + "/plugins_registry", "/dev/vfio", "/var/run/cdi"], paths
    assert find(docs, "ServiceMonitor")[0]["spec"]["endpoints"][0]["interval"] == "20s"
    assert find(docs, "PodMonitor")[0]["spec"]["podMetricsEndpoints"][0]["interval"] == "45s"


def podlabels_cannot_move_selector():
    for chart in ("hyperlight-device-plugin", "kata-device-plugin"):
        for d in find(renders[(chart, "nondefault")], "DaemonSet"):
            labels = d["spec"]["template"]["metadata"]["labels"]
            for k, v in d["spec"]["selector"]["matchLabels"].items():
                assert labels.get(k) == v, "%s %s: selector %s=%s, pod label %r" % (chart, d["metadata"]["name"], k, v, labels.get(k))


if ("hyperlight-device-plugin", "nondefault") in renders:
    check("hyperlight-device-plugin non-default render: every value reaches its object", hyperlight_nondefault)
if ("kata-device-plugin", "nondefault") in renders:
    check("kata-device-plugin non-default render: every value reaches its object", kata_nondefault)
if all((c, "nondefault") in renders for c in ("hyperlight-device-plugin", "kata-device-plugin")):
    check("pod labels keep matching the selectors", podlabels_cannot_move_selector)

with open(out, "w") as f:
    json.dump(items, f)
print("validating %d objects with kubernetes-models" % len(items))
