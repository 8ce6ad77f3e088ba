#!/usr/bin/env python3
"""Offline checks of deploy/hyperlight/, images/hyperlight.Containerfile and docs/operations.md.

Prints one line per check, "PASS <name>" or "FAIL <name>: <why>"; tests/deploy/check.sh counts
them. With --json OUT it also writes every parsed document (for the CEL policy test).

    check_manifests.py SRC_DIR [--json OUT]
    check_manifests.py --companions RENDERED COMPANIONS [VAR=VALUE ...]

The second form checks one `helm template` output of the chart (tests/deploy/check.sh renders
it): both DaemonSets set COMPANIONS to exactly COMPANIONS ("" : neither sets it), the bootstrap
nothing else of the companions', and the main one exactly the VAR=VALUE resource and count
variables given, each a value the daemon takes (hyperlight/companion.h).
"""
import json
import os
import re
import sys

import yaml

BINARY = "/hyperlight-device-plugin"
NAMESPACE = "hyperlight-system"
SA = "hyperlight-device-plugin"
ACCESS = "hyperlight.dev/device-access"
HYPERVISOR = "hyperlight.dev/hypervisor"
OPT_IN = "hyperlight.dev/device-plugin"
PROBE_CLIENT_DEADLINE_S = 3  # HEALTH_TIMEOUT_USEC in hyperlight/main.c
SEED_POD_SC = {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
               "seccompProfile": {"type": "RuntimeDefault"}}
SEED_CONTAINER_SC = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                     "capabilities": {"drop": ["ALL"]}}

# The companions (hyperlight/companion.h), in the daemon's table order: name, variable prefix.
COMPANIONS = (("tun", "TUN"), ("vhost-net", "VHOST_NET"), ("vhost-vsock", "VHOST_VSOCK"))
COMPANION_VAR = re.compile(r"^(COMPANIONS|(%s)_(RESOURCE|COUNT))$" % "|".join(e for _, e in COMPANIONS))
RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

results = []


def check(name, ok, why=""):
    results.append((name, bool(ok), why))
    print(("PASS " + name) if ok else ("FAIL %s: %s" % (name, why)))
    return ok


def dig(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict) and p in obj:
            obj = obj[p]
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return default
    return obj


def load_all(root):
    """{relative path: [documents]}; parse errors become failed checks."""
    docs = {}
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith((".yaml", ".yml")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)
            try:
                with open(path) as fh:
                    d = [x for x in yaml.safe_load_all(fh) if x is not None]
                check("parse %s" % rel, d, "no document")
                docs[rel] = d
            except yaml.YAMLError as e:
                check("parse %s" % rel, False, str(e).replace("\n", " "))
    return docs


def find(docs, kind, name):
    for rel, ds in docs.items():
        for d in ds:
            if d.get("kind") == kind and dig(d, "metadata", "name") == name:
                return rel, d
    return None, None


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


def mounts(pod, container):
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    return {m["mountPath"]: (m, vols.get(m["name"], {})) for m in container.get("volumeMounts", [])}


def mem_bytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(q))
    if not m:
        return None
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[m.group(2)]


