#!/bin/bash
# make bench-peers: our hyperlight against the device plugins people run for /dev/kvm, each
# deployed on the real cluster of make cluster for the same device, one at a time (the kubelet
# takes one plugin per resource name), measured through the real components in rounds, each
# round every plugin once in a rotated order; writes the raw figures to BUILD_DIR/peers/results.tsv
# and, with -out FILE, the section "Against the plugins people run" of FILE
# (BUILD_DIR/peers/sdp-peers-report, bench/peers/report).
#
#   bench/peers/run.sh BUILD_DIR [OUT]
#
# PEERS_ROUNDS (3), PEERS_IDLE (seconds of the idle window, 30), PEERS_BURST (pods created at once,
# 10), PEERS_COUNT (devices each plugin advertises, 2000: hyperlight's chart default).
# Needs make cluster running, make images' hyperlight image in it (make cluster imports it) and
# bench/peers/build.sh BUILD_DIR. On a host without /dev/kvm it stands in for it as make
# test-cluster does (cluster/lib.sh: a c 10:232 node, root:root 0660, no driver; hyperlight's
# probe on the tests' hypervisor stand-in, tests/cluster/test-renderer.py hvshim); the peers
# only look for the node. Everything it makes goes on the way out.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: bench/peers/run.sh BUILD_DIR [OUT]}" && pwd)
out_doc=${2:-}
# shellcheck source=cluster/lib.sh
. "$src/cluster/lib.sh"
export KUBECONFIG=$KUBECONFIG_ADMIN
bin=$STATE/bin
helm_bin=$("$src/scripts/helm-tools.sh" "$build")
export PATH=$bin:$helm_bin:$PATH
ROUNDS=${PEERS_ROUNDS:-3}
IDLE=${PEERS_IDLE:-30}
BURST=${PEERS_BURST:-10}
COUNT=${PEERS_COUNT:-2000}
DROP_WAIT=30 # seconds to wait for allocatable to drop after the device is removed
NS=sdp-peers
HL_NS=hyperlight-system
PEERS=$build/peers
WORK=$STATE/bench-peers
RES=$PEERS/results.tsv
RENDERER=$src/tests/cluster/test-renderer.py
version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)

say() { echo "bench-peers: $*" >&2; }
die() { say "$*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }
# until_ok SECONDS CMD...: CMD succeeds within SECONDS, polled every 0.2 s.
until_ok() {
	local end
	end=$(awk -v s="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n + s }')
	shift
	until "$@" >/dev/null 2>&1; do
		awk -v e="$end" -v n="$(date +%s.%N)" 'BEGIN { exit !(n < e) }' || return 1
		sleep 0.2
	done
}
ctr_() { "$bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io "$@" 2>/dev/null; }
# rec ROUND PLUGIN METRIC VALUE: one raw figure.
rec() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$RES"; say "  round $1 $2 $3 = $4"; }

node=$(kubectl get nodes -o jsonpath='{.items[0].metadata.name}' 2>/dev/null) ||
	die "no cluster (make cluster first): kubectl get nodes failed"
for f in generic-device-plugin.tar generic-device-plugin.ref smarter-device-manager.tar smarter-device-manager.ref sdp-peers-report; do
	[ -f "$PEERS/$f" ] || die "$PEERS/$f missing (bench/peers/build.sh $build)"
done
GENERIC_IMAGE=$(cat "$PEERS/generic-device-plugin.ref")
SMARTER_IMAGE=$(cat "$PEERS/smarter-device-manager.ref")
imgs=$(ctr_ images ls -q)
grep -qx "localhost/hyperlight-device-plugin:$version" <<<"$imgs" ||
	die "localhost/hyperlight-device-plugin:$version is not in containerd (make cluster imports it from make images)"

# --- the plugins --------------------------------------------------------------------------------
# Each: its resource name, how it is deployed and removed, the label selecting its pods.
res_of() { case $1 in smarter) echo smarter-devices/kvm ;; *) echo hyperlight.dev/hypervisor ;; esac; }
ns_of() { case $1 in hyperlight) echo "$HL_NS" ;; *) echo kube-system ;; esac; }
sel_of() {
	case $1 in
	hyperlight) echo app.kubernetes.io/part-of=hyperlight ;;
	generic) echo app.kubernetes.io/name=generic-device-plugin ;;
	smarter) echo name=smarter-device-manager ;;
	esac
}

