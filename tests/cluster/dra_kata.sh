# tests/cluster/dra_kata.sh: make test-cluster's DRA steps for kata (issue 29), sourced by run.sh
# after dra.sh (say, note, fail, until_ok, diag, phase, kill_container, restart_component,
# fingerprint, ready, tree, slices_policy, RENDERER, KATA_ROOT, NS, node, TEST). The kata chart, uninstalled by
# the device-plugin steps, is installed again with api=dra on the same VFIO tree (sdp-katatree:
# H100s a, b, c on the root complex pci0000:00, the A100 d on pci0000:80, each GPU with its audio
# companion); every check is through the real API server, scheduler, kubelet and containerd.

KATA_DRIVER=kata.nvidia.com
KATA_CLAIMS=/var/lib/kubelet/plugins/$KATA_DRIVER/claims

kata_slice() { kubectl get resourceslices --field-selector "spec.nodeName=$node,spec.driver=$KATA_DRIVER" -o json; }
kata_logs() {
	local p
	p=$(kata_pod)
	kubectl -n kube-system logs "$p" --previous 2>/dev/null
	kubectl -n kube-system logs "$p" 2>/dev/null
}
# kata_dev NAME FIELD: a field of the tree's device whose DRA name is NAME.
kata_dev() { jq -r --arg n "$1" ".devices[] | select(.dra_name == \$n) | .$2" "$TEST/kata-tree.json"; }

# kata_claim_pod NAME TEMPLATE: an unprivileged pod (uid 65534) holding a claim from TEMPLATE,
# listing its /dev/vfio.
kata_claim_pod() {
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
  resourceClaims: [{name: gpus, resourceClaimTemplateName: $2}]
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
      claims: [{name: gpus}]
EOF
}

# kata_template NAME CEL CONSTRAINT: a template of 2 GPUs (gpu.kata.nvidia.com), with a CEL
# selector ("" none) and matchAttribute CONSTRAINT ("" none).
kata_template() {
	kubectl apply -f - >/dev/null <<EOF
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: $1
  namespace: $NS
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.kata.nvidia.com
          count: 2
$([ -z "$2" ] || printf '          selectors:\n          - cel:\n              expression: %s\n' "'$2'")
$([ -z "$3" ] || printf '      constraints:\n      - requests: ["gpus"]\n        matchAttribute: %s\n' "$3")
EOF
}

# kata_claim_devices POD: the devices allocated to POD's claim, one a line.
kata_claim_devices() {
	kubectl -n "$NS" get resourceclaims -o json |
		jq -r --arg p "$1" '.items[] | select(.status.reservedFor[]?.name == $p) | .status.allocation.devices.results[] | select(.driver == "kata.nvidia.com") | .device'
}

