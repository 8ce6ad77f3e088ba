#!/bin/bash
# make test-arm64: the arm64 build under qemu-user on this amd64 machine. Ends with
# "N passed, M failed".
#   Usage: tests/arm64/run.sh ARM64_BUILD NATIVE_BUILD
# ARM64_BUILD: the cross build (make build ARCH=arm64, build-arm64); NATIVE_BUILD: the amd64
# build whose grpc-go programs (the mock kubelet in the scenario suite, the conformance peer)
# drive the arm64 programs over the same unix sockets as in make test.
#
# Every arm64 program runs under qemu-aarch64-static (Debian 12: QEMU 7.2), explicitly:
#  - the unit tests: `qemu-aarch64-static TEST`, as root in the machine's namespaces like make
#    test, except UNITS_IN_NAMESPACE, which start arm64 programs themselves and run through
#    ARM64_BUILD/tests/sdp-qemu-user (tests/arm64/qemu_user.c: a user namespace of its own in
#    which binfmt_misc hands an exec'd arm64 program to qemu; nothing registered on the machine
#    is used);
#  - the scenario suites: SDP_EMULATOR=ARM64_BUILD/tests/sdp-qemu-user, through which the Go
#    tests start every program of the build directory (tests/kubelet/daemon.go).
# seccomp: qemu-user loads no seccomp filter for its guest (it answers prctl(PR_SET_SECCOMP)
# with EINVAL and has no seccomp(2): docs/security.md), so a daemon left at the default
# SDP_SECCOMP=enforce would exit 1 ("cannot confine the daemon"). This harness sets
# SDP_SECCOMP=off for every program, and says so; each daemon logs msg=confined seccomp=off.
# The arm64 filter itself is checked three ways: test_seccomp runs the aarch64 filter through
# a BPF interpreter (here and in make test); here, every system call the arm64 daemons made in
# the scenario suite (qemu's -strace log) is run through the filter each daemon builds on arm64
# (seccomp-arm64-hyperlight, seccomp-arm64-kata: tests/arm64/seccomp_check.c); and a real arm64
# kernel enforces it in make test-live-kvm-arm64 (issue 22, item 4).
# SDP_SECCOMP_UNAVAILABLE=qemu-user lets the unit tests that load a filter skip, saying so
# (tests/support/dp_test.h); they are counted and listed below.
set -u
build=$(cd "${1:-build-arm64}" && pwd)
native=$(cd "${2:-build}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
qemu=/usr/bin/qemu-aarch64-static
emu="$build/tests/sdp-qemu-user"
logdir="$build/test-logs"
rm -rf "$logdir" && mkdir -p "$logdir"
export SDP_BUILD_DIR="$build" SDP_EMULATOR="$emu" SDP_SECCOMP=off SDP_SECCOMP_UNAVAILABLE=qemu-user

# The unit tests that exec arm64 programs (the helper runner's children, the node-label child).
UNITS_IN_NAMESPACE=" test_helper test_label_patch test_labels "
# Unit tests not run under qemu-user, each with its reason:
#  test_probe: its fixtures mknod device nodes (root in the machine's user namespace) and its
#    probes run in re-exec'd helper children (an exec of an arm64 binary: sdp-qemu-user's user
#    namespace, where mknod is refused); both cannot hold at once. The same probe code runs in
#    the scenarios' hyperlight daemons (TestHyperlightProbe*, TestFaultProbeHelper), on nodes the
#    Go test makes outside the daemon's namespace.
UNITS_EXCLUDED=" test_probe "
# Scenario families that cannot hold under qemu-user, each with its reason; every other scenario
# runs (the list is printed). A -test.run pattern is built from the rest (Go 1.19 has no
# -test.skip).
#  TestSeccomp*: they check the daemon's filter is loaded (Seccomp: 2 in /proc/<pid>/status)
#    and refuses calls from inside it; qemu-user loads no guest filter.
#  TestPodShape*: the daemon runs chrooted in a pod root that holds the image's files only;
#    the arm64 daemon there needs its loader and libraries (glibc build) or a musl build of
#    each binary, and the pod launcher execs it without SDP_EMULATOR.
#  TestHyperlightCDIReadOnlyDir, TestKataCDIReadOnlyPerResource, TestRegistrationSocketFailureSaid:
#    the test remounts a directory (the CDI directory, the kubelet's socket directory)
#    read-only or back while the daemon runs; under qemu-user the daemon lives in a mount
#    namespace of its own (for its binfmt_misc instance), a copy that a later remount in the
#    test's namespace does not reach.
ARM64_EXCLUDED='^(TestSeccomp|TestPodShape|TestHyperlightCDIReadOnlyDir$|TestKataCDIReadOnlyPerResource$|TestRegistrationSocketFailureSaid$)'
# Run in a pass of their own, without qemu's system-call log (the other scenarios have it):
#  TestHyperlightFdLimitHeldConnections: it lowers the daemon's RLIMIT_NOFILE to 48 and counts
#    the process's fds; qemu's -strace log is one more fd of that process.
RECORDED_EXCLUDED='^TestHyperlightFdLimitHeldConnections$'

passed=0
failed=0
skipped=0
failures=()
record() { # NAME LOG EXIT PASSED FAILED [SKIPPED]
	local name=$1 out=$2 rc=$3 p=${4:-0} f=${5:-0} s=${6:-0}
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
	if [ "$s" -ne 0 ]; then
		printf '%-28s %4d passed %3d failed %3d skipped (%s)\n' "$name" "$p" "$f" "$s" \
			"$(sed -n 's/^\[  SKIPPED \] \(test_.*\)/\1/p' "$out" | sort -u | tr '\n' ' ' | sed 's/ $//')"
	else
		printf '%-28s %4d passed %3d failed\n' "$name" "$p" "$f"
	fi
	if [ "$f" -ne 0 ]; then
		failures+=("$name")
		tail -40 "$out"
	fi
}

echo "arm64 under $($qemu --version | head -1) (user-mode emulation)"
echo "SDP_SECCOMP=off for every arm64 program: qemu-user refuses a guest's seccomp filter (docs/security.md)"
if [ ! -x "$emu" ]; then
	echo "no $emu: build the arm64 build first (make build ARCH=arm64)"
	echo "0 passed, 1 failed"
	exit 1
fi

# The exec'd arm64 programs reach qemu through binfmt_misc in sdp-qemu-user's user namespace
# (Linux 6.7+). On an older kernel (Debian 12's own 6.1) that fails; then the same rule is
# registered in the machine's binfmt_misc (root) for this run only, and removed when it ends.
# SDP_ARM64_BINFMT=machine takes that path on any kernel (to test it).
binfmt_log="$logdir/binfmt.log"
if [ "${SDP_ARM64_BINFMT:-}" = machine ] || ! "$emu" /bin/true 2>"$binfmt_log"; then
	[ -s "$binfmt_log" ] && echo "$(cat "$binfmt_log") (kernel $(uname -r))"
	"$emu" --machine unregister 2>/dev/null # a run killed before its end left it
	if "$emu" --machine register 2>>"$binfmt_log"; then
		trap '"$emu" --machine unregister' EXIT
		export SDP_QEMU_USER_BINFMT=machine
		echo "binfmt_misc: qemu-aarch64-static registered as sdp-aarch64 in the machine's binfmt_misc for this run (removed at its end)"
	else
		record binfmt "$binfmt_log" 1 0 1
		echo "0 passed, 1 failed"
		exit 1
	fi
else
	echo "binfmt_misc: sdp-qemu-user's own, in a user namespace (kernel $(uname -r))"
fi

start=$(date +%s)
units=$("$src/scripts/build-info.py" tests "$build" 2>"$logdir/unit-list.log") || units=
[ -n "$units" ] || record unit-list "$logdir/unit-list.log" 1 0 1
for t in $units; do
	name=$(basename "$t")
	out="$logdir/$name.log"
	case "$UNITS_EXCLUDED" in *" $name "*)
		echo "$name: not run under qemu-user (reason: tests/arm64/run.sh)"
		continue
		;;
	esac
	case "$UNITS_IN_NAMESPACE" in
	*" $name "*) timeout 600 "$emu" "$t" >"$out" 2>&1 ;;
	*) timeout 600 "$qemu" "$t" >"$out" 2>&1 ;;
	esac
	rc=$?
	record "$name" "$out" $rc "$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)" \
		"$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)" \
		"$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)"
