#!/bin/bash
# Offline checks of the kata deployment; ends with "N passed, M failed" (exit 1 on a failure).
#
#   tests/deploy/kata-chart.sh
#
# Needs python3 with python3-yaml; not helm, not a cluster, not podman.
# 1. deploy/helm/kata-device-plugin: Chart.yaml and values.yaml parse; values expose only image
#    (repository, tag, pullPolicy), nodeSelector, tolerations, resources, logLevel, and
#    values.schema.json enforces exactly that. templates/daemonset.yaml is read as YAML after
#    every template action is taken out (an action must be a whole line or a whole value;
#    anything else fails), then checked structurally: the fixed security context, the three
#    host paths, the exec probes, LOG_LEVEL, priority class, update strategy; and every
#    templated value comes from the values it should.
# 2. images/kata.Containerfile: FROM scratch, OCI labels, USER 0, ENTRYPOINT.
# 3. docs/kata.md: every msg= it quotes is logged by kata/*.c, and every warning or error the
#    daemon can log is explained there.
# 4. make deploy with fake helm/kubectl on PATH: says what is missing and exits non-zero
#    without calling helm; with both present it runs exactly the documented helm command.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
passed=0
failed=0
tmp=$(mktemp -d /tmp/sdp-kata-chart.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

result() { # NAME OK [WHY]
	if [ "$2" = 1 ]; then
		echo "PASS $1"
		passed=$((passed + 1))
	else
		echo "FAIL $1: ${3:-}"
		failed=$((failed + 1))
	fi
}

# ---- 1-3: python3-yaml checks, one "PASS name" / "FAIL name: why" line each ----
while IFS= read -r line; do
	echo "$line"
	case $line in
	PASS\ *) passed=$((passed + 1)) ;;
	FAIL\ *) failed=$((failed + 1)) ;;
	esac
done < <(python3 - "$src" 2>&1 <<'PY' || echo "FAIL python checks: exited non-zero"
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


VALUES = {"image", "nodeSelector", "tolerations", "resources", "logLevel"}
values = load(os.path.join(chart, "values.yaml"))


@check("values.yaml exposes only image, nodeSelector, tolerations, resources, logLevel")
def _():
    assert isinstance(values, dict), "not a mapping"
    assert set(values) == VALUES, "keys %s" % sorted(values)
    img = values["image"]
    assert isinstance(img, dict) and set(img) == {"repository", "tag", "pullPolicy"}, "image keys %s" % img
    assert all(isinstance(img[k], str) for k in img), "image values must be strings: %r" % img
    assert img["repository"], "empty image.repository"
    assert img["pullPolicy"] in ("Always", "IfNotPresent", "Never"), "pullPolicy %r" % img["pullPolicy"]
    assert values["logLevel"] in ("debug", "info", "warn", "error"), "logLevel %r" % values["logLevel"]
    assert isinstance(values["nodeSelector"], dict), "nodeSelector %r" % values["nodeSelector"]
    assert all(isinstance(v, str) for v in values["nodeSelector"].values()), "nodeSelector values must be strings"
    assert isinstance(values["tolerations"], list), "tolerations %r" % values["tolerations"]
    res = values["resources"]
    assert isinstance(res, dict) and set(res) <= {"requests", "limits"}, "resources %r" % res


def validate(schema, value, where="values"):
    """The JSON-schema subset the chart's schema uses (helm validates with the full thing)."""
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str}
    if t:
        assert isinstance(value, types[t]), "%s: %r is not of type %s" % (where, value, t)
    if "enum" in schema:
        assert value in schema["enum"], "%s: %r not in %s" % (where, value, schema["enum"])
    if "minLength" in schema:
        assert len(value) >= schema["minLength"], "%s: shorter than %d" % (where, schema["minLength"])
    if t == "object":
        for k in schema.get("required", []):
            assert k in value, "%s: %s is required" % (where, k)
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                validate(props[k], v, where + "." + k)
            elif extra is False:
                raise AssertionError("%s: additional property %s is not allowed" % (where, k))
            elif isinstance(extra, dict):
                validate(extra, v, where + "." + k)
    if t == "array" and "items" in schema:
        for i, v in enumerate(value):
            validate(schema["items"], v, "%s[%d]" % (where, i))


