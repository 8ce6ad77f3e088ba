#!/bin/bash
# make valgrind: the unit tests and the scenario suite's daemons under valgrind memcheck, against
# a normal (gcc, uninstrumented) build directory. Ends with "N passed, M failed".
#   Usage: tests/valgrind.sh BUILD
# A test counts as failed when it fails, and every valgrind log holding an error (invalid access,
# uninitialised use, a definitely or indirectly lost block, an unhandled system call) counts as
# one more failure. Logs: BUILD/valgrind-logs (unit-<test>.<pid>, daemon.<pid>).
#
# What valgrind 3.19 (Debian 12) lacks, and how the suite still runs whole under it
# (docs/reliability.md, "Memory"):
# - pidfd_open (434) / pidfd_send_signal (424) fail with ENOSYS: libdp then polls its helper
#   child with waitid every 10 ms and signals it with kill(2) (core/src/loop/loop_child.c).
# - execveat (322) fails with ENOSYS: the helper runner execs the same path with execve, which
#   the seccomp filter allows only under valgrind (core/src/seccomp/seccomp.c).
# - the helper runner's clone(CLONE_VM | CLONE_VFORK) runs as a fork: valgrind issues
#   clone(CLONE_VFORK | SIGCHLD), which the filter also allows only under valgrind.
# valgrind warns about each of these unhandled calls; those warnings are expected.
# - seccomp(2) (317) is not implemented either: libseccomp falls back to prctl(PR_SET_SECCOMP),
#   so the filter also applies to valgrind's own calls. The daemons' lists leave valgrind room
#   (the scenarios run confined), but test_seccomp's deliberately tiny lists refuse what
#   valgrind needs in a forked child (its log file): test_seccomp runs natively only.
# - test_cdi: test_permission_denied forks a child that drops to uid 65534, which fails inside
#   valgrind ("cannot drop to uid"); the binary runs natively under make test and make asan.
set -u
build=$(cd "${1:-build}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
export SDP_BUILD_DIR="$build"
logdir="$build/valgrind-logs"
rm -rf "$logdir" && mkdir -p "$logdir"
vg=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
	--show-leak-kinds=definite,indirect --track-fds=no --quiet --trace-children=no
	--suppressions="$src/tests/valgrind.supp")
unit_skip=" test_cdi test_seccomp "
# Every scenario family but TestSeccomp* (VALGRIND_SCENARIOS overrides it, a -test.run
# pattern): under valgrind the filter must also allow execve (the exec fallback) and valgrind's
# own calls, so "execve is refused" cannot hold there; those tests run natively and under ASan.
# TestHyperlightFdLimitHeldConnections neither: it lowers the daemon's RLIMIT_NOFILE to 48 after
# start, and valgrind keeps its own fds near the top of the limit it started with, so the
# daemon cannot open any (it runs natively, under ASan and in the musl suite).
: "${VALGRIND_SCENARIOS:=^(TestFault|TestHyperlight([^F]|F[^d])|TestKata|TestLabels|TestMock|TestDRA|TestCompanion)}"
passed=0
failed=0
failures=()

count() { # name passed failed
	passed=$((passed + $2))
	failed=$((failed + $3))
	printf '%-28s %4d passed %3d failed\n' "$1" "$2" "$3"
	[ "$3" -ne 0 ] && failures+=("$1")
}

# The unit tests beside their code, as tests/run.sh finds them.
units=$("$src/scripts/build-info.py" tests "$build") || units=
[ -n "$units" ] || { echo "no unit test list from scripts/build-info.py tests $build"; count unit-list 0 1; }
for t in $units; do
	name=$(basename "$t")
	case "$unit_skip" in *" $name "*) continue ;; esac
	out="$logdir/$name.out"
	timeout 600 "${vg[@]}" --log-file="$logdir/unit-$name.%p" "$t" >"$out" 2>&1
	rc=$?
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -1)
	p=${p:-0}
	f=${f:-0}
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	count "vg:$name" "$p" "$f"
	[ "$f" -ne 0 ] && tail -30 "$out"
done

out="$logdir/scenarios.out"
export SDP_DAEMON_WRAPPER="${vg[*]} --log-file=$logdir/daemon.%p"
(cd "$src/tests/kubelet" && timeout 1500 unshare -m --propagation private "$build/scenario.test" \
	-test.run "$VALGRIND_SCENARIOS" -test.v -test.timeout 1400s) >"$out" 2>&1
rc=$?
p=$(grep -c -- '--- PASS' "$out")
f=$(grep -c -- '--- FAIL' "$out")
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
count "vg:scenarios" "$p" "$f"
[ "$f" -ne 0 ] && grep -B2 -A30 -- '--- FAIL' "$out" | head -150

# The DRA side's core modules alone (core/src/pluginreg, core/src/dra), as grpc-go's tests drive
# them (tests/grpc/pluginreg_server, tests/grpc/dra_server's scripted driver); the daemon's DRA
# side is in the scenarios (TestDRA*).
out="$logdir/dra.out"
(cd "$src/tests/kubelet" && timeout 600 "$build/grpcpeer.test" -test.run '^Test(PluginReg|DRA)' -test.v) >"$out" 2>&1
rc=$?
p=$(grep -c -- '--- PASS' "$out")
f=$(grep -c -- '--- FAIL' "$out")
if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
count "vg:dra" "$p" "$f"
[ "$f" -ne 0 ] && grep -B2 -A30 -- '--- FAIL' "$out" | head -80

# Every log with an error line ("==pid== ...", or a "--pid-- WARNING" other than the known
# unhandled pidfd_open (434), pidfd_send_signal (424), execveat (322) and seccomp (317),
# see above).
daemons=$(find "$logdir" -name 'daemon.*' | wc -l)
bad=0
for l in "$logdir"/unit-* "$logdir"/daemon.*; do
	[ -s "$l" ] || continue
	if grep -qE '^==[0-9]+== [^ ]' "$l" ||
		grep -E '^--[0-9]+-- WARNING' "$l" | grep -qvE 'unhandled amd64-linux syscall: (434|424|322|317)$'; then
		bad=$((bad + 1))
		echo "== valgrind: $l"
		head -60 "$l"
	fi
done
lost=$(cat "$logdir"/unit-* "$logdir"/daemon.* 2>/dev/null | grep -cE 'definitely lost|indirectly lost')
echo "valgrind: $daemons daemon processes and the unit tests checked; $bad logs with errors; $lost lost-block records"
if [ "$bad" -ne 0 ]; then
	failed=$((failed + bad))
	failures+=("valgrind-logs($bad)")
fi
[ ${#failures[@]} -ne 0 ] && echo "failed: ${failures[*]} (logs in $logdir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
