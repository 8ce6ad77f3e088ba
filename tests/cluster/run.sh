#!/bin/bash
# make test-cluster: both plugins on the real single-node cluster of make cluster, installed
# from their charts with the real Helm, checked step by step through the real components (the
# API server, scheduler, kubelet, containerd, runc). tests/cluster/README.md says what each step
# proves and why it is done this way.
#
#   tests/cluster/run.sh BUILD_DIR
#
# K8S_VERSION: the Kubernetes release the running cluster must be, v1.37.2 (default) or v1.34.4
# (make cluster K8S_VERSION=v1.34.4; cluster/lib.sh kube_release).
# Needs make cluster running (its kubeconfig, binaries and images) and BUILD_DIR's sdp-katatree
# (scripts/go-build.sh). Ends with `test-cluster: N passed, M failed`; exit 1 if any failed.
# Everything it makes (the charts' releases, test pods and namespace, node labels, the kata
# tree and its /dev/vfio bind mount) is removed on the way out, failed or not.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: tests/cluster/run.sh BUILD_DIR}" && pwd)
# shellcheck source=cluster/lib.sh
. "$src/cluster/lib.sh"
kube_release # K8S_VERSION: the release under test

export KUBECONFIG=$KUBECONFIG_ADMIN
bin=$STATE/bin
helm_bin=$("$src/scripts/helm-tools.sh" "$build")
export PATH=$bin:$helm_bin:$PATH # the cluster's kubectl (its release) before Helm's
NS=sdp-test
TEST=$STATE/test
KATA_ROOT=$TEST/kata
RENDERER=$src/tests/cluster/kata-sysfs-renderer.py
HL_NS=hyperlight-system
version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)