@check("values.schema.json: accepts values.yaml, refuses any other key or a bad logLevel")
def _():
    with open(os.path.join(chart, "values.schema.json")) as f:
        schema = json.load(f)
    assert schema.get("additionalProperties") is False, "top level allows additional properties"
    assert set(schema.get("properties", {})) == VALUES, "schema properties %s" % sorted(schema.get("properties", {}))
    assert schema["properties"]["image"].get("additionalProperties") is False, "image allows additional properties"
    validate(schema, values)
    for bad in ({**values, "extraArgs": ["--x"]}, {**values, "logLevel": "verbose"},
                {**values, "image": {**values["image"], "digest": "sha256:0"}},
                {**values, "securityContext": {"privileged": True}}):
        try:
            validate(schema, bad)
        except AssertionError:
            continue
        raise AssertionError("accepted %r" % {k: v for k, v in bad.items() if values.get(k) != v})


# ---- templates

tdir = os.path.join(chart, "templates")
texts = {}
for name in sorted(os.listdir(tdir)):
    with open(os.path.join(tdir, name)) as f:
        texts[name] = f.read()

ALLOWED_REFS = {".Values.image.repository", ".Values.image.tag", ".Values.image.pullPolicy",
                ".Values.nodeSelector", ".Values.tolerations", ".Values.resources", ".Values.logLevel"}


@check("templates use exactly the exposed values")
def _():
    refs = set()
    for name, text in texts.items():
        refs |= set(re.findall(r"\.Values(?:\.[A-Za-z0-9_]+)*", text))
    assert refs <= ALLOWED_REFS, "unexpected references %s" % sorted(refs - ALLOWED_REFS)
    assert refs >= ALLOWED_REFS, "values never used: %s" % sorted(ALLOWED_REFS - refs)


COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.S)
ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.S)


def unfold(text):
    """YAML with the template actions taken out: a whole-line action is removed and recorded
    under the key of the line before it; `key: {{ action }}` becomes key: "@T:action@"."""
    text = COMMENT.sub("", text)
    out, attached, prev_key = [], {}, None
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        actions = ACTION.findall(line)
        if not actions:
            if "{{" in line or "}}" in line:
                raise AssertionError("line %d: a template action spans lines: %s" % (n, stripped))
            out.append(line)
            m = re.match(r"\s*(?:- )?([A-Za-z0-9_.-]+):\s*$", line)
            prev_key = m.group(1) if m else None
            continue
        if len(actions) == 1 and ACTION.fullmatch(stripped):
            if prev_key is None:
                raise AssertionError("line %d: a whole-line action not under a key: %s" % (n, stripped))
            attached.setdefault(prev_key, []).append(actions[0].strip())
            continue
        m = re.fullmatch(r"(\s*(?:- )?[A-Za-z0-9_.-]+:\s)\s*\{\{-?(.*?)-?\}\}\s*", line)
        if len(actions) != 1 or not m:
            raise AssertionError("line %d: an action inside a value: %s" % (n, stripped))
        out.append(m.group(1) + json.dumps("@T:" + m.group(2).strip() + "@"))
        prev_key = None
    return "\n".join(out), attached


state = {}


@check("templates/daemonset.yaml: parses once the template actions are taken out")
def _():
    text, attached = unfold(texts["daemonset.yaml"])
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert len(docs) == 1, "%d documents" % len(docs)
    state["ds"], state["attached"] = docs[0], attached


def ds():
    assert "ds" in state, "the template did not parse"
    return state["ds"]


def pod():
    return ds()["spec"]["template"]["spec"]


def container():
    cs = pod()["containers"]
    assert isinstance(cs, list) and len(cs) == 1, "%d containers, want 1" % len(cs)
    return cs[0]


@check("DaemonSet apps/v1, RollingUpdate, system-node-critical")
def _():
    d = ds()
    assert d.get("apiVersion") == "apps/v1" and d.get("kind") == "DaemonSet", "%s %s" % (d.get("apiVersion"), d.get("kind"))
    assert d["spec"]["updateStrategy"]["type"] == "RollingUpdate", "updateStrategy %r" % d["spec"]["updateStrategy"]
    assert pod().get("priorityClassName") == "system-node-critical", "priorityClassName %r" % pod().get("priorityClassName")
    assert d["metadata"].get("namespace") == "@T:.Release.Namespace@", "namespace %r" % d["metadata"].get("namespace")


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


@check("env: only LOG_LEVEL, from .Values.logLevel")
def _():
    env = container().get("env") or []
    assert [e.get("name") for e in env] == ["LOG_LEVEL"], "env %r" % env
    assert env[0].get("value") == "@T:.Values.logLevel | quote@", "LOG_LEVEL value %r" % env[0].get("value")


