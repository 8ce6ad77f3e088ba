#!/bin/sh
# prove-local.sh ROOTFS CASE: runs ROOTFS/microvm/run-in-pod.sh the way a pod's container
# runs it, outside Kubernetes. Run as root on the host (needs unshare, capsh, mknod).
#
#   a new network namespace (unshare -n) with only lo (up), net.ipv4.ping_group_range
#   "0 2147483647" as containerd's CRI sets it (enable_unprivileged_icmp), a private mount
#   namespace in which ROOTFS gets a tmpfs /dev holding only null zero random urandom
#   net/tun kvm (and vhost-net when the host has it), a fresh /proc and /sys, a tmpfs /tmp;
#   then chroot ROOTFS, uid 0, the bounding set dropped to CAP_NET_ADMIN (so permitted =
#   effective = {net_admin} after the exec, inheritable and ambient empty: what runc gives a
#   container with `drop: [ALL], add: [NET_ADMIN]`), no_new_privs
#   (allowPrivilegeEscalation: false); /bin/sh /microvm/run-in-pod.sh.
#
# CASE:
#   ok        as above
#   no-admin  CAP_NET_ADMIN dropped too (no capability at all): TUNSETIFF is refused
#   no-tun    /dev/net/tun not in the container's /dev
#   no-kvm    /dev/kvm not in the container's /dev (MICROVM_ACCEL=kvm)
# The environment is passed through (unshare, sh and capsh keep it), so MICROVM_* reach
# run-in-pod.sh: MICROVM_GUEST=tiny for the bare-metal guest (which runs on a PVM host's KVM
# too), MICROVM_ACCEL=tcg for the Linux guest on a host whose KVM cannot boot it (PVM).
set -eu
root=${1:?usage: prove-local.sh ROOTFS ok|no-admin|no-tun|no-kvm}
case_=${2:-ok}
root=$(cd "$root" && pwd)
last=$(cat /proc/sys/kernel/cap_last_cap)
keep=cap_net_admin
[ "$case_" = no-admin ] && keep=none
drop=
i=0
while [ $i -le "$last" ]; do
	n=$(capsh --decode="$(printf '%x' $((1 << i)))" | sed 's/.*=//')
	[ "$n" = "$keep" ] || drop=${drop:+$drop,}$n
	i=$((i + 1))
done
export MICROVM_CASE="$case_" MICROVM_ROOT="$root" MICROVM_DROP="$drop"
# shellcheck disable=SC2016 # the script expands in the new namespaces' shell
exec unshare -n -m --propagation private -- sh -eu -c '
	r=$MICROVM_ROOT
	mount -t tmpfs -o mode=0755,nosuid tmpfs "$r/dev"
	mknod -m 0666 "$r/dev/null" c 1 3
	mknod -m 0666 "$r/dev/zero" c 1 5
	mknod -m 0666 "$r/dev/random" c 1 8
	mknod -m 0666 "$r/dev/urandom" c 1 9
	if [ "$MICROVM_CASE" != no-tun ]; then
		mkdir "$r/dev/net"
		mknod -m 0666 "$r/dev/net/tun" c 10 200
	fi
	if [ "$MICROVM_CASE" != no-kvm ]; then
		mknod -m 0660 "$r/dev/kvm" c 10 232
	fi
	[ -c /dev/vhost-net ] && mknod -m 0600 "$r/dev/vhost-net" c 10 238
	mount -t proc proc "$r/proc"
	mount -t sysfs sysfs "$r/sys"
	mount -t tmpfs -o mode=1777 tmpfs "$r/tmp"
	ip link set lo up
	echo "0 2147483647" >/proc/sys/net/ipv4/ping_group_range
	echo "prove-local: case=$MICROVM_CASE netns=$(readlink /proc/self/ns/net) /dev: $(cd "$r/dev" && find . -type c | sort | tr "\n" " ")"
	exec capsh --chroot="$r" --drop="$MICROVM_DROP" --no-new-privs --shell=/bin/sh -- -c "
		echo \"prove-local: uid=\$(id -u) \$(grep -E \"^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)\" /proc/self/status | tr -s \"\\t\\n\" \"  \")\"
		exec /bin/sh /microvm/run-in-pod.sh"
'