def check_documents(docs):
    for rel, ds in docs.items():
        for i, d in enumerate(ds):
            where = "%s[%d]" % (rel, i)
            ok = isinstance(d, dict) and d.get("apiVersion") and d.get("kind") and dig(d, "metadata", "name")
            check("apiVersion, kind, metadata.name: " + where, ok, "missing")
            if not ok:
                continue
            if d["kind"] in ("Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                             "ValidatingAdmissionPolicyBinding"):
                check("cluster-scoped, no namespace: " + where, "namespace" not in d["metadata"],
                      "has metadata.namespace")
            elif not rel.startswith("examples/"):
                check("namespace %s: %s" % (NAMESPACE, where), d["metadata"].get("namespace") == NAMESPACE,
                      "namespace is %r" % d["metadata"].get("namespace"))


def check_namespace_rbac(docs):
    _, ns = find(docs, "Namespace", NAMESPACE)
    check("Namespace " + NAMESPACE, ns, "missing")
    check("namespace allows hostPath pods (pod-security enforce=privileged)",
          dig(ns, "metadata", "labels", "pod-security.kubernetes.io/enforce") == "privileged",
          "label pod-security.kubernetes.io/enforce is not privileged")
    _, sa = find(docs, "ServiceAccount", SA)
    check("ServiceAccount " + SA, sa, "missing")
    _, role = find(docs, "ClusterRole", SA)
    rules = dig(role, "rules", default=[])
    check("ClusterRole: only patch on core nodes",
          rules == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}], "rules are %r" % rules)
    _, crb = find(docs, "ClusterRoleBinding", SA)
    check("ClusterRoleBinding: role and subject",
          dig(crb, "roleRef") == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SA}
          and dig(crb, "subjects") == [{"kind": "ServiceAccount", "name": SA, "namespace": NAMESPACE}],
          "roleRef %r subjects %r" % (dig(crb, "roleRef"), dig(crb, "subjects")))


def check_probe(ds_name, c, kind, expect_cmd):
    p = c.get(kind) or {}
    check("%s %s command" % (ds_name, kind), dig(p, "exec", "command") == expect_cmd,
          "command is %r" % dig(p, "exec", "command"))
    t, period = p.get("timeoutSeconds", 1), p.get("periodSeconds", 10)
    check("%s %s timeout (%ss) leaves the %d s probe client room" % (ds_name, kind, t, PROBE_CLIENT_DEADLINE_S),
          t > PROBE_CLIENT_DEADLINE_S and period >= t, "timeoutSeconds %s periodSeconds %s" % (t, period))


def check_pod_security(ds_name, pod, c):
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    check(ds_name + " seccomp RuntimeDefault",
          dig(psc, "seccompProfile", "type") == "RuntimeDefault" or dig(csc, "seccompProfile", "type") == "RuntimeDefault",
          "no RuntimeDefault seccomp profile")
    check(ds_name + " not privileged, no privilege escalation",
          csc.get("privileged") is not True and csc.get("allowPrivilegeEscalation") is False,
          "privileged %r allowPrivilegeEscalation %r" % (csc.get("privileged"), csc.get("allowPrivilegeEscalation")))
    check(ds_name + " read-only root file system", csc.get("readOnlyRootFilesystem") is True, "not read-only")
    check(ds_name + " drops every capability, adds none",
          dig(csc, "capabilities", "drop") == ["ALL"] and not dig(csc, "capabilities", "add"),
          "capabilities %r" % csc.get("capabilities"))
    check(ds_name + " no host namespaces",
          not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), "uses a host namespace")
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    check(ds_name + " runs as uid 0 (owner of the kubelet and CDI directories)", uid == 0, "runAsUser %r" % uid)


def check_resources(ds_name, c):
    req, lim = dig(c, "resources", "requests", default={}), dig(c, "resources", "limits", default={})
    rm, lm = mem_bytes(req.get("memory")), mem_bytes(lim.get("memory"))
    check(ds_name + " memory request and limit", rm and lm and rm <= lm,
          "requests %r limits %r" % (req.get("memory"), lim.get("memory")))
    check(ds_name + " cpu request", req.get("cpu"), "no cpu request")


