# shellcheck shell=bash disable=SC2154
# (src, build and T come from run.sh)
# The body of tests/runtime/run.sh, sourced in a private mount namespace (unshare -m
# --propagation private): every mount made here disappears with the namespace. Variables from
# run.sh: src, build, T. Writes passed=/failed= to $T/summary.
set -uo pipefail

passed=0
failed=0
summary() { printf 'passed=%d\nfailed=%d\n' "$passed" "$failed" >"$T/summary"; }
summary
ok() { passed=$((passed + 1)); echo "ok - $*"; summary; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; summary; }
# check DESCRIPTION GOT WANT
check() {
	if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got '$2', want '$3'"; fi
}
die() { bad "$*"; exit 1; }

S=$T/store
mkdir -p "$S/tmp" "$S/runc"
# runc keeps its state in $S/runc: through a wrapper named as the runtime rather than with
# --runtime-flag, because podman 4.3 does not pass runtime flags on to the "container cleanup"
# that conmon runs when a container exits by itself, whose `runc delete` then created
# /run/runc on the host (seen when that cleanup won the race against podman run's own).
printf '#!/bin/sh\nexec /usr/bin/runc --root "%s" "$@"\n' "$S/runc" >"$S/runc-in-store"
chmod 0755 "$S/runc-in-store"
P=(podman --root "$S/root" --runroot "$S/runroot" --storage-driver vfs --cgroup-manager cgroupfs
	--events-backend file --runtime "$S/runc-in-store" --tmpdir "$S/tmp")
RUN=(run --pull=never --network=none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
BUILD_STORE=(podman --root "$build/podman/root" --runroot "$build/podman/runroot" --storage-driver vfs
	--cgroup-manager cgroupfs --events-backend file --runtime runc)
version=$(sed -n "s/^  version: '\([^']*\)',$/\1/p" "$src/meson.build" | head -n1)
HL_IMAGE=localhost/hyperlight-device-plugin:$version
KATA_IMAGE=localhost/kata-device-plugin:$version
BB_IMAGE=localhost/sdp-runtime-busybox:test

# --- the node: stand-in device nodes, CDI directory, device-plugins directory, all in $T ------
DP=$T/device-plugins # the kubelet's /var/lib/kubelet/device-plugins
CDI=$T/cdi           # the node's /var/run/cdi
HOSTDEV=$T/host-dev  # the node's /dev as the hyperlight DaemonSet mounts it (/host-dev)
VFIO=$T/vfio         # the node's /dev/vfio
SYS=$T/sys           # the node's /sys as the kata plugin reads it
mkdir -p "$SYS/fs/cgroup" "$DP" "$CDI" "$HOSTDEV" "$VFIO/devices" "$SYS/class/vfio-dev" "$SYS/devices/pci0000:00" "$T/empty"
chmod 0750 "$DP"

# KVM_GET_API_VERSION (_IO(0xAE, 0x00)) on the host's /dev/kvm, before any stand-in covers it.
kvm_works() {
	python3 -c 'import os, fcntl, sys
fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
sys.exit(0 if fcntl.ioctl(fd, 0xAE00) == 12 else 1)' 2>/dev/null
}
hv=${SDP_RUNTIME_HV:-auto}
if [ "$hv" = auto ]; then
	if [ -c /dev/kvm ] && kvm_works; then hv=kvm; else hv=shim; fi
fi
case $hv in
kvm | shim) echo "== hyperlight plugin probes with: $hv" ;;
*) die "SDP_RUNTIME_HV=$hv: want auto, kvm or shim" ;;
esac

mknod -m 0660 "$HOSTDEV/kvm" c 10 232
# Three VFIO functions, IOMMUFD cdevs 237:(10+N) (major 237: the daemon only stats them; the
# workload's open reaches no driver): two GPUs of two models (H100 SXM5, A100 SXM4) and an
# NVSwitch, in the kernel's sysfs layout, each in its own viable IOMMU group. The models matter only with RESOURCE_NAMING=sku.
VFIO_MAJOR=237
add_vfio() { # N BDF CLASS DEVICE
	local n=$1 bdf=$2 class=$3 pci=$SYS/devices/pci0000:00/$2
	mkdir -p "$pci" "$SYS/class/vfio-dev/vfio$n"
	printf '0x10de\n' >"$pci/vendor"
	printf '%s\n' "$4" >"$pci/device"
	printf '%s\n' "$class" >"$pci/class"
	printf '0\n' >"$pci/numa_node"
	printf '%d:%d\n' "$VFIO_MAJOR" $((10 + n)) >"$SYS/class/vfio-dev/vfio$n/dev"
	ln -s "../../../devices/pci0000:00/$bdf" "$SYS/class/vfio-dev/vfio$n/device"
	# each function alone in IOMMU group 20+N, bound to vfio-pci: a viable group, as the kernel
	# lays it out (the plugin skips a function without an iommu_group link: not isolated)
	mkdir -p "$SYS/kernel/iommu_groups/$((20 + n))/devices"
	ln -s "../../../../devices/pci0000:00/$bdf" "$SYS/kernel/iommu_groups/$((20 + n))/devices/$bdf"
	ln -s "../../../kernel/iommu_groups/$((20 + n))" "$pci/iommu_group"
	ln -s "../../../bus/pci/drivers/vfio-pci" "$pci/driver"
	mknod -m 0600 "$VFIO/devices/vfio$n" c "$VFIO_MAJOR" $((10 + n))
}
add_vfio 0 0000:41:00.0 0x030200 0x2330
add_vfio 1 0000:42:00.0 0x030200 0x20b0
add_vfio 2 0000:43:00.0 0x068000 0x1af1

