#!/bin/bash
# make cluster: a real single-node Kubernetes cluster on this machine, left running.
#
#   cluster/up.sh BIN_DIR [BUILD_DIR]
#
# BIN_DIR: the binaries of cluster/build.sh. BUILD_DIR: the project's build directory, whose
# podman store (make images) holds the plugin images imported into containerd; without it they
# are not imported. K8S_VERSION: the Kubernetes release BIN_DIR holds, v1.37.2 (default) or
# v1.34.4 (lib.sh kube_release): its pause image is built from that release's pause.c.
#
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy (iptables mode),
# containerd (CDI from /etc/cdi and /var/run/cdi) with runc, and the kubelet run in the
# background (setsid, logs in STATE/log); TLS everywhere with certificates made by cluster/pki.sh;
# the Node and RBAC authorizers; the default admission plugins plus NodeRestriction; a bridge
# network for pods (Debian's CNI plugins). Images: a pause image built from the release's
# pause.c, a busybox image from Debian's busybox-static, the project's images, all imported with
# ctr (no registry). Ends with a smoke check: the node Ready, a busybox pod Running on the pod
# network reaching the API server through the kubernetes Service's ClusterIP, its log read with
# kubectl from the admin kubeconfig.
#
# Before starting anything, the host's state is recorded (cluster/trace.sh) in CACHE/trace/before:
# make cluster-down removes everything and proves the host is back to it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
# shellcheck source=cluster/lib.sh
. "$here/lib.sh"
kube_release # K8S_VERSION, KUBE_MODULE, PAUSE_IMAGE
[ $# -ge 1 ] || { echo "usage: $0 BIN_DIR [BUILD_DIR]" >&2; exit 2; }
bin=$(cd "$1" && pwd)
build=${2:-}
t0=$(date +%s)
export PATH="$STATE/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# --- preflight ---------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "make cluster runs as root (it starts a kubelet and containerd)"
if [ -d "$STATE" ] || [ -d "$RUN" ]; then
	all=1
	for c in "${COMPONENTS[@]}"; do pid_alive "$c" >/dev/null || all=0; done
	if [ "$all" = 1 ] && [ -f "$STATE/up.done" ]; then
		# the running release: the module directory of its sdp-kube (CACHE/bin/<module>-<key>)
		running=""
		if t=$(readlink -e "$STATE/bin/sdp-kube"); then
			running=$(basename "$(dirname "$t")")
			running=${running%-*}
		fi
		if [ -n "$running" ] && [ "$running" != "$KUBE_MODULE" ]; then
			die "a cluster of Kubernetes $(modver "$running" k8s.io/kubernetes 2>/dev/null || echo "cluster/$running") runs, not $K8S_VERSION: make cluster-down first"
		fi
		say "already running (KUBECONFIG=$KUBECONFIG_ADMIN); make cluster-down removes it"
		exit 0
	fi
	die "$STATE or $RUN exists but the cluster is not (fully) running: make cluster-down first"
fi
for c in iptables ip6tables iptables-save openssl python3 curl ip ss mount; do
	command -v "$c" >/dev/null || die "$c not found (scripts/install-deps.sh cluster)"
done
for p in bridge host-local loopback portmap; do
	[ -x "/usr/lib/cni/$p" ] || die "/usr/lib/cni/$p not found: Debian's containernetworking-plugins (scripts/install-deps.sh cluster)"
done
busybox=/bin/busybox
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "install ok installed" ||
	die "Debian's busybox-static is not installed (scripts/install-deps.sh cluster)"
for b in sdp-kube containerd ctr containerd-shim-runc-v2 runc; do
	[ -x "$bin/$b" ] || die "$bin/$b missing (cluster/build.sh)"
done
busy=""
for p in "${PORTS[@]}"; do
	ss -Hltn "sport = :$p" | grep -q . && busy="$busy $p"
done
[ -z "$busy" ] || die "TCP port(s)$busy already in use (etcd 2379-2381, API server 6443, kubelet 10250/10248, kube-proxy 10249/10256, controller manager 10257, scheduler 10259): another cluster?"
node=$(hostname | tr '[:upper:]' '[:lower:]')
node_ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n1)
[ -n "$node_ip" ] || node_ip=$(ip -4 -o addr show scope global | awk '{ sub(/\/.*/, "", $4); print $4; exit }')
[ -n "$node_ip" ] || die "no global IPv4 address on this machine for the node (the API server's advertise address)"
overlap=$(ip -4 route show table all | awk '$1 != "default" {print $1 == "local" || $1 == "broadcast" ? $2 : $1}' |
	python3 -c 'import ipaddress, sys
mine = [ipaddress.ip_network(n) for n in sys.argv[1:]]
for l in sys.stdin:
    try:
        r = ipaddress.ip_network(l.strip(), strict=False)
    except ValueError:
        continue
    if r.prefixlen > 0 and any(r.overlaps(m) for m in mine):
        print(r)' "$POD_CIDR" "$SERVICE_CIDR" | sort -u | tr '\n' ' ')
[ -z "$overlap" ] || die "the pod range $POD_CIDR or the service range $SERVICE_CIDR overlaps this machine's route(s) $overlap"
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then cgroup=v2; else cgroup=v1; fi
kvm="no /dev/kvm"
[ -c /dev/kvm ] && kvm="/dev/kvm present"
say "node $node ($node_ip), cgroup $cgroup, $kvm"

# --- the host as it is before anything is started ---------------------------------------------
rm -f "$TRACE_DIR/during" "$TRACE_DIR/after" "$TRACE_DIR/after.diff"
"$here/trace.sh" snapshot "$TRACE_DIR/before"

mkdir -p "$STATE"/{log,config,images,cni/net.d,cni/ipam,kubelet-plugins} "$RUN"
chmod 700 "$STATE" "$RUN"
ln -sfn "$bin" "$STATE/bin"
step() { say "$1 ($(($(date +%s) - t0)) s)"; }

# start NAME CMD...: in the background, a session of its own, output to STATE/log/NAME.log;
# RUN/NAME.pid holds its pid and start time (lib.sh pid_alive).
start() {
	local name=$1 pid
	shift
	setsid "$@" >"$STATE/log/$name.log" 2>&1 </dev/null &
	pid=$!
	# setsid runs CMD in this very process (a background job of a script is no group leader)
	echo "$pid $(awk '{print $22}' "/proc/$pid/stat")" >"$RUN/$name.pid"
}
# fail NAME MESSAGE: the end of NAME's log and the message.
fail() {
	echo "---- last lines of $STATE/log/$1.log:" >&2
	tail -n 25 "$STATE/log/$1.log" >&2 || true
	die "$2 (all logs: $STATE/log; make cluster-down removes the cluster)"
}
# wait_for NAME SECONDS WHAT CMD...: until CMD succeeds; NAME must keep running.
wait_for() {
	local name=$1 secs=$2 what=$3 i=0
	shift 3
	while ! "$@" >/dev/null 2>&1; do
		pid_alive "$name" >/dev/null || fail "$name" "$name exited while waiting for $what"
		i=$((i + 1))
		[ "$i" -le $((secs * 5)) ] || fail "$name" "no $what after $secs s"
		sleep 0.2
	done
}

step "certificates and kubeconfigs (openssl)"
"$here/pki.sh" "$STATE" "$node" "$node_ip" "$SERVICE_IP"
pki=$STATE/pki
kubectl() { "$bin/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# --- etcd --------------------------------------------------------------------------------------
step "etcd"
start etcd "$bin/etcd" --name="$node" --data-dir="$STATE/etcd" \
	--listen-client-urls=https://127.0.0.1:2379 --advertise-client-urls=https://127.0.0.1:2379 \
	--listen-peer-urls=https://127.0.0.1:2380 --initial-advertise-peer-urls=https://127.0.0.1:2380 \
	--initial-cluster="$node=https://127.0.0.1:2380" --listen-metrics-urls=http://127.0.0.1:2381 \
	--cert-file="$pki/etcd-server.crt" --key-file="$pki/etcd-server.key" --client-cert-auth=true \
	--trusted-ca-file="$pki/etcd-ca.crt" --peer-cert-file="$pki/etcd-peer.crt" \
	--peer-key-file="$pki/etcd-peer.key" --peer-client-cert-auth=true \
	--peer-trusted-ca-file="$pki/etcd-ca.crt" --snapshot-count=10000
wait_for etcd 60 "etcd health" curl -fsS http://127.0.0.1:2381/health

# --- kube-apiserver -----------------------------------------------------------------------------
step "kube-apiserver"
start kube-apiserver "$bin/kube-apiserver" --advertise-address="$node_ip" --secure-port=6443 \
	--allow-privileged=true --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
	--client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" \
	--tls-private-key-file="$pki/apiserver.key" \
	--etcd-servers=https://127.0.0.1:2379 --etcd-cafile="$pki/etcd-ca.crt" \
	--etcd-certfile="$pki/apiserver-etcd-client.crt" --etcd-keyfile="$pki/apiserver-etcd-client.key" \
	--kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$pki/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority="$pki/ca.crt" \
	--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
	--proxy-client-cert-file="$pki/front-proxy-client.crt" --proxy-client-key-file="$pki/front-proxy-client.key" \
	--requestheader-client-ca-file="$pki/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
	--requestheader-extra-headers-prefix=X-Remote-Extra- --requestheader-group-headers=X-Remote-Group \
	--requestheader-username-headers=X-Remote-User \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
	--service-cluster-ip-range="$SERVICE_CIDR" --cert-dir="$STATE/apiserver-certs"
wait_for kube-apiserver 120 "API server readiness (/readyz)" kubectl get --raw=/readyz

# --- controller manager, scheduler --------------------------------------------------------------
step "kube-controller-manager, kube-scheduler"
start kube-controller-manager "$bin/kube-controller-manager" --bind-address=127.0.0.1 \
	--kubeconfig="$STATE/controller-manager.conf" \
	--authentication-kubeconfig="$STATE/controller-manager.conf" \
	--authorization-kubeconfig="$STATE/controller-manager.conf" \
	--client-ca-file="$pki/ca.crt" --requestheader-client-ca-file="$pki/front-proxy-ca.crt" \
	--root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
	--use-service-account-credentials=true --cluster-name=sdp-cluster \
	--cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
	--controllers='*,bootstrapsigner,tokencleaner' --leader-elect=true \
	--allocate-node-cidrs=true --cluster-cidr="$POD_CIDR" --node-cidr-mask-size=24 \
	--service-cluster-ip-range="$SERVICE_CIDR" --cert-dir="$STATE/controller-manager-certs" \
	--flex-volume-plugin-dir="$STATE/kubelet-plugins/volume/exec"
start kube-scheduler "$bin/kube-scheduler" --bind-address=127.0.0.1 \
	--kubeconfig="$STATE/scheduler.conf" --authentication-kubeconfig="$STATE/scheduler.conf" \
	--authorization-kubeconfig="$STATE/scheduler.conf" --leader-elect=true \
	--cert-dir="$STATE/scheduler-certs"

# --- kube-proxy ---------------------------------------------------------------------------------
# iptables mode, so that pods (hostNetwork or not) reach the API server at the kubernetes
# Service's ClusterIP. conntrack settings 0: the host's sysctls are left as they are;
# localhostNodePorts false: route_localnet is not set.
step "kube-proxy"
cat >"$STATE/config/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $STATE/kube-proxy.conf
hostnameOverride: $node
clusterCIDR: $POD_CIDR
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
iptables:
  localhostNodePorts: false
EOF
start kube-proxy "$bin/kube-proxy" --config="$STATE/config/kube-proxy.yaml"

# --- containerd + runc, CNI -----------------------------------------------------------------------
step "containerd"
# The pods' network: a bridge, host-local addresses from the node's pod range (state under
# STATE), masquerading to the outside, hostPort support.
cat >"$STATE/cni/net.d/10-$CNI_NETWORK.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{ "subnet": "$NODE_POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
real() { readlink -f "$bin/$1"; }
cat >"$STATE/config/containerd.toml" <<EOF
version = 3
root = "$STATE/containerd"
state = "$RUN/containerd"
disabled_plugins = []

[grpc]
  address = "$RUN/containerd/containerd.sock"

[plugins.'io.containerd.internal.v1.opt']
  path = "$STATE/containerd-opt"

[plugins.'io.containerd.nri.v1.nri']
  socket_path = "$RUN/nri/nri.sock"
  plugin_path = "$STATE/nri/plugins"
  plugin_config_path = "$STATE/nri/conf.d"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$PAUSE_IMAGE'

[plugins.'io.containerd.cri.v1.runtime']
  # CDI is always on in containerd 2.x; these are its defaults, written out.
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
  # These machines deny CAP_SYS_RESOURCE: a container cannot lower its OOM score below ours.
  restrict_oom_score_adj = true
  # pods' network namespaces under RUN/containerd, not /var/run/netns
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      runtime_path = '$(real containerd-shim-runc-v2)'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$(real runc)'
        Root = '$RUN/runc'
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '$STATE/cni/net.d'
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
EOF
start containerd "$bin/containerd" --config "$STATE/config/containerd.toml" --log-level info
# ctr's stderr (on cgroup v1 a deprecation warning per call) goes to STATE/log/ctr.log
ctr() { "$bin/ctr" --address "$RUN/containerd/containerd.sock" -n k8s.io "$@" 2>>"$STATE/log/ctr.log"; }
wait_for containerd 60 "containerd's socket" ctr version

step "images: pause (the release's pause.c), busybox (Debian's busybox-static), the project's"
img=$STATE/images
cc=gcc
command -v musl-gcc >/dev/null && cc=musl-gcc
pause_src=$CACHE/go/mod/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c
[ -f "$pause_src" ] || die "pause.c of k8s.io/kubernetes@$K8S_VERSION not in $CACHE/go/mod (cluster/build.sh fetches it)"
pause_tag=$(sed -n 's/^TAG ?= *//p' "${pause_src%/linux/pause.c}/Makefile")
[ "$pause_tag" = "${PAUSE_IMAGE##*:}" ] ||
	die "k8s.io/kubernetes@$K8S_VERSION tags its pause image $pause_tag (build/pause/Makefile), lib.sh says $PAUSE_IMAGE"
"$cc" -Os -Wall -Werror -static -DVERSION="v$pause_tag-sdp" -o "$img/pause" "$pause_src"
strip "$img/pause"
python3 "$here/oci-image.py" "$img/pause.tar" "$PAUSE_IMAGE" --file "$img/pause:/pause:0755" \
	--entrypoint '["/pause"]' --user 65535:65535 >/dev/null
links=()
for a in $("$busybox" --list); do
	[ "$a" = busybox ] || links+=(--link "/bin/$a:busybox")
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$img/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$img/group"
python3 "$here/oci-image.py" "$img/busybox.tar" "$BUSYBOX_IMAGE" --file "$busybox:/bin/busybox:0755" \
	"${links[@]}" --file "$img/passwd:/etc/passwd:0644" --file "$img/group:/etc/group:0644" \
	--dir /tmp:1777 --dir /root:0700 --cmd '["sh"]' >/dev/null
for t in pause busybox; do
	ctr images import --platform linux/amd64 "$img/$t.tar" >/dev/null || fail containerd "ctr images import $img/$t.tar failed"
done
ctr images label "$PAUSE_IMAGE" io.cri-containerd.pinned=pinned >/dev/null
project_images=""
if [ -n "$build" ] && [ -d "$build/podman/root" ]; then
	version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)
	store=$(cd "$build/podman" && pwd)
	mkdir -p "$STATE/podman-tmp"
	for n in hyperlight-device-plugin kata-device-plugin; do
		ref=localhost/$n:$version
		podman --root "$store/root" --runroot "$store/runroot" --tmpdir "$STATE/podman-tmp" \
			--storage-driver vfs --cgroup-manager cgroupfs --events-backend none \
			save --format docker-archive -o "$img/$n.tar" "$ref-amd64" >/dev/null 2>"$img/podman.err" ||
			die "podman save $ref-amd64 from $store failed (make images builds it): $(cat "$img/podman.err")"
		ctr images import --platform linux/amd64 "$img/$n.tar" >/dev/null || fail containerd "ctr images import $img/$n.tar failed"
		# the charts' tag: the manifest list's name, here the amd64 image
		ctr images tag --force "$ref-amd64" "$ref" >/dev/null
		project_images="$project_images $ref"
	done
	rm -rf "$STATE/podman-tmp" "$img/podman.err"
fi
rm -f "$img"/*.tar

# --- kubelet ----------------------------------------------------------------------------------
step "kubelet"
cat >"$STATE/config/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroup hierarchy is $cgroup. Since 1.35 the kubelet refuses cgroup v1 unless
# failCgroupV1 is false (KEP-5573); 1.37 still honours it (pkg/kubelet/apis/config/validation).
# 1.34 (the field since 1.31) defaults it to false. Every field here is in 1.34's v1beta1 too.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
address: 0.0.0.0
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $pki/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $pki/kubelet.crt
tlsPrivateKeyFile: $pki/kubelet.key
rotateCertificates: false
serverTLSBootstrap: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
failSwapOn: false
volumePluginDir: $STATE/kubelet-plugins/volume/exec
shutdownGracePeriod: 0s
runtimeRequestTimeout: 15m
# As a GPU node is run: a container's devices on one NUMA node, kata's GetPreferredAllocation
# asked to choose among the aligned ones (make test-cluster checks the pair it gets).
topologyManagerPolicy: single-numa-node
# A test node on a shared machine: eviction in absolute sizes, not the defaults' shares of the
# host's disk. Seen: a 252 GB disk with 37 GB free is under imagefs.available's default 15%, and
# the kubelet tainted the node node.kubernetes.io/disk-pressure, so no test pod scheduled. Image
# garbage collection off (it starts at 85% of the disk used, as on that disk): it would delete
# the images make cluster imported, which no registry gives back.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  nodefs.inodesFree: 5%
  imagefs.available: 1Gi
  imagefs.inodesFree: 5%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
start kubelet "$bin/kubelet" --config="$STATE/config/kubelet.yaml" --kubeconfig="$STATE/kubelet.conf" \
	--node-ip="$node_ip" --hostname-override="$node"
node_ready() { [ "$(kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
wait_for kubelet 180 "Ready node $node" node_ready
for c in "${COMPONENTS[@]}"; do pid_alive "$c" >/dev/null || fail "$c" "$c is not running"; done
iptables -t nat -S KUBE-SERVICES 2>/dev/null | grep -q "$SERVICE_IP" ||
	wait_for kube-proxy 60 "kube-proxy's rule for $SERVICE_IP" sh -c "iptables -t nat -S KUBE-SERVICES | grep -q '$SERVICE_IP'"

# --- smoke check --------------------------------------------------------------------------------
step "smoke check: a busybox pod on the pod network"
wait_for kube-controller-manager 60 "the default service account" kubectl -n default get serviceaccount default
kubectl apply -f - >"$STATE/log/smoke-apply.log" 2>&1 <<EOF || die "kubectl apply of the smoke pod failed: $(cat "$STATE/log/smoke-apply.log")"
apiVersion: v1
kind: Pod
metadata:
  name: sdp-smoke
  namespace: default
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: busybox
    image: $BUSYBOX_IMAGE
    imagePullPolicy: Never
    command:
    - sh
    - -c
    - |
      echo "sdp-smoke: running in pod \$(hostname) at \$(hostname -i)"
      # busybox's own TLS client cannot talk to Go 1.26's TLS (it sends no signature_algorithms):
      # plain HTTP to the API server's TLS port gets Go's own answer, from the server itself.
      printf "GET /version HTTP/1.0\r\n\r\n" | nc -w 5 "\$KUBERNETES_SERVICE_HOST" "\$KUBERNETES_SERVICE_PORT" |
        grep -q "Client sent an HTTP request to an HTTPS server" &&
        echo "sdp-smoke: the API server answers at \$KUBERNETES_SERVICE_HOST:\$KUBERNETES_SERVICE_PORT (the kubernetes Service)"
      sleep 3600
EOF
pod_running() { [ "$(kubectl get pod sdp-smoke -o 'jsonpath={.status.phase}')" = Running ]; }
wait_for kubelet 120 "Running smoke pod" pod_running
smoke_log() { kubectl logs sdp-smoke | grep -q 'the API server answers'; }
i=0
until smoke_log 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -gt 100 ]; then
		kubectl logs sdp-smoke >&2 || true
		die "the smoke pod did not reach the API server at $SERVICE_IP:443 in 20 s (its log is above)"
	fi
	sleep 0.2
done
kubectl logs sdp-smoke | sed 's/^/  /' >&2
# what the running cluster (with one pod) holds on the host, for make cluster-down's account
"$here/trace.sh" snapshot "$TRACE_DIR/during"
kubectl delete pod sdp-smoke --wait=true --timeout=60s >/dev/null
touch "$STATE/up.done"

ver=$(kubectl version -o json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["clientVersion"]["gitVersion"], v["serverVersion"]["gitVersion"])')
say "up in $(($(date +%s) - t0)) s: node $node Ready (kubectl $ver), containerd $("$bin/containerd" --version | awk '{print $3}'), runc $("$bin/runc" --version | awk 'NR==1{print $3}'), images: $PAUSE_IMAGE $BUSYBOX_IMAGE$project_images"
cat <<EOF

The cluster runs (logs in $STATE/log). To use it:

  export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$STATE/bin:\$PATH
  kubectl get nodes -o wide

make deploy installs the charts on it; make cluster-down removes it and every trace on the host.
EOF
