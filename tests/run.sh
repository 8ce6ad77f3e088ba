#!/bin/bash
# Run every test against a build directory and end with "N passed, M failed".
#   unit tests (cmocka, one binary per module), the grpc-go conformance tests of the gRPC layer,
#   and the scenario tests that drive the daemons through the grpc-go mock kubelet.
# With SDP_SANITIZE=1 (make asan) every sanitizer report, from any process, counts as a failure.
set -u
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
export SDP_BUILD_DIR="$build"
passed=0
failed=0
failures=()
logdir="$build/test-logs"
rm -rf "$logdir" && mkdir -p "$logdir"

if [ "${SDP_SANITIZE:-0}" = 1 ]; then
	sandir="$logdir/sanitizer"
	mkdir -p "$sandir"
	export ASAN_OPTIONS="log_path=$sandir/asan:detect_leaks=1:abort_on_error=0:strict_string_checks=1"
	export UBSAN_OPTIONS="log_path=$sandir/ubsan:print_stacktrace=1:halt_on_error=1"
fi

# Add one suite's counts: NAME LOG EXIT PASSED FAILED; a non-zero exit without a counted
# failure counts as one; on failure print what the log says (the runner's own excerpt filter).
record() {
	local name=$1 out=$2 rc=$3 p=${4:-0} f=${5:-0} excerpt=$6
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	passed=$((passed + p))
	failed=$((failed + f))
	printf '%-28s %4d passed %3d failed\n' "$name" "$p" "$f"
	if [ "$f" -ne 0 ]; then failures+=("$name"); $excerpt "$out"; fi
}
excerpt_tail() { tail -40 "$1"; }
excerpt_go() { grep -B2 -A30 -- '--- FAIL' "$1" | head -150; }
excerpt_script() { grep -E '^FAIL|error' "$1" | head -40; }

# cmocka: "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)"
run_unit() {
	local name out rc
	name=$(basename "$1")
	out="$logdir/$name.log"
	timeout 300 "$1" >"$out" 2>&1
	rc=$?
	record "$name" "$out" $rc "$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)" \
		"$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)" excerpt_tail
}

# go test -test.v: count "--- PASS" / "--- FAIL" lines (subtests included)
run_go() {
	local name=$1 out rc
	shift
	out="$logdir/$name.log"
	(cd "$src/tests/kubelet" && timeout 1200 "$@" -test.v -test.timeout 1100s) >"$out" 2>&1
	rc=$?
	record "$name" "$out" $rc "$(grep -c -- '--- PASS' "$out")" "$(grep -c -- '--- FAIL' "$out")" excerpt_go
}

# a script that ends with its own "N passed, M failed" line
run_script() {
	local name=$1 out rc
	shift
	out="$logdir/$name.log"
	timeout 600 "$@" >"$out" 2>&1
	rc=$?
	record "$name" "$out" $rc "$(sed -n 's/^\([0-9]*\) passed, [0-9]* failed$/\1/p' "$out" | tail -1)" \
		"$(sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' "$out" | tail -1)" excerpt_script
}

# The unit tests live beside their code (core/tests, hyperlight/tests,
# hyperlight/label-node/tests, kata/tests): every test_* executable the build defines, by name
# (scripts/build-info.py; one missing from the build directory fails).
if units=$("$src/scripts/build-info.py" tests "$build" 2>"$logdir/unit-list.log") && [ -n "$units" ]; then
	for t in $units; do run_unit "$t"; done
else
	echo "no unit test list from scripts/build-info.py tests $build" >>"$logdir/unit-list.log"
	record unit-list "$logdir/unit-list.log" 1 0 1 excerpt_tail