HL_RENDER=()
deploy() {
	case $1 in
	hyperlight)
		kubectl label node "$node" hyperlight.dev/device-plugin=true --overwrite >/dev/null
		helm upgrade --install hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system \
			--set deviceCount="$COUNT" "${HL_RENDER[@]}" >"$WORK/helm.log" 2>&1 || { cat "$WORK/helm.log" >&2; return 1; }
		;;
	generic)
		# its own manifest (manifests/generic-device-plugin.yaml of the module): privileged, the
		# host's /dev and the kubelet's device-plugins directory, its resources; one device
		# of its own configuration: /dev/kvm, COUNT times, under our resource name (--domain).
		kubectl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: generic-device-plugin
  namespace: kube-system
  labels: {app.kubernetes.io/name: generic-device-plugin}
spec:
  selector:
    matchLabels: {app.kubernetes.io/name: generic-device-plugin}
  template:
    metadata:
      labels: {app.kubernetes.io/name: generic-device-plugin}
    spec:
      priorityClassName: system-node-critical
      tolerations: [{operator: Exists, effect: NoExecute}, {operator: Exists, effect: NoSchedule}]
      containers:
      - name: generic-device-plugin
        image: $GENERIC_IMAGE
        imagePullPolicy: Never
        args: ["--domain", "hyperlight.dev", "--device", '{"name": "hypervisor", "groups": [{"count": $COUNT, "paths": [{"path": "/dev/kvm"}]}]}']
        resources:
          requests: {cpu: 50m, memory: 10Mi}
          limits: {cpu: 50m, memory: 20Mi}
        securityContext: {privileged: true}
        volumeMounts:
        - {name: device-plugin, mountPath: /var/lib/kubelet/device-plugins}
        - {name: dev, mountPath: /dev}
      volumes:
      - {name: device-plugin, hostPath: {path: /var/lib/kubelet/device-plugins}}
      - {name: dev, hostPath: {path: /dev}}
EOF
		;;
	smarter)
		# its own manifest (smarter-device-manager-ds-with-configmap-*.yaml of the module):
		# host network, no capability, the host's /dev, /sys and device-plugins directory, its
		# resources, the configuration from a ConfigMap at /root/config (its image's WORKDIR is
		# /root); one pattern: ^kvm$, COUNT devices.
		kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: smarter-device-manager
  namespace: kube-system
data:
  conf.yaml: |
    - devicematch: ^kvm\$
      nummaxdevices: $COUNT
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: smarter-device-manager
  namespace: kube-system
  labels: {name: smarter-device-manager}
spec:
  selector:
    matchLabels: {name: smarter-device-manager}
  template:
    metadata:
      labels: {name: smarter-device-manager}
    spec:
      priorityClassName: system-node-critical
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      containers:
      - name: smarter-device-manager
        image: $SMARTER_IMAGE
        imagePullPolicy: Never
        workingDir: /root
        securityContext:
          allowPrivilegeEscalation: false
          capabilities: {drop: ["ALL"]}
        resources:
          requests: {cpu: 10m, memory: 15Mi}
          limits: {cpu: 100m, memory: 15Mi}
        volumeMounts:
        - {name: device-plugin, mountPath: /var/lib/kubelet/device-plugins}
        - {name: dev-dir, mountPath: /dev}
        - {name: sys-dir, mountPath: /sys}
        - {name: config, mountPath: /root/config}
      volumes:
      - {name: device-plugin, hostPath: {path: /var/lib/kubelet/device-plugins}}
      - {name: dev-dir, hostPath: {path: /dev}}
      - {name: sys-dir, hostPath: {path: /sys}}
      - {name: config, configMap: {name: smarter-device-manager}}
