#!/bin/bash
# Offline checks of the kata deployment; ends with "N passed, M failed" (exit 1 on a failure).
#
#   tests/deploy/kata-chart.sh
#
# Needs python3 with python3-yaml; not helm, not a cluster, not podman.
# 1. deploy/helm/kata-device-plugin: Chart.yaml parses (no placeholder URL); in both charts
#    values.yaml and values.schema.json have the same keys, each described. The chart's
#    rendered output with default values, deploy/kata/kata-device-plugin.yaml (tests/manifests
#    renders the chart with real Helm and checks the file for drift), is checked structurally:
#    the fixed security context, the three host paths, the exec probes, LOG_LEVEL and
#    RESOURCE_NAMING, priority class, update strategy.
# 2. images/kata.Containerfile: FROM scratch, OCI labels, USER 0, ENTRYPOINT.
# 3. docs/kata.md: every msg= it quotes is logged by kata/*.c, and every warning or error the
#    daemon can log is explained there.
# 4. make deploy with fake helm/kubectl (HELM_BIN_DIR): without npm it says what to install;
#    without a cluster it says so and exits non-zero without calling helm; with a cluster it
#    runs exactly the documented helm commands (CHART=all, hyperlight, kata; another refused).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/sdp-kata-chart.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=../result.sh
. "$src/tests/result.sh"

