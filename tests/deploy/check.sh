#!/bin/bash
# Offline checks of the hyperlight deployment; ends with "N passed, M failed".
#
#   tests/deploy/check.sh [BUILD]        (BUILD defaults to ./build)
#
# 1. deploy/hyperlight/ manifests, images/hyperlight.Containerfile and the log lines quoted in
#    docs/operations.md (check_manifests.py: python3-yaml).
# 2. (The admission policies' CEL is checked for structure only: no CEL evaluator is packaged
#    in Debian 12, and tests download nothing beyond Debian packages.)
#    The chart's companions (companions.*) with real Helm (scripts/helm-tools.sh, the install
#    tests/manifests uses; HELM=/path/to/helm takes that binary): off by default and with only
#    their resource and count changed, nothing of them is rendered; enabled, both DaemonSets
#    set COMPANIONS (in the daemon's order), the main one each enabled companion's resource and
#    count, the bootstrap nothing else (check_manifests.py --companions); the values the schema
#    or the templates refuse make helm template fail saying why; every variable rendered is
#    one the daemon documents (BUILD/hyperlight-device-plugin --help).
# 3. The image context (scripts/build-static.sh: the musl daemon, its label helper program and
#    musl's loader, nothing else): the binary runs in a chroot of it (root needed), every exec probe command of the
#    DaemonSets parses there, and the daemon documents every variable the manifests set. In
#    the chroot the node-label helper (hyperlight-label-node, Mbed TLS linked in) sends its PATCH over TLS to
#    a local `openssl s_server` and reports the answer; a server certificate for another
#    address is refused.
# 4. Both daemons run as the DaemonSets run them (uid 0, no capabilities, no_new_privs, their
#    environment and arguments) against the mock kubelet in a temp root, with the hypervisor
#    shim, until their own readiness probe commands pass; uid 65534 must fail there.
# Needs root (chroot, mknod, setpriv), python3-yaml, and a built BUILD.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" 2>/dev/null && pwd) || build=${1:-$src/build}