fi
# fuzz corpus replay (fuzz/README in docs/reliability.md): one pass per corpus file run without
# a crash or a sanitizer abort by the target's replay binary
run_replay() {
	local bin=$1 name dir out p=0 f=0 file
	name=$(basename "$bin")
	dir="$src/fuzz/corpus/${name#replay_}"
	out="$logdir/$name.log"
	: >"$out"
	for file in "$dir"/*; do
		[ -f "$file" ] || continue
		if timeout 60 "$bin" "$file" >>"$out" 2>&1; then p=$((p + 1)); else f=$((f + 1)); echo "FAIL $file" >>"$out"; fi
	done
	[ $((p + f)) -eq 0 ] && f=1 && echo "no corpus in $dir" >>"$out"
	record "$name" "$out" 0 "$p" "$f" excerpt_tail
}
for t in "$build"/fuzz/replay_*; do
	[ -f "$t" ] && [ -x "$t" ] && run_replay "$t"
done
# The server target keeps one endpoint and one fake kubelet for a whole fuzz run: its corpus
# replayed 10 times in one process must keep the first registration (issue 21: with a fake
# kubelet holding no ListAndWatch stream, the 9th ListAndWatch input waited out the back-off).
run_replay_server_repeat() {
	local bin="$build/fuzz/replay_server" out="$logdir/replay_server-repeat.log" rc dirs=()
	for _ in 1 2 3 4 5 6 7 8 9 10; do dirs+=("$src/fuzz/corpus/server"); done
	timeout 120 "$bin" "${dirs[@]}" >"$out" 2>&1
	rc=$?
	record replay_server-repeat "$out" $rc $((rc == 0)) $((rc != 0)) excerpt_tail
}
[ -x "$build/fuzz/replay_server" ] && run_replay_server_repeat
run_go grpc-conformance "$build/grpcpeer.test"
# Scenarios mount (read-only CDI directory, full tmpfs) in a private mount namespace.
run_go scenarios unshare -m --propagation private "$build/scenario.test"
# The hyperlight image's build (musl, scripts/build-static.sh) through the hyperlight, label,
# fault, seccomp and deployed-shape (pod) scenarios: SDP_BUILD_DIR is an overlay of the build directory whose
# hyperlight-device-plugin and tests/fakes/libhvshim.so are the musl ones. (Not under the
# sanitizers: the musl build is not instrumented.)
if [ "${SDP_SANITIZE:-0}" != 1 ]; then
	overlay="$build/musl-overlay"
	rm -rf "$overlay"
	mkdir -p "$overlay/tests/fakes"
	for f in "$build"/*; do
		case ${f##*/} in tests | musl-overlay | hyperlight-device-plugin) ;; *) ln -s "$f" "$overlay/" ;; esac
	done
	for f in "$build"/tests/*; do [ "${f##*/}" = fakes ] || ln -s "$f" "$overlay/tests/"; done
	for f in "$build"/tests/fakes/*; do [ "${f##*/}" = libhvshim.so ] || ln -s "$f" "$overlay/tests/fakes/"; done
	# A failed musl build is one failure with its own log's excerpt; the suite that needs it is
	# not run (one failure with the reason), not 76 failures each pointing at a missing file.
	"$src/scripts/build-static.sh" "$src/build-static" >"$logdir/build-static.log" 2>&1
	rc=$?
	record build-static "$logdir/build-static.log" $rc $((rc == 0)) 0 excerpt_tail
	if [ $rc -eq 0 ]; then
		ln -s "$src/build-static/image-context-hyperlight/rootfs/hyperlight-device-plugin" "$overlay/"
		ln -s "$src/build-static/musl-dynamic/libhvshim.so" "$overlay/tests/fakes/"
		SDP_BUILD_DIR="$overlay" run_go scenarios-musl-hyperlight unshare -m --propagation private \
			"$build/scenario.test" -test.run '^(TestHyperlight|TestLabels|TestFault|TestSeccompHyperlight|TestPodShape)'
	else
		echo "not run: scripts/build-static.sh failed (build-static above), no musl binaries to test" \
			>"$logdir/scenarios-musl-hyperlight.log"
		record scenarios-musl-hyperlight "$logdir/scenarios-musl-hyperlight.log" 1 0 1 excerpt_tail
	fi
fi
run_script tree-checks "$src/scripts/check-tree.sh" "$build"
run_script manifests "$src/tests/manifests/run.sh" "$build"
run_script deploy-hyperlight "$src/tests/deploy/check.sh" "$build"
[ -x "$src/tests/deploy/kata-chart.sh" ] && run_script deploy-kata "$src/tests/deploy/kata-chart.sh" "$build"

if [ "${SDP_SANITIZE:-0}" = 1 ]; then
	reports=$(find "$sandir" -type f | wc -l)
	if [ "$reports" -ne 0 ]; then
		echo "sanitizer reports:"
		for r in "$sandir"/*; do echo "== $r"; head -60 "$r"; done
		failed=$((failed + reports))
		failures+=("sanitizer($reports)")
	fi
fi
[ ${#failures[@]} -ne 0 ] && echo "failed: ${failures[*]} (logs in $logdir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
