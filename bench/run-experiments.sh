#!/usr/bin/env bash
# Run the three scenarios of docs/experiments.md with 3 seeds each and copy
# the tables, plots and curves into docs/experiments/.  Takes about half an
# hour on 2 cores.  Usage: bench/run-experiments.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
build=${1:-build}
out=${2:-/tmp/kudus-experiments}
here=$(cd "$(dirname "$0")/.." && pwd)
port=15000
for scenario in homogeneous static-straggler dynamic; do
    "$build/kudus" experiment "$scenario" --out "$out/$scenario" --seeds 3 --base-port $port
    mkdir -p "$here/docs/experiments/$scenario"
    cp "$out/$scenario/results.md" "$out/$scenario/accuracy.png" "$out/$scenario/accuracy.csv" \
       "$here/docs/experiments/$scenario/"
done
