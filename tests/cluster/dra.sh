# tests/cluster/dra.sh: make test-cluster's DRA steps (issue 29), sourced by run.sh after its
# helpers (say, note, fail, until_ok, diag, one_pod, phase, kill_container, restart_component,
# kvm_image, hl_pod, hl_rolled, HL_RENDER, NS, HL_NS, node, HV, TEST). The hyperlight chart is
# switched to api=dra (sandboxes 3) and back; every check is through the real components: the
# API server's ResourceSlices and claims, the scheduler's allocation, the kubelet's
# NodePrepareResources, containerd's CDI injection, the plugin's own log lines.

DRA_DRIVER=hyperlight.dev
DRA_SANDBOXES=3
DRA_CLAIMS=/var/lib/kubelet/plugins/$DRA_DRIVER/claims

# dra_slice: the driver's ResourceSlices of this node as JSON (a List).
dra_slice() { kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=$DRA_DRIVER" -o json; }
# dra_plugin_logs: the plugin's log, the previous container's first (kubectl logs --previous).
dra_plugin_logs() {
	local p
	p=$(hl_pod hyperlight-device-plugin)
	kubectl -n "$HL_NS" logs "$p" --previous 2>/dev/null
	kubectl -n "$HL_NS" logs "$p" 2>/dev/null
}

# dra_pod NAME [EXTENDED]: a pod of uid 65534 that runs the KVM program on its device and stays;
# with a claim from the template hv-claim, or (EXTENDED set) with hyperlight.dev/hypervisor: 1.
dra_pod() {
	local res
	if [ -n "${2:-}" ]; then
		res="limits: {hyperlight.dev/hypervisor: 1}"
	else
		res="claims: [{name: hv}]"
	fi
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
    runAsGroup: 65534
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
$([ -n "${2:-}" ] || printf '  resourceClaims: [{name: hv, resourceClaimTemplateName: hv-claim}]\n')
  containers:
  - name: main
    image: $KVM_IMAGE
    imagePullPolicy: Never
    command: ["sh", "-c", "echo node: \$(stat -c '%F %a %u:%g' /dev/kvm); sdp-kvm-run; exec sleep 3600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop: ["ALL"]
    resources:
      $res
EOF
}

# dra_ran POD: POD's container ran the KVM program on an injected /dev/kvm (the stand-in: its
# open reached the kernel, ENODEV).
dra_ran() {
	local log
	log=$(kubectl -n "$NS" logs "$1" 2>&1 | tr '\n' ' ')
	echo "$log" | grep -q 'node: character special file 660 65534:65534' || { fail "$1: no /dev/kvm 660 65534:65534 injected: $log"; return 1; }
	if [ "$HV" = kvm ]; then
		echo "$log" | grep -q 'sdp-kvm-run: ok api=12 exits=io(port=0x10,value=0x2a),hlt uid=65534 gid=65534' || { fail "$1: the guest did not run: $log"; return 1; }
	else
		echo "$log" | grep -q 'sdp-kvm-run: FAIL open: No such device' || { fail "$1: its open did not reach the kernel: $log"; return 1; }
	fi
}

# dra_claim_uid POD: the UID of POD's claim (allocated to it).
dra_claim_uid() {
	kubectl -n "$NS" get resourceclaims -o json |
		jq -r --arg p "$1" '.items[] | select(.status.reservedFor[]?.name == $p) | .metadata.uid' | head -1
}

# api=dra: the DaemonSet rolls, the driver registers and publishes its device with every
# attribute; the device-plugin resource is no longer advertised by the plugin.
dra_switch() {
	local t s want got
	kubectl -n "$NS" delete pod kvm-hold --wait=true --timeout=60s >/dev/null 2>&1
	t=$(date +%s.%N)
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		--set api=dra --set deviceCount=$DRA_SANDBOXES "${HL_RENDER[@]}" >"$TEST/helm-hl.log" 2>&1 ||
		{ cat "$TEST/helm-hl.log" >&2; return 1; }
	hl_rolled "after helm upgrade --set api=dra" || return 1
	published() { [ "$(dra_slice | jq '.items | length')" = 1 ]; }
	until_ok 60 published || { fail "no ResourceSlice of $DRA_DRIVER on $node 60 s after api=dra: $(dra_slice | jq -c '.items')"; return 1; }
	s=$(dra_slice | jq -c '.items[0].spec')
	want="{\"driver\":\"$DRA_DRIVER\",\"nodeName\":\"$node\",\"pool\":\"$node\",\"count\":1,\"name\":\"kvm\",\"type\":\"hypervisor\",\"hypervisor\":\"kvm\",\"path\":\"/dev/kvm\",\"shared\":true,\"sandboxes\":\"$DRA_SANDBOXES\",\"default\":\"1\",\"taints\":0}"
	got=$(echo "$s" | jq -c '{driver, nodeName, pool: .pool.name, count: .pool.resourceSliceCount, name: .devices[0].name,
		type: .devices[0].attributes.type.string, hypervisor: .devices[0].attributes.hypervisor.string,
		path: .devices[0].attributes.path.string, shared: .devices[0].allowMultipleAllocations,
		sandboxes: .devices[0].capacity.sandboxes.value, default: .devices[0].capacity.sandboxes.requestPolicy.default,
		taints: (.devices[0].taints // [] | length)}')
	[ "$got" = "$want" ] || { fail "the ResourceSlice: $got; want $want"; return 1; }
	note "api=dra: rolled, ResourceSlice published $(secs "$t") s after helm upgrade: $got"
	dra_plugin_logs | grep -q 'msg="DRA driver registered with the kubelet" driver=hyperlight.dev' ||
		fail "the plugin did not log its DRA registration" || return 1
	kubectl get deviceclass hyperlight.dev >/dev/null || fail "no DeviceClass hyperlight.dev" || return 1
	kubectl apply -f - >/dev/null <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: hv-claim
  namespace: $NS
spec:
  spec:
    devices:
      requests:
      - name: hv
        exactly: {deviceClassName: hyperlight.dev}
EOF
}

# Three pods share the device, one claim each (one sandbox each); the fourth stays Pending with
# the scheduler's reason.
dra_share() {
	local t i
	kvm_image || return 1
	t=$(date +%s.%N)
	for i in 1 2 3; do dra_pod "dra-$i"; done
	three() { for i in 1 2 3; do [ "$(phase "dra-$i")" = Running ] || return 1; done; }
	until_ok 120 three || { diag "$NS" dra-1; fail "the three claim pods are not Running after 120 s"; return 1; }
	for i in 1 2 3; do
		log_ok() { kubectl -n "$NS" logs "dra-$i" 2>/dev/null | grep -q 'sdp-kvm-run:'; }
		until_ok 30 log_ok || { fail "dra-$i did not run its KVM program"; return 1; }
		dra_ran "dra-$i" || return 1
	done
	note "three pods Running on one shared device, one claim each, $(secs "$t") s after apply: $(kubectl -n "$NS" get resourceclaims -o json | jq -c '[.items[].status.allocation.devices.results[0] | {device, shareID: (.shareID != null), consumed: .consumedCapacity.sandboxes}]')"
	dra_pod dra-4
	why() { kubectl -n "$NS" get events --field-selector "involvedObject.name=dra-4,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'cannot allocate all claims'; }
	until_ok 60 why || { diag "$NS" dra-4; fail "the fourth pod is not Pending for 'cannot allocate all claims'"; return 1; }
	note "the fourth pod Pending: $(kubectl -n "$NS" get events --field-selector 'involvedObject.name=dra-4,reason=FailedScheduling' -o jsonpath='{.items[-1:].message}')"
	kubectl -n "$NS" delete pod dra-4 --wait=false >/dev/null
}

# A pod asking for hyperlight.dev/hypervisor: 1 is served by DRA unchanged (the DeviceClass's
# extendedResourceName): the scheduler makes its claim.
dra_extended() {
	local t claim
	kubectl -n "$NS" delete pod dra-3 --wait=true --timeout=60s >/dev/null
	t=$(date +%s.%N)
	dra_pod dra-er extended
	running() { [ "$(phase dra-er)" = Running ] && kubectl -n "$NS" logs dra-er 2>/dev/null | grep -q 'sdp-kvm-run:'; }
	until_ok 120 running || { diag "$NS" dra-er; fail "the pod asking for hyperlight.dev/hypervisor: 1 did not run through DRA"; return 1; }
	dra_ran dra-er || return 1
	claim=$(kubectl -n "$NS" get resourceclaims -o json | jq -r '.items[] | select(.status.reservedFor[]?.name == "dra-er") | .metadata.name')
	[[ $claim == dra-er-extended-resources-* ]] || fail "no claim made by the scheduler for dra-er ($claim)" || return 1
	note "hyperlight.dev/hypervisor: 1 served through DRA: claim $claim, Running $(secs "$t") s after apply"
}

# kill -9 of the plugin, then a kubelet restart: the pods keep their devices, each claim was
# prepared exactly once.
dra_faults() {
	local p before after kpid t since uid n
	p=$(hl_pod hyperlight-device-plugin)
	before=$(for i in 1 2 er; do fingerprint "$NS" "dra-$i" /dev/kvm; done)
	kill_container "$HL_NS" "$p" hyperlight-device-plugin || return 1
	note "kill -9 of the plugin (pid $killed_pid): restarted and Ready $(secs "$killed_at") s later"
	t=$(date +%s.%N)
	since=$(date -u +%FT%TZ)
	kpid=$(restart_component kubelet) || return 1
	again() { kubectl -n "$HL_NS" logs "$p" --since-time="$since" 2>/dev/null | grep -q 'msg="DRA driver registered with the kubelet"'; }
	until_ok 120 again || fail "the plugin did not log its DRA registration after the kubelet restart" || return 1
	note "kubelet restarted (pid $kpid): the driver registered again $(secs "$t") s later"
	sleep 5
	after=$(for i in 1 2 er; do fingerprint "$NS" "dra-$i" /dev/kvm; done)
	[ "$after" = "$before" ] || fail "a pod holding a claim changed: before: $before; after: $after" || return 1
	for i in 1 2 er; do
		uid=$(dra_claim_uid "dra-$i")
		n=$(dra_plugin_logs | grep 'msg="claim prepared"' | grep -c "uid=$uid")
		[ "$n" = 1 ] || fail "claim $uid of dra-$i prepared $n times by the plugin (want exactly once across the kill and the kubelet restart)" || return 1
	done
	note "the three pods untouched; each claim prepared exactly once"
	hl_new_dra_pod
}

# A new claim pod runs after the faults, and goes.
hl_new_dra_pod() {
	local t
	t=$(date +%s.%N)
	kubectl -n "$NS" delete pod dra-1 --wait=true --timeout=60s >/dev/null
	dra_pod dra-new
	running() { [ "$(phase dra-new)" = Running ] && kubectl -n "$NS" logs dra-new 2>/dev/null | grep -q 'sdp-kvm-run:'; }
	until_ok 120 running || { diag "$NS" dra-new; fail "a new claim pod did not run after the faults"; return 1; }
	dra_ran dra-new || return 1
	note "a new claim pod ran $(secs "$t") s after apply"
}

# Deleting a pod unprepares its claim: the plugin says so and its checkpoint is gone.
dra_unprepare() {
	local uid t
	uid=$(dra_claim_uid dra-new)
	[ -n "$uid" ] && [ -f "$DRA_CLAIMS/$uid" ] || fail "no checkpoint $DRA_CLAIMS/$uid for dra-new's claim" || return 1
	t=$(date +%s.%N)
	kubectl -n "$NS" delete pod dra-new --wait=true --timeout=60s >/dev/null
	gone() { [ ! -e "$DRA_CLAIMS/$uid" ] && dra_plugin_logs | grep 'msg="claim unprepared"' | grep -q "uid=$uid"; }
	until_ok 60 gone || fail "claim $uid not unprepared 60 s after its pod was deleted (checkpoint $(ls "$DRA_CLAIMS" | tr '\n' ' '))" || return 1
	note "dra-new deleted: claim $uid unprepared, its checkpoint removed $(secs "$t") s later"
}

# The host's /dev/kvm removed: the probe fails, the device is tainted NoSchedule and the pod
# holding it shows it Unhealthy (the kubelet's DRAResourceHealth); a new claim pod stays Pending;
# back: the taint goes, it runs, the holder's device is Healthy again.
dra_health() {
	local st mode uid gid maj min t ms
	st=$(stat -c '%a %u %g %t %T' /dev/kvm) || return 1
	read -r mode uid gid maj min <<<"$st"
	echo "$st" >"$TEST/kvm-node"
	t=$(date +%s.%N)
	rm /dev/kvm
	tainted() { [ "$(dra_slice | jq -r '.items[0].spec.devices[0].taints[0].key // empty')" = hyperlight.dev/unhealthy ]; }
	until_ok 60 tainted || fail "the device is not tainted 60 s after the host's /dev/kvm was removed: $(dra_slice | jq -c '.items[0].spec.devices[0]')" || return 1
	note "/dev/kvm removed: device tainted hyperlight.dev/unhealthy:NoSchedule $(secs "$t") s later"
	# the kubelet's view (DRAResourceHealth, ResourceHealthStatus): the pod holding the device
	# shows it Unhealthy in its status
	shown() { kubectl -n "$NS" get pod dra-2 -o json | jq -e '[.status.containerStatuses[].allocatedResourcesStatus[]?.resources[]? | select(.resourceID == "hyperlight.dev/hypervisor=kvm" and .health == "Unhealthy")] | length > 0' >/dev/null; }
	until_ok 60 shown || fail "dra-2's status does not show its device Unhealthy: $(kubectl -n "$NS" get pod dra-2 -o json | jq -c '[.status.containerStatuses[].allocatedResourcesStatus]')" || return 1
	note "the pod holding it shows it: $(kubectl -n "$NS" get pod dra-2 -o json | jq -c '.status.containerStatuses[0].allocatedResourcesStatus')"
	dra_pod dra-wait
	why() { kubectl -n "$NS" get events --field-selector "involvedObject.name=dra-wait,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'cannot allocate all claims'; }
	until_ok 60 why || { diag "$NS" dra-wait; fail "a new claim pod is not Pending on the tainted device"; return 1; }
	note "a new claim pod Pending: $(kubectl -n "$NS" get events --field-selector 'involvedObject.name=dra-wait,reason=FailedScheduling' -o jsonpath='{.items[-1:].message}')"
	t=$(date +%s.%N)
	mknod -m "$mode" /dev/kvm c "$((16#$maj))" "$((16#$min))" && chown "$uid:$gid" /dev/kvm || return 1
	rm "$TEST/kvm-node"
	clean() { [ -z "$(dra_slice | jq -r '.items[0].spec.devices[0].taints // empty')" ]; }
	until_ok 60 clean || fail "the taint stayed 60 s after /dev/kvm came back" || return 1
	running() { [ "$(phase dra-wait)" = Running ]; }
	until_ok 120 running || { diag "$NS" dra-wait; fail "the waiting claim pod did not run once /dev/kvm came back"; return 1; }
	healthy() { kubectl -n "$NS" get pod dra-2 -o json | jq -e '[.status.containerStatuses[].allocatedResourcesStatus[]?.resources[]? | select(.resourceID == "hyperlight.dev/hypervisor=kvm" and .health == "Healthy")] | length > 0' >/dev/null; }
	until_ok 60 healthy || fail "dra-2's status does not show its device Healthy again" || return 1
	note "/dev/kvm back: taint gone, the waiting pod Running, dra-2's device Healthy again $(secs "$t") s later"
	kubectl -n "$NS" delete pod dra-wait dra-2 dra-er --wait=true --timeout=60s >/dev/null
}

# Back to the device-plugin API (and 2000 devices) for the steps after.
dra_back() {
	local t
	t=$(date +%s.%N)
	kubectl -n "$NS" delete resourceclaimtemplate hv-claim >/dev/null 2>&1
	helm upgrade hyperlight-device-plugin "$src/deploy/helm/hyperlight-device-plugin" -n kube-system --reuse-values \
		--set api=devicePlugin --set deviceCount=2000 "${HL_RENDER[@]}" >"$TEST/helm-hl.log" 2>&1 ||
		{ cat "$TEST/helm-hl.log" >&2; return 1; }
	hl_rolled "after helm upgrade --set api=devicePlugin" || return 1
	until_ok 120 hl_all || fail "allocatable hyperlight.dev/hypervisor $(hl_alloc) after api=devicePlugin, want 2000" || return 1
	kubectl get deviceclass hyperlight.dev >/dev/null 2>&1 && { fail "the DeviceClass hyperlight.dev stayed with api=devicePlugin"; return 1; }
	note "api=devicePlugin again: 2000 allocatable, the DeviceClass gone, $(secs "$t") s after helm upgrade"
	hl_hold
}

# The chart's hyperlight-dra-slices policy, enforced by the API server: the plugin's account,
# with a pod-bound token naming this node, may write hyperlight.dev slices of this node only.
dra_policy() { slices_policy "$HL_NS" hyperlight-device-plugin hyperlight.dev hyperlight-dra-slices; }

# slices_policy NS ACCOUNT DRIVER POLICY: a chart's slices policy, as above, for ACCOUNT of NS.
slices_policy() {
	local pns=$1 sa=$2 drv=$3 pol=$4 token loose server ca out
	kubectl -n "$pns" apply -f - >/dev/null <<EOF2
apiVersion: v1
kind: Pod
metadata:
  name: sdp-test-binder
  namespace: $pns
spec:
  serviceAccountName: $sa
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
EOF2
	token=$(kubectl -n "$pns" create token "$sa" --bound-object-kind Pod --bound-object-name sdp-test-binder --duration 10m)
	loose=$(kubectl -n "$pns" create token "$sa" --duration 10m)
	server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
	ca=$STATE/pki/ca.crt
	# slice TOKEN NODE DRIVER: POST a one-device slice as the plugin would; prints the answer's
	# message (or the name created); fails unless 201.
	slice() {
		local code
		code=$(curl -sS -o "$TEST/slice.out" -w '%{http_code}' --cacert "$ca" -X POST \
			-H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
			--data "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceSlice\",\"metadata\":{\"name\":\"sdp-test-$2-$3\"},\"spec\":{\"driver\":\"$3\",\"nodeName\":\"$2\",\"pool\":{\"name\":\"$2\",\"generation\":0,\"resourceSliceCount\":1},\"devices\":[{\"name\":\"x\"}]}}" \
			"$server/apis/resource.k8s.io/v1/resourceslices") || return 1
		jq -r '.message // ("created " + .metadata.name)' "$TEST/slice.out" 2>/dev/null || cat "$TEST/slice.out"
		[ "$code" = 201 ]
	}
	if out=$(slice "$token" "$node" "$drv"); then
		note "own node, own driver: allowed ($out)"
		kubectl delete resourceslice "sdp-test-$node-$drv" >/dev/null
	else
		fail "a slice of driver $drv on its own node refused: $out" || return 1
	fi
	out=$(slice "$token" sdp-test-other "$drv") && { fail "a slice for another node allowed"; return 1; }
	echo "$out" | grep -q "$pol" || { fail "another node's slice refused, but not by the chart's policy: $out"; return 1; }
	note "another node: refused ($out)"
	out=$(slice "$token" "$node" other.example.com) && { fail "a slice of another driver allowed"; return 1; }
	echo "$out" | grep -q "$pol" || { fail "another driver's slice refused, but not by the chart's policy: $out"; return 1; }
	note "another driver: refused ($out)"
	out=$(slice "$loose" "$node" "$drv") && { fail "a token naming no node allowed"; return 1; }
	echo "$out" | grep -q "pod-bound token" || { fail "a token naming no node refused, but not by the chart's policy: $out"; return 1; }
	note "a token naming no node: refused ($out)"
	kubectl -n "$pns" delete pod sdp-test-binder --wait=true --timeout=30s >/dev/null
}