done
# The fuzz targets' corpus, one run of the arm64 replay binary per file (as tests/run.sh).
for bin in "$build"/fuzz/replay_*; do
	[ -f "$bin" ] && [ -x "$bin" ] || continue
	name=$(basename "$bin")
	out="$logdir/$name.log"
	p=0 f=0
	: >"$out"
	for file in "$src/fuzz/corpus/${name#replay_}"/*; do
		[ -f "$file" ] || continue
		if timeout 120 "$qemu" "$bin" "$file" >>"$out" 2>&1; then p=$((p + 1)); else f=$((f + 1)); echo "FAIL $file" >>"$out"; fi
	done
	[ $((p + f)) -eq 0 ] && f=1 && echo "no corpus for $name" >>"$out"
	record "$name" "$out" 0 "$p" "$f"
done
units_done=$(date +%s)

# go test -test.v: "--- PASS" / "--- FAIL" lines (subtests included)
run_go() {
	local name=$1 out="$logdir/$1.log" rc
	shift
	(cd "$src/tests/kubelet" && timeout 2400 "$@" -test.v -test.timeout 2300s) >"$out" 2>&1
	rc=$?
	record "$name" "$out" $rc "$(grep -c -- '--- PASS' "$out")" "$(grep -c -- '--- FAIL' "$out")"
	[ "$rc" -ne 0 ] && grep -B2 -A30 -- '--- FAIL' "$out" | head -150
}
run_go grpc-conformance "$native/grpcpeer.test"
# The scenario suite runs against the shipped arm64 daemons, the binaries the images hold
# (scripts/build-static.sh --arch arm64: kata static, hyperlight on musl's libc.so): SDP_BUILD_DIR
# is an overlay of the arm64 build whose kata-device-plugin, hyperlight-device-plugin and
# tests/fakes/libhvshim.so are those (the node-label child is found beside the daemon: the musl
# one). The glibc build's daemons run in the unit tests only.
static="$src/build-static-arm64"
"$src/scripts/build-static.sh" --arch arm64 "$static" >"$logdir/build-static-arm64.log" 2>&1
rc=$?
record build-static-arm64 "$logdir/build-static-arm64.log" $rc $((rc == 0)) 0
overlay="$build/shipped-overlay"
rm -rf "$overlay" "$build/musl-overlay"
mkdir -p "$overlay/tests/fakes"
for f in "$build"/*; do
	case ${f##*/} in tests | shipped-overlay | hyperlight-device-plugin | kata-device-plugin) ;; *) ln -s "$f" "$overlay/" ;; esac