# The host paths podman resolves CDI deviceNodes and spec directories against: in this mount
# namespace only. /var/run/cdi and /dev/vfio exist (run.sh created them if absent, recorded);
# /etc/cdi, if the host has one, is hidden so that only our specs are seen.
mount --bind "$CDI" /var/run/cdi || die "bind $CDI on /var/run/cdi"
mount --bind "$VFIO" /dev/vfio || die "bind $VFIO on /dev/vfio"
mount --bind "$HOSTDEV/kvm" /dev/kvm || die "bind the stand-in kvm node on /dev/kvm"
# What root's open of the stand-in gives: "ok" where the kvm module is loaded, else the error
# of a device number no driver serves ("No such device"); the workload's open must give the same.
kvm_open=$(python3 -c 'import os
try:
    os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)); print("ok")
except OSError as e:
    print(os.strerror(e.errno))')
echo "== root's open of the stand-in /dev/kvm: $kvm_open"
[ -d /etc/cdi ] && { mount --bind "$T/empty" /etc/cdi || die "hide /etc/cdi"; }

# --- images: copied from `make images`' store into this run's temporary store ---------------
# localhost/NAME:VERSION is a manifest list of linux/amd64 and linux/arm64; podman save takes
# this machine's image from it, as a node's runtime pulls its own. The arm64 images are taken by
# their own tags (localhost/NAME:VERSION-arm64): podman 4.3 runs a local list's image for the
# host's architecture even with --arch or --platform. One multi-image archive (podman save -m).
case $(uname -m) in
x86_64) host_arch=amd64 ;;
aarch64) host_arch=arm64 ;;
*) host_arch=$(uname -m) ;;
esac
for img in "$HL_IMAGE" "$KATA_IMAGE"; do
	platforms=$("${BUILD_STORE[@]}" manifest inspect "$img" 2>"$T/err" | python3 -c 'import json, sys
print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"])))')
	check "$img is a manifest list of linux/amd64 and linux/arm64 $(cat "$T/err")" "$platforms" "linux/amd64 linux/arm64"
done
IMAGES=("$HL_IMAGE" "$KATA_IMAGE" "$HL_IMAGE-arm64" "$KATA_IMAGE-arm64")
"${BUILD_STORE[@]}" save -m -o "$T/image.tar" "${IMAGES[@]}" >/dev/null 2>"$T/err" ||
	die "podman save ${IMAGES[*]} from $build/podman: $(cat "$T/err") (make images)"
"${P[@]}" load -q -i "$T/image.tar" >/dev/null 2>"$T/err" || die "podman load: $(cat "$T/err")"
rm -f "$T/image.tar"
check "the images loaded: ${IMAGES[*]}, by platform; the lists resolved to this machine's (linux/$host_arch)" \
	"$("${P[@]}" image inspect --format '{{.Os}}/{{.Architecture}} {{.Id}}' "${IMAGES[@]}")" \
	"$("${BUILD_STORE[@]}" image inspect --format '{{.Os}}/{{.Architecture}} {{.Id}}' "$HL_IMAGE-$host_arch" "$KATA_IMAGE-$host_arch" "$HL_IMAGE-arm64" "$KATA_IMAGE-arm64")"
mkdir -p "$T/bb/bin"
cp "$(command -v busybox)" "$T/bb/bin/busybox" || die "busybox-static not installed (scripts/install-deps.sh runtime)"
file_is_static=$(LC_ALL=C readelf -lW "$T/bb/bin/busybox" | grep -c 'program interpreter')
[ "$file_is_static" -eq 0 ] || die "$(command -v busybox) is not static (install busybox-static)"
tar -C "$T/bb" -c . | "${P[@]}" import -q - "$BB_IMAGE" >/dev/null || die "podman import busybox"
ok "images: $BB_IMAGE imported (busybox-static)"

# --- helpers -----------------------------------------------------------------------------------
# The DaemonSets' container security context: uid 0, no capability, read-only root without
# podman's extra tmpfs mounts, no privilege escalation, default seccomp, 64 MiB.
PLUGIN_RUN=("${RUN[@]}" -d --user 0:0 --cap-drop=ALL --security-opt no-new-privileges
	--read-only --read-only-tmpfs=false --memory 64m
	-v "$DP:/var/lib/kubelet/device-plugins" -v "$CDI:/var/run/cdi")

plugin_log() { # NAME: prints the container's log, kept in $T/NAME.log
	"${P[@]}" logs "$1" >"$T/$1.log" 2>&1
	sed 's/^/   | /' "$T/$1.log"
}
# The program, version and commit a plugin container's daemon logged at start.
started() { sed -n 's/.*msg=starting \(program=[^ ]* version=[^ ]* commit=[^ ]*\).*/\1/p' "$T/$1.log" | head -n1; }

plugin_checks() { # NAME
	local caps ro
	caps=$("${P[@]}" inspect --format '{{.EffectiveCaps}}' "$1")
	ro=$("${P[@]}" inspect --format '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$1")
	check "$1: runs with no capability" "$caps" "[]"
	check "$1: read-only root, user 0:0" "$ro" "true 0:0"
}

# kubelet_start NAME RESOURCE COUNT: the mock kubelet on $DP (build/runtime-e2e, a coprocess
# that stays up between allocations, its event log in $T/NAME.kubelet).
kubelet_start() {
	kname=$1
	coproc KUBELET { exec "$build/runtime-e2e" -dir "$DP" -resource "$2" -count "$3" -timeout 30s 2>"$T/$1.kubelet"; }
}
kubelet_stop() {
	if [ -n "${KUBELET_PID:-}" ]; then
		local pid=$KUBELET_PID
		eval "exec ${KUBELET[1]}>&-"
		wait "$pid"
	fi
}
# kubelet_ask COMMAND NAME WHAT: one command to the running kubelet (runtime-e2e), its JSON
# answer in $T/NAME.json.
kubelet_ask() {
	local line=""
	echo "$1" >&"${KUBELET[1]}" && read -r -t 45 line <&"${KUBELET[0]}"
	if [ -n "$line" ]; then
		echo "$line" >"$T/$2.json"
		ok "$2: registered across the container boundary, $3: $line"
		return 0
	fi
	bad "$2: kubelet side failed: $(cat "$T/$kname.kubelet")"
	return 1
}
# allocate NAME: one Allocate.
allocate() { kubelet_ask allocate "$1" "ListAndWatch, Allocate"; }
# list_devices NAME: what the endpoint advertises, of any health:
# {"resource":...,"devices":N,"health":{"Healthy":N,...}}.
list_devices() { kubelet_ask devices "$1" ListAndWatch; }
json() { python3 -c "import json, sys; d = json.load(open(sys.argv[1])); $2" "$T/$1.json"; }
cdi_names() { json "$1" 'print(" ".join(d["cdi"]))'; }

# The environment a CDI device declares (spec-level and device-level containerEdits), sorted.
spec_env() { # SPECFILE DEVICE
	python3 - "$1" "$2" <<'EOF'
import json, sys, yaml
s = yaml.safe_load(open(sys.argv[1]))
env = list((s.get("containerEdits") or {}).get("env") or [])
for d in s["devices"]:
    if d["name"] == sys.argv[2]:
        env += (d.get("containerEdits") or {}).get("env") or []
print("\n".join(sorted(env)))
EOF
}
spec_paths() { # SPECFILE DEVICE: the deviceNodes paths of one device
	python3 - "$1" "$2" <<'EOF'
import sys, yaml
s = yaml.safe_load(open(sys.argv[1]))
for d in s["devices"]:
    if d["name"] == sys.argv[2]:
        for n in (d.get("containerEdits") or {}).get("deviceNodes") or []:
            print(n["path"])
EOF
}

# workload OUT ARGS...: busybox as uid/gid 65534 with the CDI devices; output in $T/OUT.
workload() {
	local out=$1
	shift
	"${P[@]}" "${RUN[@]}" --rm --user 65534:65534 "$@" >"$T/$out" 2>"$T/$out.err"
}

# Waits (bounded, polling) until FILE has exactly the content of REF.
wait_same() { # FILE REF SECONDS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		cmp -s "$1" "$2" && return 0
		sleep 0.1
	done
	return 1
}

# ============================== hyperlight ================================================
echo "== hyperlight-device-plugin container"
HL_ARGS=(--name sdp-rt-hyperlight --device /dev/kvm -v "$HOSTDEV:/host-dev:ro"
	-e NODE_NAME=sdp-runtime-node -e HOST_DEVICE_DIR=/host-dev -e DEVICE_COUNT=2000
	-e DEVICE_UID=65534 -e DEVICE_GID=65534 -e DEVICE_MODE=0660 -e LOG_LEVEL=info)
if [ "$hv" = shim ]; then
	# No working KVM here: the fake hypervisor (tests/fakes/hvshim.c, built against musl by
	# scripts/build-static.sh, as the image's binary is) bind-mounted read-only and preloaded;
	# its only dependency, musl's libc, is in the image.
	HL_ARGS+=(-v "$src/build-static/musl-dynamic/libhvshim.so:/sdp-test/libhvshim.so:ro"
		-e LD_PRELOAD=/sdp-test/libhvshim.so -e HVSHIM_DEVICE=/dev/kvm)
fi
"${P[@]}" "${PLUGIN_RUN[@]}" "${HL_ARGS[@]}" "$HL_IMAGE" >/dev/null 2>"$T/err" ||
	die "podman run $HL_IMAGE: $(cat "$T/err")"
plugin_checks sdp-rt-hyperlight

hl_spec=$CDI/hyperlight.json
# A workload's open of /dev/kvm read-write, as one line: open=ok or open=failed: <busybox's error>.
# shellcheck disable=SC2016
hl_open='if e=$( (exec 3<>/dev/kvm) 2>&1 ); then echo open=ok; else echo "open=failed: $e"; fi'
# hl_workload OUT: a workload container as a pod runs it (busybox, --user 65534:65534, the
# allocated CDI device). Its own process, of the pod's uid, writes the device node (type,
# number, owner, mode), its open and the HYPERLIGHT_* variables ($T/OUT), then sleeps; two more
# processes in the same container then try the open (podman exec --user, $T/OUT.group and
# $T/OUT.other): uid 1000 with gid 65534 (DEVICE_GID: what runAsGroup, supplementalGroups or
# fsGroup give a pod), and uid 1000 gid 1000 (any other uid in the container).
hl_workload() {
	local out=$1 name=sdp-rt-hl-workload i
	rm -f "$T/$out" "$T/$out".*
	# shellcheck disable=SC2046
	workload "$out.id" -d --name "$name" $(for n in $(cdi_names hl-alloc); do echo --device "$n"; done) "$BB_IMAGE" \
		/bin/busybox sh -c 'stat -c "%F|%t:%T|%u:%g|%a" /dev/kvm
'"$hl_open"'
env | grep ^HYPERLIGHT_ | sort
echo end-of-report
exec /bin/busybox sleep 600' || { cp "$T/$out.id.err" "$T/$out.err"; return; }
	for ((i = 0; i < 100; i++)); do
		"${P[@]}" logs "$name" >"$T/$out" 2>"$T/$out.err"
		grep -qx end-of-report "$T/$out" && break
		sleep 0.1
	done
	sed -i '/^end-of-report$/d' "$T/$out"
	"${P[@]}" exec --user 1000:65534 "$name" /bin/busybox sh -c "$hl_open" >"$T/$out.group" 2>&1
	"${P[@]}" exec --user 1000:1000 "$name" /bin/busybox sh -c "$hl_open" >"$T/$out.other" 2>&1
	"${P[@]}" rm -f -t 0 "$name" >/dev/null 2>&1
}
# hl_open_passes WHAT OPEN: OPEN (an hl_open line) got past the device cgroup and the node's
# permission bits: open=ok on real KVM; without the kvm module the stand-in 10:232 reaches no
# driver and the open fails as root's does (ENXIO/ENODEV; not "Operation not permitted": the
# device cgroup; not "Permission denied": the node's owner and mode).
hl_open_passes() {
	if [ "$kvm_open" = ok ]; then
		check "$1 opens /dev/kvm read-write" "$2" open=ok
	else
		case $2 in
		"open=failed: "*": $kvm_open") ok "$1 passes the device cgroup and permission checks on /dev/kvm (open fails as root's: $kvm_open)" ;;
		*) bad "$1's open of /dev/kvm: want the error root gets ($kvm_open), got '$2'" ;;
		esac
	fi
}
hl_verify() { # OUT WHAT
	local first open envs want_env
	if [ ! -s "$T/$1" ]; then
		bad "$2: workload did not start or wrote nothing: $(cat "$T/$1.err" 2>/dev/null)"
		return
	fi
	first=$(head -n1 "$T/$1")
	# The spec's fileMode (DEVICE_MODE=0660, 432) is the node's mode: without it podman 4.3.1
	# creates 0666 and containerd copies the host node's (0666 under systemd's udev rule).
	check "$2: /dev/kvm is character device 10:232 (hex a:e8), uid:gid 65534:65534, mode 660 (DEVICE_UID, DEVICE_GID, DEVICE_MODE)" \
		"$first" "character special file|a:e8|65534:65534|660"
	open=$(grep '^open=' "$T/$1")
	hl_open_passes "$2: the pod's uid 65534" "$open"
	hl_open_passes "$2: uid 1000 with gid 65534 (DEVICE_GID), in the same container" "$(cat "$T/$1.group")"
	# Any other uid: refused by the node's mode, EACCES, whether KVM is there or not.
	case $(cat "$T/$1.other") in
	"open=failed: "*": Permission denied") ok "$2: uid 1000 gid 1000, in the same container, is refused by the node's mode: $(cat "$T/$1.other")" ;;
	*) bad "$2: uid 1000 gid 1000's open of /dev/kvm: want Permission denied (EACCES), got '$(cat "$T/$1.other")'" ;;
	esac
	envs=$(grep '^HYPERLIGHT_' "$T/$1")
	want_env=$(spec_env "$hl_spec" "${dev#*=}")
	check "$2: environment is exactly the spec's: $(tr '\n' ' ' <<<"$want_env")" "$envs" "$want_env"
}