EOF
		;;
	esac
}

undeploy() {
	case $1 in
	hyperlight)
		helm uninstall -n kube-system --wait --timeout 120s hyperlight-device-plugin >/dev/null 2>&1 || true
		kubectl delete namespace "$HL_NS" --wait=true --timeout=120s >/dev/null 2>&1 || true
		;;
	generic) kubectl -n kube-system delete ds generic-device-plugin --wait=true --timeout=120s >/dev/null 2>&1 || true ;;
	smarter) kubectl -n kube-system delete ds,configmap smarter-device-manager --wait=true --timeout=120s >/dev/null 2>&1 || true ;;
	esac
	gone() { [ -z "$(kubectl -n "$(ns_of "$1")" get pods -l "$(sel_of "$1")" -o name 2>/dev/null)" ]; }
	until_ok 120 gone "$1" || say "the $1 pods did not go within 120 s"
}

# alloc RESOURCE: allocatable RESOURCE in the API server's Node (2k written as 2000; "" if none).
# "err" when the API server did not answer (never taken for a value).
alloc() {
	local j
	j=$(kubectl get node "$node" -o json 2>/dev/null) || { echo err; return; }
	jq -r --arg r "$1" '.status.allocatable[$r] // ""' <<<"$j" | sed 's/^\([0-9]*\)k$/\1000/'
}
alloc_is() { [ "$(alloc "$1")" = "$2" ]; }
# kalloc RESOURCE: the kubelet's own view, without its node-status period: the number of
# RESOURCE's allocatable devices in its pod-resources API (GetAllocatableResources; healthy
# devices only), through cluster/kube's client; "" when the kubelet does not answer.
kalloc() {
	"$bin/sdp-kube" podresources /var/lib/kubelet/pod-resources/kubelet.sock 2>/dev/null |
		jq -r --arg r "$1" '[.allocatable.devices[]? | select(.resource_name == $r) | .device_ids[]] | length' ||
		echo err
}
# cmp_ OP VALUE N: VALUE is N (is), or below N or none (below).
cmp_() { [ "$2" != err ] && case $1 in is) [ "$2" = "$3" ] ;; below) [ -z "$2" ] || [ "$2" -lt "$3" ] ;; esac; }
# watch2 T0 TIMEOUT RESOURCE OP N [API-CHECK]: polls both views (the API server's Node, the
# kubelet's pod-resources) until each has allocatable OP N; sets api_s and kub_s to the seconds
# from T0 when each first did (or "never" after TIMEOUT s). API-CHECK: a command that must pass
# too for the API server's view (a status of the restarted kubelet), which is then taken only
# once the kubelet's own view has it (the restarted kubelet's first statuses can carry the
# Node's old figures).
watch2() {
	local t0=$1 to=$2 res=$3 op=$4 n=$5 chk=${6:-true}
	api_s=never kub_s=never
	while :; do
		if [ "$kub_s" = never ] && cmp_ "$op" "$(kalloc "$res")" "$n"; then kub_s=$(since "$t0"); fi
		if [ "$api_s" = never ] && { [ "$chk" = true ] || [ "$kub_s" != never ]; } &&
			cmp_ "$op" "$(alloc "$res")" "$n" && $chk; then api_s=$(since "$t0"); fi
		[ "$api_s" = never ] || [ "$kub_s" = never ] || return 0
		awk -v t="$t0" -v n="$(date +%s.%N)" -v to="$to" 'BEGIN { exit !(n - t < to) }' || return 1
		sleep 0.1
	done
}
alloc_below() { local a; a=$(alloc "$1"); [ "$a" != err ] && { [ -z "$a" ] || [ "$a" -lt "$2" ]; }; }