def check_common_daemonset(name, d):
    pod = dig(d, "spec", "template", "spec", default={})
    cs = pod.get("containers", [])
    check(name + " one container", len(cs) == 1, "%d containers" % len(cs))
    c = cs[0] if cs else {}
    sel = dig(d, "spec", "selector", "matchLabels", default={})
    labels = dig(d, "spec", "template", "metadata", "labels", default={})
    check(name + " selector matches the template",
          sel and all(labels.get(k) == v for k, v in sel.items()), "selector %r labels %r" % (sel, labels))
    check(name + " rolling update without surge (one grant per node)",
          dig(d, "spec", "updateStrategy", "rollingUpdate", "maxSurge", default=0) == 0, "maxSurge set")
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", default=[])
    check(name + " runs only on nodes labelled %s=true" % OPT_IN,
          len(terms) == 1 and {"key": OPT_IN, "operator": "In", "values": ["true"]} in terms[0].get("matchExpressions", []),
          "nodeSelectorTerms %r" % terms)
    check(name + " tolerates the chosen nodes' taints", {"operator": "Exists"} in pod.get("tolerations", []),
          "tolerations %r" % pod.get("tolerations"))
    check(name + " system-node-critical", pod.get("priorityClassName") == "system-node-critical",
          "priorityClassName %r" % pod.get("priorityClassName"))
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1].partition(":")[2]
    check(name + " image pinned to a version tag", re.fullmatch(r"v?[0-9][\w.+-]*", tag) is not None,
          "image %r" % image)
    check_pod_security(name, pod, c)
    check_resources(name, c)
    m = mounts(pod, c)
    kd = "/var/lib/kubelet/device-plugins"
    mnt, vol = m.get(kd, ({}, {}))
    check(name + " mounts the kubelet device-plugins directory read/write",
          dig(vol, "hostPath", "path") == kd and not mnt.get("readOnly"), "mount %r volume %r" % (mnt, vol))
    mnt, vol = m.get("/host-dev", ({}, {}))
    check(name + " mounts host /dev read-only at /host-dev",
          dig(vol, "hostPath", "path") == "/dev" and mnt.get("readOnly") is True and not mnt.get("mountPropagation"),
          "mount %r volume %r" % (mnt, vol))
    env = env_map(c)
    check(name + " HOST_DEVICE_DIR=/host-dev", dig(env, "HOST_DEVICE_DIR", "value") == "/host-dev",
          "HOST_DEVICE_DIR %r" % env.get("HOST_DEVICE_DIR"))
    return pod, c