passed=0
failed=0
t_all=$(date +%s.%N)
say() { echo "test-cluster: $*"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME FUNC: runs FUNC, prints its time; a failed step ends the run (the steps build on
# each other), the cleanup still runs.
step() {
	local name=$1 t
	shift
	t=$(date +%s.%N)
	if "$@"; then
		passed=$((passed + 1))
		say "ok   $name ($(secs "$t") s)"
	else
		failed=$((failed + 1))
		say "FAIL $name ($(secs "$t") s)"
		finish
	fi
}
fail() { echo "test-cluster:   $*" >&2; return 1; }
note() { echo "test-cluster:   $*"; }

# until SECONDS CMD...: CMD succeeds within SECONDS (polled every 0.5 s).
until_ok() {
	local end=$(($(date +%s) + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.5
	done
}

node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}' 2>/dev/null) ||
	{ echo "test-cluster: no cluster (make cluster first): kubectl get nodes failed" >&2; exit 1; }
server=$(kubectl version -o json 2>/dev/null | jq -r .serverVersion.gitVersion) || true
[ "$server" = "$K8S_VERSION" ] ||
	{ echo "test-cluster: the cluster runs Kubernetes $server, not $K8S_VERSION: make cluster-down, then make cluster K8S_VERSION=$K8S_VERSION" >&2; exit 1; }

# --- cleanup ------------------------------------------------------------------------------------
cleanup() {
	set +e
	kubectl delete namespace "$NS" --wait=true --timeout=60s >/dev/null 2>&1
	kubectl -n "$HL_NS" delete pod sdp-test-binder --wait=true --timeout=30s >/dev/null 2>&1
	kubectl delete node sdp-test-other --wait=true --timeout=30s >/dev/null 2>&1
	helm uninstall -n kube-system --wait --timeout 60s kata-device-plugin >/dev/null 2>&1
	helm uninstall -n kube-system --wait --timeout 60s hyperlight-device-plugin >/dev/null 2>&1
	kubectl delete namespace "$HL_NS" --wait=true --timeout=60s >/dev/null 2>&1
	kubectl label node "$node" hyperlight.dev/device-plugin- hyperlight.dev/enabled- hyperlight.dev/hypervisor- >/dev/null 2>&1
	if mountpoint -q /dev/vfio 2>/dev/null && [ -f "$TEST/vfio-mounted" ]; then
		umount /dev/vfio && [ -f "$TEST/vfio-made" ] && rmdir /dev/vfio
	fi
	rm -rf "$TEST"
	set -e
}
finish() {
	cleanup
	say "$passed passed, $failed failed ($(secs "$t_all") s)"
	[ "$failed" -eq 0 ] && exit 0
	exit 1
}
trap 'failed=$((failed + 1)); say "interrupted"; finish' INT TERM

# diag NS POD: what an operator would look at when a pod is not where it should be.
diag() {
	kubectl -n "$1" describe pod "$2" 2>&1 | sed -n '/^Events:/,$p' | tail -15 >&2
	kubectl -n "$1" logs "$2" --all-containers --tail=20 >&2 2>&1 || true
}

# --- the fixtures -------------------------------------------------------------------------------
fixtures() {
	[ -x "$build/sdp-katatree" ] || fail "$build/sdp-katatree missing (scripts/go-build.sh $build)" || return 1
	local imgs img
	imgs=$("$bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io images ls -q 2>/dev/null) # (not piped into grep -q: pipefail)
	for img in "localhost/kata-device-plugin:$version" "localhost/hyperlight-device-plugin:$version" "$BUSYBOX_IMAGE"; do
		grep -qx "$img" <<<"$imgs" ||
			fail "image $img is not in containerd (make cluster imports it from make images)" || return 1
	done
	# /dev/vfio: absent, or an empty directory (the kata chart's hostPath makes one)
	if [ -e /dev/vfio ] && { [ ! -d /dev/vfio ] || mountpoint -q /dev/vfio || [ -n "$(ls -A /dev/vfio)" ]; }; then
		fail "/dev/vfio on this host is not an empty directory: the test puts its VFIO tree there and will not hide a real one ($(ls -A /dev/vfio 2>&1 | head -n 5 | tr '\n' ' '))"
		return 1
	fi
	rm -rf "$TEST"
	mkdir -p "$TEST"
	"$build/sdp-katatree" "$KATA_ROOT" >"$TEST/kata-tree.json" || return 1
	[ -d /dev/vfio ] || { mkdir /dev/vfio && touch "$TEST/vfio-made"; }
	mount --bind "$KATA_ROOT/dev/vfio" /dev/vfio || return 1
	touch "$TEST/vfio-mounted"
	kubectl create namespace "$NS" >/dev/null
	note "kata tree: $(jq -c '[.devices[] | {name, group, numa}]' "$TEST/kata-tree.json")"
}

# tree NAME FIELD: a field of the tree's device NAME.
tree() { jq -r --arg n "$1" ".devices[] | select(.name == \$n) | .$2" "$TEST/kata-tree.json"; }

# --- kata ---------------------------------------------------------------------------------------
kata_install() {
	helm upgrade --install kata-device-plugin "$src/deploy/helm/kata-device-plugin" -n kube-system \
		--set logLevel=debug --post-renderer "$RENDERER" --post-renderer-args "$KATA_ROOT/sys" >"$TEST/helm-kata.log" 2>&1 ||
		{ cat "$TEST/helm-kata.log" >&2; return 1; }
	local t
	t=$(date +%s.%N)
	if ! kubectl -n kube-system rollout status ds/kata-device-plugin --timeout=180s >/dev/null; then
		diag kube-system "$(kubectl -n kube-system get pod -l app.kubernetes.io/name=kata-device-plugin -o name | head -n1 | cut -d/ -f2)"
		fail "the kata DaemonSet did not roll out (its pod Ready through the kubelet's readiness probe) in 180 s"
		return 1
	fi
	note "kata DaemonSet rolled out, pod Ready by its readiness probe: $(secs "$t") s after helm"
}

kata_pod() { kubectl -n kube-system get pod -l app.kubernetes.io/name=kata-device-plugin -o jsonpath='{.items[0].metadata.name}'; }

# node_res FIELD RESOURCE: the node's capacity or allocatable of RESOURCE ("" if none).
node_res() { kubectl get node "$node" -o json | jq -r --arg r "$2" ".status.$1[\$r] // \"\""; }

kata_resources() {
	local t want_gpu want_sw
	t=$(date +%s.%N)
	want_gpu=$(jq '[.devices[] | select(.resource == "nvidia.com/gpu")] | length' "$TEST/kata-tree.json")
	want_sw=$(jq '[.devices[] | select(.resource == "nvidia.com/nvswitch")] | length' "$TEST/kata-tree.json")
	gpu_ok() { [ "$(node_res allocatable nvidia.com/gpu)" = "$want_gpu" ] && [ "$(node_res allocatable nvidia.com/nvswitch)" = "$want_sw" ]; }
	if ! until_ok 60 gpu_ok; then
		fail "node $node allocatable nvidia.com/gpu=$(node_res allocatable nvidia.com/gpu) nvidia.com/nvswitch=$(node_res allocatable nvidia.com/nvswitch), want $want_gpu and $want_sw"
		return 1
	fi
	[ "$(node_res capacity nvidia.com/gpu)" = "$want_gpu" ] || fail "capacity nvidia.com/gpu $(node_res capacity nvidia.com/gpu), want $want_gpu" || return 1
	note "node $node: nvidia.com/gpu $want_gpu, nvidia.com/nvswitch $want_sw allocatable ($(secs "$t") s after the roll-out)"
	for f in kata.nvidia.com-gpu.yaml kata.nvidia.com-nvswitch.yaml; do
		[ -f "/var/run/cdi/$f" ] || fail "no CDI spec /var/run/cdi/$f" || return 1
	done
}

# The GPU pod: 2 GPUs for an unprivileged container.
gpu_pod() {
	local t
	t=$(date +%s.%N)
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: gpu-pair
  namespace: $NS
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 65534
    runAsGroup: 65534
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "ls /dev/vfio; sleep 3600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: ["ALL"]
    resources:
      limits:
        nvidia.com/gpu: 2
EOF
	running() { [ "$(kubectl -n "$NS" get pod gpu-pair -o jsonpath='{.status.phase}')" = Running ]; }
	if ! until_ok 120 running; then
		diag "$NS" gpu-pair
		fail "the GPU pod is not Running after 120 s"
		return 1
	fi
	note "GPU pod Running $(secs "$t") s after kubectl apply"
	local seen want
	seen=$(kubectl -n "$NS" exec gpu-pair -- ls /dev/vfio | sort | tr '\n' ' ')
	want=$(for n in $(jq -r '.packed_pair[]' "$TEST/kata-tree.json"); do tree "$n" group; done; echo vfio)
	want=$(echo "$want" | sort | tr '\n' ' ')
	if [ "$seen" != "$want" ]; then
		local own
		own=$(for n in $(jq -r '.own_pair[]' "$TEST/kata-tree.json"); do tree "$n" group; done | tr '\n' ' ')
		fail "the pod's /dev/vfio holds: $seen; want exactly the packed pair's groups and the container node: $want (the kubelet's own order would give groups $own)"
		return 1
	fi
	note "the pod's /dev/vfio: $seen(the packed pair $(jq -r '.packed_pair | join(" and ")' "$TEST/kata-tree.json") on one PCIe switch, kata's GetPreferredAllocation; the kubelet's own order would give $(jq -r '.own_pair | join(" and ")' "$TEST/kata-tree.json"))"
}

# cdi_nodes SPEC NAME: the device nodes of CDI device NAME in SPEC (YAML), a path a line.
cdi_nodes() {
	python3 -c 'import sys, yaml
spec = yaml.safe_load(open(sys.argv[1]))
for d in spec.get("devices", []):
    if str(d.get("name")) == sys.argv[2]:
        for n in d.get("containerEdits", {}).get("deviceNodes", []):
            print(n["path"])' "$1" "$2"
}

# The kubelet's pod-resources API: the pod's devices and the allocatable ones, as kata gave them.
pod_resources() {
	local out ids want_ids groups
	out=$("$bin/sdp-kube" podresources /var/lib/kubelet/pod-resources/kubelet.sock) || return 1
	ids=$(echo "$out" | jq -r --arg ns "$NS" '.list.pod_resources[] | select(.namespace == $ns and .name == "gpu-pair") | .containers[].devices[]? | select(.resource_name == "nvidia.com/gpu") | .device_ids[]' | sort | tr '\n' ' ')
	[ -n "$ids" ] || fail "pod-resources List: no nvidia.com/gpu devices for $NS/gpu-pair: $(echo "$out" | jq -c .list)" || return 1
	# each ID is one CDI device of kata's spec; its nodes are the group's
	groups=$(for id in $ids; do cdi_nodes /var/run/cdi/kata.nvidia.com-gpu.yaml "$id"; done |
		grep -v '^/dev/vfio/vfio$' | sed 's|^/dev/vfio/||' | sort | tr '\n' ' ')
	want_ids=$(for n in $(jq -r '.packed_pair[]' "$TEST/kata-tree.json"); do tree "$n" group; done | sort | tr '\n' ' ')
	[ "$groups" = "$want_ids" ] || fail "pod-resources List gives IDs $ids, whose CDI devices are groups $groups; want the packed pair's groups $want_ids" || return 1
	local alloc want
	alloc=$(echo "$out" | jq -r '.allocatable.devices[]? | select(.resource_name == "nvidia.com/gpu") | .device_ids[]' | wc -l)
	want=$(jq '[.devices[] | select(.resource == "nvidia.com/gpu")] | length' "$TEST/kata-tree.json")
	[ "$alloc" = "$want" ] || fail "pod-resources GetAllocatableResources: $alloc nvidia.com/gpu IDs, want $want" || return 1
	note "pod-resources: gpu-pair holds IDs $ids(groups $groups); allocatable: $alloc nvidia.com/gpu IDs"
}

# --- faults with the real components -----------------------------------------------------------

ctr_() { "$bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io "$@" 2>/dev/null; }

# container_pid NS POD: the host pid of the pod's (first) container, from containerd's task.
container_pid() {
	local id
	id=$(kubectl -n "$1" get pod "$2" -o jsonpath='{.status.containerStatuses[0].containerID}')
	id=${id#containerd://}
	[ -n "$id" ] && ctr_ tasks ls | awk -v id="$id" '$1 == id { print $2 }'
}

# fingerprint NS POD [DEV]: its phase, container ID, restart count and start time, and what its
# DEV (default /dev/vfio) is: the same string before and after a fault when the pod was left alone.
fingerprint() {
	echo "$(kubectl -n "$1" get pod "$2" -o jsonpath='{.status.phase} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].state.running.startedAt}') $(kubectl -n "$1" exec "$2" -- ls -ln "${3:-/dev/vfio}" 2>&1 | tr '\n' ' ')"
}

# restarts NS POD: the restart count of its container.
restarts() { kubectl -n "$1" get pod "$2" -o jsonpath='{.status.containerStatuses[0].restartCount}'; }
ready() { [ "$(kubectl -n "$1" get pod "$2" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }

# registered_since NS POD SINCE: the plugin's "registered with kubelet" lines logged since SINCE
# (RFC 3339): its own word that it registered with the kubelet after a fault.
registered_since() { kubectl -n "$1" logs "$2" --since-time="$3" 2>/dev/null | grep -c 'msg="registered with kubelet"'; }

# status_since SINCE: the Node's Ready heartbeat is from SINCE (epoch seconds) or later: its
# status comes from the kubelet as it is now, not from before a fault.
status_since() {
	local hb
	hb=$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
	[ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -ge "$1" ]
}

n_gpus() { jq '[.devices[] | select(.resource == "nvidia.com/gpu")] | length' "$TEST/kata-tree.json"; }
gpus_all() { [ "$(node_res allocatable nvidia.com/gpu)" = "$(n_gpus)" ]; }

# one_gpu_pod NAME: an unprivileged pod with one GPU, applied (not waited for).
one_gpu_pod() {
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $NS
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 65534
    runAsNonRoot: true
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      limits:
        nvidia.com/gpu: 1
EOF
}

# new_pod_runs: a new pod with one GPU schedules, runs with exactly one group and the container
# node, and is deleted again.
new_pod_runs() {
	local t seen
	t=$(date +%s.%N)
	one_gpu_pod gpu-new
	running() { [ "$(kubectl -n "$NS" get pod gpu-new -o jsonpath='{.status.phase}')" = Running ]; }
	until_ok 120 running || { diag "$NS" gpu-new; fail "a new pod with one GPU is not Running after 120 s"; return 1; }
	seen=$(kubectl -n "$NS" exec gpu-new -- ls /dev/vfio | sort | tr '\n' ' ')
	{ [ "$(echo "$seen" | wc -w)" = 2 ] && [[ $seen == *vfio* ]]; } || fail "the new pod's /dev/vfio holds: $seen; want one group and vfio" || return 1
	kubectl -n "$NS" delete pod gpu-new --wait=true --timeout=60s >/dev/null
	note "a new pod with one GPU ran ($(secs "$t") s to Running, /dev/vfio: $seen)"
}

# kill -9 of the kata container: the kubelet restarts it, it registers again, the running pod
# keeps its devices, a new pod schedules.
fault_kill_kata() {
	local p pid rc before t
	p=$(kata_pod)
	pid=$(container_pid kube-system "$p")
	[ -n "$pid" ] || fail "no host pid for the kata container of $p" || return 1
	rc=$(restarts kube-system "$p")
	before=$(fingerprint "$NS" gpu-pair)
	t=$(date +%s.%N)
	local since
	since=$(date -u +%FT%TZ)
	kill -KILL "$pid"
	back() { [ "$(restarts kube-system "$p")" -gt "$rc" ] && ready kube-system "$p"; }
	until_ok 120 back || { diag kube-system "$p"; fail "the kubelet did not restart the killed kata container to Ready in 120 s"; return 1; }
	note "kill -9 of kata (pid $pid): restarted and Ready $(secs "$t") s later"
	[ "$(registered_since kube-system "$p" "$since")" -ge 2 ] || fail "the restarted kata did not log 'registered with kubelet' for both resources" || return 1
	# (the kubelet posts the Node's status only when it changed or every 5 min: a drop to 0 and
	# back within one 10 s sync never shows; the plugin's own lines above are the proof)
	until_ok 60 gpus_all || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) after the restart" || return 1
	note "allocatable nvidia.com/gpu back to $(node_res allocatable nvidia.com/gpu) $(secs "$t") s after the kill"
	[ "$(fingerprint "$NS" gpu-pair)" = "$before" ] || fail "the running GPU pod changed: before: $before; after: $(fingerprint "$NS" gpu-pair)" || return 1
	note "the running GPU pod untouched: $before"
	new_pod_runs
}

# A kubelet restart: capacity comes back, running pods untouched, the plugin re-registers by
# itself (its container not restarted).
fault_kubelet_restart() {
	local p rc before t kpid
	p=$(kata_pod)
	rc=$(restarts kube-system "$p")
	before=$(fingerprint "$NS" gpu-pair)
	t=$(date +%s.%N)
	local since now
	since=$(date -u +%FT%TZ)
	now=$(date +%s)
	kpid=$(restart_component kubelet) || return 1
	node_ready() { status_since "$now" && [ "$(kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
	until_ok 120 node_ready || fail "node not Ready (in a status the restarted kubelet posted) 120 s after the kubelet restart" || return 1
	fresh_all() { status_since "$now" && gpus_all; }
	until_ok 120 fresh_all || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) in the restarted kubelet's status 120 s later" || return 1
	[ "$(registered_since kube-system "$p" "$since")" -ge 2 ] || fail "kata did not log 'registered with kubelet' for both resources after the kubelet restart" || return 1
	note "kubelet restarted (pid $kpid): allocatable nvidia.com/gpu back to $(node_res allocatable nvidia.com/gpu) $(secs "$t") s later"
	[ "$(restarts kube-system "$p")" = "$rc" ] || fail "the kata container was restarted ($rc -> $(restarts kube-system "$p")): it should re-register by itself" || return 1
	[ "$(fingerprint "$NS" gpu-pair)" = "$before" ] || fail "the running GPU pod changed: before: $before; after: $(fingerprint "$NS" gpu-pair)" || return 1
	note "the running GPU pod untouched, the plugin's container not restarted"
	new_pod_runs
}

# The host's device nodes of the free GPUs removed: allocatable drops, a new pod stays Pending
# with the scheduler's reason; back when the nodes return.
fault_node_removed() {
	local t free g want pair
	pair=" $(jq -r '.packed_pair | join(" ")' "$TEST/kata-tree.json") "
	free=$(for n in $(jq -r '.devices[] | select(.resource == "nvidia.com/gpu") | .name' "$TEST/kata-tree.json"); do
		[[ $pair == *" $n "* ]] || tree "$n" group
	done | tr '\n' ' ')
	want=$(($(n_gpus) - $(echo "$free" | wc -w)))
	t=$(date +%s.%N)
	for g in $free; do rm "/dev/vfio/$g"; done
	dropped() { [ "$(node_res allocatable nvidia.com/gpu)" = "$want" ]; }
	until_ok 60 dropped || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) after removing the nodes of groups $free, want $want" || return 1
	note "/dev/vfio nodes of the free GPUs (groups $free) removed: allocatable $want $(secs "$t") s later"
	one_gpu_pod gpu-wait
	why() { kubectl -n "$NS" get events --field-selector "involvedObject.name=gpu-wait,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'Insufficient nvidia.com/gpu'; }
	until_ok 60 why || { diag "$NS" gpu-wait; fail "the new pod is not Pending for 'Insufficient nvidia.com/gpu'"; return 1; }
	note "a new pod with one GPU Pending: $(kubectl -n "$NS" get events --field-selector 'involvedObject.name=gpu-wait,reason=FailedScheduling' -o jsonpath='{.items[-1:].message}')"
	t=$(date +%s.%N)
	for g in $free; do mknod -m 0666 "/dev/vfio/$g" c 238 "$g"; done
	until_ok 60 gpus_all || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) after the nodes came back" || return 1
	running() { [ "$(kubectl -n "$NS" get pod gpu-wait -o jsonpath='{.status.phase}')" = Running ]; }
	until_ok 120 running || { diag "$NS" gpu-wait; fail "the waiting pod did not run once the nodes came back"; return 1; }
	note "nodes back: allocatable $(node_res allocatable nvidia.com/gpu), the waiting pod Running $(secs "$t") s later"
}

# helm upgrade with a changed value: the DaemonSet rolls; no pod holding a device loses it,
# watched all along.
fault_helm_upgrade() {
	local p before1 before2 t bad="" x
	p=$(kata_pod)
	before1=$(fingerprint "$NS" gpu-pair)
	before2=$(fingerprint "$NS" gpu-wait)
	t=$(date +%s.%N)
	helm upgrade kata-device-plugin "$src/deploy/helm/kata-device-plugin" -n kube-system --reuse-values \
		--set logLevel=info --post-renderer "$RENDERER" --post-renderer-args "$KATA_ROOT/sys" >"$TEST/helm-kata-up.log" 2>&1 ||
		{ cat "$TEST/helm-kata-up.log" >&2; return 1; }
	kubectl -n kube-system rollout status ds/kata-device-plugin --timeout=180s >"$TEST/rollout.log" 2>&1 &
	local roll=$!
	while kill -0 "$roll" 2>/dev/null; do
		for x in gpu-pair gpu-wait; do
			[ "$(kubectl -n "$NS" get pod "$x" -o jsonpath='{.status.phase}')" = Running ] || bad="$bad $x"
		done
		sleep 0.5
	done
	wait "$roll" || { cat "$TEST/rollout.log" >&2; fail "the upgraded DaemonSet did not roll out"; return 1; }
	[ "$(kata_pod)" != "$p" ] || fail "helm upgrade with a changed value made no new pod" || return 1
	[ -z "$bad" ] || fail "pods holding GPUs left Running during the roll-out:$bad" || return 1
	until_ok 60 gpus_all || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) after the upgrade" || return 1
	{ [ "$(fingerprint "$NS" gpu-pair)" = "$before1" ] && [ "$(fingerprint "$NS" gpu-wait)" = "$before2" ]; } ||
		fail "a pod holding GPUs changed across the upgrade" || return 1
	note "helm upgrade (logLevel info): new pod $(kata_pod), rolled and allocatable back in $(secs "$t") s; both GPU pods Running throughout, devices unchanged"
}

# helm uninstall: what stays is what docs/operations.md says (the CDI specs), the sockets go,
# allocatable drops to 0, running pods stay.
fault_helm_uninstall() {
	local t left f
	t=$(date +%s.%N)
	helm uninstall kata-device-plugin -n kube-system --wait --timeout 120s >/dev/null || return 1
	gone() { [ -z "$(kubectl -n kube-system get pod -l app.kubernetes.io/name=kata-device-plugin -o name)" ]; }
	until_ok 60 gone || fail "the kata pod is still there 60 s after helm uninstall" || return 1
	zero() { [ "$(node_res allocatable nvidia.com/gpu)" = 0 ]; }
	until_ok 60 zero || fail "allocatable nvidia.com/gpu $(node_res allocatable nvidia.com/gpu) after helm uninstall, want 0" || return 1
	left=$(find /var/lib/kubelet/device-plugins -name 'kata-*' | tr '\n' ' ')
	[ -z "$left" ] || fail "kata sockets left in /var/lib/kubelet/device-plugins: $left" || return 1
	for f in kata.nvidia.com-gpu.yaml kata.nvidia.com-nvswitch.yaml; do
		[ -f "/var/run/cdi/$f" ] || fail "/var/run/cdi/$f is gone: docs/operations.md says the specs stay for the pods using them" || return 1
	done
	[ "$(kubectl -n "$NS" get pod gpu-pair -o jsonpath='{.status.phase}')" = Running ] || fail "the GPU pod stopped with the plugin" || return 1
	note "helm uninstall: pod and sockets gone, allocatable 0, CDI specs kept, GPU pods Running ($(secs "$t") s)"
}

# --- hyperlight ---------------------------------------------------------------------------------
hl_install() {
	kubectl label node "$node" hyperlight.dev/device-plugin=true --overwrite >/dev/null
	helm upgrade --install hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system \
		--set admissionPolicies.enabled=true >"$TEST/helm-hl.log" 2>&1 || { cat "$TEST/helm-hl.log" >&2; return 1; }
}

hl_pod() { kubectl -n "$HL_NS" get pod -l "app.kubernetes.io/name=$1" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null; }

# With /dev/kvm: both DaemonSets Ready, 2000 slots allocatable, the node labelled by the plugin.
hl_kvm() {
	local t
	t=$(date +%s.%N)
	for ds in hyperlight-device-access hyperlight-device-plugin; do
		if ! kubectl -n "$HL_NS" rollout status "ds/$ds" --timeout=180s >/dev/null; then
			diag "$HL_NS" "$(hl_pod "$ds")"
			fail "DaemonSet $ds did not roll out in 180 s"
			return 1
		fi
	done
	note "both hyperlight DaemonSets rolled out, pods Ready: $(secs "$t") s after helm"
	hl_ok() { [ "$(node_res allocatable hyperlight.dev/hypervisor)" = 2000 ]; }
	until_ok 60 hl_ok || fail "allocatable hyperlight.dev/hypervisor $(node_res allocatable hyperlight.dev/hypervisor), want 2000" || return 1
	labels_ok() {
		[ "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.hyperlight\.dev/hypervisor}')" = kvm ] &&
			[ "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.hyperlight\.dev/enabled}')" = true ]
	}
	until_ok 60 labels_ok || fail "node $node not labelled hyperlight.dev/hypervisor=kvm, hyperlight.dev/enabled=true by the plugin" || return 1
	note "allocatable hyperlight.dev/hypervisor 2000; node labelled by the plugin through the chart's RBAC and admission policy"
}

# The workload's proof (with /dev/kvm): a pod of two containers, each with one
# hyperlight.dev/hypervisor, from an image of busybox and sdp-kvm-run (tests/cluster/kvm-run):
# the one running as the device's owner (DEVICE_UID/GID, 65534 by default) creates a VM and runs
# guest code to its exits; the one running as another uid is refused the device by its mode.
KVM_IMAGE=localhost/sdp-kvm-run:test
kvm_image() {
	local busybox links=() a
	"$src/tests/cluster/kvm-run/build.sh" "$TEST" || return 1
	busybox=$(command -v busybox) || fail "busybox-static is not installed (scripts/install-deps.sh cluster)" || return 1
	for a in sh stat cat echo; do links+=(--link "/bin/$a:busybox"); done
	python3 "$src/cluster/oci-image.py" "$TEST/kvm-run.tar" "$KVM_IMAGE" --file "$busybox:/bin/busybox:0755" "${links[@]}" \
		--file "$TEST/sdp-kvm-run:/usr/local/bin/sdp-kvm-run:0755" --dir /tmp:1777 --cmd '["sh"]' >/dev/null || return 1
	ctr_ images import --platform linux/amd64 "$TEST/kvm-run.tar" >/dev/null || fail "ctr images import $TEST/kvm-run.tar failed" || return 1
}

hl_workload() {
	local t c code log
	kvm_image || return 1
	t=$(date +%s.%N)
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kvm-workload
  namespace: $NS
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
$(for c in owner:65534 other:1000; do cat <<EOC
  - name: ${c%%:*}
    image: $KVM_IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "echo node: \$(stat -c '%F %a %u:%g' /dev/kvm); exec sdp-kvm-run"]
    securityContext:
      runAsUser: ${c#*:}
      runAsGroup: ${c#*:}
      allowPrivilegeEscalation: false
      capabilities:
        drop: ["ALL"]
    resources:
      limits:
        hyperlight.dev/hypervisor: 1
EOC
done)
EOF
	done_() { [ "$(kubectl -n "$NS" get pod kvm-workload -o jsonpath='{.status.containerStatuses[*].state.terminated.reason}' | wc -w)" = 2 ]; }
	until_ok 120 done_ || { diag "$NS" kvm-workload; fail "the KVM workload's containers did not both finish in 120 s"; return 1; }
	note "KVM workload pod: both containers finished $(secs "$t") s after kubectl apply"
	for c in owner other; do
		code=$(kubectl -n "$NS" get pod kvm-workload -o jsonpath="{.status.containerStatuses[?(@.name==\"$c\")].state.terminated.exitCode}")
		log=$(kubectl -n "$NS" logs kvm-workload -c "$c" 2>&1 | tr '\n' ' ')
		note "$c: exit $code: $log"
		echo "$log" | grep -q 'node: character special file 660 65534:65534' ||
			fail "$c: the device node in the container is not 'character special file 660 65534:65534' (DEVICE_MODE, DEVICE_UID, DEVICE_GID)" || return 1
	done
	code=$(kubectl -n "$NS" get pod kvm-workload -o jsonpath='{.status.containerStatuses[?(@.name=="owner")].state.terminated.exitCode}')
	log=$(kubectl -n "$NS" logs kvm-workload -c owner 2>&1)
	{ [ "$code" = 0 ] && echo "$log" | grep -q '^sdp-kvm-run: ok api=12 exits=io(port=0x10,value=0x2a),hlt uid=65534 gid=65534$'; } ||
		fail "the owner's sdp-kvm-run did not run its guest: exit $code, $log" || return 1
	code=$(kubectl -n "$NS" get pod kvm-workload -o jsonpath='{.status.containerStatuses[?(@.name=="other")].state.terminated.exitCode}')
	log=$(kubectl -n "$NS" logs kvm-workload -c other 2>&1)
	{ [ "$code" = 1 ] && echo "$log" | grep -q '^sdp-kvm-run: FAIL open: Permission denied$'; } ||
		fail "another uid was not refused the device: exit $code, $log" || return 1
}

# kill -9 of the hyperlight plugin's container (with /dev/kvm): restarted, 2000 allocatable
# again, a pod holding the device untouched.
hl_fault_kill() {
	local p pid rc before t
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: kvm-hold
  namespace: $NS
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 65534
    runAsNonRoot: true
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      limits:
        hyperlight.dev/hypervisor: 1
EOF
	running() { [ "$(kubectl -n "$NS" get pod kvm-hold -o jsonpath='{.status.phase}')" = Running ]; }
	until_ok 120 running || { diag "$NS" kvm-hold; fail "a pod holding hyperlight.dev/hypervisor is not Running after 120 s"; return 1; }
	p=$(hl_pod hyperlight-device-plugin)
	pid=$(container_pid "$HL_NS" "$p")
	[ -n "$pid" ] || fail "no host pid for the hyperlight container of $p" || return 1
	rc=$(restarts "$HL_NS" "$p")
	before=$(fingerprint "$NS" kvm-hold /dev/kvm)
	t=$(date +%s.%N)
	kill -KILL "$pid"
	back() { [ "$(restarts "$HL_NS" "$p")" -gt "$rc" ] && ready "$HL_NS" "$p"; }
	until_ok 120 back || { diag "$HL_NS" "$p"; fail "the kubelet did not restart the killed hyperlight container to Ready in 120 s"; return 1; }
	hl_ok() { [ "$(node_res allocatable hyperlight.dev/hypervisor)" = 2000 ]; }
	until_ok 60 hl_ok || fail "allocatable hyperlight.dev/hypervisor $(node_res allocatable hyperlight.dev/hypervisor) after the restart" || return 1
	[ "$(fingerprint "$NS" kvm-hold /dev/kvm)" = "$before" ] || fail "the pod holding the device changed: before: $before; after: $(fingerprint "$NS" kvm-hold /dev/kvm)" || return 1
	note "kill -9 of hyperlight (pid $pid): Ready and 2000 allocatable again $(secs "$t") s later; the pod holding /dev/kvm untouched"
	kubectl -n "$NS" delete pod kvm-hold --wait=false >/dev/null
}

# Without a hypervisor: the bootstrap plugin says why and restarts, the main pod waits for it.
hl_nokvm() {
	local t ap mp
	t=$(date +%s.%N)
	ap=$(hl_pod hyperlight-device-access)
	said() { kubectl -n "$HL_NS" logs "$ap" --previous 2>/dev/null | grep -q 'msg="no usable hypervisor device"' ||
		kubectl -n "$HL_NS" logs "$ap" 2>/dev/null | grep -q 'msg="no usable hypervisor device"'; }
	restarted() { [ "$(kubectl -n "$HL_NS" get pod "$ap" -o jsonpath='{.status.containerStatuses[0].restartCount}')" -ge 1 ]; }
	until_ok 120 said || { diag "$HL_NS" "$ap"; fail "the device-access pod never logged msg=\"no usable hypervisor device\""; return 1; }
	until_ok 120 restarted || { diag "$HL_NS" "$ap"; fail "the device-access pod was not restarted by the kubelet"; return 1; }
	mp=$(hl_pod hyperlight-device-plugin)
	pending() { kubectl -n "$HL_NS" get events --field-selector "involvedObject.name=$mp,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'Insufficient hyperlight.dev/device-access'; }
	until_ok 60 pending || { diag "$HL_NS" "$mp"; fail "the main pod is not Pending for 'Insufficient hyperlight.dev/device-access'"; return 1; }
	[ -z "$(node_res allocatable hyperlight.dev/hypervisor)" ] || [ "$(node_res allocatable hyperlight.dev/hypervisor)" = 0 ] ||
		fail "allocatable hyperlight.dev/hypervisor $(node_res allocatable hyperlight.dev/hypervisor) on a node without a hypervisor" || return 1
	note "no /dev/kvm on this host: device-access logged msg=\"no usable hypervisor device\" and was restarted, the main pod Pending (Insufficient hyperlight.dev/device-access), nothing advertised ($(secs "$t") s)"
}

# The node-label policy of the chart, enforced by the API server, both ways: the plugin's
# account, with a token bound to a pod on this node, may set its own labels on this node only.
hl_policy() {
	kubectl -n "$HL_NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: sdp-test-binder
  namespace: $HL_NS
spec:
  serviceAccountName: hyperlight-device-plugin
  automountServiceAccountToken: false
  nodeName: $node
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 65534
    runAsNonRoot: true
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
EOF
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: sdp-test-other
EOF
	local token loose server ca
	token=$(kubectl -n "$HL_NS" create token hyperlight-device-plugin --bound-object-kind Pod --bound-object-name sdp-test-binder --duration 10m)
	loose=$(kubectl -n "$HL_NS" create token hyperlight-device-plugin --duration 10m)
	server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	ca=$STATE/pki/ca.crt
	[ -f "$ca" ] || fail "no $ca" || return 1
	# label TOKEN NODE KEY=VALUE...: the merge patch of the labels the plugin itself sends, with
	# curl (the plugin's RBAC has patch, not get: kubectl label and patch read the node first).
	# Prints the API server's answer; fails unless it is 200.
	label() {
		local tok=$1 n=$2 kv labels="" code
		shift 2
		for kv in "$@"; do labels="$labels${labels:+,}\"${kv%%=*}\":\"${kv#*=}\""; done
		code=$(curl -sS -o "$TEST/patch.out" -w '%{http_code}' --cacert "$ca" -X PATCH \
			-H "Authorization: Bearer $tok" -H 'Content-Type: application/merge-patch+json' \
			--data "{\"metadata\":{\"labels\":{$labels}}}" "$server/api/v1/nodes/$n") || return 1
		jq -r '.message // ("labels now: " + (.metadata.labels | tostring))' "$TEST/patch.out" 2>/dev/null || cat "$TEST/patch.out"
		[ "$code" = 200 ]
	}
	local out
	# allowed: its own labels on its own node
	out=$(label "$token" "$node" hyperlight.dev/hypervisor=kvm hyperlight.dev/enabled=true) ||
		fail "the plugin's account was refused its own labels on its own node: $out" || return 1
	note "own node, own labels: allowed ($out)"
	# refused: another node
	if out=$(label "$token" sdp-test-other hyperlight.dev/hypervisor=kvm); then
		fail "the plugin's account labelled another node: $out"
		return 1
	fi
	echo "$out" | grep -q "may not change node sdp-test-other" || fail "another node: refused, but not by the chart's policy: $out" || return 1
	note "another node: refused ($(echo "$out" | tail -n1))"
	# refused: another label, and the operator's opt-in label
	for l in example.com/other=x hyperlight.dev/device-plugin=false; do
		if out=$(label "$token" "$node" "$l"); then
			fail "the plugin's account set $l: $out"
			return 1
		fi
		echo "$out" | grep -q "may change only the labels" || fail "label $l: refused, but not by the chart's policy: $out" || return 1
		note "label $l: refused ($out)"
	done
	# refused: a token that names no node
	if out=$(label "$loose" "$node" hyperlight.dev/enabled=true); then
		fail "a token without a node was allowed: $out"
		return 1
	fi
	echo "$out" | grep -q "must use a pod-bound token" || fail "a token without a node: refused, but not by the chart's policy: $out" || return 1
	note "a token naming no node: refused ($out)"
	# the same requests as the cluster admin: allowed (the policy binds the plugin's account only)
	kubectl label node sdp-test-other example.com/other=x >/dev/null || fail "the admin could not label sdp-test-other" || return 1
	kubectl delete node sdp-test-other --wait=true >/dev/null
	kubectl -n "$HL_NS" delete pod sdp-test-binder --wait=false >/dev/null
	if [ ! -c /dev/kvm ]; then
		kubectl label node "$node" hyperlight.dev/hypervisor- hyperlight.dev/enabled- >/dev/null
	fi
}

# --- the run ------------------------------------------------------------------------------------
say "on node $node: Kubernetes $(kubectl version -o json | jq -r .serverVersion.gitVersion), images $version"
step "fixtures: the kata VFIO tree (legacy, 2 NUMA nodes), test namespace" fixtures
step "kata chart installed with Helm, DaemonSet rolled out, pod Ready" kata_install
step "node advertises kata's resources, CDI specs written" kata_resources
step "GPU pod (uid 65534, no privileges, nvidia.com/gpu: 2) sees exactly its groups and /dev/vfio/vfio" gpu_pod
step "pod-resources API: the pod's devices and the allocatable ones" pod_resources
step "fault: kill -9 of the kata container" fault_kill_kata
step "fault: kubelet restart" fault_kubelet_restart
step "fault: the host's device nodes of the free GPUs removed, then back" fault_node_removed
step "fault: helm upgrade with a changed value" fault_helm_upgrade
step "helm uninstall of kata leaves what docs/operations.md says" fault_helm_uninstall
step "hyperlight chart installed with Helm (admission policies on)" hl_install
if [ -c /dev/kvm ]; then
	step "hyperlight on /dev/kvm: rolled out, 2000 allocatable, node labelled" hl_kvm
	step "KVM workload (uid 65534): a VM runs guest code to its exits; another uid is refused the node" hl_workload
	step "fault: kill -9 of the hyperlight container" hl_fault_kill
else
	step "hyperlight without a hypervisor: told, restarted, nothing advertised" hl_nokvm
fi
step "node-label admission policy enforced by the API server, both ways" hl_policy
finish