# ---- 1-3: python3-yaml checks, one "PASS name" / "FAIL name: why" line each ----
tally < <(python3 - "$src" 2>&1 <<'PY' || echo "FAIL python checks: exited non-zero"
import json, os, re, sys
import yaml

src = sys.argv[1]
chart = os.path.join(src, "deploy/helm/kata-device-plugin")


def result(name, ok, why=""):
    print(("PASS %s" % name) if ok else ("FAIL %s: %s" % (name, why)), flush=True)


def check(name):
    """Decorator: run fn(); an AssertionError or any exception is a failure with its text."""
    def run(fn):
        try:
            fn()
            result(name, True)
        except Exception as e:  # noqa: BLE001 - every error is a failed check
            result(name, False, "%s: %s" % (type(e).__name__, e) if not isinstance(e, AssertionError) else str(e))
        return fn
    return run


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


# ---- Chart.yaml, values.yaml, values.schema.json

@check("Chart.yaml: apiVersion v2, name, semver version, appVersion")
def _():
    c = load(os.path.join(chart, "Chart.yaml"))
    assert c.get("apiVersion") == "v2", "apiVersion %r" % c.get("apiVersion")
    assert c.get("name") == "kata-device-plugin", "name %r" % c.get("name")
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", str(c.get("version"))), "version %r" % c.get("version")
    assert isinstance(c.get("appVersion"), str) and c["appVersion"], "appVersion %r" % c.get("appVersion")
    assert c.get("type", "application") == "application", "type %r" % c.get("type")


@check("Chart.yaml: no placeholder home or source (example.com)")
def _():
    with open(os.path.join(chart, "Chart.yaml")) as f:
        text = f.read()
    assert "example" not in text, "placeholder URL in Chart.yaml"


values = load(os.path.join(chart, "values.yaml"))


@check("values.yaml and values.schema.json: the same keys, every one described, no other key allowed")
def _():
    for name in ("kata-device-plugin", "hyperlight-device-plugin"):
        d = os.path.join(src, "deploy/helm", name)
        with open(os.path.join(d, "values.schema.json")) as f:
            schema = json.load(f)
        vals = load(os.path.join(d, "values.yaml"))
        assert schema.get("additionalProperties") is False, "%s: top level allows additional properties" % name
        props = schema.get("properties", {})
        assert set(props) == set(vals), "%s: schema %s, values %s" % (name, sorted(props), sorted(vals))
        undescribed = []

        def walk(ps, prefix):
            for k, v in ps.items():
                if not v.get("description"):
                    undescribed.append(prefix + k)
                ref = v.get("$ref", "").rsplit("/", 1)[-1]
                walk(v.get("properties") or schema.get("definitions", {}).get(ref, {}).get("properties", {}), prefix + k + ".")
        walk(props, "")
        assert not undescribed, "%s: no description for %s" % (name, undescribed)
        assert props["image"].get("additionalProperties") is False, "%s: image allows additional properties" % name
    assert values["resourceNaming"] == "table", "resourceNaming default %r" % values["resourceNaming"]
    assert values["vfioBackend"] == "auto", "vfioBackend default %r" % values["vfioBackend"]
    assert values["metrics"]["enabled"] is False and values["metrics"]["port"] == 9400, "metrics %r" % values["metrics"]


# ---- the rendered DaemonSet: deploy/kata/kata-device-plugin.yaml is what the chart renders with
# its default values (tests/manifests/run.sh checks that with real Helm, and renders non-default
# values too); the contracts are checked here on it.

state = {}
RENDERED = os.path.join(src, "deploy/kata/kata-device-plugin.yaml")


@check("deploy/kata/kata-device-plugin.yaml: one DaemonSet, generated from the chart")
def _():
    with open(RENDERED) as f:
        text = f.read()
    assert text.startswith("# GENERATED by scripts/render-manifests.sh"), "no GENERATED header"
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert len(docs) == 1, "%d documents" % len(docs)
    state["ds"] = docs[0]


def ds():
    assert "ds" in state, "the rendered manifest did not parse"
    return state["ds"]


def pod():
    return ds()["spec"]["template"]["spec"]


def container():
    cs = pod()["containers"]
    assert isinstance(cs, list) and len(cs) == 1, "%d containers, want 1" % len(cs)
    return cs[0]


@check("DaemonSet apps/v1, RollingUpdate without surge, system-node-critical, kube-system")
def _():
    d = ds()
    assert d.get("apiVersion") == "apps/v1" and d.get("kind") == "DaemonSet", "%s %s" % (d.get("apiVersion"), d.get("kind"))
    u = d["spec"]["updateStrategy"]
    assert u["type"] == "RollingUpdate" and u["rollingUpdate"]["maxSurge"] == 0, "updateStrategy %r" % u
    assert pod().get("priorityClassName") == "system-node-critical", "priorityClassName %r" % pod().get("priorityClassName")
    assert d["metadata"].get("namespace") == "kube-system", "namespace %r" % d["metadata"].get("namespace")
    assert pod().get("nodeSelector") == {"kubernetes.io/os": "linux"}, "nodeSelector %r" % pod().get("nodeSelector")


@check("security context: runAsUser 0 pinned, no privilege escalation, read-only root, drop ALL, seccomp RuntimeDefault")
def _():
    p, c = pod().get("securityContext") or {}, container().get("securityContext") or {}
    uid = c.get("runAsUser", p.get("runAsUser"))
    assert uid == 0 and p.get("runAsUser", 0) == 0, "runAsUser pod %r container %r" % (p.get("runAsUser"), c.get("runAsUser"))
    assert "runAsUser" in p or "runAsUser" in c, "runAsUser not pinned"
    assert p.get("runAsNonRoot", False) is False and c.get("runAsNonRoot", False) is False, "runAsNonRoot set"
    assert c.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation %r" % c.get("allowPrivilegeEscalation")
    assert c.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem %r" % c.get("readOnlyRootFilesystem")
    caps = c.get("capabilities") or {}
    assert caps.get("drop") == ["ALL"], "capabilities.drop %r" % caps.get("drop")
    assert not caps.get("add"), "capabilities.add %r" % caps.get("add")
    assert c.get("privileged", False) is False, "privileged"
    seccomp = (c.get("seccompProfile") or p.get("seccompProfile") or {}).get("type")
    assert seccomp == "RuntimeDefault", "seccompProfile %r" % seccomp
    assert (p.get("seccompProfile") or {"type": "RuntimeDefault"}).get("type") == "RuntimeDefault", "pod seccompProfile"
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod().get(k), "%s set" % k
    assert pod().get("automountServiceAccountToken") is False, "service account token mounted (no API access needed)"


@check("host paths: device-plugins (rw), /dev/vfio (readOnly), /var/run/cdi (rw), nothing else")
def _():
    vols = {v["name"]: v for v in pod().get("volumes", [])}
    want = {"/var/lib/kubelet/device-plugins": False, "/dev/vfio": True, "/var/run/cdi": False}
    paths = {}
    for name, v in vols.items():
        assert set(v) == {"name", "hostPath"}, "volume %s is not a hostPath: %r" % (name, v)
        paths[v["hostPath"]["path"]] = name
        assert v["hostPath"].get("type") in ("Directory", "DirectoryOrCreate"), "volume %s type %r" % (name, v["hostPath"].get("type"))
    assert set(paths) == set(want), "hostPaths %s" % sorted(paths)
    mounts = {m["name"]: m for m in container().get("volumeMounts", [])}
    assert set(mounts) == set(vols), "mounts %s, volumes %s" % (sorted(mounts), sorted(vols))
    for path, ro in want.items():
        m = mounts[paths[path]]
        assert m["mountPath"] == path, "%s mounted at %s" % (path, m["mountPath"])
        assert bool(m.get("readOnly", False)) == ro, "%s readOnly %r, want %r" % (path, m.get("readOnly"), ro)
        assert "subPath" not in m, "%s has a subPath" % path


@check("exec probes: --health-check (liveness), --health-check=readiness (readiness)")
def _():
    c = container()
    for probe, cmd in (("livenessProbe", ["/kata-device-plugin", "--health-check"]),
                       ("readinessProbe", ["/kata-device-plugin", "--health-check=readiness"])):
        p = c.get(probe)
        assert p and set(p) & {"exec", "httpGet", "tcpSocket", "grpc"} == {"exec"}, "%s %r" % (probe, p)
        assert p["exec"]["command"] == cmd, "%s command %r" % (probe, p["exec"]["command"])
        # The probe client's own deadline is 3 s.
        assert p.get("timeoutSeconds", 1) > 3, "%s timeoutSeconds %r <= 3" % (probe, p.get("timeoutSeconds"))
    assert "command" not in c and "args" not in c, "the entrypoint is overridden: %r %r" % (c.get("command"), c.get("args"))


@check("env: LOG_LEVEL=info, RESOURCE_NAMING=table and VFIO_BACKEND=auto only; no metrics port by default")
def _():
    env = container().get("env") or []
    assert env == [{"name": "LOG_LEVEL", "value": "info"}, {"name": "RESOURCE_NAMING", "value": "table"},
                   {"name": "VFIO_BACKEND", "value": "auto"}], "env %r" % env
    assert "ports" not in container(), "ports %r" % container().get("ports")
    assert container()["image"] == "localhost/kata-device-plugin:0.1.0", "image %r" % container()["image"]


# ---- Containerfile

@check("images/kata.Containerfile: FROM scratch, OCI labels, USER 0, ENTRYPOINT")
def _():
    with open(os.path.join(src, "images/kata.Containerfile")) as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)
    ins = [l.strip() for l in text.split("\n") if l.strip() and not l.strip().startswith("#")]
    froms = [l for l in ins if l.upper().startswith("FROM ")]
    assert froms == ["FROM scratch"], "FROM lines %r" % froms
    users = [l for l in ins if l.upper().startswith("USER ")]
    assert users == ["USER 0"], "USER lines %r" % users
    eps = [l for l in ins if l.upper().startswith("ENTRYPOINT ")]
    assert len(eps) == 1 and json.loads(eps[0][len("ENTRYPOINT "):]) == ["/kata-device-plugin"], "ENTRYPOINT %r" % eps
    copies = [l for l in ins if l.upper().startswith(("COPY ", "ADD "))]
    assert copies == ["COPY kata-device-plugin /kata-device-plugin", "COPY sdp-kube-api /sdp-kube-api"], "COPY lines %r" % copies
    labels = " ".join(l for l in ins if l.upper().startswith("LABEL "))
    for k in ("title", "description", "licenses", "version", "revision", "source"):
        assert "org.opencontainers.image.%s=" % k in labels, "no org.opencontainers.image.%s label" % k
    assert not [l for l in ins if l.upper().startswith(("RUN ", "CMD "))], "RUN or CMD in a scratch image"


