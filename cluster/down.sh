#!/bin/bash
# make cluster-down: stop the cluster of make cluster and remove every trace of it on the host,
# then prove it: the host's state (cluster/trace.sh) compared with the snapshot make cluster
# took before it started anything (CACHE/trace/before). Exit 1 if anything differs.
#
#   cluster/down.sh
#
# Order: the controllers stop (nothing recreates pods), every pod is deleted through the API
# while the kubelet runs (it kills the containers, tears down their network, unmounts their
# volumes), the kubelet stops, whatever pod sandbox is left is stopped and removed through the
# CRI (sdp-kube cri-clean), kube-proxy stops and removes its rules (kube-proxy --cleanup),
# containerd, the API server and etcd stop. Then what the components leave by design goes:
# mounts under the cluster's directories, the pods' bridge, the iptables chains of the kubelet,
# kube-proxy and the CNI plugins (KUBE-*, CNI-*) and the nftables tables made for them, the
# kubepods cgroups, the sysctls they changed (restored to the recorded values), the directories
# the components made (those that did not exist before make cluster; in those that did, only
# what is new), and the cluster's own STATE and RUN. Only processes the cluster started are
# stopped, by their recorded pid (checked by start time), and the shims and container processes
# it left (found by the containerd socket on their command line, or a kubepods cgroup).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster/lib.sh
. "$here/lib.sh"
[ "$(id -u)" -eq 0 ] || die "make cluster-down runs as root"
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
before=$TRACE_DIR/before
t0=$(date +%s)
bin=""
[ -d "$STATE/bin" ] && bin=$(readlink -f "$STATE/bin")
if [ ! -e "$STATE" ] && [ ! -e "$RUN" ]; then
	say "no cluster here ($STATE and $RUN absent)"
else
	say "stopping the cluster"
	if [ -f "$before" ] && [ -f "$TRACE_DIR/during" ]; then
		say "the running cluster (with its smoke pod) had added to the host (cluster/trace.sh summary):"
		"$here/trace.sh" summary "$before" "$TRACE_DIR/during" >&2
	fi
fi

# stop NAME [SECONDS]: SIGTERM to a component we started, SIGKILL after SECONDS (default 20).
stop() {
	local pid i=0
	pid=$(pid_alive "$1") || return 0
	kill -TERM "$pid" 2>/dev/null
	while [ -d "/proc/$pid" ] && [ "$i" -lt $((${2:-20} * 10)) ]; do sleep 0.1; i=$((i + 1)); done
	if [ -d "/proc/$pid" ]; then
		say "$1 (pid $pid) did not stop on SIGTERM: SIGKILL"
		kill -KILL "$pid" 2>/dev/null
		sleep 0.2
	fi
	rm -f "$RUN/$1.pid"
}

kubectl() { "$bin/kubectl" --kubeconfig "$STATE/admin.conf" --request-timeout=10s "$@"; }
stop kube-controller-manager
stop kube-scheduler
if [ -n "$bin" ] && pid_alive kube-apiserver >/dev/null && pid_alive kubelet >/dev/null; then
	n=$(kubectl get pods -A --no-headers 2>/dev/null | wc -l)
	if [ "$n" -gt 0 ]; then
		say "deleting $n pod(s) through the API (the kubelet tears them down)"
		kubectl delete pods --all -A --grace-period=2 --wait=true --timeout=90s >/dev/null 2>&1 ||
			say "pods not all gone through the API in 90 s: removed through the CRI below"
	fi
fi
stop kubelet
if [ -n "$bin" ] && pid_alive containerd >/dev/null; then
	"$bin/sdp-kube" cri-clean "unix://$RUN/containerd/containerd.sock" >&2 ||
		say "cri-clean failed (above): the sweep below removes what is left"
fi
stop kube-proxy
if [ -n "$bin" ]; then
	"$bin/kube-proxy" --cleanup >"$STATE/log/kube-proxy-cleanup.log" 2>&1 ||
		say "kube-proxy --cleanup failed (log: $STATE/log/kube-proxy-cleanup.log, removed below)"
fi
stop containerd
stop kube-apiserver
stop etcd 30

# Processes the cluster left: containerd shims (their command line names our containerd socket)
# and container processes (in a kubepods cgroup). None when the steps above worked.
for p in /proc/[0-9]*; do
	pid=${p#/proc/}
	cmd=$(tr '\0\n' '  ' 2>/dev/null <"$p/cmdline") || continue
	cg=$(cat "$p/cgroup" 2>/dev/null) || continue
	case "$cmd" in *"$RUN/containerd"*) ;; *) case "$cg" in *kubepods*) ;; *) continue ;; esac ;; esac
	grep -q "^processes .*kubepods" "$before" 2>/dev/null && continue # another cluster's, not ours
	say "killing leftover pid $pid: $cmd"
	kill -KILL "$pid" 2>/dev/null
done
sleep 0.3