# api=dra on the same tree: rolled out and Ready, registered, one device per IOMMU group with the
# tree's attributes, the DeviceClasses there.
kata_dra_install() {
	local t want got
	# pods of the device-plugin steps hold groups the scheduler would not know of: drained first
	# (docs/dra.md, "Moving from the device-plugin API")
	kubectl -n "$NS" delete pod gpu-pair gpu-wait gpu-new --ignore-not-found --wait=true --timeout=60s >/dev/null
	t=$(date +%s.%N)
	helm upgrade --install kata-device-plugin "$src/deploy/helm/kata-device-plugin" -n kube-system \
		--set api=dra --set admissionPolicies.enabled=true \
		--post-renderer "$RENDERER" --post-renderer-args sysfs --post-renderer-args "$KATA_ROOT/sys" >"$TEST/helm-kata.log" 2>&1 ||
		{ cat "$TEST/helm-kata.log" >&2; return 1; }
	if ! kubectl -n kube-system rollout status ds/kata-device-plugin --timeout=180s >/dev/null; then
		diag kube-system "$(kata_pod)"
		fail "the kata DaemonSet (api=dra) did not roll out in 180 s"
		return 1
	fi
	published() { [ "$(kata_slice | jq '[.items[].spec.devices[]] | length')" = "$(jq '.devices | length' "$TEST/kata-tree.json")" ]; }
	until_ok 60 published || { fail "kata's ResourceSlices: $(kata_slice | jq -c '[.items[].spec.devices[].name]'), want one device per group of the tree"; return 1; }
	note "api=dra: rolled, Ready and published $(secs "$t") s after helm"
	want=$(jq -c '[.devices[] | {name: .dra_name, root: .pcie_root, bus: .bdf, numa, model, group, type: (.resource | sub("nvidia.com/"; "")), resource}] | sort_by(.name)' "$TEST/kata-tree.json")
	got=$(kata_slice | jq -c '[.items[].spec.devices[] | {name, root: .attributes["resource.kubernetes.io/pcieRoot"].string,
		bus: .attributes["resource.kubernetes.io/pciBusID"].string, numa: .attributes["resource.kubernetes.io/numaNode"].int,
		model: .attributes.model.string, group: .attributes.iommuGroup.int, type: .attributes.type.string,
		resource: .attributes.resource.string}] | sort_by(.name)')
	[ "$got" = "$want" ] || { fail "the devices' attributes: $got; want (the tree) $want"; return 1; }
	[ "$(kata_slice | jq '[.items[].spec.devices[] | select(.attributes.vfioBackend.string != "legacy" or .attributes.functions.int != 1 or .taints != null)] | length')" = 0 ] ||
		fail "a device with another backend, function count or a taint: $(kata_slice | jq -c '.items[].spec.devices')" || return 1
	note "every IOMMU group published with the tree's attributes: $got"
	kata_logs | grep -q 'msg="DRA driver registered with the kubelet" driver=kata.nvidia.com' || fail "kata did not log its DRA registration" || return 1
	kubectl get deviceclass gpu.kata.nvidia.com nvswitch.kata.nvidia.com >/dev/null || fail "the DeviceClasses are missing" || return 1
	[ -z "$(find /var/lib/kubelet/device-plugins -name 'kata-*')" ] || fail "kata serves device-plugin sockets with api=dra" || return 1
}

# The chart's kata-dra-slices policy (admissionPolicies.enabled), as hyperlight's.
kata_dra_policy() { slices_policy kube-system kata-device-plugin "$KATA_DRIVER" kata-dra-slices; }

# Two H100s (CEL on the model) under one PCIe root (matchAttribute): allocated by the scheduler,
# the pod sees exactly those groups' nodes, injected by CDI from kata-dra.nvidia.com-gpu.yaml.
kata_dra_pair() {
	local t devs groups seen want d
	kata_template h100-pair 'device.attributes["kata.nvidia.com"].model == "GH100_H100_SXM5_80GB"' resource.kubernetes.io/pcieRoot
	t=$(date +%s.%N)
	kata_claim_pod gpu-dra h100-pair
	running() { [ "$(phase gpu-dra)" = Running ]; }
	until_ok 120 running || { diag "$NS" gpu-dra; fail "the claim pod is not Running after 120 s"; return 1; }
	devs=$(kata_claim_devices gpu-dra | sort | tr '\n' ' ')
	[ "$(echo "$devs" | wc -w)" = 2 ] || fail "the claim's devices: '$devs', want 2" || return 1
	for d in $devs; do
		[ "$(kata_dev "$d" model)" = GH100_H100_SXM5_80GB ] && [ "$(kata_dev "$d" pcie_root)" = pci0000:00 ] ||
			fail "$d ($(kata_dev "$d" model) on $(kata_dev "$d" pcie_root)) is not an H100 on pci0000:00" || return 1
		grep -q "name: \"$d\"" /var/run/cdi/kata-dra.nvidia.com-gpu.yaml || fail "$d is not in /var/run/cdi/kata-dra.nvidia.com-gpu.yaml" || return 1
	done
	groups=$(for d in $devs; do kata_dev "$d" group; done)
	want=$( (echo "$groups"; echo vfio) | sort | tr '\n' ' ')
	seen=$(kubectl -n "$NS" exec gpu-dra -- ls /dev/vfio | sort | tr '\n' ' ')
	[ "$seen" = "$want" ] || fail "the pod's /dev/vfio holds: $seen; want its devices' groups and the container node: $want" || return 1
	note "h100-pair allocated $devs(groups $(echo "$groups" | tr '\n' ' ')on pci0000:00), Running $(secs "$t") s after apply; the pod's /dev/vfio: $seen"
}

