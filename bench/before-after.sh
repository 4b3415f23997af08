#!/usr/bin/env bash
# Speed before and after a change, in alternating pairs (issue 33: the
# restructuring must not cost speed).  Builds BASELINE_COMMIT in a
# temporary worktree (once: its binaries are kept in KUDUS_BASELINE_DIR-COMMIT,
# /var/tmp/kudus-baseline-COMMIT by default), then runs, TRIALS times, this build's and the
# baseline's `kudus bench phase` and `kudus bench pushpull --sizes 4K,1M,16M
# --shards 1,2 --inflight 1,8`, alternating which goes first.  Every row is
# appended to OUT with the trial, the side and the commit that ran it; a
# trial already recorded is skipped, so an interrupted run resumes.  At the
# end, bench/before-after.py prints the median of the paired ratios.
#
#   bench/before-after.sh [BUILD_DIR] [BASELINE_COMMIT] [TRIALS] [OUT]
#
# Environment: KUDUS_AFTER_ID (the after side's name, default HEAD's commit),
# KUDUS_BA_BENCHES (default "phase pushpull"), KUDUS_BA_SIZES (pushpull's
# sizes, default 4K,1M,16M), KUDUS_BASE_PORT (default 14000).
#
# Run it on a quiet machine: anything beside it (a build, a test suite, a
# sweep) moves the figures more than the change does.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
# The commit itself, not a name that may move (a cached build is keyed by it).
commit=$(git -C "$(cd "$(dirname "$0")/.." && pwd)" rev-parse --short "${2:-93a4113}^{commit}")
trials=${3:-6}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${4:-$here/docs/results/before-after.jsonl}
port=${KUDUS_BASE_PORT:-14000}
# The after side's name: HEAD, or KUDUS_AFTER_ID for a build not yet committed.
after=${KUDUS_AFTER_ID:-$(git -C "$here" rev-parse --short HEAD)}
# A narrower look: KUDUS_BA_BENCHES="pushpull" KUDUS_BA_SIZES=4K (with an OUT of its own).
benches=${KUDUS_BA_BENCHES:-phase pushpull}
sizes=${KUDUS_BA_SIZES:-4K,1M,16M}
# The baseline's binaries are built once and kept (KUDUS_BASELINE_DIR), so
# that a rerun, or a build made ahead at idle priority, skips the build.
base=${KUDUS_BASELINE_DIR:-/var/tmp/kudus-baseline}-$commit
if [ ! -x "$base/kudus" ]; then
    tree=$(mktemp -d)
    trap 'git -C "$here" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
    git -C "$here" worktree add --detach "$tree" "$commit" >/dev/null
    cmake -S "$tree" -B "$tree/build" -DKUDUS_TESTS=OFF >/dev/null
    cmake --build "$tree/build" -j 2 --target kudus kudus-shard kudus-scheduler kudus-worker kudus-monitor >/dev/null
    rm -rf "$base.new" && mkdir -p "$base.new"
    cp "$tree"/build/kudus* "$base.new/"
    rm -rf "$base" && mv "$base.new" "$base"
fi
touch "$out"
# One side's two benchmarks, tagged, appended to OUT.
run_side () {
    local trial=$1 side=$2 bin=$3 id=$4
    for bench in $benches; do
        local extra=()
        [ "$bench" = pushpull ] && extra=(--sizes "$sizes" --shards 1,2 --inflight 1,8 --repeat 3)
        "$bin/kudus" bench "$bench" --json true --base-port "$port" "${extra[@]}" 2>/dev/null |
            python3 -c '
import json, sys
trial, side, build = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        row = json.loads(line)
        row.update(trial=trial, side=side, build=build)
        print(json.dumps(row))' "$trial" "$side" "$id" >> "$out"
    done
}
for t in $(seq 1 "$trials"); do
    if grep -q "\"trial\": $t, \"side\": \"after\", \"build\": \"$after\"" "$out" \
    && grep -q "\"trial\": $t, \"side\": \"before\", \"build\": \"$commit\"" "$out"; then
        echo "before-after: trial $t recorded, skipped"
        continue
    fi
    if [ $((t % 2)) -eq 1 ]; then
        run_side "$t" before "$base" "$commit"; run_side "$t" after "$build" "$after"
    else
        run_side "$t" after "$build" "$after"; run_side "$t" before "$base" "$commit"
    fi
    echo "before-after: trial $t done"
done
python3 "$here/bench/before-after.py" "$out" "$commit" "$after"
