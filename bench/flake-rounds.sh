#!/usr/bin/env bash
# Do the integration suites flake on a busy machine?  Runs them ROUNDS times
# in a row (ctest -L integration) beside `stress-ng --cpu 2`, both at idle
# priority (SCHED_IDLE) so that other work on the machine keeps the CPU it
# had, and stops at the first failure (issue 35 §5).  Prints one line a
# round and the count at the end; exits 1 if a round failed.
#
#   bench/flake-rounds.sh [ROUNDS] [BUILD_DIR]      (10, build)
set -euo pipefail
rounds=${1:-10}
build=${2:-$(cd "$(dirname "$0")/.." && pwd)/build}
command -v stress-ng > /dev/null || { echo "flake-rounds.sh: stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2; }
log=$(mktemp -d)
chrt --idle 0 stress-ng --cpu 2 --timeout 0 --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null || true; wait "$stress" 2>/dev/null || true' EXIT
passed=0
for i in $(seq 1 "$rounds"); do
    start=$(date +%s)
    if (cd "$build" && chrt --idle 0 nice -n 19 ctest -L integration --output-on-failure > "$log/round-$i.log" 2>&1); then
        passed=$((passed + 1))
        echo "flake-rounds.sh: round $i passed ($(($(date +%s) - start)) s)"
    else
        echo "flake-rounds.sh: round $i FAILED ($(($(date +%s) - start)) s): $(grep -E 'tests failed|\*\*\*Failed|\(Failed\)|\(Timeout\)' "$log/round-$i.log" | tr '\n' ' ')"
        echo "flake-rounds.sh: its log: $log/round-$i.log"
        echo "flake-rounds.sh: $passed of $rounds rounds passed in a row"
        exit 1
    fi
done
echo "flake-rounds.sh: $passed of $rounds rounds passed in a row"
rm -rf "$log"