# The free GPUs are one H100 on pci0000:00 and the A100 on pci0000:80: a pair on one root stays
# Pending with the scheduler's reason, the same pair without the constraint runs.
kata_dra_unsatisfiable() {
	local msg
	kata_template any-pair-one-root "" resource.kubernetes.io/pcieRoot
	kata_claim_pod gpu-dra-root any-pair-one-root
	why() { kubectl -n "$NS" get events --field-selector "involvedObject.name=gpu-dra-root,reason=FailedScheduling" -o jsonpath='{.items[*].message}' | grep -q 'cannot allocate all claims'; }
	until_ok 60 why || { diag "$NS" gpu-dra-root; fail "the one-root pair is not Pending for 'cannot allocate all claims'"; return 1; }
	msg=$(kubectl -n "$NS" get events --field-selector 'involvedObject.name=gpu-dra-root,reason=FailedScheduling' -o jsonpath='{.items[-1:].message}')
	kata_template any-pair "" ""
	kata_claim_pod gpu-dra-any any-pair
	running() { [ "$(phase gpu-dra-any)" = Running ]; }
	until_ok 120 running || { diag "$NS" gpu-dra-any; fail "a pair without the root constraint did not run on the two free GPUs"; return 1; }
	[ "$(phase gpu-dra-root)" = Pending ] || fail "the one-root pair left Pending" || return 1
	note "a pair on one root Pending ($msg); without the constraint it runs on $(kata_claim_devices gpu-dra-any | tr '\n' ' ')"
	kubectl -n "$NS" delete pod gpu-dra-root gpu-dra-any --wait=true --timeout=60s >/dev/null
}