def check_daemonsets(docs, version):
    _, acc = find(docs, "DaemonSet", "hyperlight-device-access")
    _, main = find(docs, "DaemonSet", "hyperlight-device-plugin")
    if not check("DaemonSet hyperlight-device-access", acc, "missing") or \
            not check("DaemonSet hyperlight-device-plugin", main, "missing"):
        return None
    apod, ac = check_common_daemonset("device-access", acc)
    mpod, mc = check_common_daemonset("device-plugin", main)
    check("both DaemonSets run the same image", ac.get("image") and ac.get("image") == mc.get("image"),
          "%r vs %r" % (ac.get("image"), mc.get("image")))
    check("image tag is the project version %s" % version, mc.get("image", "").endswith(":" + version),
          "image %r" % mc.get("image"))

    check("device-access args", ac.get("args") == ["--device-access"] and not ac.get("command"),
          "command %r args %r" % (ac.get("command"), ac.get("args")))
    check_probe("device-access", ac, "livenessProbe", [BINARY, "--device-access", "--health-check"])
    check_probe("device-access", ac, "readinessProbe", [BINARY, "--device-access", "--health-check=readiness"])
    check("device-access requests no device-access grant itself",
          ACCESS not in dig(ac, "resources", "limits", default={}) and ACCESS not in dig(ac, "resources", "requests", default={}),
          "it requests %s" % ACCESS)
    check("device-access has no API token", apod.get("automountServiceAccountToken") is False,
          "automountServiceAccountToken %r" % apod.get("automountServiceAccountToken"))
    check("device-access does not mount the CDI directory", "/var/run/cdi" not in mounts(apod, ac), "it does")

    check("device-plugin runs the main mode", not mc.get("args") and not mc.get("command"),
          "command %r args %r" % (mc.get("command"), mc.get("args")))
    check_probe("device-plugin", mc, "livenessProbe", [BINARY, "--health-check"])
    check_probe("device-plugin", mc, "readinessProbe", [BINARY, "--health-check=readiness"])
    check("device-plugin limits %s: 1" % ACCESS, str(dig(mc, "resources", "limits", ACCESS)) == "1",
          "limits %r" % dig(mc, "resources", "limits"))
    m = mounts(mpod, mc)
    mnt, vol = m.get("/var/run/cdi", ({}, {}))
    check("device-plugin mounts /var/run/cdi read/write",
          dig(vol, "hostPath", "path") == "/var/run/cdi" and not mnt.get("readOnly"), "mount %r volume %r" % (mnt, vol))
    env = env_map(mc)
    check("device-plugin NODE_NAME from spec.nodeName",
          dig(env, "NODE_NAME", "valueFrom", "fieldRef", "fieldPath") == "spec.nodeName", "NODE_NAME %r" % env.get("NODE_NAME"))
    check("device-plugin uses its ServiceAccount with a token",
          mpod.get("serviceAccountName") == SA and mpod.get("automountServiceAccountToken") is not False,
          "serviceAccountName %r" % mpod.get("serviceAccountName"))
    for var, lo, hi in (("DEVICE_COUNT", 1, None), ("DEVICE_UID", 0, 2**32 - 1), ("DEVICE_GID", 0, 2**32 - 1)):
        v = dig(env, var, "value")
        check("device-plugin %s is a valid value" % var,
              v is None or (isinstance(v, str) and v.isdigit() and int(v) >= lo and (hi is None or int(v) <= hi)),
              "%s=%r" % (var, v))
    v = dig(env, "DEVICE_MODE", "value")
    check("device-plugin DEVICE_MODE is 3 or 4 octal digits up to 0777",
          v is None or (isinstance(v, str) and re.fullmatch(r"0?[0-7]{3}", v) is not None), "DEVICE_MODE=%r" % v)
    # As shipped the companions are off (the chart's companions.enabled: []).
    for name, c in (("device-access", ac), ("device-plugin", mc)):
        extra = sorted(n for n in env_map(c) if COMPANION_VAR.match(n))
        check("%s sets no companion variable (companions off as shipped)" % name, not extra, "it sets %s" % extra)
    return mc


def check_companion_env(acc, main, want, want_vars):
    """Both DaemonSets of one chart render: COMPANIONS is want ("" : unset) on both; the
    bootstrap sets no other companion variable; the main one exactly want_vars ({VAR: VALUE})."""
    ac, mc = (dig(d, "spec", "template", "spec", "containers", 0, default={}) for d in (acc, main))
    aenv, menv = env_map(ac), env_map(mc)
    for name, env in (("device-access", aenv), ("device-plugin", menv)):
        got = dig(env, "COMPANIONS", "value")
        check("%s COMPANIONS=%r" % (name, want or None), got == (want or None) and
              (want or "COMPANIONS" not in env), "COMPANIONS %r" % env.get("COMPANIONS"))
    extra = sorted(n for n in aenv if COMPANION_VAR.match(n) and n != "COMPANIONS")
    check("device-access sets COMPANIONS only (no resource or count)", not extra, "it sets %s" % extra)
    got = {n: dig(e, "value") for n, e in menv.items() if COMPANION_VAR.match(n) and n != "COMPANIONS"}
    check("device-plugin companion variables %s" % (" ".join("%s=%s" % kv for kv in sorted(want_vars.items())) or "none"),
          got == want_vars, "got %r" % got)
    listed = want.split(",") if want else []
    order = [n for n, _ in COMPANIONS if n in listed]
    check("COMPANIONS names known companions once each, in the daemon's order",
          listed == order, "%r (order %r)" % (listed, order))
    seen = {}
    for n, e in COMPANIONS:
        if n not in listed:
            continue
        r = dig(menv, e + "_RESOURCE", "value", default=n)
        c = dig(menv, e + "_COUNT", "value", default="2000")
        check("%s_RESOURCE=%r is a resource name the daemon takes" % (e, r),
              isinstance(r, str) and len(r) <= 63 and RESOURCE_NAME.match(r) and r not in ("hypervisor", "device-access")
              and r not in seen, "invalid or also %s's" % seen.get(r))
        seen[r] = n
        check("%s_COUNT=%r is a count >= 1" % (e, c), isinstance(c, str) and c.isdigit() and int(c) >= 1, "invalid")
    check("no COMPANIONS with PLUGIN_API=dra", not (want and dig(menv, "PLUGIN_API", "value") == "dra"),
          "both set")
    check("device-plugin readinessProbe still asks every resource (--health-check=readiness)",
          dig(mc, "readinessProbe", "exec", "command") == [BINARY, "--health-check=readiness"],
          "command %r" % dig(mc, "readinessProbe", "exec", "command"))


