# tests/cluster/companions.sh: the micro-VM sandbox's companions on the real cluster (sourced by
# run.sh; docs/operations.md, "Micro-VM sandboxes"). The chart's companions.enabled={tun,
# vhost-net}: both resources advertised from the host's real nodes (a missing one Unhealthy
# with its reason, the plugin pod not Ready, as documented); the companion's node in workloads
# with the chart's owner and mode, opened by its uid and refused to another; a pod with only
# NET_ADMIN makes a tap through /dev/net/tun and boots a guest on it that exchanges packets
# with the pod (tests/cluster/microvm); the same pod without the tun resource fails naming
# /dev/net/tun; the host's /dev/net/tun removed and back; the companions turned off again.

# host_opens PATH: the host's node opens read-write (its driver is loaded).
host_opens() { python3 -c 'import os,sys; os.close(os.open(sys.argv[1], os.O_RDWR))' "$1" 2>/dev/null; }
# res_alloc NAME: allocatable hyperlight.dev/NAME as a number ("" when the Node has none).
res_alloc() { node_res allocatable "hyperlight.dev/$1" | sed 's/^\([0-9]*\)k$/\1000/'; }

# VHOST: whether this host's kernel serves /dev/vhost-net (CONFIG_VHOST_NET and its module).
VHOST=no
host_opens /dev/vhost-net && VHOST=yes