done
for f in "$build"/tests/*; do [ "${f##*/}" = fakes ] || ln -s "$f" "$overlay/tests/"; done
for f in "$build"/tests/fakes/*; do [ "${f##*/}" = libhvshim.so ] || ln -s "$f" "$overlay/tests/fakes/"; done
ln -s "$static/image-context-hyperlight/rootfs/hyperlight-device-plugin" "$overlay/"
ln -s "$static/image-context-kata/kata-device-plugin" "$overlay/"
ln -s "$static/musl-dynamic/libhvshim.so" "$overlay/tests/fakes/"
all=$("$native/scenario.test" -test.list '.*' 2>"$logdir/scenario-list.log" | grep '^Test') || all=
run=$(printf '%s\n' $all | grep -Ev "$ARM64_EXCLUDED" | grep -Ev "$RECORDED_EXCLUDED" | paste -sd'|')
unrecorded=$(printf '%s\n' $all | grep -E "$RECORDED_EXCLUDED" | paste -sd'|')
excluded=$(printf '%s\n' $all | grep -E "$ARM64_EXCLUDED" | tr '\n' ' ')
if [ $rc -ne 0 ] || [ -z "$run" ] || [ -z "$unrecorded" ]; then
	echo "not run: scripts/build-static.sh --arch arm64 failed, or no scenario list from $native/scenario.test -test.list" >>"$logdir/scenario-list.log"
	record scenarios "$logdir/scenario-list.log" 1 0 1
else
	echo "scenarios not run under qemu-user (reasons: tests/arm64/run.sh): $excluded"
	echo "scenarios run without qemu's system-call log (reasons: tests/arm64/run.sh): ${unrecorded//|/ }"
	# qemu logs every system call of the arm64 daemons (and of the programs they exec) here
	strace_dir="$logdir/strace"
	mkdir -p "$strace_dir"
	SDP_BUILD_DIR="$overlay" SDP_QEMU_STRACE_DIR="$strace_dir" run_go scenarios unshare -m --propagation private \
		"$native/scenario.test" -test.run "^($run)\$"
	SDP_BUILD_DIR="$overlay" run_go scenarios-unrecorded unshare -m --propagation private \
		"$native/scenario.test" -test.run "^($unrecorded)\$"
	# Every call each shipped daemon made under its filter, checked against the arm64 filter it
	# builds (tests/arm64/strace_calls.py says which calls count; sdp-seccomp-check, built against
	# musl as the shipped daemons are, runs the filter).
	for d in hyperlight kata; do
		out="$logdir/seccomp-arm64-$d.log"
		calls="$logdir/seccomp-arm64-$d.calls"
		"$src/tests/arm64/strace_calls.py" "$strace_dir/$d-device-plugin".* >"$calls" 2>"$out"
		rc=$?
		[ $rc -eq 0 ] && { "$qemu" "$static/musl-dynamic/tests/sdp-seccomp-check" "$d" <"$calls" >>"$out" 2>&1; rc=$?; }
		tail -1 "$out"
		record "seccomp-arm64-$d" "$out" $rc $((rc == 0)) $((rc != 0))
	done
	rm -rf "$strace_dir" # hundreds of MB; the distinct calls stay in seccomp-arm64-*.calls
fi
end=$(date +%s)
echo "time: unit tests and corpus $((units_done - start)) s, grpc-go suites $((end - units_done)) s"
[ "$skipped" -ne 0 ] && echo "skipped: $skipped unit tests that load a seccomp filter (listed above)"
[ ${#failures[@]} -ne 0 ] && echo "failed: ${failures[*]} (logs in $logdir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