def companions_main(path, want, pairs):
    try:
        with open(path) as fh:
            docs = {"render": [x for x in yaml.safe_load_all(fh) if x is not None]}
    except (OSError, yaml.YAMLError) as e:
        check("parse %s" % path, False, str(e).replace("\n", " "))
        return 1
    _, acc = find(docs, "DaemonSet", "hyperlight-device-access")
    _, main = find(docs, "DaemonSet", "hyperlight-device-plugin")
    if check("both DaemonSets rendered", acc and main, "device-access %r, device-plugin %r" % (bool(acc), bool(main))):
        check_companion_env(acc, main, want, dict(p.split("=", 1) for p in pairs))
    return 0 if all(ok for _, ok, _ in results) else 1


def check_workload(docs, main_container):
    _, pod = find(docs, "Pod", "hyperlight-example")
    if not check("example workload Pod", pod, "missing"):
        return
    spec = pod["spec"]
    check("workload nodeSelector %s is kvm or mshv" % HYPERVISOR,
          dig(spec, "nodeSelector", HYPERVISOR) in ("kvm", "mshv"), "nodeSelector %r" % spec.get("nodeSelector"))
    c = spec["containers"][0]
    check("workload limits %s: 1" % HYPERVISOR, str(dig(c, "resources", "limits", HYPERVISOR)) == "1",
          "limits %r" % dig(c, "resources", "limits"))
    check("workload does not request %s" % ACCESS, ACCESS not in dig(c, "resources", "limits", default={}), "it does")
    check("workload pod securityContext is the seed's",
          all(spec.get("securityContext", {}).get(k) == v for k, v in SEED_POD_SC.items()),
          "securityContext %r" % spec.get("securityContext"))
    check("workload container securityContext is the seed's",
          all(c.get("securityContext", {}).get(k) == v for k, v in SEED_CONTAINER_SC.items()),
          "securityContext %r" % c.get("securityContext"))
    if main_container:
        env = env_map(main_container)
        uid, gid = dig(env, "DEVICE_UID", "value", default="65534"), dig(env, "DEVICE_GID", "value", default="65534")
        check("workload user owns the injected device (DEVICE_UID/GID)",
              str(spec["securityContext"].get("runAsUser")) == uid and str(spec["securityContext"].get("runAsGroup")) == gid,
              "pod runs as %r:%r, device owner %s:%s" % (spec["securityContext"].get("runAsUser"),
                                                        spec["securityContext"].get("runAsGroup"), uid, gid))
        # What the kernel checks at open: the owner's bits for the owner, else the group's for a
        # process with the group (runAsGroup, supplementalGroups, fsGroup), else the others'.
        mode = dig(env, "DEVICE_MODE", "value", default="0660")
        if re.fullmatch(r"0?[0-7]{3}", str(mode)):
            sc = spec["securityContext"]
            groups = {str(sc.get("runAsGroup")), str(sc.get("fsGroup"))} | {str(g) for g in sc.get("supplementalGroups", [])}
            bits = int(mode, 8)
            shift = 6 if str(sc.get("runAsUser")) == uid else 3 if gid in groups else 0
            check("workload may open the injected device read/write (DEVICE_MODE %s)" % mode,
                  (bits >> shift) & 0o6 == 0o6, "pod runs as %r:%r groups %r, device %s:%s mode %s" % (
                      sc.get("runAsUser"), sc.get("runAsGroup"), sorted(groups), uid, gid, mode))


