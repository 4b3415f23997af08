#!/usr/bin/env bash
# Do the suites that start services flake on a busy machine?  Runs them
# (ctest -L "integration|inproc|python": the spawned services, the
# in-process ones and the Python clusters) round after round beside
# `stress-ng --cpu 2`, both at idle
# priority (SCHED_IDLE) so that other work on the machine keeps the CPU it
# had, until ROUNDS rounds in a row have passed, and stops at the first
# failure (issue 35 §5).
#
#   bench/flake-rounds.sh [ROUNDS] [BUILD_DIR] [RESULTS]
#                         (10, build, docs/results/flake-rounds.jsonl)
#   CTEST_JOBS: suites at a time (default 4, as make test runs them)
#   FLAKE_LABELS: the ctest label regex (default "integration|inproc|python")
#
# Resumable: every round appends a row to RESULTS (its build, pass or the
# suites that failed, its time), and a rerun counts the passes in a row at
# the end of the file and runs only the rounds still missing, so a long
# proof can be split across sessions.  A failure, or a round of another
# build or other labels, ends the streak; the next run starts a new one.  The build of a round is the commit of the tree
# (the last one that changed more than docs/ and README.md, with "+dirty" when the
# tree has such changes) and the checksum of the kudus binary.
# Exits 0 when the streak is complete, 1 after a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-10}
build=${2:-$here/build}
results=${3:-$here/docs/results/flake-rounds.jsonl}
# As many suites at a time as `make test` runs (its CTEST_FLAGS -j 4).
jobs=${CTEST_JOBS:-4}
labels=${FLAKE_LABELS:-integration|inproc|python}
command -v stress-ng > /dev/null || { echo "flake-rounds.sh: stress-ng is not installed (apt-get install stress-ng)" >&2; exit 2; }
[ -x "$build/kudus" ] || { echo "flake-rounds.sh: no build in $build (make build first)" >&2; exit 2; }
touch "$results"
# The last commit that changed more than documentation: committing the
# rounds' own results (docs/) between sessions does not start a new streak.
commit=$(git -C "$here" log -1 --format=%h -- . ':!docs' ':!README.md')
# Documentation edited since (results among it) does not make a build dirty.
dirty=$([ -n "$(git -C "$here" status --porcelain --untracked-files=no -- . ':!docs' ':!README.md')" ] && echo "+dirty" || true)
build_id="$commit$dirty-$(sha256sum "$build/kudus" | cut -c1-8)"

streak () {     # passes in a row of this build at the end of the results
    python3 - "$results" "$build_id" "$labels" <<'EOF'
import json, sys
n = 0
for line in open(sys.argv[1]):
    if line.strip():
        row = json.loads(line)
        # Rows from before labels were recorded ran "integration" alone.
        same = row["build"] == sys.argv[2] and row.get("labels", "integration") == sys.argv[3]
        n = n + 1 if row["pass"] and same else 0
print(n)
EOF
}

log=$(mktemp -d)
chrt --idle 0 stress-ng --cpu 2 --timeout 0 --quiet &
stress=$!
trap 'kill "$stress" 2>/dev/null || true; wait "$stress" 2>/dev/null || true; rm -rf "$log"' EXIT
passed=$(streak)
echo "flake-rounds.sh: build $build_id, suites labelled $labels; $passed of $rounds rounds in a row already recorded in $results"
while [ "$passed" -lt "$rounds" ]; do
    round=$((passed + 1))
    start=$(date +%s)
    ok=true
    # A label regex that matches no test is an error, not a pass.
    (cd "$build" && chrt --idle 0 nice -n 19 ctest -L "$labels" -j "$jobs" --no-tests=error --output-on-failure \
         > "$log/round.log" 2>&1) || ok=false
    seconds=$(($(date +%s) - start))
    # ctest's list after "The following tests FAILED": "N - name (Failed)",
    # "(Timeout)", "(SEGFAULT)", "(Not Run)", "(Subprocess killed)"...
    failed=$(grep -oE '[0-9]+ - [A-Za-z0-9_]+ \([A-Za-z ]+\)' "$log/round.log" \
             | awk '{print $3}' | paste -sd, - || true)
    # "N tests failed out of M": M, the suites the round ran.
    tests=$(grep -oE 'tests? failed out of [0-9]+' "$log/round.log" | awk '{print $NF}' | tail -1 || true)
    python3 - "$round" "$ok" "$seconds" "$build_id" "$failed" "$jobs" "$labels" "${tests:-0}" >> "$results" <<'EOF'
import json, sys, time
rnd, ok, seconds, build, failed, jobs, labels, tests = sys.argv[1:9]
print(json.dumps({"round": int(rnd), "pass": ok == "true", "seconds": int(seconds), "build": build,
                  "failed": [f for f in failed.split(",") if f], "stress": "stress-ng --cpu 2", "jobs": int(jobs),
                  "labels": labels, "tests": int(tests),
                  "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
EOF
    if [ "$ok" != true ]; then
        kept=${TMPDIR:-/tmp}/kudus-flake-round-$round.log
        cp "$log/round.log" "$kept"
        echo "flake-rounds.sh: round $round FAILED ($seconds s): $failed; its log: $kept"
        echo "flake-rounds.sh: the streak ended at $passed of $rounds"
        exit 1
    fi
    passed=$round
    echo "flake-rounds.sh: round $round passed ($seconds s); $passed of $rounds in a row"
done
echo "flake-rounds.sh: $passed of $rounds rounds passed in a row"