# An audio companion bound to snd_hda_intel (its group no longer viable): the device is tainted
# at once (a PCI uevent), the pod holding it shows it Unhealthy; bound back: all well.
kata_dra_companion() {
	local dev link target t ms rid bridge
	dev=$(kata_claim_devices gpu-dra | sort | head -n1)
	link=$KATA_ROOT/$(kata_dev "$dev" companion)
	target=$(readlink "$link")
	rid="nvidia.com/gpu=$dev"
	bridge=$(for b in /sys/bus/pci/devices/*; do grep -q '^0x06' "$b/class" 2>/dev/null && { echo "$b"; break; }; done)
	t=$(date +%s.%N)
	ln -sfn "${target%/*}/snd_hda_intel" "$link"
	[ -z "$bridge" ] || echo add >"$bridge/uevent"
	tainted() { [ "$(kata_slice | jq -r --arg d "$dev" '.items[].spec.devices[] | select(.name == $d) | .taints[0].key // empty')" = kata.nvidia.com/unhealthy ]; }
	ms=""
	for _ in $(seq 600); do tainted && { ms=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%d", (b - a) * 1000 }'); break; }; sleep 0.05; done
	[ -n "$ms" ] || { ln -sfn "$target" "$link"; fail "$dev not tainted 30 s after its companion was bound to snd_hda_intel"; return 1; }
	note "companion of $dev bound to snd_hda_intel: $dev tainted kata.nvidia.com/unhealthy:NoSchedule in the API server ${ms} ms later (PCI uevent: ${bridge:-none})"
	[ "$(kata_slice | jq '[.items[].spec.devices[] | select(.taints != null)] | length')" = 1 ] || fail "other devices tainted too" || return 1
	shown() { kubectl -n "$NS" get pod gpu-dra -o json | jq -e --arg r "$rid" '[.status.containerStatuses[].allocatedResourcesStatus[]?.resources[]? | select(.resourceID == $r and .health == "Unhealthy")] | length > 0' >/dev/null; }
	until_ok 60 shown || { ln -sfn "$target" "$link"; fail "gpu-dra's status does not show $rid Unhealthy: $(kubectl -n "$NS" get pod gpu-dra -o json | jq -c '[.status.containerStatuses[].allocatedResourcesStatus]')"; return 1; }
	note "the pod holding it shows it: $(kubectl -n "$NS" get pod gpu-dra -o json | jq -c '.status.containerStatuses[0].allocatedResourcesStatus')"
	kata_logs | grep 'msg="IOMMU group not viable, advertising the device Unhealthy"' | grep -q 'driver=snd_hda_intel' || fail "kata did not log the group as not viable" || return 1
	t=$(date +%s.%N)
	ln -sfn "$target" "$link"
	clean() { [ "$(kata_slice | jq '[.items[].spec.devices[] | select(.taints != null)] | length')" = 0 ]; }
	until_ok 30 clean || fail "the taint stayed 30 s after the companion went back to vfio-pci" || return 1
	healthy() { kubectl -n "$NS" get pod gpu-dra -o json | jq -e --arg r "$rid" '[.status.containerStatuses[].allocatedResourcesStatus[]?.resources[]? | select(.resourceID == $r and .health == "Healthy")] | length > 0' >/dev/null; }
	until_ok 60 healthy || fail "gpu-dra's status does not show $rid Healthy again" || return 1
	note "companion back on vfio-pci: taint gone, $rid Healthy again $(secs "$t") s later"
}

# kill -9 of kata and a kubelet restart: the pod keeps its groups, its claim prepared once.
kata_dra_faults() {
	local p before after t since uid n kpid
	p=$(kata_pod)
	before=$(fingerprint "$NS" gpu-dra)
	kill_container kube-system "$p" kata || return 1
	note "kill -9 of kata (pid $killed_pid): restarted and Ready $(secs "$killed_at") s later"
	t=$(date +%s.%N)
	since=$(date -u +%FT%TZ)
	kpid=$(restart_component kubelet) || return 1
	again() { kubectl -n kube-system logs "$p" --since-time="$since" 2>/dev/null | grep -q 'msg="DRA driver registered with the kubelet"'; }
	until_ok 120 again || fail "kata did not log its DRA registration after the kubelet restart" || return 1
	note "kubelet restarted (pid $kpid): the driver registered again $(secs "$t") s later"
	ready_again() { ready kube-system "$p" && [ "$(fingerprint "$NS" gpu-dra)" = "$before" ]; }
	until_ok 30 ready_again || fail "gpu-dra changed: before: $before; after: $(fingerprint "$NS" gpu-dra)" || return 1
	uid=$(kubectl -n "$NS" get resourceclaims -o json | jq -r '.items[] | select(.status.reservedFor[]?.name == "gpu-dra") | .metadata.uid')
	n=$(kata_logs | grep 'msg="claim prepared"' | grep -c "uid=$uid")
	[ "$n" = 1 ] || fail "claim $uid prepared $n times by kata (want once across the kill and the kubelet restart)" || return 1
	note "gpu-dra untouched; its claim prepared exactly once"
}

# Deleting the pod unprepares its claim; the chart goes.
kata_dra_unprepare() {
	local uid t
	uid=$(kubectl -n "$NS" get resourceclaims -o json | jq -r '.items[] | select(.status.reservedFor[]?.name == "gpu-dra") | .metadata.uid')
	[ -n "$uid" ] && [ -f "$KATA_CLAIMS/$uid" ] || fail "no checkpoint $KATA_CLAIMS/$uid for gpu-dra's claim" || return 1
	t=$(date +%s.%N)
	kubectl -n "$NS" delete pod gpu-dra --wait=true --timeout=60s >/dev/null
	gone() { [ ! -e "$KATA_CLAIMS/$uid" ] && kata_logs | grep 'msg="claim unprepared"' | grep -q "uid=$uid"; }
	until_ok 60 gone || fail "claim $uid not unprepared 60 s after its pod was deleted" || return 1
	note "gpu-dra deleted: claim $uid unprepared, its checkpoint removed $(secs "$t") s later"
	helm uninstall kata-device-plugin -n kube-system --wait --timeout 120s >/dev/null || return 1
	kubectl get deviceclass gpu.kata.nvidia.com >/dev/null 2>&1 && { fail "the DeviceClass stayed after helm uninstall"; return 1; }
	return 0
}
