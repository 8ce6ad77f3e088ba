#!/bin/bash
# What make cluster leaves on the host: a snapshot of everything it can touch, and a comparison.
#
#   cluster/trace.sh snapshot FILE        write the host's state to FILE
#   cluster/trace.sh compare BEFORE AFTER  print every difference; exit 1 if there is one
#   cluster/trace.sh summary BEFORE DURING  what the running cluster added, per section
#
# make cluster takes CACHE/trace/before (before anything is started), make cluster-down takes
# CACHE/trace/after once it has removed everything and compares the two. Sections:
#   processes   every process of the cluster: its executable under the cache or the state
#               directories, a command line naming them, or a cgroup under kubepods (a pod's)
#   mounts      every mount point of the host's mount namespace, with its type and source
#   links       every network device; routes  the IPv4 and IPv6 routing tables
#   iptables, ip6tables  iptables-save / ip6tables-save of every table, counters dropped
#   nft         the nftables tables (where nft is installed)
#   files       every file under the directories the components write to (lib.sh HOST_DIRS:
#               the kubelet's root, the CDI directories, /run/containerd, ...), or "absent"
#   state       the cluster's own directories (STATE, RUN): absent before and after
#   devices     /dev/kvm (type, numbers, mode, owner, or absent): make test-cluster removes and
#               makes it again, or stands in for it where the host has none
#   cgroups     every kubepods cgroup (the kubelet's QoS tree and the pods' cgroups)
#   sysctl      the values of the sysctls the components set (lib.sh SYSCTLS)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=cluster/lib.sh
. "$here/lib.sh"

canon_dirs() { for d in "${HOST_DIRS[@]}"; do readlink -m "$d"; done | sort -u; }

# Each line: SECTION<space>content, so that a difference names its section.
snapshot() {
	local pid exe cmd cg t d s f ancestors=" " a=$$
	# this script and its callers (make cluster's own scripts name the cache) are not the cluster
	while [ "$a" -gt 1 ] 2>/dev/null; do
		ancestors="$ancestors$a "
		a=$(awk '{print $4}' "/proc/$a/stat" 2>/dev/null) || break
	done
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		case "$ancestors" in *" $pid "*) continue ;; esac
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		cmd=$(tr '\0\n' '  ' 2>/dev/null <"$p/cmdline") || continue
		cg=$(cat "$p/cgroup" 2>/dev/null) || continue
		case "$exe $cmd" in
		*"$CACHE/bin/"* | *"$STATE"* | *"$RUN"*) ;;
		*) case "$cg" in *kubepods*) ;; *) continue ;; esac ;;
		esac
		echo "processes ${exe} :: ${cmd}"
	done | sort
	awk '{ sep = 0; for (i = 7; i <= NF; i++) if ($i == "-") { sep = i; break }
		print "mounts", $5, $(sep + 1), $(sep + 2) }' /proc/self/mountinfo | sort
	ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print "links", $2 }' | sort
	{ ip -4 route show table all; ip -6 route show table all; } 2>/dev/null | sed 's/^/routes /' | sort
	for t in iptables ip6tables; do
		if command -v "$t-save" >/dev/null; then
			"$t-save" 2>/dev/null | grep -v '^#' | sed 's/ \[[0-9]*:[0-9]*\]$//' || true
		else
			echo "($t-save not installed)"
		fi | sed "s/^/$t /"
	done
	if command -v nft >/dev/null; then nft list tables 2>/dev/null | sort; else echo "(nft not installed)"; fi |
		sed 's/^/nft /'
	for d in $(canon_dirs); do
		if [ -e "$d" ] || [ -L "$d" ]; then
			find "$d" -xdev -printf '%p %y %m\n' 2>/dev/null | sort
		else
			echo "absent $d"
		fi
	done | sed 's/^/files /'
	for d in "$STATE" "$RUN"; do
		if [ -e "$d" ]; then echo "state present $d"; else echo "state absent $d"; fi
	done
	if [ -e /dev/kvm ]; then echo "devices /dev/kvm $(stat -c '%F %t:%T %a %u:%g' /dev/kvm)"; else echo "devices /dev/kvm absent"; fi
	find /sys/fs/cgroup -type d -path '*kubepods*' 2>/dev/null | sort | sed 's/^/cgroups /'
	for s in "${SYSCTLS[@]}"; do
		f=/proc/sys/$(echo "$s" | tr . /)
		if [ -r "$f" ]; then echo "sysctl $s = $(tr '\t' ' ' <"$f")"; else echo "sysctl $s absent"; fi
	done
}