kubelet_start hl-kubelet hyperlight.dev/hypervisor 1
if allocate hl-alloc; then
	dev=$(cdi_names hl-alloc)
	check "hyperlight: Allocate answers one CDI name" "$dev" "hyperlight.dev/hypervisor=$([ -e /dev/mshv ] && echo mshv || echo kvm)"
	if [ -f "$hl_spec" ]; then ok "hyperlight: spec $hl_spec written"; else bad "hyperlight: no spec in $CDI: $(ls "$CDI")"; fi
	if "${P[@]}" exec sdp-rt-hyperlight /hyperlight-device-plugin --health-check=readiness 2>"$T/err"; then
		ok "hyperlight: readiness probe (exec in the container) passes"
	else
		bad "hyperlight: readiness probe: $(cat "$T/err")"
	fi
	cp "$hl_spec" "$T/hl-good.json"
	hl_workload hl-w1
	hl_verify hl-w1 "hyperlight workload 1"

	# Corrupt the spec on the host; the next Allocate (next pod) makes the plugin repair it.
	printf '{"cdiVersion": "0.5.0", "kind": "hyperlight.dev/hypervisor", "devices": [' >"$hl_spec"
	allocate hl-alloc2
	if wait_same "$hl_spec" "$T/hl-good.json" 10; then
		ok "hyperlight: the plugin container repaired the corrupt spec"
	else
		bad "hyperlight: spec not repaired within 10 s: $(head -c 300 "$hl_spec")"
	fi
	hl_workload hl-w2
	hl_verify hl-w2 "hyperlight workload 2 (after repair)"

	# Deliberately broken specs beside the good one: each must make podman refuse, with why.
	broken() { # NAME PYTHON-EDIT EXPECTED-STDERR-PATTERN
		python3 - "$T/hl-good.json" "$CDI/sdp-broken.json" <<EOF
import json, sys
s = json.load(open(sys.argv[1]))
s["kind"] = "sdp-test.example/broken"
$2
json.dump(s, open(sys.argv[2], "w"))
EOF
		if workload "broken-$1" --log-level=debug --device "sdp-test.example/broken=${dev#*=}" "$BB_IMAGE" /bin/busybox true; then
			bad "broken spec ($1): podman started the workload"
		elif grep -qi "$3" "$T/broken-$1.err"; then
			ok "broken spec ($1) refused by podman: $(grep -i -o "$3.*" "$T/broken-$1.err" | head -n1 | cut -c1-160)"
		else
			bad "broken spec ($1): refused, but not for the expected reason /$3/: $(cat "$T/broken-$1.err")"
		fi
		rm -f "$CDI/sdp-broken.json"
	}
	broken cdiVersion-0.6.0 's["cdiVersion"] = "0.6.0"' 'unsupported\|version'
	broken unknown-field 's["devices"][0]["containerEdits"]["unknownField"] = 1' 'unknown field'
	broken wrong-device-mapping 's["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] = "/dev/sdp-runtime-no-such-node"' 'no such file'
