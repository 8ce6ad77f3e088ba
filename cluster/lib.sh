# shellcheck shell=bash
# Shared by cluster/up.sh, cluster/down.sh and cluster/trace.sh: where make cluster keeps its
# state, and every place on the host it touches.

# The cluster's own directories: everything it makes that a component lets us place.
STATE=/var/lib/sdp-cluster # certificates, kubeconfigs, configs, etcd data, containerd root, logs
RUN=/run/sdp-cluster       # pid files, containerd state and sockets, runc root, pod netns
CACHE=${SDP_CLUSTER_CACHE:-/var/cache/sdp-cluster}
TRACE_DIR=$CACHE/trace     # the host snapshot taken before make cluster (kept: it is the proof)

# What the components insist on (fixed paths, or paths a real cluster has there). Each is
# recorded before make cluster; make cluster-down removes those that did not exist then, and
# only what is new in those that did.
CLUSTER_DIRS=(
	/var/lib/kubelet     # the kubelet's root (the charts mount its device-plugins directory)
	/var/log/pods        # container logs (the kubelet's podLogsDir)
	/var/log/containers  # the kubelet's symlinks to them
	/etc/cdi             # CDI spec directories (containerd's cdi_spec_dirs), written by the plugins
	/var/run/cdi
	/var/lib/cni         # libcni's cache of results (fixed in libcni)
	/run/containerd      # the shims' sockets (/run/containerd/s, fixed in containerd)
	/dev/vfio            # the kata chart's hostPath (DirectoryOrCreate) makes it on a node without VFIO
)
# Where a component would write by default but ours are told otherwise (a real cluster's
# /etc/cni/net.d, /opt/cni/bin, /var/lib/containerd, /var/run/netns, ...): compared before and
# after, never cleaned (podman and others use some of them).
WATCH_DIRS=(
	/etc/cni /opt/cni /var/lib/containerd /opt/containerd /var/run/netns /var/lib/etcd
	/etc/kubernetes /var/run/kubernetes /usr/libexec/kubernetes /var/run/nri /opt/nri /etc/nri
)
HOST_DIRS=("${CLUSTER_DIRS[@]}" "${WATCH_DIRS[@]}")

# Sysctls the components set (the kubelet's kernel tunables, the bridge plugin's forwarding,
# kube-proxy's conntrack and route_localnet): saved before, restored after.
SYSCTLS=(
	net.ipv4.ip_forward
	net.ipv6.conf.all.forwarding
	net.ipv4.conf.all.route_localnet
	net.bridge.bridge-nf-call-iptables
	net.bridge.bridge-nf-call-ip6tables
	vm.overcommit_memory
	vm.panic_on_oom
	kernel.panic
	kernel.panic_on_oops
	kernel.keys.root_maxkeys
	kernel.keys.root_maxbytes
	net.netfilter.nf_conntrack_max
	net.netfilter.nf_conntrack_tcp_timeout_established
	net.netfilter.nf_conntrack_tcp_timeout_close_wait
	net.netfilter.nf_conntrack_tcp_be_liberal
	net.netfilter.nf_conntrack_udp_timeout
	net.netfilter.nf_conntrack_udp_timeout_stream
)

# Network: the pods' bridge and ranges.
BRIDGE=sdpcni0
POD_CIDR=10.244.0.0/16
NODE_POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/12
SERVICE_IP=10.96.0.1 # the kubernetes Service's ClusterIP (first address of SERVICE_CIDR)
CNI_NETWORK=sdp-cluster

# The components, in start order (down.sh stops them in reverse).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy containerd kubelet)
PORTS=(2379 2380 2381 6443 10257 10259 10249 10256 10250 10248)

KUBECONFIG_ADMIN=$STATE/admin.conf

say() { echo "cluster: $*" >&2; }
die() { echo "cluster: $*" >&2; exit 1; }