# pids PLUGIN: the host pids of the plugin's containers (containerd's tasks), one a line.
pids() {
	local ids id
	ids=$(kubectl -n "$(ns_of "$1")" get pods -l "$(sel_of "$1")" -o jsonpath='{range .items[*]}{range .status.containerStatuses[*]}{.containerID}{"\n"}{end}{end}' | sed 's|^containerd://||')
	for id in $ids; do ctr_ tasks ls | awk -v id="$id" '$1 == id { print $2 }'; done
}
# main_pid PLUGIN: the pid of the daemon serving RESOURCE (hyperlight: the main plugin).
main_pid() {
	local id
	case $1 in
	hyperlight) id=$(kubectl -n "$HL_NS" get pods -l app.kubernetes.io/name=hyperlight-device-plugin -o jsonpath='{.items[0].status.containerStatuses[0].containerID}') ;;
	*) id=$(kubectl -n "$(ns_of "$1")" get pods -l "$(sel_of "$1")" -o jsonpath='{.items[0].status.containerStatuses[0].containerID}') ;;
	esac
	ctr_ tasks ls | awk -v id="${id#containerd://}" '$1 == id { print $2 }'
}
# cpu_ns PIDS...: CPU time (ns) of the containers of these pids: their cgroups' cpuacct.usage
# (every process of the container, helper children included), summed.
cpu_ns() {
	local p cg t=0 u
	for p in "$@"; do
		cg=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3 }' "/proc/$p/cgroup")
		if [ -f "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage" ]; then
			u=$(cat "/sys/fs/cgroup/cpuacct$cg/cpuacct.usage")
		elif [ -f "/sys/fs/cgroup$cg/cpu.stat" ]; then # cgroup v2
			u=$(($(awk '$1 == "usage_usec" { print $2 }' "/sys/fs/cgroup$cg/cpu.stat") * 1000))
		else
			u=0
		fi
		t=$((t + u))
	done
	echo "$t"
}
# daemon_ns PIDS...: the daemons' own CPU time (ns): every thread's schedstat, plus the children
# they reaped (utime+stime of /proc/PID/stat's cutime and cstime: hyperlight's probe helper);
# not the kubelet's exec probes run in the container (children of runc, not of the daemon).
daemon_ns() {
	local p t=0 th c hz
	hz=$(getconf CLK_TCK)
	for p in "$@"; do
		for th in /proc/"$p"/task/*/schedstat; do
			read -r c _ <"$th" 2>/dev/null || c=0
			t=$((t + c))
		done
		c=$(awk -v hz="$hz" '{ sub(/^.*\) /, ""); printf "%.0f", ($14 + $15) * 1e9 / hz }' "/proc/$p/stat")
		t=$((t + c))
	done
	echo "$t"
}
# rss_kib PIDS...: VmRSS summed (KiB).
rss_kib() {
	local p t=0 r
	for p in "$@"; do
		r=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
		t=$((t + ${r:-0}))
	done
	echo "$t"
}

# The kubelet's Allocate histogram for RESOURCE: "sum count" from its /metrics, through the API
# server's node proxy.
alloc_metric() {
	kubectl get --raw "/api/v1/nodes/$node/proxy/metrics" |
		awk -v r="resource_name=\"$1\"" '
			index($0, "kubelet_device_plugin_alloc_duration_seconds_sum{") == 1 && index($0, r) { s = $2 }
			index($0, "kubelet_device_plugin_alloc_duration_seconds_count{") == 1 && index($0, r) { c = $2 }
			END { printf "%s %s\n", (s == "" ? 0 : s), (c == "" ? 0 : c) }'
}

# pod NAME RESOURCE: an unprivileged pod with one RESOURCE (not waited for).
pod_yaml() {
	cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $NS
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  securityContext: {runAsUser: 65534, runAsNonRoot: true}
  containers:
  - name: main
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources:
      limits: {$2: 1}
---
EOF
}
running_n() { [ "$(kubectl -n "$NS" get pods -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$')" -ge "$1" ]; }
clear_pods() {
	kubectl -n "$NS" delete pods --all --grace-period=0 --wait=true --timeout=120s >/dev/null 2>&1 || true
}

# --- one plugin, one round ----------------------------------------------------------------------
session() {
	local r=$1 p=$2 res t a b c pl mp before after i hist0 hist1 peak
	res=$(res_of "$p")
	say "round $r: $p ($res)"
	until_ok 120 alloc_below "$res" 1 || die "allocatable $res is $(alloc "$res") before $p starts: another plugin serves it"
	hist0=$(alloc_metric "$res")
	# start: deployed → allocatable COUNT in the API server's Node
	t=$(now)
	deploy "$p" || die "$p: deploy failed"
	watch2 "$t" 180 "$res" is "$COUNT" || die "$p: allocatable $res $(alloc "$res") (the kubelet's: $(kalloc "$res")) 180 s after deploying it, want $COUNT"
	rec "$r" "$p" start_alloc_s "$api_s"
	rec "$r" "$p" start_kubelet_s "$kub_s"
	sleep 10 # past its start-up work
	# idle: CPU over IDLE seconds, RSS at its end
	mapfile -t pl < <(pids "$p")
	mp=$(main_pid "$p")
	a=$(cpu_ns "${pl[@]}")
	c=$(daemon_ns "${pl[@]}")
	sleep "$IDLE"
	b=$(cpu_ns "${pl[@]}")
	i=$(daemon_ns "${pl[@]}")
	rec "$r" "$p" idle_cpu_ms_per_min "$(awk -v a="$a" -v b="$b" -v s="$IDLE" 'BEGIN { printf "%.2f", (b - a) / 1e6 * 60 / s }')"
	rec "$r" "$p" idle_daemon_cpu_ms_per_min "$(awk -v a="$c" -v b="$i" -v s="$IDLE" 'BEGIN { printf "%.2f", (b - a) / 1e6 * 60 / s }')"
	rec "$r" "$p" idle_rss_kib "$(rss_kib "${pl[@]}")"
	rec "$r" "$p" idle_rss_main_kib "$(rss_kib "$mp")"
	# one pod, three times: created → Running
	for i in 1 2 3; do
		t=$(now)
		pod_yaml "one-$i" "$res" | kubectl apply -f - >/dev/null
		until_ok 120 running_n 1 || die "$p: a pod with one $res not Running in 120 s"
		rec "$r" "$p" pod_start_s "$(since "$t")"
		# what the container's node is (owner, mode): the plugin's answer decides it
		[ "$i" != 1 ] || rec "$r" "$p" pod_dev "$(kubectl -n "$NS" exec "one-$i" -- stat -c '%F %a %u:%g' /dev/kvm 2>&1 | tr ' ' _)"
		clear_pods
	done
	# burst: BURST pods created at once → all Running; the plugin's CPU and peak RSS meanwhile
	a=$(cpu_ns "${pl[@]}")
	hist1=$(daemon_ns "${pl[@]}")
	peak=0
	t=$(now)
	for i in $(seq 1 "$BURST"); do pod_yaml "burst-$i" "$res"; done | kubectl apply -f - >/dev/null
	until running_n "$BURST" 2>/dev/null; do
		c=$(rss_kib "${pl[@]}")
		[ "$c" -le "$peak" ] || peak=$c
		awk -v t="$t" -v n="$(date +%s.%N)" 'BEGIN { exit !(n - t < 180) }' || die "$p: $BURST pods not Running in 180 s"
		sleep 0.1
	done
	rec "$r" "$p" burst_s "$(since "$t")"
	b=$(cpu_ns "${pl[@]}")
	rec "$r" "$p" burst_cpu_ms "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b - a) / 1e6 }')"
	c=$(daemon_ns "${pl[@]}")
	rec "$r" "$p" burst_daemon_cpu_ms "$(awk -v a="$hist1" -v b="$c" 'BEGIN { printf "%.2f", (b - a) / 1e6 }')"
	c=$(rss_kib "${pl[@]}")
	[ "$c" -le "$peak" ] || peak=$c
	rec "$r" "$p" burst_rss_kib "$peak"
	clear_pods
	# the kubelet's own Allocate latency for this session's pods (3 + BURST Allocates)
	hist1=$(alloc_metric "$res")
	read -r a b <<<"$hist0"
	read -r c i <<<"$hist1"
	rec "$r" "$p" alloc_n "$(awk -v a="$b" -v b="$i" 'BEGIN { printf "%d", b - a }')"
	rec "$r" "$p" alloc_mean_ms "$(awk -v s0="$a" -v c0="$b" -v s1="$c" -v c1="$i" 'BEGIN { if (c1 > c0) printf "%.3f", (s1 - s0) / (c1 - c0) * 1000; else print "nan" }')"
	# kubelet restart → allocatable COUNT again in a status the restarted kubelet posted
	local epoch kpid
	epoch=$(date +%s)
	t=$(now)
	kpid=$(restart_component kubelet) || die "kubelet restart failed"
	fresh_hb() {
		local hb
		hb=$(kubectl get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}')
		[ -n "$hb" ] && [ "$(date -d "$hb" +%s)" -gt "$epoch" ]
	}
	watch2 "$t" 180 "$res" is "$COUNT" fresh_hb || die "$p: allocatable $res $(alloc "$res") (the kubelet's: $(kalloc "$res")) 180 s after the kubelet restart (pid $kpid)"
	rec "$r" "$p" kubelet_restart_s "$api_s"
	rec "$r" "$p" kubelet_restart_kubelet_s "$kub_s"
	sleep 10 # settled after the restart
	# the host's /dev/kvm removed → allocatable below COUNT; made again → COUNT
	local st mode uid gid maj min
	st=$(stat -c '%a %u %g %t %T' /dev/kvm)
	read -r mode uid gid maj min <<<"$st"
	echo "$st" >"$WORK/kvm-node"
	t=$(now)
	rm /dev/kvm
	watch2 "$t" "$DROP_WAIT" "$res" below "$COUNT" || true
	rec "$r" "$p" dev_drop_s "$api_s"
	rec "$r" "$p" dev_drop_kubelet_s "$kub_s"
	if [ "$kub_s" != never ]; then
		rec "$r" "$p" dev_drop_to "$(kalloc "$res")"
		t=$(now)
		mknod -m "$mode" /dev/kvm c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/kvm
		rm -f "$WORK/kvm-node"
		watch2 "$t" 120 "$res" is "$COUNT" || true
		rec "$r" "$p" dev_back_s "$api_s"
		rec "$r" "$p" dev_back_kubelet_s "$kub_s"
	else
		# a pod asking for the device now: what a user gets from a plugin that still advertises it
		pod_yaml gone "$res" | kubectl apply -f - >/dev/null
		if until_ok 30 running_n 1; then
			rec "$r" "$p" dev_gone_pod "Running"
		else
			rec "$r" "$p" dev_gone_pod "$(kubectl -n "$NS" get pod gone -o jsonpath='{.status.phase}')/$(kubectl -n "$NS" get pod gone -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}')"
		fi
		clear_pods
		t=$(now)
		mknod -m "$mode" /dev/kvm c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/kvm
		rm -f "$WORK/kvm-node"
	fi
	undeploy "$p"
	# its capacity gone from the allocatable before the next plugin
	until_ok 120 alloc_below "$res" 1 || say "allocatable $res still $(alloc "$res") after $p went"
}

cleanup() {
	set +e
	kubectl delete namespace "$NS" --wait=true --timeout=120s >/dev/null 2>&1
	for p in hyperlight generic smarter; do undeploy "$p"; done
	kubectl label node "$node" hyperlight.dev/device-plugin- hyperlight.dev/enabled- hyperlight.dev/hypervisor- >/dev/null 2>&1
	kvm_node_restore "$WORK/kvm-node"
	kvm_standin_remove >/dev/null
	rm -rf "$WORK"
	set -e
}
trap 'say interrupted; cleanup; exit 1' INT TERM

# --- the run ------------------------------------------------------------------------------------
kvm_standin_remove
mkdir -p "$WORK"
if kvm_opens; then
	HV=kvm
elif [ -e /dev/kvm ]; then
	die "/dev/kvm exists but does not open ($(stat -c '%F %t:%T' /dev/kvm)): no driver behind it; neither used nor stood in for"
else
	HV=standin
	shim=$src/build-static/musl-dynamic/libhvshim.so
	[ -f "$shim" ] || die "$shim missing (make images builds it: scripts/build-static.sh)"
	cp "$shim" "$WORK/libhvshim.so"
	echo "c 10:232 made by bench/peers/run.sh" >"$KVM_STANDIN_MARK"
	mknod -m 0660 /dev/kvm c 10 232
	HL_RENDER=(--post-renderer "$RENDERER" --post-renderer-args hvshim --post-renderer-args "$WORK/libhvshim.so")
fi
for f in generic-device-plugin smarter-device-manager; do
	ctr_ images import --platform linux/amd64 "$PEERS/$f.tar" >/dev/null || die "ctr images import $PEERS/$f.tar failed"
done
trap 'say failed; cleanup' EXIT
kubectl create namespace "$NS" >/dev/null 2>&1 || true
for p in hyperlight generic smarter; do undeploy "$p"; done
: >"$RES"
t_all=$(now)
printf 'meta\tstarted\t%s\n' "$(date -u +%FT%TZ)" >>"$RES"
printf 'meta\thv\t%s\n' "$HV" >>"$RES"
printf 'meta\tkubernetes\t%s\n' "$(kubectl version -o json | jq -r .serverVersion.gitVersion)" >>"$RES"
printf 'meta\tload_before\t%s\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RES"
printf 'meta\tnproc\t%s\n' "$(nproc)" >>"$RES"
printf 'meta\trounds\t%s\nmeta\tidle\t%s\nmeta\tburst\t%s\nmeta\tcount\t%s\n' "$ROUNDS" "$IDLE" "$BURST" "$COUNT" >>"$RES"
printf 'meta\tgeneric_image\t%s\nmeta\tsmarter_image\t%s\nmeta\thyperlight_image\tlocalhost/hyperlight-device-plugin:%s\n' "$GENERIC_IMAGE" "$SMARTER_IMAGE" "$version" >>"$RES"
# image sizes: containerd's (the compressed layers, as a registry serves them) and unpacked
for ref in "localhost/hyperlight-device-plugin:$version" "$GENERIC_IMAGE" "$SMARTER_IMAGE"; do
	printf 'meta\timage_size\t%s %s\n' "$ref" "$(ctr_ images ls | awk -v r="$ref" '$1 == r { print $4 $5 }')" >>"$RES"
done
printf 'meta\tbinary_kib\thyperlight %s\n' "$(du -k "$src/build-static/image-context-hyperlight/rootfs/hyperlight-device-plugin" | cut -f1)" >>"$RES"
printf 'meta\tbinary_kib\tgeneric %s\n' "$(du -k "$PEERS/generic-device-plugin" | cut -f1)" >>"$RES"
printf 'meta\tbinary_kib\tsmarter %s\n' "$(du -k "$PEERS/smarter-device-manager" | cut -f1)" >>"$RES"
order=(hyperlight generic smarter)
for ((r = 1; r <= ROUNDS; r++)); do
	rot=()
	for ((i = 0; i < ${#order[@]}; i++)); do rot+=("${order[$(((i + r - 1) % ${#order[@]}))]}"); done
	t=$(now)
	l0=$(cut -d' ' -f1 /proc/loadavg)
	for p in "${rot[@]}"; do session "$r" "$p"; done
	printf 'meta\tround\t%s|%s|%s|%s → %s\n' "$r" "${rot[*]}" "$(since "$t")" "$l0" "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
done
printf 'meta\tduration\t%s\n' "$(since "$t_all")" >>"$RES"
trap - EXIT
cleanup
say "raw figures in $RES"
if [ -n "$out_doc" ]; then
	"$PEERS/sdp-peers-report" -results "$RES" -out "$out_doc"
	say "section written to $out_doc"
fi
