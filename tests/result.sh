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

# Count the "PASS name" / "FAIL name: why" lines of a checker read on stdin (echoed as they come).
tally() {
	local line
	while IFS= read -r line; do
		echo "$line"
		case $line in
		PASS\ *) passed=$((passed + 1)) ;;
		FAIL\ *) failed=$((failed + 1)) ;;
		esac
	done
}