def check_policies(docs):
    for name in ("hyperlight-node-labels", "hyperlight-reserve-device-access"):
        _, p = find(docs, "ValidatingAdmissionPolicy", name)
        _, b = find(docs, "ValidatingAdmissionPolicyBinding", name)
        check("policy %s and its binding" % name,
              p and b and dig(b, "spec", "policyName") == name and dig(b, "spec", "validationActions") == ["Deny"]
              and dig(p, "spec", "failurePolicy") == "Fail" and p["apiVersion"] == "admissionregistration.k8s.io/v1",
              "policy %r binding %r" % (bool(p), dig(b, "spec")))
    _, p = find(docs, "ValidatingAdmissionPolicy", "hyperlight-node-labels")
    conds = " ".join(c.get("expression", "") for c in dig(p, "spec", "matchConditions", default=[]))
    check("node-labels policy matches the plugin's account",
          "'system:serviceaccount:%s:%s'" % (NAMESPACE, SA) in conds, "matchConditions %r" % conds)
    _, b = find(docs, "ValidatingAdmissionPolicyBinding", "hyperlight-reserve-device-access")
    exprs = dig(b, "spec", "matchResources", "namespaceSelector", "matchExpressions", default=[])
    check("reserve policy exempts only %s" % NAMESPACE,
          exprs == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE]}],
          "namespaceSelector %r" % exprs)


def check_no_test_root(src):
    hits = []
    for top in ("deploy", "images"):
        for dirpath, _, files in os.walk(os.path.join(src, top)):
            for f in files:
                path = os.path.join(dirpath, f)
                with open(path, errors="replace") as fh:
                    if "SDP_TEST_ROOT" in fh.read():
                        hits.append(os.path.relpath(path, src))
    check("SDP_TEST_ROOT (test-only) appears in no manifest or image file", not hits, "found in %s" % hits)


def check_containerfile(src):
    path = os.path.join(src, "images", "hyperlight.Containerfile")
    try:
        text = open(path).read()
    except OSError as e:
        check("images/hyperlight.Containerfile", False, str(e))
        return
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    check("Containerfile FROM scratch", lines and lines[0] == "FROM scratch", "first instruction %r" % lines[:1])
    check("Containerfile ENTRYPOINT is the binary", 'ENTRYPOINT ["%s"]' % BINARY in lines,
          "no ENTRYPOINT [\"%s\"]" % BINARY)
    check("Containerfile USER 0", "USER 0" in lines, "no USER 0")
    for label in ("version", "revision", "source"):
        check("Containerfile OCI label %s from an ARG" % label,
              re.search(r"org\.opencontainers\.image\.%s=\"\$\{[A-Z]+\}\"" % label, text) is not None,
              "label org.opencontainers.image.%s missing" % label)
    check("Containerfile has no RUN (scratch has no shell)", re.search(r"^\s*RUN\b", text, re.M) is None, "RUN found")
    script = open(os.path.join(src, "scripts", "build-static.sh")).read()
    # strip: the host's, or the cross one ("${tool}strip", --arch arm64)
    # the loop (of those in the script) whose body strips each name into the image's rootfs/
    loops = re.finditer(r"^for name in ([^;]*); do\n((?:.*\n)*?)done$", script, re.M)
    installs = [m for m in loops if re.search(r"\t(?:strip|\"\$\{tool\}strip\") -o \"\$ctx/rootfs/\$name\"", m.group(2))]
    check("build-static.sh installs the binary where ENTRYPOINT expects it",
          len(installs) == 1 and BINARY.lstrip("/") in installs[0].group(1).split(),
          "build-static.sh does not strip %s into $ctx/rootfs/" % BINARY.lstrip("/"))