tmp=$(mktemp -d /tmp/sdp-deploy.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=../result.sh
. "$src/tests/result.sh"

# ---- 1. manifests ----
tally < <(python3 "$src/tests/deploy/check_manifests.py" "$src" --json "$tmp/docs.json" 2>&1)
[ -s "$tmp/docs.json" ] || result "manifests parsed for the policy test" 0 "check_manifests.py wrote no JSON"
# The same checks on a broken copy must fail where it is broken.
mkdir -p "$tmp/broken/core" "$tmp/broken/docs"
cp -r "$src/deploy" "$src/images" "$src/scripts" "$src/hyperlight" "$src/meson.build" "$tmp/broken/"
cp -r "$src/core/src" "$tmp/broken/core/"
cp "$src/docs/operations.md" "$tmp/broken/docs/"
ds="$tmp/broken/deploy/hyperlight/30-device-plugin.yaml"
sed -i -e 's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/' \
	-e 's/"--health-check=readiness"/"--health-check"/' \
	-e 's|value: /host-dev|value: /host-dev\n            - name: SDP_TEST_ROOT\n              value: /x|' \
	-e '/name: DEVICE_MODE/{n;s/value: .*/value: "4660"/}' "$ds"
out=$(python3 "$src/tests/deploy/check_manifests.py" "$tmp/broken" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q '^FAIL device-plugin read-only root' <<<"$out" &&
	grep -q '^FAIL device-plugin readinessProbe command' <<<"$out" &&
	grep -q '^FAIL SDP_TEST_ROOT' <<<"$out" &&
	grep -q '^FAIL device-plugin DEVICE_MODE' <<<"$out"; then
	result "manifest checks catch a writable root, a wrong probe flag, SDP_TEST_ROOT and a DEVICE_MODE with a setuid bit" 1
else
	result "manifest checks catch a writable root, a wrong probe flag, SDP_TEST_ROOT and a DEVICE_MODE with a setuid bit" 0 \
		"exit $rc: $(grep '^FAIL' <<<"$out" | tr '\n' ' ')"
fi

# ---- 2. the chart with companions ----
chart="$src/deploy/helm/hyperlight-device-plugin"
helm=${HELM:-}
if [ -z "$helm" ] && bin_dir=$("$src/scripts/helm-tools.sh" "$build" 2>"$tmp/helm-tools.err"); then
	helm=$bin_dir/helm
fi
# hrender NAME [helm args]: helm template into $tmp/chart/NAME.yaml (errors in NAME.err)
hrender() {
	local name=$1
	shift
	"$helm" template hyperlight-device-plugin "$chart" -n kube-system "$@" >"$tmp/chart/$name.yaml" 2>"$tmp/chart/$name.err"
}
if [ -z "$helm" ]; then
	result "chart with companions (helm template)" 0 "no helm: $(tail -3 "$tmp/helm-tools.err" | tr '\n' ' ')"
else
	mkdir -p "$tmp/chart"
	# rendered OK: NAME WHAT COMPANIONS [VAR=VALUE...] -- helm args
	rendered() {
		local name=$1 what=$2 want=$3
		shift 3
		local vars=()
		while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
		shift
		if hrender "$name" "$@"; then
			result "chart renders $what" 1
			tally < <(python3 "$src/tests/deploy/check_manifests.py" --companions "$tmp/chart/$name.yaml" "$want" "${vars[@]}" 2>&1 |
				awk -v w="$what" '{ sub(/^(PASS|FAIL) /, "&[" w "] "); print }')
		else
			result "chart renders $what" 0 "$(head -c 400 "$tmp/chart/$name.err")"
		fi
	}
	rendered default "default values (companions off)" "" --
	rendered off-changed "companions off, their resources and counts changed" "" -- \
		--set companions.tun.resource=tap --set companions.vhostNet.count=5 --set companions.vhostVsock.resource=vsock
	result "companions off renders byte-identical output, whatever their resources and counts" \
		"$(cmp -s "$tmp/chart/default.yaml" "$tmp/chart/off-changed.yaml" && echo 1)" \
		"$(diff "$tmp/chart/default.yaml" "$tmp/chart/off-changed.yaml" | head -c 400)"
	rendered all "all three companions" tun,vhost-net,vhost-vsock \
		TUN_RESOURCE=tun TUN_COUNT=10 VHOST_NET_RESOURCE=vhost-net VHOST_NET_COUNT=2000 \
		VHOST_VSOCK_RESOURCE=vsock VHOST_VSOCK_COUNT=2000 -- \
		--set 'companions.enabled={vhost-vsock,tun,vhost-net}' --set companions.tun.count=10 \
		--set companions.vhostVsock.resource=vsock
	rendered two "tun and vhost-vsock only" tun,vhost-vsock \
		TUN_RESOURCE=tun TUN_COUNT=2000 VHOST_VSOCK_RESOURCE=vhost-vsock VHOST_VSOCK_COUNT=2000 -- \
		--set 'companions.enabled={vhost-vsock,tun}' --set companions.vhostNet.resource=ignored
	rendered nondefault "vhost-net with tests/manifests' non-default values (api=devicePlugin)" vhost-net \
		VHOST_NET_RESOURCE=vnet VHOST_NET_COUNT=64 -- \
		-f "$src/tests/manifests/values/hyperlight-nondefault.yaml" --set api=devicePlugin \
		--set 'companions.enabled={vhost-net}' --set companions.vhostNet.count=64
	# The checker itself catches a bootstrap without COMPANIONS and one with a resource variable.
	if [ -s "$tmp/chart/all.yaml" ]; then
		python3 - "$tmp/chart/all.yaml" "$tmp/chart/broken.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d.get("kind") == "DaemonSet" and d["metadata"]["name"] == "hyperlight-device-access":
        env = d["spec"]["template"]["spec"]["containers"][0]["env"]
        env[:] = [e for e in env if e["name"] != "COMPANIONS"] + [{"name": "TUN_RESOURCE", "value": "tun"}]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
		out=$(python3 "$src/tests/deploy/check_manifests.py" --companions "$tmp/chart/broken.yaml" tun,vhost-net,vhost-vsock \
			TUN_RESOURCE=tun TUN_COUNT=10 VHOST_NET_RESOURCE=vhost-net VHOST_NET_COUNT=2000 \
			VHOST_VSOCK_RESOURCE=vsock VHOST_VSOCK_COUNT=2000 2>&1)
		rc=$?
		result "companion checks catch a bootstrap without COMPANIONS and with TUN_RESOURCE" \
			"$([ $rc -ne 0 ] && grep -q '^FAIL device-access COMPANIONS' <<<"$out" &&
				grep -q '^FAIL device-access sets COMPANIONS only' <<<"$out" && echo 1)" \
			"exit $rc: $(grep '^FAIL' <<<"$out" | tr '\n' ' ')"
	fi
	# Refused: helm template fails and its error says WANT (WHAT|HELM ARGS|WANT a line).
	while IFS='|' read -r what args want; do
		# shellcheck disable=SC2086
		hrender refused $args
		rc=$?
		result "chart refuses $what" "$([ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/chart/refused.err" && echo 1)" \
			"exit $rc: $(head -c 400 "$tmp/chart/refused.err")"
	done <<EOT