hl_companions_on() {
	local t mp ap
	t=$(date +%s.%N)
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		"${HL_RENDER[@]}" --set 'companions.enabled={tun,vhost-net}' >"$TEST/helm-hl.log" 2>&1 ||
		{ cat "$TEST/helm-hl.log" >&2; return 1; }
	kubectl -n "$HL_NS" rollout status ds/hyperlight-device-access --timeout=180s >"$TEST/rollout.log" 2>&1 ||
		{ cat "$TEST/rollout.log" >&2; fail "the bootstrap DaemonSet did not roll out with COMPANIONS"; return 1; }
	has_env() { kubectl -n "$HL_NS" get pod "$(hl_pod hyperlight-device-plugin)" -o json 2>/dev/null |
		jq -e '.status.phase == "Running" and any(.spec.containers[0].env[]; .name == "COMPANIONS" and .value == "tun,vhost-net")' >/dev/null; }
	until_ok 180 has_env || fail "no Running hyperlight-device-plugin pod with COMPANIONS=tun,vhost-net" || return 1
	mp=$(hl_pod hyperlight-device-plugin)
	ap=$(hl_pod hyperlight-device-access)
	tun_all() { [ "$(res_alloc tun)" = 2000 ] && hl_all; }
	until_ok 60 tun_all || { diag "$HL_NS" "$mp"; fail "allocatable hyperlight.dev/tun $(res_alloc tun), hypervisor $(hl_alloc); want 2000 each"; return 1; }
	kubectl -n "$HL_NS" logs "$mp" | grep 'msg="device usable" resource=hyperlight.dev/tun ' | grep -q 'probe="tun features 0x[0-9a-f]* (tap' ||
		fail "no 'device usable' line with the kernel's tun features in $mp's log" || return 1
	note "companions on: both DaemonSets rolled ($(secs "$t") s), allocatable hyperlight.dev/tun 2000, hypervisor 2000; $(kubectl -n "$HL_NS" logs "$mp" | grep -o 'resource=hyperlight.dev/tun .*probe="[^"]*"' | head -n 1)"
	# the companions' node labels, through the chart's admission policy (widened to them)
	local vn=false
	[ "$VHOST" = yes ] && vn=true
	labelled() { [ "$(node_label hyperlight.dev/tun)" = true ] && [ "$(node_label hyperlight.dev/vhost-net)" = "$vn" ] &&
		[ "$(node_label hyperlight.dev/enabled)" = true ]; }
	until_ok 60 labelled || { diag "$HL_NS" "$mp"; fail "node labels tun=$(node_label hyperlight.dev/tun) vhost-net=$(node_label hyperlight.dev/vhost-net) enabled=$(node_label hyperlight.dev/enabled); want true, $vn, true"; return 1; }
	note "node labelled through the admission policy: hyperlight.dev/tun=true hyperlight.dev/vhost-net=$vn hyperlight.dev/enabled=true; $(kubectl -n "$HL_NS" logs "$mp" | grep 'msg="node labelled"' | tail -n 1 | grep -o 'hyperlight.dev/enabled.*attempts=[0-9]*')"
	# the policy widened to exactly the enabled companions' labels, "true" or "false"
	local out maybe
	policy_binder
	out=$(policy_label "$POLICY_TOKEN" "$node" hyperlight.dev/tun=true) || fail "the plugin's account was refused hyperlight.dev/tun=true: $out" || return 1
	if out=$(policy_label "$POLICY_TOKEN" "$node" hyperlight.dev/tun=maybe); then fail "the plugin's account set hyperlight.dev/tun=maybe"; return 1; fi
	echo "$out" | grep -q 'must be "true" or "false"' || fail "tun=maybe: refused, but not by the chart's policy: $out" || return 1
	maybe=$out
	if out=$(policy_label "$POLICY_TOKEN" "$node" hyperlight.dev/vhost-vsock=true); then fail "the plugin's account set hyperlight.dev/vhost-vsock (not enabled)"; return 1; fi
	echo "$out" | grep -q 'may change only the labels' || fail "vhost-vsock=true: refused, but not by the chart's policy: $out" || return 1
	note "policy: hyperlight.dev/tun=true allowed; tun=maybe refused ($maybe); vhost-vsock (not enabled) refused ($out)"
	if [ "$VHOST" = yes ]; then
		vn_all() { [ "$(res_alloc vhost-net)" = 2000 ] && ready "$HL_NS" "$mp"; }
		until_ok 60 vn_all || { diag "$HL_NS" "$mp"; fail "allocatable hyperlight.dev/vhost-net $(res_alloc vhost-net), want 2000; the pod Ready"; return 1; }
		note "this host has vhost_net: allocatable hyperlight.dev/vhost-net 2000, the plugin pod Ready"
		return 0
	fi
	# No vhost_net on this host: the bootstrap grant leaves it out and says so, the plugin
	# advertises it Unhealthy with the reason, its pod is not Ready (readiness asks every resource).
	granted() { kubectl -n "$HL_NS" logs "$ap" | grep -q 'msg="companion not granted" device=/dev/vhost-net reason="/host-dev/vhost-net missing"'; }
	until_ok 30 granted || { diag "$HL_NS" "$ap"; fail "the bootstrap pod did not log that /dev/vhost-net is not granted"; return 1; }
	said() { kubectl -n "$HL_NS" logs "$mp" | grep -q 'msg="device unusable, advertising every device Unhealthy" resource=hyperlight.dev/vhost-net reason="/dev/vhost-net missing"'; }
	until_ok 30 said || { diag "$HL_NS" "$mp"; fail "the plugin did not say why hyperlight.dev/vhost-net is unusable"; return 1; }
	notready() { ! ready "$HL_NS" "$mp" && kubectl -n "$HL_NS" get events --field-selector "involvedObject.name=$mp,reason=Unhealthy" -o jsonpath='{.items[*].message}' | grep -q 'Readiness probe failed'; }
	until_ok 60 notready || { diag "$HL_NS" "$mp"; fail "the plugin pod is Ready (or its readiness probe never failed) with hyperlight.dev/vhost-net Unhealthy"; return 1; }
	[ "$(res_alloc vhost-net)" = 0 ] || fail "allocatable hyperlight.dev/vhost-net $(res_alloc vhost-net), want 0" || return 1
	note "no vhost_net on this host ($(uname -r)): not granted (bootstrap), Unhealthy \"/dev/vhost-net missing\", allocatable 0, the plugin pod not Ready (its readiness probe failed), tun and the hypervisor served"
}

# The companion's node in a workload: the chart's owner and mode; the owner's uid opens it,
# another uid is refused by the mode.
hl_companion_modes() {
	local t c log
	t=$(date +%s.%N)
	# shellcheck disable=SC2016 # expanded in the container
	uid_pair_pod tun-modes hyperlight.dev/tun 'echo node: $(stat -c '"'"'%F %a %u:%g %t:%T'"'"' /dev/net/tun); exec 3<>/dev/net/tun && echo open: ok' || return 1
	for c in owner other; do
		log=$(kubectl -n "$NS" logs tun-modes -c "$c" 2>&1 | tr '\n' ' ')
		note "$c: $log"
		echo "$log" | grep -q 'node: character special file 660 65534:65534 a:c8' ||
			fail "$c: /dev/net/tun is not 'character special file 660 65534:65534 a:c8' (the chart's deviceMode, deviceUID, deviceGID)" || return 1
	done
	kubectl -n "$NS" logs tun-modes -c owner | grep -qx 'open: ok' || fail "uid 65534 could not open its /dev/net/tun" || return 1
	kubectl -n "$NS" logs tun-modes -c other | grep -q "sh: can't create /dev/net/tun: Permission denied" ||
		fail "uid 1000 was not refused /dev/net/tun by its mode" || return 1
	kubectl -n "$NS" delete pod tun-modes --wait=false >/dev/null
	note "tun-modes: both containers saw the node 660 65534:65534; uid 65534 opened it, uid 1000 got Permission denied ($(secs "$t") s)"
}

# The micro-VM pod: only NET_ADMIN (uid 0, every other capability dropped, no escalation,
# RuntimeDefault seccomp; the nodes through the group 65534), hyperlight.dev/hypervisor and
# hyperlight.dev/tun (and vhost-net on a host that serves it). QEMU makes tap0 through
# /dev/net/tun in the pod's own network namespace and boots the guest on it; guest and pod ping
# each other. Two guests: the tiny one (tests/cluster/microvm/tiny: bare metal, virtio-net by
# polling) on the pod's /dev/kvm on every KVM host, a PVM one too; Debian's kernel on KVM where a
# stock kernel boots on it, else on QEMU's TCG (a PVM host: kvm_pvm runs only guests built for
# it). Without a hypervisor (the stand-in), both on TCG.
MICROVM_IMAGE=localhost/sdp-microvm:test
hl_microvm() {
	local t vh linux_accel tiny_accel
	t=$(date +%s.%N)
	command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86_64 missing (scripts/install-deps.sh cluster)" || return 1
	"$src/tests/cluster/microvm/build.sh" "$TEST/microvm" >"$TEST/microvm-build.log" 2>&1 ||
		{ tail -n 20 "$TEST/microvm-build.log" >&2; fail "tests/cluster/microvm/build.sh failed"; return 1; }
	python3 "$src/cluster/oci-image.py" "$TEST/microvm.tar" "$MICROVM_IMAGE" --tree "$TEST/microvm/rootfs:/" \
		--dir /tmp:1777 --cmd '["sh"]' >/dev/null || return 1
	ctr_ images import --platform linux/amd64 "$TEST/microvm.tar" >/dev/null || fail "ctr images import $TEST/microvm.tar failed" || return 1
	note "microVM image: QEMU $(qemu-system-x86_64 --version | head -n 1 | awk '{print $4}'), the guest kernel $(ls /boot/vmlinuz-* | sort -V | tail -n 1 | sed 's|.*vmlinuz-||'), the tiny guest $(stat -c %s "$TEST/microvm/rootfs/microvm/tiny.elf") bytes, $(du -sm "$TEST/microvm.tar" | cut -f1) MiB ($(secs "$t") s)"
	vh=off
	[ "$VHOST" = yes ] && vh=on
	linux_accel=kvm
	tiny_accel=kvm
	if [ "$HV" != kvm ]; then
		linux_accel=tcg
		tiny_accel=tcg
		note "no /dev/kvm on this host: both guests run on QEMU's TCG"
	elif [ -d /sys/module/kvm_pvm ]; then
		linux_accel=tcg
		note "this host's KVM is PVM (kvm_pvm): it runs the tiny guest, not Debian's kernel (tests/cluster/microvm/README.md); the Linux guest runs on QEMU's TCG"
	fi
	# The tiny guest (tests/cluster/microvm/tiny): virtio-net on the tap, on the pod's /dev/kvm.
	microvm_run microvm-tiny yes tiny "$tiny_accel" || return 1
	echo "$MICROVM_LOG" | grep -q "^microvm: ok accel=$tiny_accel vhost=$vh guest-ping=ok pod-ping=ok .* guest=tiny$" ||
		fail "the tiny guest's pod: exit $MICROVM_CODE, no ok line for accel=$tiny_accel vhost=$vh" || return 1
	if [ "$tiny_accel" = kvm ]; then
		echo "$MICROVM_LOG" | grep -q '^microvm: guest: tiny: PVH entry.*cpuid hypervisor KVMKVMKVM' || fail "the tiny guest did not see KVM's CPUID signature" || return 1
	fi
	note "tiny guest on $tiny_accel (uid 0, only NET_ADMIN): tap0 made through /dev/net/tun, guest and pod pinged each other ($MICROVM_SECS s)"
	# Debian's kernel with busybox: the same exchange from a stock Linux guest.
	microvm_run microvm yes linux "$linux_accel" || return 1
	echo "$MICROVM_LOG" | grep -q "^microvm: ok accel=$linux_accel vhost=$vh guest-ping=ok pod-ping=ok .* guest=linux$" ||
		fail "the Linux guest's pod: exit $MICROVM_CODE, no ok line for accel=$linux_accel vhost=$vh" || return 1
	note "Linux guest on $linux_accel: the same ($MICROVM_SECS s)"
	# The same pod without hyperlight.dev/tun: no /dev/net/tun, a clear error.
	microvm_run microvm-notun no tiny "$tiny_accel" 120 || return 1
	MICROVM_LOG=$(echo "$MICROVM_LOG" | tail -n 1)
	{ [ "$MICROVM_CODE" = 1 ] && [ "$MICROVM_LOG" = "microvm: FAIL /dev/net/tun: no such character device (the container needs the node's /dev/net/tun, c 10:200)" ]; } ||
		fail "the pod without hyperlight.dev/tun: exit $MICROVM_CODE, $MICROVM_LOG" || return 1
	note "without hyperlight.dev/tun: exit 1, $MICROVM_LOG ($MICROVM_SECS s)"
}
# microvm_run NAME WITH_TUN GUEST ACCEL [BOUND]: the pod (microvm_pod) to its end, within BOUND
# seconds (300); MICROVM_CODE its exit code, MICROVM_LOG its log (shown), MICROVM_SECS the time.
microvm_run() {
	local t
	t=$(date +%s.%N)
	microvm_pod "$1" "$2" "$3" "$4"
	ended() { [ -n "$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.terminated.reason}')" ]; }
	until_ok "${5:-300}" ended "$1" || { diag "$NS" "$1"; fail "the pod $1 did not finish in ${5:-300} s"; return 1; }
	MICROVM_CODE=$(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')
	MICROVM_LOG=$(kubectl -n "$NS" logs "$1" 2>&1)
	MICROVM_SECS=$(secs "$t")
	echo "$MICROVM_LOG" | sed 's/^/test-cluster:     /'
	kubectl -n "$NS" delete pod "$1" --wait=false >/dev/null
}
microvm_pod() { # NAME WITH_TUN GUEST ACCEL
	local limits="hyperlight.dev/hypervisor: 1"
	[ "$2" = yes ] && limits="$limits
        hyperlight.dev/tun: 1"
	[ "$2" = yes ] && [ "$VHOST" = yes ] && limits="$limits
        hyperlight.dev/vhost-net: 1"
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
    supplementalGroups: [65534]
    seccompProfile:
      type: RuntimeDefault
    sysctls:
      - name: net.ipv4.ping_group_range
        value: "0 0"
  containers:
  - name: vmm
    image: $MICROVM_IMAGE
    imagePullPolicy: Never
    command: ["/microvm/run-in-pod.sh"]
    env:
      - name: MICROVM_GUEST
        value: $3
      - name: MICROVM_ACCEL
        value: $4
    securityContext:
      runAsUser: 0
      runAsGroup: 0
      allowPrivilegeEscalation: false
      capabilities:
        drop: ["ALL"]
        add: ["NET_ADMIN"]
    resources:
      limits:
        memory: 384Mi
        $limits
EOF
}


# The host's /dev/net/tun removed (tun is built in or stays loaded: its node goes as an rmmod
# would take it): allocatable hyperlight.dev/tun 0, the reason in the log; made again as it was:
# 2000. A run that ends in between has its cleanup make it again (companion_node_restore).
TUN_NODE_SAVED=
hl_companion_fault() {
	local mp t
	mp=$(hl_pod hyperlight-device-plugin)
	TUN_NODE_SAVED=$TEST/tun-node
	stat -c '%a %u %g %t %T' /dev/net/tun >"$TUN_NODE_SAVED" || return 1
	t=$(date +%s.%N)
	rm /dev/net/tun
	gone() { [ "$(res_alloc tun)" = 0 ]; }
	until_ok 60 gone || { companion_node_restore; fail "allocatable hyperlight.dev/tun $(res_alloc tun) after /dev/net/tun was removed, want 0"; return 1; }
	note "host's /dev/net/tun removed: allocatable hyperlight.dev/tun 0 after $(secs "$t") s (the Node's status, as the kubelet posts it); $(kubectl -n "$HL_NS" logs "$mp" | grep 'resource=hyperlight.dev/tun reason=' | tail -n 1 | grep -o 'reason="[^"]*"')"
	# the label follows after the chart's hold (nodeLabelsHold, 10 s); the hypervisor's stays
	unlabelled() { [ "$(node_label hyperlight.dev/tun)" = false ]; }
	until_ok 60 unlabelled || { companion_node_restore; fail "node label hyperlight.dev/tun=$(node_label hyperlight.dev/tun) after /dev/net/tun was removed, want false"; return 1; }
	[ "$(node_label hyperlight.dev/enabled)" = true ] || { companion_node_restore; fail "hyperlight.dev/enabled=$(node_label hyperlight.dev/enabled) with only tun broken"; return 1; }
	note "node label hyperlight.dev/tun=false after $(secs "$t") s (hold 10 s), hyperlight.dev/enabled still true"
	t=$(date +%s.%N)
	companion_node_restore
	back() { [ "$(res_alloc tun)" = 2000 ]; }
	until_ok 60 back || { fail "allocatable hyperlight.dev/tun $(res_alloc tun) after /dev/net/tun came back, want 2000"; return 1; }
	note "made again ($(stat -c '%a %u:%g' /dev/net/tun)): 2000 after $(secs "$t") s"
	relabelled() { [ "$(node_label hyperlight.dev/tun)" = true ]; }
	until_ok 60 relabelled || fail "node label hyperlight.dev/tun=$(node_label hyperlight.dev/tun) after /dev/net/tun came back, want true" || return 1
	note "node label hyperlight.dev/tun=true again after $(secs "$t") s"
}
companion_node_restore() {
	local mode uid gid maj min
	[ -n "$TUN_NODE_SAVED" ] && [ -f "$TUN_NODE_SAVED" ] && [ ! -e /dev/net/tun ] || return 0
	read -r mode uid gid maj min <"$TUN_NODE_SAVED" || return 1
	mkdir -p /dev/net && mknod -m "$mode" /dev/net/tun c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/net/tun
}

# Off again: no companion resource advertised, the plugin pod Ready (the steps after this one
# and the DRA switch run without companions).
hl_companions_off() {
	local t
	t=$(date +%s.%N)
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		"${HL_RENDER[@]}" --set-json 'companions.enabled=[]' >"$TEST/helm-hl.log" 2>&1 || { cat "$TEST/helm-hl.log" >&2; return 1; }
	hl_rolled "with companions off" || return 1
	off() { [ "$(res_alloc tun)" = 0 ] || [ -z "$(res_alloc tun)" ]; }
	until_ok 60 off || fail "allocatable hyperlight.dev/tun $(res_alloc tun) with companions off" || return 1
	until_ok 60 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc), want 2000" || return 1
	note "companions off: both DaemonSets rolled, pods Ready, hyperlight.dev/tun 0, the hypervisor 2000 ($(secs "$t") s)"
	# their labels stay, as docs/operations.md says, until the operator removes them
	[ "$(node_label hyperlight.dev/tun)" = true ] || fail "node label hyperlight.dev/tun=$(node_label hyperlight.dev/tun) after companions off, want it kept (true)" || return 1
	kubectl label node "$node" hyperlight.dev/tun- hyperlight.dev/vhost-net- >/dev/null || fail "kubectl label node $node hyperlight.dev/tun- hyperlight.dev/vhost-net- failed" || return 1
	note "their node labels kept (hyperlight.dev/tun=true), removed as documented: kubectl label node $node hyperlight.dev/tun- hyperlight.dev/vhost-net-"
}
