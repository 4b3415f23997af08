#!/usr/bin/env bash
# Kudus against ps-lite, dense push+pull of one key of S floats, one
# server (shard) and one worker, one request in flight, interleaved trial
# by trial so that both see the same machine.  Build ps-lite first with
# build.sh.
#
#   bench/vs-pslite/run.sh [TRIALS]     default 7
#
# Environment: KUDUS (default build/kudus), PSLITE_BIN (build.sh's OUT/bin,
# default /tmp/kudus-vs-pslite/bin), SIZES (default 64K,256K,1M,4M,16M),
# SECONDS_PER_SIZE (default 0.5), SPARSE (default 1; 0 skips the sparse
# part), RESULTS (default
# docs/results/vs-pslite.jsonl), BASE_PORT (default 13000, outside the tests' 20000-31999; ps-lite takes
# BASE_PORT + trial, Kudus BASE_PORT + 200 and up).
#
# Each trial runs pslite_dense over every size, then `kudus bench pushpull
# --shards 1 --inflight 1 --repeat 1`, which times Kudus over TCP, over
# shared memory and the raw ZeroMQ echo in the same run; odd trials run
# Kudus first; then ps-lite's test_kv_app_benchmark and Kudus's keyed push
# and pull of its shape, in the same order.  Every row is appended to RESULTS with the trial, the run's
# id and both builds; summary.py prints the medians of the paired ratios.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
trials=${1:-7}
kudus=${KUDUS:-build/kudus}
bin=${PSLITE_BIN:-/tmp/kudus-vs-pslite/bin}
sizes=${SIZES:-64K,256K,1M,4M,16M}
secs=${SECONDS_PER_SIZE:-0.5}
# ps-lite's sparse benchmark is compiled with 10 million keys.
if [ "${SPARSE:-1}" = 0 ]; then sparse_keys=0; else sparse_keys=10000000; fi
results=${RESULTS:-docs/results/vs-pslite.jsonl}
port=${BASE_PORT:-13000}
if [ ! -x "$bin/pslite_dense" ]; then
    echo "run.sh: $bin/pslite_dense is missing; run bench/vs-pslite/build.sh PSLITE_TREE first" >&2
    exit 2
fi
if [ ! -x "$kudus" ]; then
    echo "run.sh: $kudus is missing; build Kudus first (make build)" >&2
    exit 2
fi
pslite_commit=$(cat "$bin/PSLITE_COMMIT" 2>/dev/null || echo unknown)
kudus_build=${KUDUS_BUILD_ID:-$(git describe --always --dirty 2>/dev/null || echo unknown)}
run_id=$(date -u +%Y%m%dT%H%M%SZ)
scratch=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One ps-lite run: scheduler, server and worker on loopback only.  Each
# run gets its own scheduler port: a port a previous run's nodes knew may
# still receive their last frames, which ps-lite's scheduler cannot parse.
pslite() {
    local out=$1 trial=$2
    export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 \
           DMLC_PS_ROOT_PORT=$((port + trial)) DMLC_NODE_HOST=127.0.0.1
    pids=()
    DMLC_ROLE=scheduler "$bin/pslite_dense" "$sizes" "$secs" >/dev/null 2>>"$scratch/pslite.log" & pids+=($!)
    DMLC_ROLE=server "$bin/pslite_dense" "$sizes" "$secs" >/dev/null 2>>"$scratch/pslite.log" & pids+=($!)
    if ! DMLC_ROLE=worker timeout 300 "$bin/pslite_dense" "$sizes" "$secs" >"$out" 2>>"$scratch/pslite.log"; then
        echo "run.sh: the ps-lite worker failed; its log:" >&2
        tail -20 "$scratch/pslite.log" >&2
        exit 1
    fi
    wait "${pids[@]}" || true
    pids=()
}

kudus_run() {
    "$kudus" bench pushpull --sizes "$sizes" --shards 1 --inflight 1 --repeat 1 \
        --run-seconds "$secs" --json --base-port $((port + 200)) --log-level error >"$1"
}

# Tags every row of a trial and appends it to the results.
record() {
    python3 - "$1" "$2" "$3" "$run_id" "$kudus_build" "$pslite_commit" "$results" <<'PY'
import json, sys
path, system, trial, run_id, build, pslite, results = sys.argv[1:]
with open(path) as f, open(results, "a") as out:
    for line in f:
        line = line.strip()
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        row.update({"system": system, "trial": int(trial), "run_id": run_id,
                    "build": build, "pslite_commit": pslite})
        out.write(json.dumps(row) + "\n")
PY
}

# ps-lite's own sparse benchmark (10 million keys, one float each, one
# push and one pull, each timed once) against Kudus's keyed push and pull
# of the same shape (kudus bench sparse --sparse-parts pslite), cold.
pslite_sparse() {
    local out=$1 trial=$2
    export DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=1 DMLC_PS_ROOT_URI=127.0.0.1 \
           DMLC_PS_ROOT_PORT=$((port + 50 + trial)) DMLC_NODE_HOST=127.0.0.1
    pids=()
    DMLC_ROLE=scheduler "$bin/test_kv_app_benchmark" >/dev/null 2>&1 & pids+=($!)
    DMLC_ROLE=server "$bin/test_kv_app_benchmark" >/dev/null 2>&1 & pids+=($!)
    if ! DMLC_ROLE=worker timeout 300 "$bin/test_kv_app_benchmark" >"$scratch/sparse.log" 2>&1; then
        echo "run.sh: ps-lite's test_kv_app_benchmark failed:" >&2
        tail -20 "$scratch/sparse.log" >&2
        exit 1
    fi
    wait "${pids[@]}" || true
    pids=()
    python3 - "$scratch/sparse.log" >"$out" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
push = re.search(r"num = (\d+), Push average time cost: ([\d.]+)ms", text)
pull = re.search(r"num = (\d+), Pull average time cost: ([\d.]+)ms", text)
if not push or not pull:
    sys.exit("run.sh: no times in test_kv_app_benchmark's output")
print(json.dumps({"bench": "sparse-pslite", "keys": int(push.group(1)),
                  "first_push_ms": float(push.group(2)), "first_pull_ms": float(pull.group(2))}))
PY
}

kudus_sparse() {
    "$kudus" bench sparse --sparse-parts pslite --pull-keys "$sparse_keys" --repeat 1 --json \
        --base-port $((port + 300)) --log-level error >"$1"
}

# One workload of a trial, both systems in the trial's order:
# pair TRIAL PSLITE_FN KUDUS_FN.
pair() {
    local t=$1 who
    for who in "${order[@]}"; do
        if [ "$who" = pslite ]; then
            "$2" "$scratch/p.json" "$t"; record "$scratch/p.json" ps-lite "$t"
        else
            "$3" "$scratch/k.json"; record "$scratch/k.json" kudus "$t"
        fi
    done
}

mkdir -p "$(dirname "$results")"
for ((t = 1; t <= trials; t++)); do
    if ((t % 2)); then order=(kudus pslite); else order=(pslite kudus); fi
    pair "$t" pslite kudus_run
    if [ "$sparse_keys" -gt 0 ]; then
        pair "$t" pslite_sparse kudus_sparse
    fi
    echo "run.sh: trial $t of $trials recorded" >&2
done
python3 "$here/bench/vs-pslite/summary.py" "$results" --run "$run_id"
