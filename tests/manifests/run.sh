#!/bin/bash
# Validate every plain manifest in deploy/ (every *.yaml outside deploy/helm, every document)
# against the Kubernetes API schemas of the npm package kubernetes-models (validate.mjs),
# plus three deliberately broken copies that must be refused (a wrong type, a missing required
# field, an unknown kind). Part of `make test`; ends with "N passed, M failed".
#
#   tests/manifests/run.sh BUILD_DIR
#
# The package (version pinned by package-lock.json) is installed with `npm ci` into
# BUILD_DIR/manifests-npm (once; again when the lock file changes). The Helm chart is not
# rendered here (no helm on this machine type; tests/deploy/kata-chart.sh checks it).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
here=$src/tests/manifests
npmdir=$build/manifests-npm

command -v npm >/dev/null || { echo "tests/manifests: npm not found (Node.js and npm are on this machine type)" >&2; exit 1; }
mkdir -p "$npmdir"
if ! cmp -s "$here/package-lock.json" "$npmdir/package-lock.json" || [ ! -d "$npmdir/node_modules/kubernetes-models" ]; then
	cp "$here/package.json" "$here/package-lock.json" "$npmdir/"
	(cd "$npmdir" && npm ci --no-audit --no-fund --silent)
fi
cp "$here/validate.mjs" "$npmdir/validate.mjs"

python3 - "$src" "$npmdir/input.json" <<'PY'
import copy, glob, json, os, sys, yaml
src, out = sys.argv[1], sys.argv[2]
items = []
files = sorted(f for f in glob.glob(os.path.join(src, "deploy", "**", "*.yaml"), recursive=True)
               if "/deploy/helm/" not in f)
if not files:
    sys.exit("tests/manifests: no manifest found in deploy/")
for f in files:
    rel = os.path.relpath(f, src)
    with open(f) as fh:
        for i, doc in enumerate(yaml.safe_load_all(fh)):
            if doc is None:
                continue
            items.append({"where": f"{rel}#{i}", "object": doc, "expect": "valid"})
ds = next(it["object"] for it in items if it["object"].get("kind") == "DaemonSet")
broken = copy.deepcopy(ds)
broken["spec"]["template"]["spec"]["containers"][0]["name"] = 5
items.append({"where": "broken(containers[0].name is a number)", "object": broken, "expect": "invalid"})
broken = copy.deepcopy(ds)
del broken["spec"]["selector"]
items.append({"where": "broken(spec.selector missing)", "object": broken, "expect": "invalid"})
broken = copy.deepcopy(ds)
broken["kind"] = "DaemonSett"
items.append({"where": "broken(kind DaemonSett)", "object": broken, "expect": "invalid"})
json.dump(items, open(out, "w"))
print(f"validating {len(items)} objects from {len(files)} files with kubernetes-models")
PY
exec node "$npmdir/validate.mjs" "$npmdir/input.json"
