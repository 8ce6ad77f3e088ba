#!/bin/bash
# The VFIO behaviour table: kata-device-plugin and KubeVirt's PCI host device plugin
# (sdp-kubevirt-pci-plugin, build.sh) each run alone on the kata test tree (sdp-katatree: a legacy
# VFIO sysfs in the kernel's layout, group nodes made with mknod), in a private mount and PID
# namespace where the tree's sys is bind-mounted over /sys and its dev/vfio at /dev/vfio (on a
# tmpfs /dev), a tmpfs at /var/lib/kubelet/device-plugins served by the mock kubelet
# (build/mock-kubelet, grpc-go) and one at /run/cdi. Nothing of the host's kubelet, /dev or /sys
# is touched; a real kubelet on this host never sees these plugins.
#
#   bench/peers/kubevirt/vfio-table.sh BUILD_DIR [OUT.md]
#
# BUILD_DIR holds sdp-kubevirt-pci-plugin and sdp-kubevirt-dpctl (bench/peers/kubevirt/build.sh
# BUILD_DIR); SDP_BUILD (default: the checkout's build/) holds kata-device-plugin, mock-kubelet
# and sdp-katatree. VFIO_TABLE_REPS (default 5): repetitions of each unbind/rebind. Needs root
# (mknod, mount, unshare). The raw logs stay in BUILD_DIR/vfio-table/. Prints the Markdown
# section on stdout, and writes it to OUT.md when given.
set -eu
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

# ---- inside the namespace: vfio-table.sh __ns ROOT LOGDIR CMD... --------------------------------
if [ "${1:-}" = __ns ]; then
	root=$2 log=$3
	shift 3
	mkdir -p "$log/hostdev"
	mount --rbind /dev "$log/hostdev"
	mount -t tmpfs -o mode=755 tmpfs /dev
	for n in null zero full random urandom tty; do
		touch "/dev/$n"
		mount --bind "$log/hostdev/$n" "/dev/$n"
	done
	ln -s /proc/self/fd /dev/fd
	mkdir /dev/vfio
	mount --bind "$root/dev/vfio" /dev/vfio
	umount -l "$log/hostdev"
	mount --bind "$root/sys" /sys
	mkdir -p /var/lib/kubelet/device-plugins /run/cdi
	mount -t tmpfs tmpfs /var/lib/kubelet/device-plugins
	mount -t tmpfs tmpfs /run/cdi
	# every kubelet line with the wall-clock time it was read (microseconds)
	"$SDP_BUILD/mock-kubelet" > >(while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done >"$log/kubelet.log") 2>"$log/kubelet.err" &
	kpid=$!
	for _ in $(seq 200); do [ -S /var/lib/kubelet/device-plugins/kubelet.sock ] && break; sleep 0.05; done
	"$@" >"$log/plugin.log" 2>&1 &
	ppid_=$!
	while [ ! -e "$log/stop" ]; do
		kill -0 $ppid_ 2>/dev/null || { echo "plugin exited: $(wait $ppid_; echo $?)" >"$log/plugin.exit"; break; }
		sleep 0.05
	done
	kill -TERM $ppid_ 2>/dev/null || true
	for _ in $(seq 100); do kill -0 $ppid_ 2>/dev/null || break; sleep 0.05; done
	kill -KILL $ppid_ 2>/dev/null || true
	sleep 0.2
	kill -TERM $kpid 2>/dev/null || true
	wait 2>/dev/null || true
	exit 0
fi

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 BUILD_DIR [OUT.md]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "$0: needs root (mknod, mount, unshare)" >&2; exit 2; }
mkdir -p "$1"
build=$(cd "$1" && pwd)
out=${2:-}
export SDP_BUILD=${SDP_BUILD:-$(cd "$(dirname "$self")/../../.." && pwd)/build}
reps=${VFIO_TABLE_REPS:-5}
kv=$build/sdp-kubevirt-pci-plugin
dpctl=$build/sdp-kubevirt-dpctl
read -ra plugins <<<"${VFIO_TABLE_PLUGINS:-kata kubevirt}"
case " ${plugins[*]} " in *" kubevirt "*) need=$kv ;; *) need= ;; esac
for f in $need "$dpctl" "$SDP_BUILD/kata-device-plugin" "$SDP_BUILD/mock-kubelet" "$SDP_BUILD/sdp-katatree"; do
	[ -x "$f" ] || { echo "$0: $f missing (bench/peers/kubevirt/build.sh $build; make build)" >&2; exit 2; }