case "${1:-}" in
snapshot)
	[ $# -eq 2 ] || { echo "usage: $0 snapshot FILE" >&2; exit 2; }
	mkdir -p "$(dirname "$2")"
	snapshot >"$2.tmp"
	mv "$2.tmp" "$2"
	;;
compare)
	[ $# -eq 3 ] || { echo "usage: $0 compare BEFORE AFTER" >&2; exit 2; }
	if diff -U0 "$2" "$3" >"$3.diff"; then
		rm -f "$3.diff"
		before=$2
		n() { grep -c "^$1 " "$before" || true; }
		echo "host traces: none. Same as before make cluster: $(n processes) cluster processes," \
			"$(n mounts) mounts, $(n links) network devices, $(n routes) routes," \
			"$(n iptables) + $(n ip6tables) lines of iptables-save/ip6tables-save, $(n nft) nft tables," \
			"$(n files) entries in ${#HOST_DIRS[@]} component directories, no $STATE or $RUN," \
			"/dev/kvm as it was ($(grep '^devices /dev/kvm' "$before" | cut -d' ' -f3-))," \
			"$(n cgroups) kubepods cgroups, $(n sysctl) sysctls ($3 vs $2)"
	else
		echo "host traces: make cluster left these differences (- before make cluster, + now):" >&2
		grep -v '^@@\|^---\|^+++' "$3.diff" >&2 || true
		echo "(full diff: $3.diff)" >&2
		exit 1
	fi
	;;
summary)
	[ $# -eq 3 ] || { echo "usage: $0 summary BEFORE DURING" >&2; exit 2; }
	python3 - "$2" "$3" <<'PY'
import collections, re, sys
before = set(open(sys.argv[1]).read().splitlines())
added = [l for l in open(sys.argv[2]).read().splitlines() if l not in before]
ids = lambda s: re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uid>",
                       re.sub(r"[0-9a-f]{64}", "<id>", s))
def kind(sec, rest):
    if sec == "processes":
        return rest.split(" :: ")[0].rsplit("/", 1)[-1]
    if sec == "mounts":
        p = ids(rest.split()[0])
        p = re.sub(r"/(cni-)[0-9a-f-]+$", r"/\1<id>", p)
        p = re.sub(r"(/pods/<uid>/volumes)/.*", r"\1/...", p)
        return p + " (" + rest.split()[1] + ")"
    if sec == "files":
        m = re.match(r"(/(?:var/lib|var/log|var/run|run|etc)/[^/ ]+)", rest)
        return m.group(1) if m else rest
    if sec in ("iptables", "ip6tables"):
        w = rest.split()[0]
        return "chains" if w.startswith(":") else ("table " + w[1:] if w.startswith("*") else "rules" if w.startswith("-") else "")
    if sec == "cgroups":
        return rest.split("/kubepods")[0].rsplit("/", 1)[-1]
    if sec == "links":
        return re.sub(r"^veth.*", "veth*", rest)
    if sec == "routes":
        m = re.search(r" dev (\S+)", rest)
        return "dev " + re.sub(r"^veth.*", "veth*", m.group(1)) if m else rest
    return rest
out = collections.OrderedDict()
for l in added:
    sec, _, rest = l.partition(" ")
    k = kind(sec, rest)
    if k:
        out.setdefault(sec, collections.Counter())[k] += 1
for sec, c in out.items():
    items = ", ".join(k + (" x%d" % n if n > 1 else "") for k, n in c.items())
    print("  %-9s %4d: %s" % (sec, sum(c.values()), items))
PY
	;;
*)
	echo "usage: $0 snapshot FILE | compare BEFORE AFTER | summary BEFORE DURING" >&2
	exit 2
	;;
esac
