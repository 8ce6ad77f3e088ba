# Sourced by the shell test scripts (tests/manifests/run.sh, tests/deploy/*.sh): one line per
# check, PASS or FAIL with its reason, and the counts for the closing "N passed, M failed" line.
passed=0
failed=0

result() { # NAME OK [WHY]
	if [ "$2" = 1 ]; then
		echo "PASS $1"
		passed=$((passed + 1))
	else
		echo "FAIL $1: ${3:-}"
		failed=$((failed + 1))
	fi
}
