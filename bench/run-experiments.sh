#!/usr/bin/env bash
# Run the shipped scenarios of docs/experiments.md, resumably.
#
#   bench/run-experiments.sh [SCENARIO...]
#
# Each scenario is bench/scenarios/NAME.json; its finished runs are appended
# to docs/results/NAME.jsonl, one JSON line per (model, optimizer, seed), and
# runs already recorded there are skipped, so an interrupted sweep resumes
# where it stopped (a run killed midway records nothing).  With no argument,
# every shipped scenario runs, headline claims first.  Then
# `python3 bench/report.py` rebuilds the tables and plots of
# docs/experiments.md from docs/results/ alone.
#
# Environment: KUDUS (the kudus binary, default build/kudus, built with
# `make build` when missing), KUDUS_BASE_PORT (default 15000),
# EXPERIMENT_FLAGS (more flags for every `kudus experiment`, e.g.
# "--seeds-only 1" or "--models bsp,lsp").
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
kudus=${KUDUS:-build/kudus}
port=${KUDUS_BASE_PORT:-15000}
if [ ! -x "$kudus" ]; then
    make build
fi
if [ $# -gt 0 ]; then
    scenarios=("$@")
else
    scenarios=(two-slow six-slow equal noisy shifting one-very-slow wide)
fi
read -r -a extra <<< "${EXPERIMENT_FLAGS:-}"
rc=0
for name in "${scenarios[@]}"; do
    file=bench/scenarios/$name.json
    if [ ! -f "$file" ]; then
        echo "run-experiments: no scenario $file" >&2
        rc=2
        continue
    fi
    "$kudus" experiment "$file" --results "docs/results/$name.jsonl" \
        --out "/tmp/kudus-experiments/$name" --base-port "$port" ${extra[@]+"${extra[@]}"} || {
        status=$?
        # Interrupted (Ctrl-C, SIGTERM): stop the sweep; the finished runs are kept.
        if [ $status -ge 128 ]; then exit $status; fi
        rc=1
    }
done
echo "run-experiments: done; rebuild the report with: python3 bench/report.py"
exit $rc
