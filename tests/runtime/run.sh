#!/bin/bash
# `make test-runtime`: the plugin images run as containers under podman + runc the way their
# DaemonSets run them, the mock kubelet (build/runtime-e2e) on the host side of a bind-mounted
# device-plugins directory, and workload containers that get their devices from podman's CDI
# support. See tests/runtime/README.md for what is checked and what is created where.
#
#   tests/runtime/run.sh BUILD_DIR        (root; images from `make images` in BUILD_DIR/podman)
#
# SDP_RUNTIME_HV=auto|kvm|shim chooses the hyperlight plugin's hypervisor (default auto: the
# host's /dev/kvm when it answers KVM_GET_API_VERSION, else the hvshim bind-mounted read-only
# and preloaded). Ends with "N passed, M failed"; exit status 1 if anything failed.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)

if [ "${2:-}" = --inner ]; then
	# shellcheck source=tests/runtime/inner.sh
	. "$src/tests/runtime/inner.sh"
	exit $?
fi

[ "$(id -u)" -eq 0 ] || { echo "test-runtime: needs root (podman, mknod, mount)" >&2; exit 1; }
for b in runtime-e2e hyperlight-device-plugin tests/fakes/libhvshim.so; do
	[ -e "$build/$b" ] || { echo "test-runtime: $build/$b missing (make build)" >&2; exit 1; }
done
[ -d "$build/podman/root" ] || { echo "test-runtime: no image store in $build/podman (make images)" >&2; exit 1; }

start=$(date +%s)
T=$(mktemp -d /tmp/sdp-runtime.XXXXXX)
export T
created=$T/created-outside-tmp # one path a line, in creation order
: >"$created"

# Paths outside /tmp that podman, runc or this test could touch: their listing before and after
# must be equal (CDI and VFIO directories, the kubelet's directory, podman's and runc's
# default state directories; every one is redirected to $T by the flags in inner.sh).
WATCHED="/etc/cdi /var/run/cdi /dev/vfio /dev/kvm /var/lib/kubelet /run/runc /run/libpod
/run/containers /var/lib/containers /etc/containers"
snapshot() {
	for p in $WATCHED; do
		if [ -e "$p" ] || [ -L "$p" ]; then
			find "$p" -maxdepth 3 -printf '%p %y %m %U:%G\n' 2>/dev/null
		else
			echo "$p absent"
		fi
	done | sort
}
snapshot >"$T/host-before"

# The mount points the private mount namespace needs, created only where absent (recorded).
need_dir() {
	if [ ! -e "$1" ]; then
		mkdir "$1" && echo "$1" >>"$created"
	fi
}
need_file() {
	if [ ! -e "$1" ]; then
		: >"$1" && echo "$1" >>"$created"
	fi
}

cleanup() {
	local rc=$? fail=0
	# Containers still running (a failure mid-way): stop them from here; their state is in $T.
	if [ -d "$T/store" ]; then
		podman --root "$T/store/root" --runroot "$T/store/runroot" --storage-driver vfs \
			--cgroup-manager cgroupfs --events-backend file --runtime "$T/store/runc-in-store" \
			--tmpdir "$T/store/tmp" rm -a -f -t 0 >/dev/null 2>&1 || true
	fi
	# Everything created outside /tmp, newest first, only if it is still what we made.
	if [ -s "$created" ]; then
		echo "== removing what was created outside /tmp:"
		tac "$created" | while read -r p; do
			if [ -d "$p" ]; then rmdir "$p"; else rm -f "$p"; fi
			if [ -e "$p" ]; then echo "   $p: NOT removed"; else echo "   $p: removed"; fi
		done
	else
		echo "== nothing was created outside /tmp"
	fi
	while read -r p; do
		[ -e "$p" ] && fail=1
	done <"$created"
	snapshot >"$T/host-after"
	if ! diff -u "$T/host-before" "$T/host-after" >"$T/host-diff"; then
		echo "FAIL - host paths changed by the run:"
		cat "$T/host-diff"
		fail=1
	else
		echo "ok - host paths unchanged ($(wc -w <<<"$WATCHED") watched: $(tr '\n' ' ' <<<"$WATCHED"))"
	fi
	local summary=$T/summary
	local passed failed
	passed=$(sed -n 's/^passed=//p' "$summary" 2>/dev/null || echo 0)
	failed=$(sed -n 's/^failed=//p' "$summary" 2>/dev/null || echo 1)
	[ -n "$passed" ] || passed=0
	[ -n "$failed" ] || failed=1
	if [ "$fail" -ne 0 ]; then failed=$((failed + 1)); else passed=$((passed + 1)); fi
	if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
		echo "FAIL - the run ended early with status $rc"
		failed=1
	fi
	rm -rf "$T"
	if [ -e "$T" ]; then
		echo "FAIL - $T not removed"
		failed=$((failed + 1))
	fi
	echo "test-runtime: $(($(date +%s) - start)) s"
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ] && [ "$rc" -eq 0 ] && exit 0
	exit 1
}
inner=""
stop_inner() {
	if [ -n "$inner" ]; then
		kill -TERM "$inner" 2>/dev/null
		wait "$inner" 2>/dev/null
	fi
	exit 130
}
trap cleanup EXIT
trap stop_inner INT TERM

need_dir /var/run/cdi
need_dir /dev/vfio
need_file /dev/kvm
unshare -m --propagation private "$0" "$build" --inner &
inner=$!
wait "$inner"