# Mounts under the cluster's directories and the kubelet's, deepest first.
umount_under() {
	local m
	for m in $(awk '{print $5}' /proc/self/mountinfo | grep -E "^($1)(/|$)" | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "cannot unmount $m"
	done
}
umount_under "$STATE|$RUN|/var/lib/kubelet|/run/containerd"

# The pods' bridge (veths and network namespaces are gone with the pods).
ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE"

# iptables: chains named KUBE-* (kube-proxy, the kubelet's canaries) and CNI-* (bridge ipMasq,
# portmap) that were not there before, with the rules that jump to them.
for t in iptables ip6tables; do
	command -v "$t-save" >/dev/null || continue
	for table in $("$t-save" 2>/dev/null | sed -n 's/^\*//p'); do
		chains=$("$t" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}')
		[ -n "$chains" ] || continue
		keep=$(grep "^$t " "$before" 2>/dev/null | awk '$2 ~ /^:(KUBE-|CNI-)/ {print substr($2, 2)}')
		mine=$(for c in $chains; do echo "$keep" | grep -qx "$c" || echo "$c"; done)
		[ -n "$mine" ] || continue
		re=$(echo "$mine" | paste -sd'|')
		# rules in any chain that jump to one of ours, deleted by their -A spec
		"$t" -t "$table" -S 2>/dev/null | grep '^-A ' | grep -E -- "-j ($re)( |$)" | while read -r rule; do
			eval "$t -t $table ${rule/-A/-D}" 2>/dev/null
		done
		for c in $mine; do "$t" -t "$table" -F "$c" 2>/dev/null; done
		for c in $mine; do "$t" -t "$table" -X "$c" 2>/dev/null || say "$t -t $table -X $c failed"; done
	done
done
# nftables tables made for those rules (iptables-nft makes a table on first use): deleted
# when they did not exist before and hold no rule now.
if command -v nft >/dev/null; then
	nft list tables 2>/dev/null | while read -r _ fam name; do
		grep -qx "nft table $fam $name" "$before" 2>/dev/null && continue
		[ -f "$before" ] || continue
		rules=$(nft -j list table "$fam" "$name" 2>/dev/null |
			python3 -c 'import json, sys; print(sum("rule" in o for o in json.load(sys.stdin)["nftables"]))' 2>/dev/null)
		if [ "${rules:-1}" = 0 ]; then
			nft delete table "$fam" "$name" 2>/dev/null || say "nft delete table $fam $name failed"
		else
			say "nft table $fam $name (not there before make cluster) still holds $rules rule(s): left"
		fi
	done
fi

# The kubepods cgroups (the kubelet's QoS tree, the pods' own), deepest first.
find /sys/fs/cgroup -depth -type d -path '*kubepods*' 2>/dev/null | while read -r d; do
	rmdir "$d" 2>/dev/null || say "cannot remove cgroup $d"
done

# Sysctls, back to their recorded values.
if [ -f "$before" ]; then
	grep '^sysctl .* = ' "$before" | while read -r _ name _ value; do
		f=/proc/sys/$(echo "$name" | tr . /)
		[ -w "$f" ] || continue
		[ "$(tr '\t' ' ' <"$f")" = "$value" ] && continue
		echo "$value" >"$f" 2>/dev/null && say "sysctl $name restored to $value" ||
			say "cannot restore sysctl $name to $value"
	done
fi

# Directories: the cluster's own, then those of the components. make test-cluster's VFIO tree
# (under STATE) bind-mounted at /dev/vfio, if a killed run left it: unmounted first.
if mountpoint -q /dev/vfio 2>/dev/null && [ -f "$STATE/test/vfio-mounted" ]; then
	umount /dev/vfio && say "make test-cluster's VFIO tree unmounted from /dev/vfio"
fi
# make test-cluster's /dev/kvm, if a killed run left it removed (a real one) or made (the stand-in)
kvm_node_restore "$STATE/test/kvm-node" | while read -r l; do say "$l"; done
kvm_standin_remove | while read -r l; do say "$l"; done
rm -rf "$STATE" "$RUN"
for d in "${CLUSTER_DIRS[@]}"; do
	d=$(readlink -m "$d")
	if [ ! -f "$before" ]; then
		continue
	elif grep -qx "files absent $d" "$before"; then
		rm -rf "$d"
	elif [ -d "$d" ]; then
		# entries that are new since the snapshot, deepest first
		find "$d" -xdev -depth -mindepth 1 -printf '%p %y\n' 2>/dev/null | while read -r path type; do
			grep -q "^files $path $type " "$before" || rm -rf "$path"
		done
	fi
done
if [ ! -f "$before" ]; then
	say "no snapshot $before (from make cluster): the component directories were left"
	exit 1
fi

say "stopped and removed in $(($(date +%s) - t0)) s; comparing with the host before make cluster"
"$here/trace.sh" snapshot "$TRACE_DIR/after"
"$here/trace.sh" compare "$before" "$TRACE_DIR/after"
