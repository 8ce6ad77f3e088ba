#!/bin/sh
# make test-live-mshv: the daemon against this host's real /dev/mshv (register, Healthy, Allocate
# through the mock kubelet; see tests/kubelet/cmd/live-kvm/mshv.go). Opt-in:
#   TEST_MSHV_LIVE unset (or not 1)   prints why it did not run, exits 0 (CI does not run it)
#   TEST_MSHV_LIVE=1, /dev/mshv here   runs the check; exit status is its verdict
#   TEST_MSHV_LIVE=1, no /dev/mshv     prints that it cannot run and why, exits 1: a live test
#                                      that was asked for and did not run must not look passed
# Usage: tests/live/run-mshv.sh BUILD_DIR
set -eu
build=$(cd "$1" && pwd)

if [ -c /dev/mshv ]; then
	here="this host has /dev/mshv"
elif [ -e /dev/mshv ]; then
	here="/dev/mshv exists here but is not a character device"
else
	here="this host has no /dev/mshv (it needs Linux as the root partition of Microsoft Hypervisor, with the mshv driver loaded)"
fi
if [ "${TEST_MSHV_LIVE:-}" != 1 ]; then
	echo "test-live-mshv: not run: it is opt-in (TEST_MSHV_LIVE=1) and $here"
	exit 0
fi
if [ ! -c /dev/mshv ]; then
	echo "test-live-mshv: FAIL: TEST_MSHV_LIVE=1 but it cannot run: $here" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "test-live-mshv: FAIL: must run as root (it creates a copy of the /dev/mshv node under a temporary root)" >&2
	exit 1
fi
"$build/live-kvm" -mshv -build "$build" && rc=0 || rc=$?
if [ "$rc" -eq 0 ]; then
	echo "test-live-mshv: PASS"
else
	echo "test-live-mshv: FAIL (exit $rc)" >&2
fi
exit "$rc"