@check("templated fields come from the values: image, pullPolicy, resources, nodeSelector, tolerations")
def _():
    c, a = container(), state["attached"]
    assert c["image"] == '@T:include "kata-device-plugin.image" . | quote@', "image %r" % c["image"]
    helpers = texts["_helpers.tpl"]
    m = re.search(r'define "kata-device-plugin.image".*?\{\{-? end', helpers, re.S)
    assert m and ".Values.image.repository" in m.group(0) and ".Values.image.tag" in m.group(0), "image helper"
    assert c["imagePullPolicy"] == "@T:.Values.image.pullPolicy@", "imagePullPolicy %r" % c["imagePullPolicy"]
    assert a.get("resources") == ["toYaml .Values.resources | nindent 12"], "resources %r" % a.get("resources")
    assert a.get("tolerations") == ["toYaml .Values.tolerations | nindent 8"], "tolerations %r" % a.get("tolerations")
    assert a.get("nodeSelector") == ['include "kata-device-plugin.nodeSelector" . | nindent 8'], "nodeSelector %r" % a.get("nodeSelector")
    m = re.search(r'define "kata-device-plugin.nodeSelector".*?\{\{-? end', helpers, re.S)
    assert m and ".Values.nodeSelector" in m.group(0), "nodeSelector helper"
    # Nothing fixed next to the templated content.
    for owner, key in ((c, "resources"), (pod(), "tolerations"), (pod(), "nodeSelector")):
        assert owner.get(key) is None, "%s has fixed content too: %r" % (key, owner.get(key))


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
    assert copies == ["COPY kata-device-plugin /kata-device-plugin"], "COPY lines %r" % copies
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
    files.append(os.path.join(src, "core/src/endpoint_log.c"))
    # and the confinement lines (dp_seccomp_confine_daemon)
    files.append(os.path.join(src, "core/src/seccomp.c"))
    # the signal lines (dp_signals_ignore), the CDI back-off episode (dp_cdi_log_fight) and
    # the gRPC limits (dp_grpc_log_limit): core functions both daemons opt into
    for n in ("signals.c", "cdi.c", "grpc_budget.c"):
        files.append(os.path.join(src, "core/src", n))
    for path in files:
        with open(path) as f:
            code = f.read()
        for m in re.finditer(r'dp_(info|warn|error)\(\s*"((?:[^"\\]|\\.)*)"', code):
            msgs[m.group(2)] = m.group(1)
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

# ---- 4: make deploy, hermetic: fake helm and kubectl on an otherwise empty PATH ----
make=$(command -v make)
fake=$tmp/bin
mkdir -p "$fake"
mkfake() { # NAME EXIT: a fake command logging its arguments
	printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\nexit %s\n' "$1" "$tmp" "$2" >"$fake/$1"
	chmod +x "$fake/$1"
}
deploy() { # run `make deploy` with only $fake on PATH; output in $tmp/out, exit status echoed
	rm -f "$tmp/calls"
	(cd "$src" && PATH=$fake "$make" --no-print-directory deploy >"$tmp/out" 2>&1)
	echo $?
}
rc=$(deploy)
result "make deploy without helm: exits non-zero and says so" \
	"$([ "$rc" -ne 0 ] && grep -q 'helm is not installed' "$tmp/out" && echo 1)" "exit $rc: $(cat "$tmp/out")"
mkfake helm 0
rc=$(deploy)
result "make deploy without kubectl: exits non-zero, helm not run" \
	"$([ "$rc" -ne 0 ] && grep -q 'kubectl is not installed' "$tmp/out" && [ ! -e "$tmp/calls" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
mkfake kubectl 1
rc=$(deploy)
result "make deploy without a cluster: exits non-zero, helm not run" \
	"$([ "$rc" -ne 0 ] && grep -q 'no reachable Kubernetes cluster' "$tmp/out" && ! grep -q '^helm' "$tmp/calls" && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"
mkfake kubectl 0
rc=$(deploy)
want="helm upgrade --install kata-device-plugin deploy/helm/kata-device-plugin -n kube-system"
result "make deploy with helm and a cluster: runs '$want'" \
	"$([ "$rc" -eq 0 ] && [ "$(grep '^helm' "$tmp/calls")" = "$want" ] && echo 1)" \
	"exit $rc: $(cat "$tmp/out") calls: $(cat "$tmp/calls" 2>/dev/null)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
