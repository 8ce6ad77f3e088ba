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
RENDERER=$src/tests/cluster/test-renderer.py
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
	kubectl -n kube-system delete pod sdp-test-binder --wait=true --timeout=30s >/dev/null 2>&1
	kubectl delete node sdp-test-other --wait=true --timeout=30s >/dev/null 2>&1
	helm uninstall -n kube-system --wait --timeout 60s kata-device-plugin >/dev/null 2>&1
	helm uninstall -n kube-system --wait --timeout 60s hyperlight-device-plugin >/dev/null 2>&1
	kubectl delete namespace "$HL_NS" --wait=true --timeout=60s >/dev/null 2>&1
	kubectl label node "$node" hyperlight.dev/device-plugin- hyperlight.dev/enabled- hyperlight.dev/hypervisor- \
		hyperlight.dev/tun- hyperlight.dev/vhost-net- >/dev/null 2>&1
	if mountpoint -q /dev/vfio 2>/dev/null && [ -f "$TEST/vfio-mounted" ]; then
		umount /dev/vfio && [ -f "$TEST/vfio-made" ] && rmdir /dev/vfio
	fi
	kvm_node_restore "$TEST/kvm-node"
	companion_node_restore
	kvm_standin_remove >/dev/null
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
# ctr_ ARGS: containerd's ctr on the cluster's socket, in the kubelet's namespace.
ctr_() { "$bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io "$@" 2>/dev/null; }

fixtures() {
	[ -x "$build/sdp-katatree" ] || fail "$build/sdp-katatree missing (scripts/go-build.sh $build)" || return 1
	local imgs img
	imgs=$(ctr_ images ls -q) # (not piped into grep -q: pipefail)
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
	local taints
	taints=$(kubectl get node "$node" -o jsonpath='{range .spec.taints[*]}{.key}:{.effect} {end}')
	[ -z "$taints" ] || fail "node $node is tainted ($taints): no test pod would schedule; its conditions: $(kubectl get node "$node" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {end}')" || return 1
	note "kata tree: $(jq -c '[.devices[] | {name, group, numa}]' "$TEST/kata-tree.json")"
}

# tree NAME FIELD: a field of the tree's device NAME.
tree() { jq -r --arg n "$1" ".devices[] | select(.name == \$n) | .$2" "$TEST/kata-tree.json"; }

# --- kata ---------------------------------------------------------------------------------------
kata_install() {
	helm upgrade --install kata-device-plugin "$src/deploy/helm/kata-device-plugin" -n kube-system \
		--set logLevel=debug --post-renderer "$RENDERER" --post-renderer-args sysfs --post-renderer-args "$KATA_ROOT/sys" >"$TEST/helm-kata.log" 2>&1 ||
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
# node_label KEY: the node's label KEY ("" when it has none)
node_label() { kubectl get node "$node" -o json | jq -r --arg k "$1" '.metadata.labels[$k] // ""'; }

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
# registered_n NS POD SINCE N: at least N such lines within 30 s (the log is read through the
# kubelet, which may have just restarted; a line may come after the status the test waited for).
registered_n() {
	n_ok() { [ "$(registered_since "$1" "$2" "$3")" -ge "$4" ]; }
	until_ok 30 n_ok "$@"
}

# status_since SINCE: the Node's Ready heartbeat is from SINCE (epoch seconds) or later: its
# status comes from the kubelet as it is now, not from before a fault.
status_since() {
	local hb
	hb=$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
	[ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -ge "$1" ]
}

n_gpus() { jq '[.devices[] | select(.resource == "nvidia.com/gpu")] | length' "$TEST/kata-tree.json"; }
gpus_all() { [ "$(node_res allocatable nvidia.com/gpu)" = "$(n_gpus)" ]; }

# one_pod NAME RESOURCE: an unprivileged pod (uid 65534) with one RESOURCE, applied (not waited
# for).
one_pod() {
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
        $2: 1
EOF
}
one_gpu_pod() { one_pod "$1" nvidia.com/gpu; }
# phase POD: the test namespace's pod POD's phase.
phase() { kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}'; }

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

# kill_container NS POD WHAT: kill -9 of the pod's container (its host pid from containerd);
# returns once the kubelet restarted it and it is Ready again (within 120 s). Sets killed_pid and
# killed_at (the kill's time, for secs).
kill_container() {
	local ns=$1 pod=$2 what=$3 rc
	killed_pid=$(container_pid "$ns" "$pod")
	[ -n "$killed_pid" ] || fail "no host pid for the $what container of $pod" || return 1
	rc=$(restarts "$ns" "$pod")
	killed_at=$(date +%s.%N)
	kill -KILL "$killed_pid"
	back() { [ "$(restarts "$ns" "$pod")" -gt "$rc" ] && ready "$ns" "$pod"; }
	until_ok 120 back || { diag "$ns" "$pod"; fail "the kubelet did not restart the killed $what container to Ready in 120 s"; return 1; }
}

# kill -9 of the kata container: the kubelet restarts it, it registers again, the running pod
# keeps its devices, a new pod schedules.
fault_kill_kata() {
	local p before since t
	p=$(kata_pod)
	before=$(fingerprint "$NS" gpu-pair)
	since=$(date -u +%FT%TZ)
	kill_container kube-system "$p" kata || return 1
	t=$killed_at
	note "kill -9 of kata (pid $killed_pid): restarted and Ready $(secs "$t") s later"
	registered_n kube-system "$p" "$since" 2 || fail "the restarted kata did not log 'registered with kubelet' for both resources" || return 1
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
	registered_n kube-system "$p" "$since" 2 || fail "kata did not log 'registered with kubelet' for both resources after the kubelet restart" || return 1
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
		--set logLevel=info --post-renderer "$RENDERER" --post-renderer-args sysfs --post-renderer-args "$KATA_ROOT/sys" >"$TEST/helm-kata-up.log" 2>&1 ||
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
# HL_RENDER: the post-renderer of every helm command on the hyperlight release, once the stand-in
# hypervisor is in place (hl_standin); empty with the host's own /dev/kvm.
HL_RENDER=()
hl_install() {
	kubectl label node "$node" hyperlight.dev/device-plugin=true --overwrite >/dev/null
	helm upgrade --install hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system \
		--set admissionPolicies.enabled=true >"$TEST/helm-hl.log" 2>&1 || { cat "$TEST/helm-hl.log" >&2; return 1; }
}

hl_pod() { kubectl -n "$HL_NS" get pod -l "app.kubernetes.io/name=$1" -o jsonpath='{.items[0].metadata.name}' 2>/dev/null; }
# hl_alloc: allocatable hyperlight.dev/hypervisor as a number (the API server writes 2000 as
# the quantity 2k).
hl_alloc() { node_res allocatable hyperlight.dev/hypervisor | sed 's/^\([0-9]*\)k$/\1000/'; }
hl_all() { [ "$(hl_alloc)" = 2000 ]; }

# hl_rolled WHAT: both hyperlight DaemonSets rolled out (pods Ready) within 180 s.
hl_rolled() {
	local ds
	for ds in hyperlight-device-access hyperlight-device-plugin; do
		if ! kubectl -n "$HL_NS" rollout status "ds/$ds" --timeout=180s >"$TEST/rollout.log" 2>&1; then
			cat "$TEST/rollout.log" >&2
			diag "$HL_NS" "$(hl_pod "$ds")"
			fail "DaemonSet $ds did not roll out $1 (kubectl rollout status, 180 s: its words above)"
			return 1
		fi
	done
}

# The stand-in hypervisor, on a host without /dev/kvm (after hl_nokvm): the test makes /dev/kvm
# (c 10:232, root:root 0660) with no driver behind it, and the hyperlight-device-plugin
# container preloads the tests' hypervisor stand-in (tests/fakes/hvshim.c, the musl build of
# make images) for /dev/kvm, so the daemon's real probe code passes. Nothing else is stood in:
# the bootstrap plugin finds the node by stat, the kubelet, CDI, containerd, runc and the
# device cgroup hand it to pods; only a guest cannot run (a workload's open gets ENODEV from the
# kernel: no driver). The node goes on the way out (cleanup; make cluster-down too, if the test
# was killed), found by its mark in $STATE.
hl_standin() {
	local shim=$src/build-static/musl-dynamic/libhvshim.so t
	[ -f "$shim" ] || fail "$shim missing (make images builds it with the images: scripts/build-static.sh)" || return 1
	t=$(date +%s.%N)
	cp "$shim" "$TEST/libhvshim.so"
	echo "c 10:232 made by tests/cluster/run.sh" >"$KVM_STANDIN_MARK"
	mknod -m 0660 /dev/kvm c 10 232 || return 1
	HL_RENDER=(--post-renderer "$RENDERER" --post-renderer-args hvshim --post-renderer-args "$TEST/libhvshim.so")
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		"${HL_RENDER[@]}" >"$TEST/helm-hl.log" 2>&1 || { cat "$TEST/helm-hl.log" >&2; return 1; }
	# the bootstrap pod is in the kubelet's crash back-off from hl_nokvm: a new one now
	kubectl -n "$HL_NS" delete pod "$(hl_pod hyperlight-device-access)" --wait=false >/dev/null
	note "/dev/kvm made (c 10:232, no driver), the plugin's probe on the stand-in (LD_PRELOAD $TEST/libhvshim.so, HVSHIM_DEVICE=/dev/kvm) ($(secs "$t") s)"
}

# With /dev/kvm (or the stand-in): both DaemonSets Ready, 2000 slots allocatable, the node
# labelled by the plugin.
hl_kvm() {
	local t
	t=$(date +%s.%N)
	hl_rolled "after helm" || return 1
	note "both hyperlight DaemonSets rolled out, pods Ready: $(secs "$t") s after helm"
	until_ok 60 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc), want 2000" || return 1
	labels_ok() {
		[ "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.hyperlight\.dev/hypervisor}')" = kvm ] &&
			[ "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.hyperlight\.dev/enabled}')" = true ]
	}
	until_ok 60 labels_ok || fail "node $node not labelled hyperlight.dev/hypervisor=kvm, hyperlight.dev/enabled=true by the plugin" || return 1
	note "allocatable hyperlight.dev/hypervisor 2000; node labelled by the plugin through the chart's RBAC and admission policy"
}

# The workload's proof: a pod of two containers, each with one hyperlight.dev/hypervisor, from
# an image of busybox and sdp-kvm-run (tests/cluster/kvm-run): the one running as the device's
# owner (DEVICE_UID/GID, 65534 by default) creates a VM and runs guest code to its exits; the
# one running as another uid is refused the device by its mode. With the stand-in, the owner's
# open passes the mode and the device cgroup and reaches the kernel, which has no driver for
# the node: ENODEV ("No such device"; the device cgroup would say EPERM, the mode EACCES).
KVM_IMAGE=localhost/sdp-kvm-run:test
kvm_image() {
	local busybox links=() a
	"$src/tests/cluster/kvm-run/build.sh" "$TEST" || return 1
	busybox=$(command -v busybox) || fail "busybox-static is not installed (scripts/install-deps.sh cluster)" || return 1
	for a in sh stat cat echo ls; do links+=(--link "/bin/$a:busybox"); done
	python3 "$src/cluster/oci-image.py" "$TEST/kvm-run.tar" "$KVM_IMAGE" --file "$busybox:/bin/busybox:0755" "${links[@]}" \
		--file "$TEST/sdp-kvm-run:/usr/local/bin/sdp-kvm-run:0755" --dir /tmp:1777 --cmd '["sh"]' >/dev/null || return 1
	ctr_ images import --platform linux/amd64 "$TEST/kvm-run.tar" >/dev/null || fail "ctr images import $TEST/kvm-run.tar failed" || return 1
}

# uid_pair_pod NAME RESOURCE COMMAND: a pod of two containers from KVM_IMAGE, "owner" of uid
# 65534 (the chart's deviceUID) and "other" of uid 1000, no capability, no escalation, each with
# one RESOURCE and running sh -c COMMAND; waits (120 s) until both have finished.
uid_pair_pod() {
	local c
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
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
$(for c in owner:65534 other:1000; do cat <<EOC
  - name: ${c%%:*}
    image: $KVM_IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "$3"]
    securityContext:
      runAsUser: ${c#*:}
      runAsGroup: ${c#*:}
      allowPrivilegeEscalation: false
      capabilities:
        drop: ["ALL"]
    resources:
      limits:
        $2: 1
EOC
done)
EOF
	both_done() { [ "$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[*].state.terminated.reason}' | wc -w)" = 2 ]; }
	until_ok 120 both_done "$1" || { diag "$NS" "$1"; fail "the containers of $1 did not both finish in 120 s"; return 1; }
}

hl_workload() {
	local t c code log
	kvm_image || return 1
	t=$(date +%s.%N)
	# shellcheck disable=SC2016 # expanded in the container
	uid_pair_pod kvm-workload hyperlight.dev/hypervisor 'echo node: $(stat -c '"'"'%F %a %u:%g'"'"' /dev/kvm); exec sdp-kvm-run' || return 1
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
	if [ "$HV" = kvm ]; then
		{ [ "$code" = 0 ] && echo "$log" | grep -q '^sdp-kvm-run: ok api=12 exits=io(port=0x10,value=0x2a),hlt uid=65534 gid=65534$'; } ||
			fail "the owner's sdp-kvm-run did not run its guest: exit $code, $log" || return 1
	else
		{ [ "$code" = 1 ] && echo "$log" | grep -q '^sdp-kvm-run: FAIL open: No such device$'; } ||
			fail "the owner's open of the stand-in node did not reach the kernel (want ENODEV: allowed by the mode and the device cgroup, no driver): exit $code, $log" || return 1
	fi
	code=$(kubectl -n "$NS" get pod kvm-workload -o jsonpath='{.status.containerStatuses[?(@.name=="other")].state.terminated.exitCode}')
	log=$(kubectl -n "$NS" logs kvm-workload -c other 2>&1)
	{ [ "$code" = 1 ] && echo "$log" | grep -q '^sdp-kvm-run: FAIL open: Permission denied$'; } ||
		fail "another uid was not refused the device: exit $code, $log" || return 1
	kubectl -n "$NS" delete pod kvm-workload --wait=false >/dev/null
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
	[ -z "$(hl_alloc)" ] || [ "$(hl_alloc)" = 0 ] ||
		fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) on a node without a hypervisor" || return 1
	note "no /dev/kvm on this host: device-access logged msg=\"no usable hypervisor device\" and was restarted, the main pod Pending (Insufficient hyperlight.dev/device-access), nothing advertised ($(secs "$t") s)"
}

# kvm-hold: a pod holding one hyperlight.dev/hypervisor through the faults below, Running.
hl_hold() {
	one_pod kvm-hold hyperlight.dev/hypervisor
	running() { [ "$(phase kvm-hold)" = Running ]; }
	until_ok 120 running || { diag "$NS" kvm-hold; fail "a pod holding hyperlight.dev/hypervisor is not Running after 120 s"; return 1; }
	note "kvm-hold Running: $(fingerprint "$NS" kvm-hold /dev/kvm)"
}
hl_held() { fingerprint "$NS" kvm-hold /dev/kvm; }

# hl_new_pod_runs: a new pod with one hyperlight.dev/hypervisor runs with /dev/kvm, then goes.
hl_new_pod_runs() {
	local t seen
	t=$(date +%s.%N)
	one_pod kvm-new hyperlight.dev/hypervisor
	running() { [ "$(phase kvm-new)" = Running ]; }
	until_ok 120 running || { diag "$NS" kvm-new; fail "a new pod with hyperlight.dev/hypervisor is not Running after 120 s"; return 1; }
	seen=$(kubectl -n "$NS" exec kvm-new -- stat -c '%F %t:%T' /dev/kvm 2>&1)
	[ "$seen" = "character special file a:e8" ] || fail "the new pod's /dev/kvm: $seen; want the character device 10:232" || return 1
	kubectl -n "$NS" delete pod kvm-new --wait=true --timeout=60s >/dev/null
	note "a new pod with hyperlight.dev/hypervisor ran ($(secs "$t") s to Running, /dev/kvm 10:232)"
}

# kill -9 of the hyperlight plugin's container: restarted, 2000 allocatable again, the pod
# holding the device untouched, a new one runs.
hl_fault_kill() {
	local p before since t
	p=$(hl_pod hyperlight-device-plugin)
	before=$(hl_held)
	since=$(date -u +%FT%TZ)
	kill_container "$HL_NS" "$p" hyperlight || return 1
	t=$killed_at
	registered_n "$HL_NS" "$p" "$since" 1 || fail "the restarted hyperlight did not log 'registered with kubelet'" || return 1
	until_ok 60 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after the restart" || return 1
	[ "$(hl_held)" = "$before" ] || fail "the pod holding the device changed: before: $before; after: $(hl_held)" || return 1
	note "kill -9 of hyperlight (pid $killed_pid): Ready and 2000 allocatable again $(secs "$t") s later; the pod holding /dev/kvm untouched"
	hl_new_pod_runs
}

# A kubelet restart: both hyperlight plugins re-register by themselves (neither container
# restarted), 2000 allocatable in the restarted kubelet's status, the holding pod untouched.
hl_fault_kubelet() {
	local p a rp ra before t since now kpid
	p=$(hl_pod hyperlight-device-plugin)
	a=$(hl_pod hyperlight-device-access)
	rp=$(restarts "$HL_NS" "$p")
	ra=$(restarts "$HL_NS" "$a")
	before=$(hl_held)
	t=$(date +%s.%N)
	since=$(date -u +%FT%TZ)
	now=$(date +%s)
	kpid=$(restart_component kubelet) || return 1
	fresh() { status_since "$now" && [ "$(kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ] && hl_all; }
	until_ok 120 fresh || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) (want 2000) in the restarted kubelet's status 120 s later" || return 1
	registered_n "$HL_NS" "$p" "$since" 1 || fail "hyperlight-device-plugin did not log 'registered with kubelet' after the kubelet restart" || return 1
	registered_n "$HL_NS" "$a" "$since" 1 || fail "hyperlight-device-access did not log 'registered with kubelet' after the kubelet restart" || return 1
	note "kubelet restarted (pid $kpid): both hyperlight plugins registered again, 2000 allocatable $(secs "$t") s later"
	{ [ "$(restarts "$HL_NS" "$p")" = "$rp" ] && [ "$(restarts "$HL_NS" "$a")" = "$ra" ]; } ||
		fail "a hyperlight container was restarted: it should re-register by itself" || return 1
	[ "$(hl_held)" = "$before" ] || fail "the pod holding the device changed: before: $before; after: $(hl_held)" || return 1
	note "the pod holding /dev/kvm untouched, neither plugin container restarted"
	hl_new_pod_runs
}

# The host's /dev/kvm removed: allocatable drops to 0, a new pod stays Pending with the
# scheduler's reason; the node made again as it was (type, numbers, mode, owner): 2000 again and
# the pod runs. The holding pod keeps its own node all along.
hl_fault_node() {
	local t before st mode uid gid maj min
	before=$(hl_held)
	st=$(stat -c '%a %u %g %t %T' /dev/kvm) || return 1
	read -r mode uid gid maj min <<<"$st"
	echo "$st" >"$TEST/kvm-node" # cleanup makes it again if the test ends in between
	t=$(date +%s.%N)
	rm /dev/kvm
	zero() { [ "$(hl_alloc)" = 0 ]; }
	until_ok 60 zero || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after /dev/kvm was removed, want 0" || return 1
	note "/dev/kvm removed: allocatable 0 $(secs "$t") s later"
	one_pod kvm-wait hyperlight.dev/hypervisor
	why() { kubectl -n "$NS" get events --field-selector "involvedObject.name=kvm-wait,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'Insufficient hyperlight.dev/hypervisor'; }
	until_ok 60 why || { diag "$NS" kvm-wait; fail "the new pod is not Pending for 'Insufficient hyperlight.dev/hypervisor'"; return 1; }
	note "a new pod with hyperlight.dev/hypervisor Pending: $(kubectl -n "$NS" get events --field-selector 'involvedObject.name=kvm-wait,reason=FailedScheduling' -o jsonpath='{.items[-1:].message}')"
	# the label follows the verdict once it has held for the chart's nodeLabelsHold (10 s)
	enabled_is() { [ "$(kubectl get node "$node" -o jsonpath='{.metadata.labels.hyperlight\.dev/enabled}')" = "$1" ]; }
	until_ok 60 enabled_is false || fail "node label hyperlight.dev/enabled is not 'false' $(secs "$t") s after /dev/kvm was removed" || return 1
	note "node label hyperlight.dev/enabled=false $(secs "$t") s after the removal (hold 10 s): $(kubectl -n "$HL_NS" logs ds/hyperlight-device-plugin 2>/dev/null | grep 'msg="node labelled"' | tail -n1)"
	t=$(date +%s.%N)
	mknod -m "$mode" /dev/kvm c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/kvm || return 1
	rm "$TEST/kvm-node"
	until_ok 60 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after /dev/kvm came back, want 2000" || return 1
	running() { [ "$(phase kvm-wait)" = Running ]; }
	until_ok 120 running || { diag "$NS" kvm-wait; fail "the waiting pod did not run once /dev/kvm came back"; return 1; }
	note "/dev/kvm back ($mode $uid:$gid): 2000 allocatable, the waiting pod Running $(secs "$t") s later"
	until_ok 60 enabled_is true || fail "node label hyperlight.dev/enabled is not 'true' $(secs "$t") s after /dev/kvm came back" || return 1
	note "node label hyperlight.dev/enabled=true again $(secs "$t") s after /dev/kvm came back"
	[ "$(hl_held)" = "$before" ] || fail "the pod holding the device changed: before: $before; after: $(hl_held)" || return 1
	kubectl -n "$NS" delete pod kvm-wait --wait=false >/dev/null
}

# helm upgrade with a changed value: both DaemonSets roll; the holding pod never leaves Running
# (polled through the roll-out) and is unchanged after it; 2000 allocatable again.
hl_fault_upgrade() {
	local p before t bad=0 roll
	p=$(hl_pod hyperlight-device-plugin)
	before=$(hl_held)
	t=$(date +%s.%N)
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		--set logLevel=debug "${HL_RENDER[@]}" >"$TEST/helm-hl-up.log" 2>&1 || { cat "$TEST/helm-hl-up.log" >&2; return 1; }
	hl_rolled "after helm upgrade" &
	roll=$!
	while kill -0 "$roll" 2>/dev/null; do
		[ "$(phase kvm-hold)" = Running ] || bad=$((bad + 1))
		sleep 0.5
	done
	wait "$roll" || return 1
	[ "$(hl_pod hyperlight-device-plugin)" != "$p" ] || fail "helm upgrade with a changed value made no new plugin pod" || return 1
	[ "$bad" = 0 ] || fail "the pod holding the device left Running $bad times during the roll-out" || return 1
	until_ok 60 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after the upgrade" || return 1
	[ "$(hl_held)" = "$before" ] || fail "the pod holding the device changed across the upgrade" || return 1
	note "helm upgrade (logLevel debug): new pod $(hl_pod hyperlight-device-plugin), both DaemonSets rolled, 2000 allocatable in $(secs "$t") s; the holding pod Running throughout, unchanged"
	hl_new_pod_runs
}

# helm uninstall: what stays is what docs/operations.md says (the CDI spec and the node
# labels); the pods, the namespace and the sockets go, allocatable drops to 0, the holding pod
# stays.
hl_fault_uninstall() {
	local t left l v
	t=$(date +%s.%N)
	helm uninstall hyperlight-device-plugin -n kube-system --wait --timeout 120s >/dev/null || return 1
	gone() { ! kubectl get namespace "$HL_NS" >/dev/null 2>&1; }
	until_ok 120 gone || fail "namespace $HL_NS still there 120 s after helm uninstall" || return 1
	zero() { [ "$(hl_alloc)" = 0 ]; }
	until_ok 60 zero || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after helm uninstall, want 0" || return 1
	left=$(find /var/lib/kubelet/device-plugins -name 'hl-*' | tr '\n' ' ')
	[ -z "$left" ] || fail "hyperlight sockets left in /var/lib/kubelet/device-plugins: $left" || return 1
	[ -f /var/run/cdi/hyperlight.json ] || fail "/var/run/cdi/hyperlight.json is gone: docs/operations.md says it stays for the pods using it" || return 1
	for l in hypervisor=kvm enabled=true device-plugin=true; do
		v=$(kubectl get node "$node" -o jsonpath="{.metadata.labels.hyperlight\.dev/${l%%=*}}")
		[ "$v" = "${l#*=}" ] || fail "node label hyperlight.dev/${l%%=*} is '$v' after helm uninstall: docs/operations.md says it stays (${l#*=})" || return 1
	done
	[ "$(phase kvm-hold)" = Running ] || fail "the pod holding the device stopped with the plugin" || return 1
	note "helm uninstall: pods, namespace and sockets gone, allocatable 0, CDI spec and labels kept, the holding pod Running ($(secs "$t") s)"
}

# policy_binder: a pod of the plugin's account on this node, and POLICY_TOKEN, a token bound to
# it (so it names this node, as the plugin's own does).
policy_binder() {
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
	POLICY_TOKEN=$(kubectl -n "$HL_NS" create token hyperlight-device-plugin --bound-object-kind Pod --bound-object-name sdp-test-binder --duration 10m)
}
# policy_label TOKEN NODE KEY=VALUE...: the merge patch of the labels the plugin itself sends,
# with curl (the plugin's RBAC has patch, not get: kubectl label and patch read the node
# first). Prints the API server's answer; fails unless it is 200.
policy_label() {
	local tok=$1 n=$2 kv labels="" code server
	shift 2
	server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	for kv in "$@"; do labels="$labels${labels:+,}\"${kv%%=*}\":\"${kv#*=}\""; done
	code=$(curl -sS -o "$TEST/patch.out" -w '%{http_code}' --cacert "$STATE/pki/ca.crt" -X PATCH \
		-H "Authorization: Bearer $tok" -H 'Content-Type: application/merge-patch+json' \
		--data "{\"metadata\":{\"labels\":{$labels}}}" "$server/api/v1/nodes/$n") || return 1
	jq -r '.message // ("labels now: " + (.metadata.labels | tostring))' "$TEST/patch.out" 2>/dev/null || cat "$TEST/patch.out"
	[ "$code" = 200 ]
}

# The node-label policy of the chart, enforced by the API server, both ways: the plugin's
# account, with a token bound to a pod on this node, may set its own labels on this node only.
hl_policy() {
	[ -f "$STATE/pki/ca.crt" ] || fail "no $STATE/pki/ca.crt" || return 1
	policy_binder
	kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: sdp-test-other
EOF
	local token=$POLICY_TOKEN loose
	loose=$(kubectl -n "$HL_NS" create token hyperlight-device-plugin --duration 10m)
	local out
	# allowed: its own labels on its own node
	out=$(policy_label "$token" "$node" hyperlight.dev/hypervisor=kvm hyperlight.dev/enabled=true) ||
		fail "the plugin's account was refused its own labels on its own node: $out" || return 1
	note "own node, own labels: allowed ($out)"
	out=$(policy_label "$token" "$node" hyperlight.dev/enabled=false) ||
		fail "the plugin's account was refused hyperlight.dev/enabled=false on its own node: $out" || return 1
	out=$(policy_label "$token" "$node" hyperlight.dev/enabled=true) || fail "enabled=true again refused: $out" || return 1
	note "own node, hyperlight.dev/enabled=false then true: allowed"
	if out=$(policy_label "$token" "$node" hyperlight.dev/enabled=maybe); then
		fail "the plugin's account set hyperlight.dev/enabled=maybe: $out"
		return 1
	fi
	echo "$out" | grep -q 'must be "true" or "false"' || fail "enabled=maybe: refused, but not by the chart's policy: $out" || return 1
	note "hyperlight.dev/enabled=maybe: refused ($out)"
	# refused: another node
	if out=$(policy_label "$token" sdp-test-other hyperlight.dev/hypervisor=kvm); then
		fail "the plugin's account labelled another node: $out"
		return 1
	fi
	echo "$out" | grep -q "may not change node sdp-test-other" || fail "another node: refused, but not by the chart's policy: $out" || return 1
	note "another node: refused ($(echo "$out" | tail -n1))"
	# refused: another label, the operator's opt-in label, and a companion's with companions off
	for l in example.com/other=x hyperlight.dev/device-plugin=false hyperlight.dev/tun=true; do
		if out=$(policy_label "$token" "$node" "$l"); then
			fail "the plugin's account set $l: $out"
			return 1
		fi
		echo "$out" | grep -q "may change only the labels" || fail "label $l: refused, but not by the chart's policy: $out" || return 1
		note "label $l: refused ($out)"
	done
	# refused: a token that names no node
	if out=$(policy_label "$loose" "$node" hyperlight.dev/enabled=true); then
		fail "a token without a node was allowed: $out"
		return 1
	fi
	echo "$out" | grep -q "must use a pod-bound token" || fail "a token without a node: refused, but not by the chart's policy: $out" || return 1
	note "a token naming no node: refused ($out)"
	# the same requests as the cluster admin: allowed (the policy binds the plugin's account only)
	kubectl label node sdp-test-other example.com/other=x >/dev/null || fail "the admin could not label sdp-test-other" || return 1
	kubectl delete node sdp-test-other --wait=true >/dev/null
	kubectl -n "$HL_NS" delete pod sdp-test-binder --wait=false >/dev/null
}

# --- the companions (tests/cluster/companions.sh) -------------------------------------------------
# shellcheck source=tests/cluster/companions.sh
. "$src/tests/cluster/companions.sh"

# --- DRA (tests/cluster/dra.sh) -----------------------------------------------------------------
# shellcheck source=tests/cluster/dra.sh
. "$src/tests/cluster/dra.sh"
# shellcheck source=tests/cluster/dra_kata.sh
. "$src/tests/cluster/dra_kata.sh"

# --- the run ------------------------------------------------------------------------------------
# The hypervisor: the host's own /dev/kvm (HV=kvm), or none (HV=none: the stand-in steps). What a
# killed run left is put right first: a /dev/kvm it removed, its stand-in.
kvm_node_restore "$TEST/kvm-node" || exit 1
TUN_NODE_SAVED=$TEST/tun-node companion_node_restore || exit 1
kvm_standin_remove
if kvm_opens; then
	HV=kvm
elif [ -e /dev/kvm ]; then
	echo "test-cluster: /dev/kvm exists but does not open ($(stat -c '%F %t:%T' /dev/kvm)): no driver behind it; the test will neither use it nor stand in for it" >&2
	exit 1
else
	HV=none
fi
say "on node $node: Kubernetes $(kubectl version -o json | jq -r .serverVersion.gitVersion), images $version, hypervisor: $([ "$HV" = kvm ] && echo /dev/kvm || echo "none (a stand-in for the hyperlight steps)")"
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
if [ "$HV" = kvm ]; then
	step "hyperlight on /dev/kvm: rolled out, 2000 allocatable, node labelled" hl_kvm
	step "KVM workload (uid 65534): a VM runs guest code to its exits; another uid is refused the node" hl_workload
else
	step "hyperlight without a hypervisor: told, restarted, nothing advertised" hl_nokvm
	step "stand-in hypervisor: /dev/kvm made (no driver), the plugin's probe on the tests' stand-in" hl_standin
	step "hyperlight on the stand-in /dev/kvm: rolled out, 2000 allocatable, node labelled" hl_kvm
	step "stand-in workload (uid 65534): its open reaches the kernel (ENODEV); another uid is refused the node" hl_workload
fi
step "companions on (tun, vhost-net): advertised from the host's nodes, a missing one Unhealthy with its reason, node labelled per companion" hl_companions_on
step "tun in workloads: node 660 65534:65534, opened by uid 65534, refused to uid 1000" hl_companion_modes
step "micro-VM pods with only NET_ADMIN: a tap through /dev/net/tun, the tiny guest on the pod's /dev/kvm and Debian's kernel ping the pod and back; without tun: a clear error" hl_microvm
step "fault: the host's /dev/net/tun removed, then back: allocatable and its node label follow" hl_companion_fault
step "companions off: both DaemonSets rolled, the hypervisor alone again, the companions' labels kept" hl_companions_off
step "node-label admission policy enforced by the API server, both ways" hl_policy
step "a pod holding hyperlight.dev/hypervisor through the faults" hl_hold
step "fault: kill -9 of the hyperlight container" hl_fault_kill
step "fault: kubelet restart (hyperlight)" hl_fault_kubelet
step "fault: the host's /dev/kvm removed, then back" hl_fault_node
step "fault: helm upgrade of hyperlight with a changed value" hl_fault_upgrade
step "DRA: hyperlight switched to api=dra: rolled, registered, its device published with every attribute" dra_switch
step "DRA: the slices admission policy enforced by the API server" dra_policy
step "DRA: three pods share the hypervisor, one claim each; the fourth Pending with the scheduler's reason" dra_share
step "DRA: a pod asking for hyperlight.dev/hypervisor: 1 served through DRA (extendedResourceName)" dra_extended
step "DRA: kill -9 of the plugin and a kubelet restart: pods keep their devices, claims prepared once" dra_faults
step "DRA: a deleted pod's claim unprepared, its checkpoint removed" dra_unprepare
step "DRA: the host's /dev/kvm removed: device tainted, its pod shows it Unhealthy, a new claim Pending; back: all well" dra_health
step "DRA: back to api=devicePlugin" dra_back
step "DRA: kata installed with api=dra: registered, each IOMMU group published with the tree's attributes" kata_dra_install
step "DRA: kata's slices admission policy enforced by the API server" kata_dra_policy
step "DRA: two H100s under one PCIe root (CEL + matchAttribute) allocated, exactly their groups injected" kata_dra_pair
step "DRA: a pair no single PCIe root can hold stays Pending with the scheduler's reason" kata_dra_unsatisfiable
step "DRA: a companion bound to its host driver: device tainted at once, its pod shows it Unhealthy; back: all well" kata_dra_companion
step "DRA: kill -9 of kata and a kubelet restart: the pod keeps its groups, its claim prepared once" kata_dra_faults
step "DRA: the pod deleted: its claim unprepared, checkpoint removed; kata uninstalled" kata_dra_unprepare
step "helm uninstall of hyperlight leaves what docs/operations.md says" hl_fault_uninstall
finish