done
work=$build/vfio-table
rm -rf "$work"
mkdir -p "$work"

# A real PCI function of this machine whose uevent file we write "add" to: the kernel then emits
# a PCI uevent, as it does on every bind and unbind (a fake tree raises none; kata acts on any
# PCI uevent, KubeVirt listens to none). A bridge when there is one, as the scenario tests do.
uev=
for d in /sys/bus/pci/devices/*; do
	[ -e "$d/uevent" ] || continue
	[ -z "$uev" ] && uev=$d
	case $(cat "$d/class" 2>/dev/null) in 0x06*) uev=$d; break ;; esac
done
kernel_uevent() { [ -n "$uev" ] && echo add >"$uev/uevent" || true; }

# ---- the tree ---------------------------------------------------------------------------------
# sdp-katatree, plus what the kernel also has and sdp-katatree does not write (KubeVirt reads
# them): /sys/bus/pci/devices/<BDF> links, each function's uevent (DRIVER, PCI_CLASS, PCI_ID,
# PCI_SLOT_NAME) and /sys/bus/pci/drivers/<driver>/<BDF> links. The NVSwitch gets the device ID
# of a real NVSwitch (0x22a3; sdp-katatree gives every function without a model the H100's,
# which would put it under KubeVirt's 10de:2330 selector).
declare -A rel # BDF -> path below sys/devices
make_tree() {   # ROOT
	local r=$1 d b
	"$SDP_BUILD/sdp-katatree" "$r" >"$r.json"
	printf '0x22a3\n' >"$(find "$r/sys/devices" -type d -name "$(jq -r '.devices[] | select(.name=="nvswitch") | .bdf' "$r.json")")/device"
	mkdir -p "$r/sys/bus/pci/devices" "$r/sys/bus/pci/drivers"
	rel=()
	while read -r d; do
		d=${d%/vendor}
		b=${d##*/}
		rel[$b]=${d#"$r/sys/devices/"}
		ln -s "../../../devices/${rel[$b]}" "$r/sys/bus/pci/devices/$b"
		write_uevent "$r" "$b"
		[ -L "$d/driver" ] && drv_link "$r" "$b" "$(basename "$(readlink "$d/driver")")"
	done < <(find "$r/sys/devices" -name vendor | sort)
}
fdir() { echo "$1/sys/devices/${rel[$2]}"; }
uevent_text() { # ROOT BDF [DRIVER|-]: the function's uevent file (DRIVER: the one it is bound to)
	local d v dev c drv=${3:-}
	d=$(fdir "$1" "$2")
	v=$(sed 's/^0x//' "$d/vendor" | tr a-f A-F)
	dev=$(sed 's/^0x//' "$d/device" | tr a-f A-F)
	c=$(sed 's/^0x//' "$d/class" | tr a-f A-F)
	[ -z "$drv" ] && [ -L "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
	[ "$drv" = - ] && drv=
	[ -n "$drv" ] && echo "DRIVER=$drv"
	echo "PCI_CLASS=${c#0}"
	echo "PCI_ID=$v:$dev"
	echo "PCI_SUBSYS_ID=$v:16A1"
	echo "PCI_SLOT_NAME=$2"
}
write_uevent() { uevent_text "$@" >"$(fdir "$1" "$2")/uevent"; }
drv_link() { # ROOT BDF DRIVER: /sys/bus/pci/drivers/DRIVER/BDF
	mkdir -p "$1/sys/bus/pci/drivers/$3"
	ln -sfn "../../../../devices/${rel[$2]}" "$1/sys/bus/pci/drivers/$3/$2"
}
# set_driver ROOT BDF DRIVER|-: what a bind or unbind through sysfs changes (the driver's
# directory, the driver link, the uevent file), as katatree's Bind does for the link. Everything
# is computed first; the driver link is the first change either plugin can see (T_OP: its time)
# and the uevent file is written by the shell itself, so the change ends a few ms after T_OP.
set_driver() {
	local r=$1 b=$2 drv=$3 d up old= ue
	d=$(fdir "$r" "$b")
	[ -L "$d/driver" ] && old=$(basename "$(readlink "$d/driver")")
	up=$(printf '../%.0s' $(seq $(($(tr -cd / <<<"${rel[$b]}" | wc -c) + 2))))
	ue=$(uevent_text "$r" "$b" "$drv")
	[ -n "$old" ] && rm -f "$r/sys/bus/pci/drivers/$old/$b"
	[ "$drv" != - ] && drv_link "$r" "$b" "$drv"
	: "${T_OP:=$EPOCHREALTIME}"
	if [ "$drv" != - ]; then
		ln -sfn "${up}bus/pci/drivers/$drv" "$d/driver"
	else
		rm -f "$d/driver"
	fi
	printf '%s\n' "$ue" >"$d/uevent"
}
# move_group ROOT BDF G: BDF into IOMMU group G (the tree's layout: both links).
move_group() {
	local r=$1 b=$2 g=$3 d old up
	d=$(fdir "$r" "$b")
	old=$(basename "$(readlink "$d/iommu_group")")
	rm -f "$r/sys/kernel/iommu_groups/$old/devices/$b"
	mkdir -p "$r/sys/kernel/iommu_groups/$g/devices"
	ln -s "../../../../devices/${rel[$b]}" "$r/sys/kernel/iommu_groups/$g/devices/$b"
	up=$(printf '../%.0s' $(seq $(($(tr -cd / <<<"${rel[$b]}" | wc -c) + 2))))
	ln -sfn "${up}kernel/iommu_groups/$g" "$d/iommu_group"
	if [ -z "$(ls -A "$r/sys/kernel/iommu_groups/$old/devices")" ]; then
		rm -rf "$r/sys/kernel/iommu_groups/$old" "$r/sys/class/vfio/$old" "$r/dev/vfio/$old"
	fi
}
# the group node as the kernel keeps it: present while a member is bound to vfio-pci
group_node_sync() { # ROOT G
	local r=$1 g=$2 m any=
	for m in "$r/sys/kernel/iommu_groups/$g/devices/"*; do
		[ "$(basename "$(readlink "$m/driver" 2>/dev/null)")" = vfio-pci ] && any=1
	done
	if [ -n "$any" ]; then
		[ -e "$r/dev/vfio/$g" ] || {
			mkdir -p "$r/sys/class/vfio/$g"
			printf '238:%d\n' "$g" >"$r/sys/class/vfio/$g/dev"
			T_OP=$EPOCHREALTIME # the node is what both plugins watch: the change's moment
			mknod "$r/dev/vfio/$g" c 238 "$g"
		}
	elif [ -e "$r/dev/vfio/$g" ]; then
		T_OP=$EPOCHREALTIME
		rm -f "$r/dev/vfio/$g"
		rm -rf "$r/sys/class/vfio/$g"
	fi
}
tj() { jq -r --arg n "$2" ".devices[] | select(.name == \$n) | .$3" "$1.json"; }

# ---- running a plugin -------------------------------------------------------------------------
upid= inner= log=
start_plugin() { # NAME ROOT PLUGIN(kata|kubevirt)
	log=$work/$1
	mkdir -p "$log"
	local cmd
	case $3 in
	kata) cmd=(env -i PATH=/usr/bin:/bin LOG_LEVEL=debug "$SDP_BUILD/kata-device-plugin") ;;
	kubevirt) cmd=("$kv" -resource nvidia.com/gpu -selector 10de:2330,10de:20b0) ;;
	esac
	unshare -m -p -f --mount-proc --propagation private "$self" __ns "$2" "$log" "${cmd[@]}" &
	upid=$!
	for _ in $(seq 300); do
		inner=$(cat "/proc/$upid/task/$upid/children" 2>/dev/null | awk '{print $1}')
		grep -q 'event=devices.*resource=nvidia.com/gpu' "$log/kubelet.log" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "$1: no nvidia.com/gpu device list in 15 s (logs in $log)" >&2
	return 0
}
stop_plugin() {
	touch "$log/stop"
	wait "$upid" || true
}
# the last nvidia.com/gpu device list the kubelet got, as "ID:Health ..."
last_list() { grep 'event=devices.*resource=nvidia.com/gpu' "$log/kubelet.log" | tail -n 1 | sed 's/^[0-9.]* //'; }
nlists() { grep -c 'event=devices.*resource=nvidia.com/gpu' "$log/kubelet.log" || true; }
# wait for the kubelet's next gpu device list after the N-th; print ms from T0 (EPOCHREALTIME), or "none"
wait_list() { # N T0 TIMEOUT_S
	local line end=$((${2%.*} + $3 + 1))
	while :; do
		line=$(grep 'event=devices.*resource=nvidia.com/gpu' "$log/kubelet.log" | sed -n "$(($1 + 1))p")
		if [ -n "$line" ]; then
			awk -v a="${line%% *}" -v b="$2" 'BEGIN { printf "%.1f\n", (a - b) * 1000 }'
			return
		fi
		[ "${EPOCHREALTIME%.*}" -lt "$end" ] || break
		sleep 0.01
	done
	echo none
}
sock_of() { # the plugin's endpoint socket, from its registration
	grep 'event=register .*resource=nvidia.com/gpu' "$log/kubelet.log" | tail -n 1 | sed 's/.* endpoint=\([^ ]*\).*/\1/'
}
allocate() { # ID
	nsenter -t "$inner" -m "$dpctl" allocate "/var/lib/kubelet/device-plugins/$(sock_of)" "$1" 2>&1 | head -c 2000
}
# the full device list the plugin gives a new ListAndWatch stream, "ID:Health ..." (KubeVirt's
# streams share one health channel: only taken once nothing more is measured in a run)
full_list() {
	nsenter -t "$inner" -m "$dpctl" list "/var/lib/kubelet/device-plugins/$(sock_of)" 2>&1 |
		jq -r '[.devices[]? | "\(.ID):\(.health)"] | join(" ")' 2>/dev/null || echo "?"
}
alloc_summary() { # the Allocate answer, short: the device nodes and envs, or the error
	local a
	a=$(allocate "$1")
	case $a in
	error*) printf '%s' "$a" | sed 's/^error code=\([A-Za-z]*\) message="\(.*\)"$/refused, \1: "\2"/' ;;
	\{*) printf '%s' "$a" | jq -r '.container_responses[0] | "granted: " + ([.devices[]?.host_path] | if length > 0 then "device nodes " + join(", ") else "no device nodes" end) + (if .envs then "; env " + ([.envs | to_entries[] | "\(.key)=\(.value)"] | join(" ")) else "" end) + (if .cdi_devices then "; CDI " + ([.cdi_devices[].name] | join(", ")) else "" end) + (if .annotations then "; annotations " + ([.annotations | keys[]] | join(", ")) else "" end)' ;;
	*) printf 'no answer: %s' "$a" ;;
	esac
}
cell_list() { # the kubelet's view, short
	last_list | sed 's/.*msg="snapshot [0-9]*: \(.*\)"$/\1/'
}