# ---- docs vs the daemon's log lines

def daemon_messages():
    msgs = {}
    files = [os.path.join(src, "kata", n) for n in sorted(os.listdir(os.path.join(src, "kata")))
             if n.endswith(".c")]
    # the life-cycle lines both daemons opt into (dp_endpoint_log_events)
    files.append(os.path.join(src, "core/src/endpoint/endpoint_log.c"))
    # and the confinement lines (dp_seccomp_confine_daemon)
    files.append(os.path.join(src, "core/src/seccomp/seccomp.c"))
    # the signal lines (dp_signals_ignore), the CDI back-off episode (dp_cdi_log_fight) and
    # the gRPC limits (dp_grpc_log_limit): core functions both daemons opt into
    # the daemon shell's start-up and shutdown lines (dp_daemon_main) are kata's too
    for n in ("daemon/daemon.c", "base/signals.c", "cdi/cdi.c", "grpc/grpc_budget.c"):
        files.append(os.path.join(src, "core/src", n))
    # the Allocate lines, at debug (LOG_LEVEL=debug): the endpoint's own, for every daemon
    with open(os.path.join(src, "core/src/endpoint/endpoint_alloclog.c")) as f:
        for m in re.finditer(r'dp_debug\(\s*"((?:[^"\\]|\\.)*)"', f.read()):
            msgs.setdefault(m.group(1), "debug")
    for path in files:
        with open(path) as f:
            code = f.read()
        for m in re.finditer(r'dp_(info|warn|error)\(\s*"((?:[^"\\]|\\.)*)"', code):
            msgs[m.group(2)] = m.group(1)
        # the health-change lines' wording, logged by dp_endpoint_log_events (endpoint.h)
        for m in re.finditer(r'\.(healthy|unhealthy)_message\s*=\s*"((?:[^"\\]|\\.)*)"', code):
            msgs[m.group(2)] = "info" if m.group(1) == "healthy" else "warn"
        # dp_log(verbose ? DP_LOG_WARN : DP_LOG_DEBUG, "msg", ...)
        for m in re.finditer(r'dp_log\([^,]*DP_LOG_(INFO|WARN|ERROR)[^,]*,\s*"((?:[^"\\]|\\.)*)"', code):
            msgs.setdefault(m.group(2), m.group(1).lower())
    return msgs