an unknown companion (macvtap)|--set companions.enabled={tun,macvtap}|companions.enabled.1 must be one of the following
a companion listed twice|--set companions.enabled={tun,tun}|companions.enabled: array items[0,1] must be unique
companions.enabled as a string|--set companions.enabled=tun|companions.enabled: Invalid type
an unknown key under companions|--set companions.macvtap.count=1|Additional property macvtap is not allowed
a resource name with a capital (Tun)|--set companions.tun.resource=Tun|companions.tun.resource: Does not match pattern
a resource name ending in '-'|--set companions.vhostNet.resource=vhost-|companions.vhostNet.resource: Does not match pattern
an empty resource name|--set companions.vhostVsock.resource=|companions.vhostVsock.resource: Does not match pattern
a resource name of 64 bytes|--set companions.tun.resource=$(printf 'a%.0s' $(seq 64))|companions.tun.resource: String length must be less than or equal to 63
the resource name hypervisor|--set companions.tun.resource=hypervisor|companions.tun.resource: Must not validate the schema (not)
the resource name device-access|--set companions.vhostNet.resource=device-access|companions.vhostNet.resource: Must not validate the schema (not)
the resource name enabled (the hypervisor's node label)|--set companions.tun.resource=enabled|companions.tun.resource: Must not validate the schema (not)
the resource name device-plugin (the operator's node label)|--set companions.vhostVsock.resource=device-plugin|companions.vhostVsock.resource: Must not validate the schema (not)
count 0|--set companions.tun.count=0|companions.tun.count: Must be greater than or equal to 1
count as a string|--set-string companions.vhostVsock.count=5|companions.vhostVsock.count: Invalid type
companions with api=dra (schema)|--set companions.enabled={tun} --set api=dra|api: api must be one of the following: "devicePlugin"
companions with api=dra (template, schema skipped)|--set companions.enabled={vhost-vsock} --set api=dra --skip-schema-validation|companions are served through the device-plugin API only
two enabled companions under one resource name|--set companions.enabled={tun,vhost-net} --set companions.vhostNet.resource=tun|tun and vhost-net are both hyperlight.dev/tun
EOT
	# Every variable the renders set is one the daemon documents.
	if [ -x "$build/hyperlight-device-plugin" ]; then
		helptext=$("$build/hyperlight-device-plugin" --help 2>&1)
		for var in $(cat "$tmp/chart/all.yaml" "$tmp/chart/nondefault.yaml" 2>/dev/null |
			sed -n 's/^ *- name: \([A-Z][A-Z0-9_]*\)$/\1/p' | sort -u); do
			result "the chart's $var is documented by the daemon (--help)" \
				"$(grep -qw -- "$var" <<<"$helptext" && echo 1)" "not in $build/hyperlight-device-plugin --help"
		done
	else
		result "the chart's companion variables are documented by the daemon (--help)" 0 \
			"no $build/hyperlight-device-plugin: build first"
	fi
fi

# ---- 3. image context ----
"$src/scripts/build-static.sh" "$src/build-static" >"$tmp/static.log" 2>&1 ||
	result "musl builds (scripts/build-static.sh)" 0 "$(tail -5 "$tmp/static.log")"
ctx="$src/build-static/image-context-hyperlight"
bin="$ctx/rootfs/hyperlight-device-plugin"
if [ ! -x "$bin" ]; then
	result "image context $ctx" 0 "no binary: scripts/build-static.sh failed"
else
	rm -rf "$tmp/ctx"
	cp -a "$ctx" "$tmp/ctx"
	root="$tmp/ctx/rootfs"
	files=$(cd "$root" && find . -type f | sort | tr '\n' ' ')
	result "image holds the daemon, its label helper and musl's loader, nothing else ($files)" \
		"$([ "$files" = "./hyperlight-device-plugin ./hyperlight-label-node ./lib/ld-musl-x86_64.so.1 " ] && echo 1)" "$files"
	needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
	result "the binary needs musl's libc.so only (NEEDED: $needed)" "$([ "$needed" = "libc.so " ] && echo 1)" \
		"NEEDED: $needed"
	want=$("$bin" --version 2>&1)
	# A sanitizer build (make asan) reads its options and runs its leak scan through /proc,
	# which the image does not have: give it a private /proc inside the chroot.
	in_image() {
		if [ -n "${ASAN_OPTIONS:-}" ]; then
			mkdir -p "$root/proc"
			unshare -m --propagation private sh -c 'mount -t proc proc "$0/proc" && exec chroot "$@"' \
				"$root" "$root" "$@"
		else
			chroot "$root" "$@"
		fi
	}
	got=$(in_image /hyperlight-device-plugin --version 2>&1)
	result "binary runs in the image with only its context" "$([ "$got" = "$want" ] && echo 1)" \
		"got '$got', want '$want'"
	# Every exec probe in the DaemonSets: in the image and with no plugin socket, each must be
	# understood (exit 1, "not live/ready" or no socket directory), not rejected (exit 2).
	python3 -c '
import json, sys
for ds in json.load(open(sys.argv[1])).values():
    for d in ds:
        if d["kind"] != "DaemonSet":
            continue
        c = d["spec"]["template"]["spec"]["containers"][0]
        for p in ("livenessProbe", "readinessProbe"):
            print(d["metadata"]["name"], p, "\t".join(c[p]["exec"]["command"]))
' "$tmp/docs.json" >"$tmp/probes"
	while read -r ds probe cmd; do
		IFS=$'\t' read -r -a argv <<<"$cmd"
		out=$(in_image "${argv[@]}" 2>&1)
		rc=$?
		result "$ds $probe command parses in the image (${argv[*]})" \
			"$([ $rc -eq 1 ] && ! grep -qi -e usage -e unknown <<<"$out" && echo 1)" "exit $rc: $out"
	done <"$tmp/probes"
	# The label child in the image: one PATCH over TLS to openssl s_server (it answers with
	# what it reads from its stdin), trusting only the server's own certificate.
	lt="$tmp/label-tls"
	mkdir -p "$lt" "$root/label-test"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
		-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
		-keyout "$lt/key.pem" -out "$root/label-test/ca.crt" >"$lt/req.log" 2>&1
	echo token-in-image >"$root/label-test/token"
	mkfifo "$lt/answer"
	timeout 30 openssl s_server -naccept 1 -accept 127.0.0.1:0 -cert "$root/label-test/ca.crt" \
		-key "$lt/key.pem" <"$lt/answer" >"$lt/server.log" 2>&1 &
	server=$!
	(printf 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}' &&
		exec sleep 30) >"$lt/answer" &
	feeder=$!
	for _ in $(seq 100); do grep -q '^ACCEPT' "$lt/server.log" && break; sleep 0.1; done
	port=$(sed -n 's/^ACCEPT 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$lt/server.log")
	label_child() {
		in_image /hyperlight-label-node --dp-helper label-node \
			"https://127.0.0.1:${port:-1}/api/v1/nodes/node-in-image" /label-test/token /label-test/ca.crt kvm true 2>&1
	}
	out=$(label_child)
	result "label child in the image: PATCH over TLS answered 200" \
		"$([ "$out" = "ok status=200" ] && grep -q '^PATCH /api/v1/nodes/node-in-image HTTP/1.1' "$lt/server.log" &&
			grep -q '^Authorization: Bearer token-in-image' "$lt/server.log" && echo 1)" \
		"child: '$out'; server: $(tr '\r\n' '  ' <"$lt/server.log" | head -c 600)"
	kill "$server" "$feeder" 2>/dev/null
	wait "$server" "$feeder" 2>/dev/null
	# A certificate signed by the trusted CA but for 127.0.0.2: refused before any request.
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
		-subj /CN=127.0.0.2 -addext subjectAltName=IP:127.0.0.2 \
		-keyout "$lt/key2.pem" -out "$root/label-test/ca.crt" >>"$lt/req.log" 2>&1
	sleep 30 | timeout 30 openssl s_server -naccept 1 -accept 127.0.0.1:0 -cert "$root/label-test/ca.crt" \
		-key "$lt/key2.pem" >"$lt/server2.log" 2>&1 &
	server=$!
	for _ in $(seq 100); do grep -q '^ACCEPT' "$lt/server2.log" && break; sleep 0.1; done
	port=$(sed -n 's/^ACCEPT 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$lt/server2.log")
	out=$(label_child)
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	result "label child in the image: a certificate for another address is refused" \
		"$([ "$out" = "fail TLS handshake with 127.0.0.1 port $port: certificate rejected: no subjectAltName IP address 127.0.0.1 in it" ] &&
			! grep -q '^PATCH' "$lt/server2.log" && echo 1)" "child: '$out'"
	rm -rf "$root/label-test"
	helptext=$(in_image /hyperlight-device-plugin --help 2>&1)
	python3 -c '
import json, sys
for ds in json.load(open(sys.argv[1])).values():
    for d in ds:
        if d["kind"] == "DaemonSet":
            for e in d["spec"]["template"]["spec"]["containers"][0].get("env", []):
                print(d["metadata"]["name"], e["name"])
' "$tmp/docs.json" >"$tmp/env"
	while read -r ds var; do
		result "$ds sets $var, which the daemon documents (--help)" \
			"$(grep -qw -- "$var" <<<"$helptext" && echo 1)" "not in --help"
	done <"$tmp/env"
fi

# ---- 4. the DaemonSets' security context, for real ----
# Both daemons as the manifests run them: uid 0, every capability dropped (bounding set too),
# no_new_privs, their environment, the host paths root-owned with kubelet's modes; kubelet is
# the mock, the hypervisor the LD_PRELOAD shim. Each must become ready by its own readiness
# probe command. And uid 65534 must fail: uid 0 is needed, not just convenient.
mock="$build/mock-kubelet"
# The image's binary ($bin, musl) with the hypervisor stand-in built against musl.
shim="$src/build-static/musl-dynamic/libhvshim.so"
pids=()
stop_all() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT
nocaps=(setpriv --reuid 0 --regid 0 --clear-groups --inh-caps=-all --ambient-caps=-all
	--bounding-set=-all --no-new-privs --)
# env_of DAEMONSET: its container's environment (fieldRef values made up), one NAME=VALUE a line.
env_of() {
	python3 -c '
import json, sys
for ds in json.load(open(sys.argv[1])).values():
    for d in ds:
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == sys.argv[2]:
            for e in d["spec"]["template"]["spec"]["containers"][0].get("env", []):
                print("%s=%s" % (e["name"], e.get("value", "node-under-test")))
' "$tmp/docs.json" "$1"
}
# probe_of DAEMONSET KIND: that probe's arguments after the binary, one a line.
probe_of() {
	python3 -c '
import json, sys
for ds in json.load(open(sys.argv[1])).values():
    for d in ds:
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == sys.argv[2]:
            print("\n".join(d["spec"]["template"]["spec"]["containers"][0][sys.argv[3]]["exec"]["command"][1:]))
' "$tmp/docs.json" "$1" "$2"
}
# wait_for SECONDS COMMAND...: poll until COMMAND succeeds or the bound passes.
wait_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt "$end" ] || return 1
		sleep 0.1
	done
}
if [ ! -x "$bin" ] || [ ! -x "$mock" ] || [ ! -f "$shim" ] || [ ! -s "$tmp/docs.json" ]; then
	result "daemons under the DaemonSets' security context" 0 "needs $bin, $mock and $shim: build first"