fi
kubelet_stop
"${P[@]}" stop -t 10 sdp-rt-hyperlight >/dev/null 2>&1
echo "   hyperlight-device-plugin log:"
plugin_log sdp-rt-hyperlight
"${P[@]}" rm -f -t 0 sdp-rt-hyperlight >/dev/null 2>&1

# ============================== kata ======================================================
kata_spec=$CDI/kata.nvidia.com-gpu.yaml
kata_workload() { # ALLOC OUT: a workload with the CDI devices of ALLOC's answer
	# shellcheck disable=SC2046,SC2016
	workload "$2" $(for n in $(cdi_names "$1"); do echo --device "$n"; done) "$BB_IMAGE" \
		/bin/busybox sh -c 'for f in /dev/vfio/devices/*; do stat -c "%n|%F|%t:%T" "$f"; done'
}
kata_verify() { # OUT WHAT
	local want="" p
	if [ ! -s "$T/$1" ] && [ -s "$T/$1.err" ]; then
		bad "$2: workload did not start: $(cat "$T/$1.err")"
		return
	fi
	for p in $(spec_paths "$kata_spec" "${kdev#*=}"); do
		want+="$p|character special file|$(stat -c '%t:%T' "$VFIO/devices/${p##*/}")"$'\n'
	done
	check "$2: /dev/vfio/devices holds exactly the allocated device's node(s): $(tr '\n' ' ' <"$T/$1")" "$(cat "$T/$1")" "${want%$'\n'}"
}
# kata_plugin TAG IMAGE [PODMAN RUN OPTIONS...]: the kata plugin container sdp-rt-TAG, the
# mock kubelet, two Allocates (the spec corrupted in between), readiness and two workloads;
# TAG names the checks and files. $VIA: the command that runs the image's binary in an exec
# (empty natively; the emulator for the arm64 image). $SAME_AS: another TAG whose run had the
# workloads; instead of its own, this run's spec must be byte-identical to that one's.
kata_plugin() {
	local tag=$1 image=$2 ctr=sdp-rt-$1
	shift 2
	rm -f "$CDI"/kata.nvidia.com-*.yaml # a previous run's: this plugin must write its own
	"${P[@]}" "${PLUGIN_RUN[@]}" --name "$ctr" -v "$VFIO:/dev/vfio:ro" -v "$SYS:/sys:ro" \
		-e LOG_LEVEL=info "$@" "$image" >/dev/null 2>"$T/err" || die "podman run $image: $(cat "$T/err")"
	plugin_checks "$ctr"
	kubelet_start "$tag-kubelet" nvidia.com/gpu 1
	if allocate "$tag-alloc"; then
		kdev=$(cdi_names "$tag-alloc")
		case $kdev in
		nvidia.com/gpu=*) ok "$tag: Allocate answers one CDI name ($kdev)" ;;
		*) bad "$tag: Allocate's CDI names: '$kdev'" ;;
		esac
		if [ -f "$kata_spec" ]; then ok "$tag: spec $kata_spec written"; else bad "$tag: no $kata_spec: $(ls "$CDI")"; fi
		paths=$(spec_paths "$kata_spec" "${kdev#*=}")
		check "$tag: the spec maps $kdev to one GPU node" "$(echo "$paths" | grep -c '^/dev/vfio/devices/vfio[01]$')" 1
		if "${P[@]}" exec "$ctr" ${VIA:+"$VIA"} /kata-device-plugin --health-check=readiness 2>"$T/err"; then
			ok "$tag: readiness probe (exec in the container) passes"
		else
			bad "$tag: readiness probe: $(cat "$T/err")"
		fi
		cp "$kata_spec" "$T/$tag-good.yaml"
		if [ -n "$SAME_AS" ]; then
			check "$tag: the spec is byte-identical to the $SAME_AS plugin's (whose workloads got their device above)" \
				"$(cmp "$T/$tag-good.yaml" "$T/$SAME_AS-good.yaml" 2>&1)" ""
		else
			kata_workload "$tag-alloc" "$tag-w1"
			kata_verify "$tag-w1" "$tag workload 1"
		fi
		printf 'cdiVersion: "0.5.0"\nkind: nvidia.com/gpu\ndevices: [\n' >"$kata_spec"
		allocate "$tag-alloc2"
		if wait_same "$kata_spec" "$T/$tag-good.yaml" 10; then
			ok "$tag: the plugin container repaired the corrupt spec"
		else
			bad "$tag: spec not repaired within 10 s: $(head -c 300 "$kata_spec")"
		fi
		if [ -z "$SAME_AS" ]; then
			kata_workload "$tag-alloc" "$tag-w2"
			kata_verify "$tag-w2" "$tag workload 2 (after repair)"
		fi
	fi
	kubelet_stop
	"${P[@]}" stop -t 10 "$ctr" >/dev/null 2>&1
	echo "   $ctr log:"
	plugin_log "$ctr"
	"${P[@]}" rm -f -t 0 "$ctr" >/dev/null 2>&1
}
echo "== kata-device-plugin container"
VIA=
SAME_AS=
kata_plugin kata "$KATA_IMAGE"