# The pinned versions, as the modules' go.mod files say them.
_cluster_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modver() { awk -v m="$2" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$_cluster_dir/$1/go.mod"; }
CONTAINERD_VERSION=$(modver containerd github.com/containerd/containerd/v2)

# The Kubernetes releases make cluster builds, each from a module of its own (its go.mod pins
# k8s.io/kubernetes, and etcd at that release's version), with the tag its build/pause/Makefile
# gives the pause image (TAG). The first is the default.
KUBE_RELEASES=(
	"kube 3.10.2"       # k8s.io/kubernetes v1.37.2
	"kube-v1.34 3.10.1" # k8s.io/kubernetes v1.34.4: the oldest release with DRA GA
)
# kube_release: the release K8S_VERSION names (the environment; make passes its command line's
# K8S_VERSION=... there), or the default without it: sets KUBE_MODULE (its directory here),
# K8S_VERSION and PAUSE_IMAGE. Any other value is refused, naming those built here.
kube_release() {
	local r m tag v known=""
	for r in "${KUBE_RELEASES[@]}"; do
		read -r m tag <<<"$r"
		v=$(modver "$m" k8s.io/kubernetes)
		if [ -z "${K8S_VERSION:-}" ] || [ "$K8S_VERSION" = "$v" ]; then
			KUBE_MODULE=$m K8S_VERSION=$v PAUSE_IMAGE=localhost/pause:$tag
			return 0
		fi
		if [ -z "$known" ]; then known="$v (cluster/$m, the default)"; else known+=", $v (cluster/$m)"; fi
	done
	die "K8S_VERSION=$K8S_VERSION is not a release make cluster builds; it builds $known"
}

# Pinned images built here (no registry); the pause image's tag is the release's (kube_release).
BUSYBOX_IMAGE=localhost/busybox:1.35.0

# make test-cluster's /dev/kvm (tests/cluster/run.sh). kvm_opens: /dev/kvm is a character
# device that opens (a driver behind it).
kvm_opens() { [ -c /dev/kvm ] && (exec 3<>/dev/kvm) 2>/dev/null; }
# On a host without KVM the test makes a stand-in /dev/kvm (c 10:232, no driver) and marks it
# here; kvm_standin_remove removes it (by make test-cluster on the way out, by make cluster-down
# after a killed test): only while the mark is there, and only a c 10:232 node that does not open.
KVM_STANDIN_MARK=$STATE/kvm-standin
kvm_standin_remove() {
	[ -f "$KVM_STANDIN_MARK" ] || return 0
	if [ -c /dev/kvm ] && [ "$(stat -c '%t:%T' /dev/kvm)" = a:e8 ] && ! kvm_opens; then
		rm -f /dev/kvm && echo "the stand-in /dev/kvm of make test-cluster removed"
	fi
	rm -f "$KVM_STANDIN_MARK"
}
# kvm_node_restore FILE: the test's fault removes /dev/kvm after writing its "mode uid gid major
# minor" (stat -c '%a %u %g %t %T') to FILE; a test that ended before it made the node again
# leaves FILE, and /dev/kvm is made again from it (by the test's cleanup, by make cluster-down).
kvm_node_restore() {
	local mode uid gid maj min
	[ -f "$1" ] && [ ! -e /dev/kvm ] || return 0
	read -r mode uid gid maj min <"$1" || return 1
	mknod -m "$mode" /dev/kvm c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/kvm &&
		echo "/dev/kvm made again ($mode $uid:$gid), removed by a make test-cluster that ended early"
}

# pid_alive NAME: the pid of a component we started, if it still runs (the pid file's process,
# checked by its start time, so a reused pid is never taken for ours).
pid_alive() {
	local f=$RUN/$1.pid pid start
	[ -f "$f" ] || return 1
	read -r pid start <"$f" || return 1
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
	[ "$(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null)" = "$start" ] || return 1
	echo "$pid"
}

# restart_component NAME: stops a component we started (SIGTERM; SIGKILL after 30 s) and starts
# it again with the same command line, environment and working directory, in a session of its
# own, its output appended to STATE/log/NAME.log; RUN/NAME.pid updated. For make test-cluster's
# kubelet restart. Prints the new pid.
restart_component() {
	local name=$1 pid i cwd
	pid=$(pid_alive "$name") || { echo "restart_component: $name is not running" >&2; return 1; }
	local -a cmd env
	mapfile -d '' -t cmd <"/proc/$pid/cmdline"
	mapfile -d '' -t env <"/proc/$pid/environ"
	cwd=$(readlink "/proc/$pid/cwd")
	kill -TERM "$pid"
	for ((i = 0; i < 300; i++)); do
		[ -d "/proc/$pid" ] || break
		sleep 0.1
	done
	[ ! -d "/proc/$pid" ] || kill -KILL "$pid"
	while [ -d "/proc/$pid" ]; do sleep 0.1; done
	(cd "$cwd" && exec env -i "${env[@]}" setsid "${cmd[@]}" >>"$STATE/log/$name.log" 2>&1 </dev/null) &
	pid=$!
	echo "$pid $(awk '{print $22}' "/proc/$pid/stat")" >"$RUN/$name.pid"
	echo "$pid"
}