def check_docs(src):
    """Every msg= quoted in docs/operations.md exists in the daemon's source."""
    path = os.path.join(src, "docs", "operations.md")
    try:
        doc = open(path).read()
    except OSError as e:
        check("docs/operations.md", False, str(e))
        return
    code = ""
    for d in ("hyperlight", "core/src"):
        for top, _, names in sorted(os.walk(os.path.join(src, d))):
            for f in sorted(names):
                if f.endswith(".c"):
                    code += open(os.path.join(top, f)).read()
    msgs = sorted(set(re.findall(r'msg=(?:"([^"]+)"|([A-Za-z][\w-]*))', doc)))
    msgs = [a or b for a, b in msgs]
    check("docs/operations.md quotes log lines", len(msgs) >= 10, "only %d msg= found" % len(msgs))
    for m in msgs:
        check("docs msg=%r is logged by the daemon" % m, '"%s"' % m in code, "not found in hyperlight/, core/src/")
    # docs/dra.md's troubleshooting rows: every log line it quotes is one the daemons log
    try:
        dra = open(os.path.join(src, "docs", "dra.md")).read()
    except OSError as e:
        check("docs/dra.md", False, str(e))
        return
    dmsgs = sorted(set(a or b for a, b in re.findall(r'msg=(?:"([^"]+)"|([A-Za-z][\w-]*))', dra)))
    check("docs/dra.md quotes DRA log lines", len(dmsgs) >= 10, "only %d msg= found" % len(dmsgs))
    kata_code = "".join(open(os.path.join(src, "kata", f)).read() for f in sorted(os.listdir(os.path.join(src, "kata")))
                        if f.endswith(".c"))
    for m in dmsgs:
        check("docs/dra.md msg=%r is logged by a daemon" % m, '"%s"' % m in code + kata_code,
              "not found in hyperlight/, kata/, core/src/")
    # and the other way: every line the DRA side logs at info or above has its row
    dra_code = ""
    for f in ("core/src/draside/draside.c", "core/src/draside/draside_claims.c", "hyperlight/dra.c", "kata/dra.c"):
        dra_code += open(os.path.join(src, f)).read()
    for m in sorted(set(re.findall(r'dp_(?:info|warn|error)\("([^"]+)"', dra_code))):
        check("DRA log line %r has its row in docs/dra.md" % m, 'msg="%s"' % m in dra or "msg=%s " % m in dra, "not in docs/dra.md")
    for f in ("00-namespace.yaml", "10-rbac.yaml", "20-device-access.yaml", "30-device-plugin.yaml"):
        check("docs/operations.md names %s" % f, f in doc or "deploy/hyperlight/" in doc, "not named")


def project_version(src):
    m = re.search(r"version:\s*'([^']+)'", open(os.path.join(src, "meson.build")).read())
    return m.group(1) if m else "?"


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--companions" and all("=" in a for a in sys.argv[4:]):
        return companions_main(sys.argv[2], sys.argv[3], sys.argv[4:])
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2] != "--json"):
        print(__doc__, file=sys.stderr)
        return 2
    src = sys.argv[1]
    docs = load_all(os.path.join(src, "deploy", "hyperlight"))
    check_documents(docs)
    check_namespace_rbac(docs)
    main_container = check_daemonsets(docs, project_version(src))
    check_workload(docs, main_container)
    check_policies(docs)
    check_no_test_root(src)
    check_containerfile(src)
    check_docs(src)
    if len(sys.argv) == 4:
        with open(sys.argv[3], "w") as fh:
            json.dump(docs, fh)
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