# ============================== kata, RESOURCE_NAMING=sku =================================
# One resource per model: the A100 (vfio1) is the only device of nvidia.com/GA100_A100_SXM4_40GB,
# ID 0; podman must resolve that name through the model's own spec to vfio1, not to the H100
# (vfio0), which has ID 0 in its own resource too.
echo "== kata-device-plugin container, RESOURCE_NAMING=sku"
sku_res=nvidia.com/GA100_A100_SXM4_40GB
sku_spec=$CDI/kata.nvidia.com-GA100_A100_SXM4_40GB.yaml
"${P[@]}" "${PLUGIN_RUN[@]}" --name sdp-rt-kata-sku -v "$VFIO:/dev/vfio:ro" -v "$SYS:/sys:ro" \
	-e LOG_LEVEL=info -e RESOURCE_NAMING=sku "$KATA_IMAGE" >/dev/null 2>"$T/err" ||
	die "podman run $KATA_IMAGE (sku): $(cat "$T/err")"
kubelet_start kata-sku-kubelet "$sku_res" 1
if allocate kata-sku-alloc; then
	check "kata sku: Allocate answers the model's CDI name" "$(cdi_names kata-sku-alloc)" "$sku_res=0"
	for f in kata.nvidia.com-GH100_H100_SXM5_80GB.yaml kata.nvidia.com-GA100_A100_SXM4_40GB.yaml \
		kata.nvidia.com-GA100_A100_NVSwitch.yaml; do
		if [ -f "$CDI/$f" ]; then ok "kata sku: spec $f written"; else bad "kata sku: no $f: $(ls "$CDI")"; fi
	done
	check "kata sku: the spec maps $sku_res=0 to the A100's node" "$(spec_paths "$sku_spec" 0)" /dev/vfio/devices/vfio1
	if "${P[@]}" exec sdp-rt-kata-sku /kata-device-plugin --health-check=readiness 2>"$T/err"; then
		ok "kata sku: readiness probe (exec in the container) passes"
	else
		bad "kata sku: readiness probe: $(cat "$T/err")"
	fi
	# shellcheck disable=SC2016
	workload kata-sku-w1 --device "$sku_res=0" "$BB_IMAGE" \
		/bin/busybox sh -c 'for f in /dev/vfio/devices/*; do stat -c "%n|%F|%t:%T" "$f"; done'
	if [ ! -s "$T/kata-sku-w1" ] && [ -s "$T/kata-sku-w1.err" ]; then
		bad "kata sku workload: did not start: $(cat "$T/kata-sku-w1.err")"
	else
		check "kata sku workload: /dev/vfio/devices holds exactly the A100's node: $(tr '\n' ' ' <"$T/kata-sku-w1")" \
			"$(cat "$T/kata-sku-w1")" "/dev/vfio/devices/vfio1|character special file|$(stat -c '%t:%T' "$VFIO/devices/vfio1")"
	fi
