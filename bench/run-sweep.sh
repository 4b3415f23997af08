#!/usr/bin/env bash
# A sweep of issue 32, resumable: the shipped scenarios with BSP, ASP,
# backup workers, LSP, ALSP and auto on frozen binaries.  The sweep is the
# one the scenario files name ("sweep": "3" since the third; the second
# ran this script as bench/run-sweep2.sh).
#
#   bench/run-sweep.sh [SCENARIO...]      default: equal two-slow six-slow,
#                                         then the others
#
# Three paired seeds everywhere; five on two-slow and six-slow for BSP,
# backup, LSP, ALSP and auto (ASP takes the first three there).  SSP is not
# run again: its rules did not change, and the first sweep's records stand
# beside the second in the report as its reference.  Every run is appended
# to docs/results/SCENARIO.jsonl with its sweep and the build that ran
# it; a run already recorded is skipped, so an interrupted sweep resumes.
#
# Environment: KUDUS (the kudus binary; copy build/ somewhere first so that
# a rebuild does not change the binaries under a running sweep),
# KUDUS_BASE_PORT (default 15000).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
kudus=${KUDUS:-build/kudus}
port=${KUDUS_BASE_PORT:-15000}
if [ $# -gt 0 ]; then
    scenarios=("$@")
else
    scenarios=(equal two-slow six-slow one-very-slow noisy shifting wide slow-link)
fi
run() {
    local name=$1; shift
    "$kudus" experiment "bench/scenarios/$name.json" --results "docs/results/$name.jsonl" \
        --out "/tmp/kudus-experiments/$name" --base-port "$port" "$@" || {
        status=$?
        if [ $status -ge 128 ]; then exit $status; fi
        rc=1
    }
}
rc=0
for name in "${scenarios[@]}"; do
    case $name in
        two-slow|six-slow)
            run "$name" --models bsp,backup,lsp,alsp,auto
            run "$name" --models asp --seeds-only 3 ;;
        *)
            run "$name" ;;
    esac
done
echo "run-sweep: done; rebuild the report with: python3 bench/report.py"
exit $rc
