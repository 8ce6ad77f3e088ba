#!/bin/bash
# make fuzz: build the libFuzzer targets (fuzz/build.sh) and run each for SECONDS, starting
# from a copy of its committed corpus (new inputs go to OUT/corpus-<target>, never into the
# repository), then print executions and coverage per target. Any crash fails the run; the
# crashing input is OUT/crash-<target>-*.
# Usage: fuzz/run.sh BUILD OUT SECONDS [TARGET...] (the targets without fuzz_; default: all)
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1 out=$2 secs=$3
shift 3
only=" $* "
"$src/fuzz/build.sh" "$build" "$out" >/dev/null || exit 1
out=$(cd "$out" && pwd)
rc=0
for t in "$src"/fuzz/fuzz_*.c; do
	name=$(basename "$t" .c)
	name=${name#fuzz_}
	[ "$only" = "  " ] || [[ $only == *" $name "* ]] || continue
	[ -x "$out/fuzz_$name" ] || { echo "fuzz_$name: not built"; rc=1; continue; }
	mkdir -p "$out/corpus-$name"
	cp -n "$src/fuzz/corpus/$name"/* "$out/corpus-$name/" 2>/dev/null
	(cd "$out" && "./fuzz_$name" -max_total_time="$secs" -print_final_stats=1 \
		-artifact_prefix="$out/crash-$name-" "corpus-$name" >"$out/fuzz_$name.log" 2>&1)
	r=$?
	done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out/fuzz_$name.log" | tail -1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz_$name.log")
	cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([^ ]*\) .*/cov: \1 ft: \2 corp: \3/p' <<<"$done_line")
	if [ "$r" -ne 0 ]; then
		rc=1
		echo "fuzz_$name: CRASH (exit $r), see $out/fuzz_$name.log and $out/crash-$name-*"
	else
		printf 'fuzz_%-12s %10s execs  %s\n' "$name" "${execs:-?}" "${cov:-?}"
	fi
done
exit $rc