declare -A R # R[case,plugin]
declare -A T # T[step,plugin]: timings
declare -A C # C[case,plugin]: ms from a change's first visible file operation to its uevent
idof() { # PLUGIN GROUP [KATA_ID]: the ID a plugin gives the device of GROUP
	[ "$1" = kubevirt ] && echo "$2" || echo "$3"
}

# a static case: CASE NAME, a tree change before the start, the group whose device Allocate asks for
static_case() { # KEY SETUP-FUNCTION GROUP KATA-ID
	local p r
	for p in "${plugins[@]}"; do
		r=$work/$1-$p/root
		mkdir -p "$work/$1-$p"
		make_tree "$r"
		$2 "$r"
		start_plugin "$1-$p" "$r" "$p"
		R[$1,$p]="$(cell_list); full list: \`$(full_list)\`"
		if [ -n "$3" ]; then
			R[$1,$p]+="; Allocate of group $3 as \`$(idof "$p" "$3" "$4")\`: $(alloc_summary "$(idof "$p" "$3" "$4")")"
		fi
		stop_plugin
	done
}
setup_a() { :; }
setup_b() { set_driver "$1" 0000:12:00.1 snd_hda_intel; }
setup_c() { # GPU c and its audio function in GPU b's group 101
	move_group "$1" 0000:23:00.0 101
	move_group "$1" 0000:23:00.1 101
}
setup_d1() { set_driver "$1" 0000:12:00.1 -; }
setup_d2() { # a third function in group 100: a USB 3.1 host controller (as on Turing boards) on xhci_hcd
	local r=$1 d b=0000:12:00.2 up
	d=$(dirname "$(fdir "$r" 0000:12:00.0)")/$b
	mkdir -p "$d"
	printf '0x10de\n' >"$d/vendor"; printf '0x1ad6\n' >"$d/device"; printf '0x0c0330\n' >"$d/class"; printf '0\n' >"$d/numa_node"
	rel[$b]=${d#"$r/sys/devices/"}
	ln -s "../../../devices/${rel[$b]}" "$r/sys/bus/pci/devices/$b"
	up=$(printf '../%.0s' $(seq $(($(tr -cd / <<<"${rel[$b]}" | wc -c) + 2))))
	ln -s "${up}kernel/iommu_groups/100" "$d/iommu_group"
	ln -s "../../../../devices/${rel[$b]}" "$r/sys/kernel/iommu_groups/100/devices/$b"
	set_driver "$r" "$b" xhci_hcd
}

# a live change: the plugin started on a healthy tree, then DO and UNDO VFIO_TABLE_REPS times,
# each followed by a kernel PCI uevent; ms from the change's first file operation a plugin can see
# (T_OP: a driver link; when the change removes or makes a group node, that node, which both
# plugins watch) to the kubelet's next device list. The uevent follows T_OP by the rest of the
# change (C: a few ms; the kernel's own unbind takes about as long).
live_case() { # KEY DO-FUNCTION UNDO-FUNCTION GROUP KATA-ID (Allocate of GROUP's ID after the first DO)
	local p r i n ms
	for p in "${plugins[@]}"; do
		r=$work/$1-$p/root
		mkdir -p "$work/$1-$p"
		make_tree "$r"
		start_plugin "$1-$p" "$r" "$p"
		T[$1-do,$p]= T[$1-undo,$p]=
		for i in $(seq "$reps"); do
			sleep 0.3
			n=$(nlists); T_OP=
			$2 "$r"
			C[$1,$p]+="$(awk -v a="$EPOCHREALTIME" -v b="$T_OP" 'BEGIN { printf "%.1f", (a - b) * 1000 }') "
			kernel_uevent
			ms=$(wait_list "$n" "$T_OP" 3)
			T[$1-do,$p]+="$ms "
			[ "$i" = 1 ] && R[$1-do,$p]="$(cell_list); Allocate of group $4 as \`$(idof "$p" "$4" "$5")\`: $(alloc_summary "$(idof "$p" "$4" "$5")")"
			sleep 0.3
			n=$(nlists); T_OP=
			$3 "$r"
			C[$1,$p]+="$(awk -v a="$EPOCHREALTIME" -v b="$T_OP" 'BEGIN { printf "%.1f", (a - b) * 1000 }') "
			kernel_uevent
			ms=$(wait_list "$n" "$T_OP" 3)
			T[$1-undo,$p]+="$ms "
			[ "$i" = 1 ] && R[$1-undo,$p]="$(cell_list)"
		done
		R[$1-end,$p]="$(full_list)"
		stop_plugin
	done
}
e1_do() { set_driver "$1" 0000:22:00.0 -; }
e1_undo() { set_driver "$1" 0000:22:00.0 vfio-pci; }
e2_do() { set_driver "$1" 0000:22:00.0 -; set_driver "$1" 0000:22:00.1 -; group_node_sync "$1" 101; }
e2_undo() { set_driver "$1" 0000:22:00.0 vfio-pci; set_driver "$1" 0000:22:00.1 vfio-pci; group_node_sync "$1" 101; }
e3_do() { set_driver "$1" 0000:12:00.1 snd_hda_intel; }
e3_undo() { set_driver "$1" 0000:12:00.1 vfio-pci; }

static_case a setup_a 100 0
static_case b setup_b 100 0
static_case c setup_c 101 1
static_case d1 setup_d1 100 0
static_case d2 setup_d2 100 0
live_case e1 e1_do e1_undo 101 1
live_case e2 e2_do e2_undo 101 1
live_case e3 e3_do e3_undo 100 0

# ---- the section --------------------------------------------------------------------------------
tcell() { # KEY PLUGIN: the reaction times, or what happened
	local all s
	all=${T[$1,$2]}
	if ! grep -q '[0-9]' <<<"$all"; then
		echo "no new device list within 3 s (${reps}x)"
		return
	fi
	s=$(tr ' ' '\n' <<<"$all" | grep -v '^$' | grep -v none | sort -n | tr '\n' ' ')
	echo "$(cell "$1" "$2"); ms: ${s% }$(grep -q none <<<"$all" && echo " ($(grep -o none <<<"$all" | wc -l)x none within 3 s)")"
}
cell() { echo "${R[$1,$2]}"; }
kvv=$(cd "$(dirname "$self")" && GOFLAGS=-mod=readonly go list -m -f '{{.Version}}' kubevirt.io/kubevirt 2>/dev/null || echo v1.7.0)
{
	echo "## VFIO: what each plugin advertises (KubeVirt $kvv)"
	echo
	echo "kata-device-plugin and KubeVirt's PCI host device plugin (\`kubevirt.io/kubevirt\` $kvv,"
	echo "pkg/virt-handler/device-manager, constructed as virt-handler does for"
	echo "\`permittedHostDevices.pciHostDevices\` \`10de:2330\` and \`10de:20b0\` as \`nvidia.com/gpu\`:"
	echo "bench/peers/kubevirt/main.go), each alone on the kata test tree (\`sdp-katatree\`: GPUs a, b, c"
	echo "(H100, IOMMU groups 100-102) and d (A100, group 103), each with its HD audio function in its"
	echo "group on vfio-pci, an NVSwitch in group 104; legacy group nodes \`/dev/vfio/<group>\`) in a"
	echo "private mount and PID namespace with the grpc-go mock kubelet. Each cell: the kubelet's last"
	echo "\`nvidia.com/gpu\` device list (count, IDs, health), then the full list the plugin gives a new"
	echo "ListAndWatch stream (\`ID:Health\`). A change \"live\" is made on the running plugin, followed by"
	echo "a kernel PCI uevent as a real bind or unbind raises; ms: from the change's first file operation"
	echo "either plugin can see (a driver link; in (e2) the group node) to the kubelet's next device list, $reps times (\"no new device list\": the plugin sent none in 3 s). Measured on"
	echo "$(nproc) cores, $(date -u +%Y-%m-%d)."
	echo
	echo "| case | kata-device-plugin | KubeVirt PCI host device plugin |"
	echo "|---|---|---|"
	row() { echo "| $1 | $(cell "$2" kata) | $(cell "$2" kubevirt) |"; }
	trow() { echo "| $1 | $(tcell "$2" kata) | $(tcell "$2" kubevirt) |"; }
	row "(a) healthy tree" a
	row "(b) GPU a's audio function on \`snd_hda_intel\` (group 100 not viable: VFIO refuses to open it)" b
	row "(c) GPUs b and c (and their audio functions) in one IOMMU group, 101" c
	row "(d1) GPU a's audio function bound to no driver (viable: the kernel accepts a member without a driver)" d1
	row "(d2) a third function in group 100, a USB controller on \`xhci_hcd\` (not viable)" d2
	trow "(e1) live: GPU b unbound from vfio-pci (its audio function stays: \`/dev/vfio/101\` stays)" e1-do
	trow "(e1) live: GPU b bound to vfio-pci again" e1-undo
	echo "| (e1) after $reps rounds, full list | $(cell e1-end kata) | $(cell e1-end kubevirt) |"
	trow "(e2) live: GPU b and its audio function unbound (the kernel removes \`/dev/vfio/101\`)" e2-do
	trow "(e2) live: both bound to vfio-pci again (\`/dev/vfio/101\` back)" e2-undo
	echo "| (e2) after $reps rounds, full list | $(cell e2-end kata) | $(cell e2-end kubevirt) |"
	trow "(e3) live: GPU a's audio function bound to \`snd_hda_intel\`" e3-do
	trow "(e3) live: back on vfio-pci" e3-undo
	echo "| (e3) after $reps rounds, full list | $(cell e3-end kata) | $(cell e3-end kubevirt) |"
	echo
	echo "The uevent followed a change's first file operation by $(printf '%s' "${C[*]}" | tr ' ' '\n' | grep -v '^$' | sort -n | sed -n '1p;$p' | paste -sd- ) ms"
	echo "(the rest of the change: the uevent file, written by the shell). Negative ms: the list came"
	echo "before the group node went or came back, from the driver links changed before it in (e2)."
	echo
	echo "Re-run (root; needs the proxy for KubeVirt's modules once): \`make bench-peers\` ends with it; alone:"
	echo
	echo '```sh'
	echo 'make build   # build/kata-device-plugin, build/mock-kubelet, build/sdp-katatree'
	echo 'bench/peers/kubevirt/build.sh /tmp/kv-build'
	echo 'bench/peers/kubevirt/vfio-table.sh /tmp/kv-build docs/benchmarks.md   # or OUT.md; logs in /tmp/kv-build/vfio-table'
	echo '```'
} >"$work/section.md"
cat "$work/section.md"

# ---- into OUT.md: between this section's own markers, right after the bench-peers section's end
# marker (make bench-peers writes that section; the two generators never touch each other's), or
# before "## Targets missed in this run" while that section is absent, or at the end.
if [ -n "$out" ]; then
	[ -e "$out" ] || : >"$out"
	python3 - "$out" "$work/section.md" <<'PY'
import sys
path, secpath = sys.argv[1], sys.argv[2]
begin = "<!-- vfio-table: begin (bench/peers/kubevirt/vfio-table.sh; never edited by hand) -->"
end = "<!-- vfio-table: end -->"
peers_end = "<!-- make bench-peers: end -->"
before = "## Targets missed in this run"
doc = open(path).read()
sec = begin + "\n" + open(secpath).read() + end + "\n"
i = doc.find(begin)
if i >= 0:
    j = doc.find(end, i)
    if j >= 0:
        k = j + len(end)
        while k < len(doc) and doc[k] == "\n":
            k += 1
        doc = doc[:i] + doc[k:]
i = doc.find(peers_end)
if i >= 0:
    k = i + len(peers_end)
    while k < len(doc) and doc[k] == "\n":
        k += 1
    doc = doc[:k].rstrip("\n") + "\n\n" + sec + "\n" + doc[k:]
elif (i := doc.find(before)) >= 0:
    doc = doc[:i] + sec + "\n" + doc[i:]
else:
    doc = doc.rstrip("\n") + "\n\n" + sec
open(path, "w").write(doc)
PY
	echo "written into $out" >&2
fi