else
	r="$tmp/node"
	mkdir -p "$r/var/lib/kubelet" "$r/var/run" "$r/dev" "$r/host-dev"
	mkdir -m 0750 "$r/var/lib/kubelet/device-plugins"
	mkdir -m 0755 "$r/var/run/cdi"
	mknod -m 0660 "$r/dev/kvm" c 10 232
	mknod -m 0660 "$r/host-dev/kvm" c 10 232
	"$mock" -dir "$r/var/lib/kubelet/device-plugins" >"$tmp/mock.log" 2>&1 &
	pids+=($!)
	wait_for 10 test -S "$r/var/lib/kubelet/device-plugins/kubelet.sock"
	for ds in hyperlight-device-access hyperlight-device-plugin; do
		mapfile -t envs < <(env_of "$ds")
		mapfile -t args < <(python3 -c '
import json, sys
for ds in json.load(open(sys.argv[1])).values():
    for d in ds:
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == sys.argv[2]:
            print("\n".join(d["spec"]["template"]["spec"]["containers"][0].get("args", [])))
' "$tmp/docs.json" "$ds" | grep .)
		mapfile -t ready < <(probe_of "$ds" readinessProbe)
		base=(env -i PATH=/usr/bin:/bin SDP_TEST_ROOT="$r" HVSHIM_DEVICE="$r/dev/kvm")
		# the musl shim is preloaded into the daemon only, not into setpriv (glibc)
		daemon=(env LD_PRELOAD="$shim" "$bin")
		"${base[@]}" "${envs[@]}" "${nocaps[@]}" "${daemon[@]}" "${args[@]}" >"$tmp/$ds.log" 2>&1 &
		pids+=($!)
		if wait_for 15 "${base[@]}" "${nocaps[@]}" "${daemon[@]}" "${ready[@]}"; then
			result "$ds ready as uid 0 without capabilities (its own readiness probe)" 1
		else
			result "$ds ready as uid 0 without capabilities (its own readiness probe)" 0 \
				"$(tail -5 "$tmp/$ds.log" | tr '\n' ' ')"
		fi
	done
	cdi="$r/var/run/cdi/hyperlight.json"
	result "CDI spec written as uid 0 without capabilities" \
		"$([ -f "$cdi" ] && [ "$(stat -c %u "$cdi")" = 0 ] && echo 1)" "no $cdi"
	# Its device node as the manifest's DEVICE_UID, DEVICE_GID and DEVICE_MODE make it: the
	# owner and the permission bits (fileMode, a decimal number) a workload's /dev/kvm gets.
	node=$(python3 -c 'import json, sys
n = json.load(open(sys.argv[1]))["devices"][0]["containerEdits"]["deviceNodes"][0]
print(n.get("uid"), n.get("gid"), oct(n["fileMode"]) if "fileMode" in n else "no-fileMode")' "$cdi" 2>&1)
	want=$(env_of hyperlight-device-plugin | python3 -c 'import sys
e = dict(l.rstrip("\n").split("=", 1) for l in sys.stdin if "=" in l)
print(e.get("DEVICE_UID", "65534"), e.get("DEVICE_GID", "65534"), oct(int(e.get("DEVICE_MODE", "0660"), 8)))')
	result "CDI spec's device node: uid gid mode $want, as the manifest's DEVICE_UID, DEVICE_GID, DEVICE_MODE" \
		"$([ "$node" = "$want" ] && echo 1)" "spec has $node"
	grep -q 'NODE_NAME' <(env_of hyperlight-device-plugin) &&
		result "node labelling inactive without a service account (logged, not fatal)" \
			"$(grep -q 'msg="node labelling disabled"' "$tmp/hyperlight-device-plugin.log" && echo 1)" \
			"no 'node labelling disabled' line"
	mapfile -t envs < <(env_of hyperlight-device-plugin)
	"${base[@]}" "${envs[@]}" setpriv --reuid 65534 --regid 65534 --clear-groups \
		--inh-caps=-all --ambient-caps=-all --bounding-set=-all --no-new-privs -- \
		"${daemon[@]}" >"$tmp/nobody.log" 2>&1 &
	pids+=($!)
	if wait_for 10 grep -q 'Permission denied' "$tmp/nobody.log"; then
		result "uid 65534 without capabilities cannot serve in the kubelet directory" 1
	else
		result "uid 65534 without capabilities cannot serve in the kubelet directory" 0 \
			"$(tail -3 "$tmp/nobody.log" | tr '\n' ' ')"
	fi
	stop_all
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