fi
kubelet_stop
"${P[@]}" stop -t 10 sdp-rt-kata-sku >/dev/null 2>&1
echo "   kata-device-plugin (sku) log:"
plugin_log sdp-rt-kata-sku
"${P[@]}" rm -f -t 0 sdp-rt-kata-sku >/dev/null 2>&1

# ============================== arm64 images, under qemu-user ==============================
# This machine is amd64 and may have no binfmt_misc entry for aarch64 (a Debian 12 CI machine
# has none); this test neither needs nor changes the machine's. Debian's static
# qemu-aarch64-static is bind-mounted read-only into the plugin container and is its entrypoint,
# with the image's binary as its first argument; the image stays the one `make images` built.
# qemu-aarch64 runs nothing but an aarch64 program; each daemon must log the program, version
# and commit of its amd64 counterpart. What cannot hold there, and is not checked:
#  - the daemons' seccomp filter: qemu-user answers a guest's prctl(PR_SET_SECCOMP) with EINVAL,
#    so they run with SDP_SECCOMP=off (the default, enforce, exits 1: "cannot confine the
#    daemon"); the arm64 filters are checked by make test-arm64;
#  - every program a daemon execs: qemu-user hands an exec to the kernel, which runs an aarch64
#    binary only through binfmt_misc. hyperlight's device check runs in such a child (an exec of
#    its own binary): without an aarch64 entry on the machine it cannot start, and the plugin
#    advertises its devices Unhealthy (with one, the child runs through it, and the stand-in
#    /dev/kvm still fails it where the machine has no KVM). So the arm64 hyperlight plugin gets
#    no Allocate (kubelet allocates only Healthy devices) and is not ready; it is checked up to
#    ListAndWatch, its CDI spec and liveness, and the test prints the devices' health and the
#    check's reason. The kata plugin execs nothing: it runs the amd64 sequence above, but for
#    the workloads: its spec must be byte-identical to the amd64 plugin's, which they used;
#  - kata with RESOURCE_NAMING=sku: not repeated on arm64, to keep the run short.
arm64_start=$SECONDS
QEMU=/usr/bin/qemu-aarch64-static
qemu_version=$("$QEMU" --version 2>/dev/null | head -n1) || die "$QEMU missing (scripts/install-deps.sh arm64)"
EMU=(-v "$QEMU:/qemu-aarch64-static:ro" -e SDP_SECCOMP=off)
entry() { printf '["/qemu-aarch64-static","%s"]' "$1"; }
echo "== arm64 images under qemu-user: $qemu_version, bind-mounted read-only as /qemu-aarch64-static, the entrypoint; SDP_SECCOMP=off"
echo "   run: hyperlight: start, registration, ListAndWatch, CDI spec, liveness; kata: start, registration, Allocate, CDI spec, readiness, spec repair"
echo "   not run: hyperlight's device check (an exec of an aarch64 binary: binfmt_misc), hence its readiness and Allocate; the seccomp filters; kata's workloads (its spec is compared instead) and RESOURCE_NAMING=sku (reasons: tests/runtime/inner.sh)"
same_start() { # ARM64-CONTAINER AMD64-CONTAINER
	check "$1: the daemon (under qemu-aarch64) started as $2's: $(started "$2")" "$(started "$1")" "$(started "$2")"
}

