#!/usr/bin/env bash
# Scheduler CPU per applied gradient under ASP and SSP: this build (shards
# apply pushes on arrival, the scheduler only gates clocks) against the
# scheduler of an earlier commit (one COMMIT per gradient to every shard),
# measured in the same run by `kudus bench barrier --baseline-bin-dir`.
# Usage: bench/async-vs-before.sh [BUILD_DIR] [BASELINE_COMMIT]
# The default baseline is the last commit before the direct path.
set -euo pipefail
build=${1:-build}
commit=${2:-123fb20}
here=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d /tmp/kudus-baseline-XXXXXX)
trap 'git -C "$here" worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"' EXIT
git -C "$here" worktree add --detach "$tree" "$commit" >/dev/null
cmake -S "$tree" -B "$tree/build" -DKUDUS_TESTS=OFF >/dev/null
cmake --build "$tree/build" -j 2 --target kudus-scheduler >/dev/null
"$build/kudus" bench barrier --consistency asp,ssp --workers 16,64,256 --phases 200 \
    --repeat 5 --baseline-bin-dir "$tree/build" "${@:3}"