@check("docs/kata.md: every quoted msg= is logged by kata/*.c; every warning and error is explained")
def _():
    with open(os.path.join(src, "docs/kata.md")) as f:
        doc = f.read()
    msgs = daemon_messages()
    assert msgs, "no log messages found in kata/*.c"
    quoted = set(re.findall(r'msg="([^"]+)"', doc)) | set(re.findall(r"msg=([A-Za-z][A-Za-z_-]*)", doc))
    unknown = sorted(q for q in quoted if q not in msgs)
    assert not unknown, "docs quote messages the daemon never logs: %s" % unknown
    missing = sorted(m for m, lvl in msgs.items() if lvl in ("warn", "error") and m not in quoted)
    assert not missing, "warnings/errors not explained in docs/kata.md: %s" % missing
PY
)

# ---- 4: make deploy, hermetic: fake helm and kubectl (HELM_BIN_DIR), no cluster reached ----
make=$(command -v make)
fake=$tmp/bin
sys=$tmp/sys
mkdir -p "$fake" "$sys"
mkfake() { # NAME EXIT: a fake command logging its arguments
	printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\nexit %s\n' "$1" "$tmp" "$2" >"$fake/$1"
	chmod +x "$fake/$1"
}
deploy() { # run `make deploy ARGS...`; output in $tmp/out, exit status echoed
	rm -f "$tmp/calls"
	(cd "$src" && "$make" --no-print-directory deploy "$@" >"$tmp/out" 2>&1)
	echo $?
}
# Without npm (a PATH of the basic tools only) and no HELM_BIN_DIR: says what to install.
for t in sh bash dirname mkdir cmp cp rm tail cat python3 env; do
	ln -sf "$(command -v "$t")" "$sys/$t"
done
rc=$(PATH=$sys deploy BUILD="$tmp/build")
result "make deploy without npm: exits non-zero and names the packages to install" \
	"$([ "$rc" -ne 0 ] && grep -q 'apt-get install nodejs npm' "$tmp/out" && grep -q 'nothing deployed' "$tmp/out" && echo 1)" \
	"exit $rc: $(cat "$tmp/out")"
mkfake helm 0
mkfake kubectl 1
rc=$(deploy HELM_BIN_DIR="$fake")
result "make deploy without a cluster: exits non-zero, helm not run" \
	"$([ "$rc" -ne 0 ] && grep -q 'no reachable Kubernetes cluster' "$tmp/out" && ! grep -q '^helm' "$tmp/calls" && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
mkfake kubectl 0
hl="helm upgrade --install hyperlight-device-plugin deploy/helm/hyperlight-device-plugin -n kube-system"
kt="helm upgrade --install kata-device-plugin deploy/helm/kata-device-plugin -n kube-system"
rc=$(deploy HELM_BIN_DIR="$fake")
result "make deploy with a cluster: installs both charts ('$hl', '$kt')" \
	"$([ "$rc" -eq 0 ] && [ "$(grep '^helm' "$tmp/calls")" = "$hl"$'\n'"$kt" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
rc=$(deploy HELM_BIN_DIR="$fake" CHART=kata "HELM_ARGS=--set logLevel=debug")
result "make deploy CHART=kata HELM_ARGS=...: only '$kt --set logLevel=debug'" \
	"$([ "$rc" -eq 0 ] && [ "$(grep '^helm' "$tmp/calls")" = "$kt --set logLevel=debug" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
rc=$(deploy HELM_BIN_DIR="$fake" CHART=hyperlight)
result "make deploy CHART=hyperlight: only '$hl'" \
	"$([ "$rc" -eq 0 ] && [ "$(grep '^helm' "$tmp/calls")" = "$hl" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
rc=$(deploy HELM_BIN_DIR="$fake" CHART=nvidia)
result "make deploy CHART=nvidia: refused, nothing run" \
	"$([ "$rc" -ne 0 ] && grep -q 'want hyperlight, kata or all' "$tmp/out" && [ ! -e "$tmp/calls" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