echo "== hyperlight-device-plugin container, arm64"
rm -f "$hl_spec" # the amd64 plugin's: this plugin must write its own
"${P[@]}" "${PLUGIN_RUN[@]}" --name sdp-rt-hyperlight-arm64 --device /dev/kvm -v "$HOSTDEV:/host-dev:ro" \
	-e NODE_NAME=sdp-runtime-node -e HOST_DEVICE_DIR=/host-dev -e DEVICE_COUNT=2000 \
	-e DEVICE_UID=65534 -e DEVICE_GID=65534 -e DEVICE_MODE=0660 -e LOG_LEVEL=info "${EMU[@]}" \
	--entrypoint "$(entry /hyperlight-device-plugin)" "$HL_IMAGE-arm64" >/dev/null 2>"$T/err" ||
	die "podman run $HL_IMAGE-arm64: $(cat "$T/err")"
plugin_checks sdp-rt-hyperlight-arm64
kubelet_start hl-arm64-kubelet hyperlight.dev/hypervisor 2000
if list_devices hl-arm64-list; then
	check "hyperlight arm64: ListAndWatch advertises DEVICE_COUNT devices" "$(json hl-arm64-list 'print(d["devices"])')" 2000
	wait_same "$hl_spec" "$T/hl-good.json" 10
	check "hyperlight arm64: spec $hl_spec written, byte-identical to the amd64 plugin's" "$(cmp "$hl_spec" "$T/hl-good.json" 2>&1)" ""
	# Liveness (the loop answers gRPC health), not readiness, which also needs the last device
	# check healthy: the check could not run (printed below).
	if "${P[@]}" exec sdp-rt-hyperlight-arm64 /qemu-aarch64-static /hyperlight-device-plugin --health-check 2>"$T/err"; then
		ok "hyperlight arm64: liveness probe (exec in the container, under qemu) passes"
	else
		bad "hyperlight arm64: liveness probe: $(cat "$T/err")"
	fi
fi
kubelet_stop
"${P[@]}" stop -t 10 sdp-rt-hyperlight-arm64 >/dev/null 2>&1
echo "   sdp-rt-hyperlight-arm64 log:"
plugin_log sdp-rt-hyperlight-arm64
same_start sdp-rt-hyperlight-arm64 sdp-rt-hyperlight
echo "   hyperlight arm64: devices by health $(json hl-arm64-list 'print(json.dumps(d["health"]))' 2>/dev/null); the device check: $(sed -n 's/.*msg="device unusable[^"]*" .*reason="\([^"]*\)".*/\1/p' "$T/sdp-rt-hyperlight-arm64.log" | head -n1)"
"${P[@]}" rm -f -t 0 sdp-rt-hyperlight-arm64 >/dev/null 2>&1

echo "== kata-device-plugin container, arm64"
VIA=/qemu-aarch64-static
SAME_AS=kata
kata_plugin kata-arm64 "$KATA_IMAGE-arm64" "${EMU[@]}" --entrypoint "$(entry /kata-device-plugin)"
same_start sdp-rt-kata-arm64 sdp-rt-kata
echo "== arm64 images under qemu-user: $((SECONDS - arm64_start)) s"

# ============================== nothing left ==============================================
left=$("${P[@]}" ps -a -q | wc -l)
check "no container left in the run's store" "$left" 0
"${P[@]}" rmi -f "$HL_IMAGE" "$KATA_IMAGE" "$HL_IMAGE-arm64" "$KATA_IMAGE-arm64" "$BB_IMAGE" >/dev/null 2>&1
check "no image left in the run's store" "$("${P[@]}" images -q | wc -l)" 0
others=$(find "$CDI" -mindepth 1 ! -name hyperlight.json ! -name 'kata.nvidia.com-*.yaml' -printf '%f ')
check "the CDI directory holds only the plugins' own specs" "$others" ""
summary
[ "$failed" -eq 0 ]
