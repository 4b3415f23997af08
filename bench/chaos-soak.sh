#!/usr/bin/env bash
# The long chaos soaks of issue 35: `kudus chaos --seconds 1800` for each
# seed, checked, one row a seed in docs/results/chaos.jsonl.  Resumable: a
# seed already recorded at this length is skipped, and a soak cut short
# is run again.  Runs on a frozen copy of the build, so rebuilding the tree
# while the soaks run does not change what they test.  Everything runs at
# idle priority (SCHED_IDLE): the soaks must not disturb other work on the
# machine, and they are the harder test for it.
#
#   bench/chaos-soak.sh [--seeds "1 2 3"] [--seconds 1800] [--jobs 2]
#                       [--port 17000] [--work DIR] [--build DIR] [--refreeze]
#                       [--results FILE]
#
# --jobs soaks run at once (at most 2: each is a cluster of 10 processes),
# soak i on base port --port + 200 i (17000 and 17200: a cluster takes its
# base to base + 103, and test_prometheus binds 17700 when make test runs
# beside).  Histories stay in --work/seed-S for
# a failing seed to be looked at (about 240 MB for 30 minutes).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
seeds="1 2 3 5 6 7 8 9 10 11"
seconds=1800
jobs=2
port=17000
work=/var/tmp/kudus-chaos-soak
build=$here/build
refreeze=0
results=$here/docs/results/chaos.jsonl
while [ $# -gt 0 ]; do
    case $1 in
        --seeds) seeds=$2; shift 2 ;;
        --seconds) seconds=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --work) work=$2; shift 2 ;;
        --build) build=$2; shift 2 ;;
        --refreeze) refreeze=1; shift ;;
        --results) results=$2; shift 2 ;;
        *) echo "chaos-soak.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
case $jobs in 1|2) ;; *) echo "chaos-soak.sh: --jobs must be 1 or 2" >&2; exit 2 ;; esac
idle=(chrt --idle 0 nice -n 19)
mkdir -p "$work"
touch "$results"

# The frozen build and its id: the commit it was built from and the
# checksum of the kudus binary (a dirty tree shows in the latter).
frozen=$work/frozen
if [ $refreeze = 1 ] || [ ! -x "$frozen/kudus" ]; then
    [ -x "$build/kudus" ] || { echo "chaos-soak.sh: no build in $build (make build first)" >&2; exit 2; }
    rm -rf "$frozen.new"
    cp -a "$build" "$frozen.new"
    commit=$(git -C "$here" rev-parse --short HEAD)
    dirty=$([ -n "$(git -C "$here" status --porcelain --untracked-files=no -- . ':!docs/results')" ] && echo "+dirty" || true)
    echo "$commit$dirty-$(sha256sum "$frozen.new/kudus" | cut -c1-8)" > "$frozen.new/BUILD_ID"
    rm -rf "$frozen"
    mv "$frozen.new" "$frozen"
fi
build_id=$(cat "$frozen/BUILD_ID")
echo "chaos-soak.sh: build $build_id, $seconds s a seed, results in $results"

recorded () {   # seed -> 0 when a row for it at this length exists
    python3 - "$results" "$1" "$seconds" <<'EOF'
import json, sys
seed, seconds = int(sys.argv[2]), float(sys.argv[3])
for line in open(sys.argv[1]):
    line = line.strip()
    if line and json.loads(line).get("seed") == seed and float(json.loads(line).get("seconds", 0)) == seconds:
        sys.exit(0)
sys.exit(1)
EOF
}

soak () {       # seed base-port: run, check, record
    local seed=$1 p=$2 out=$work/seed-$1
    rm -rf "$out"
    echo "chaos-soak.sh: seed $seed on port $p, log $out.log"
    local code=0
    "${idle[@]}" "$frozen/kudus" chaos --seed "$seed" --seconds "$seconds" --out "$out" \
        --base-port "$p" > "$out.log" 2>&1 || code=$?
    if [ ! -f "$out/report.json" ] || ! grep -q '"ev":"done"' "$out/chaos.jsonl" 2>/dev/null; then
        echo "chaos-soak.sh: seed $seed did not finish (exit $code); not recorded" >&2
        return 0
    fi
    # Check again on its own to measure the checker (it rewrites the same report).
    "${idle[@]}" /usr/bin/time -v "$frozen/kudus" chaos check "$out" > "$out/check.out" 2> "$out/check.time" || true
    python3 - "$out" "$seed" "$seconds" "$build_id" "$code" >> "$out/row.json" <<'EOF'
import json, sys, re, time
out, seed, seconds, build, code = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rep = json.load(open(out + "/report.json"))
summ = {}
try:
    summ = json.load(open(out + "/summary.json"))
except Exception:
    pass
by_kind, not_fired = {}, 0
for line in open(out + "/chaos.jsonl"):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("ev") == "fault":
        if o.get("fired"):
            by_kind[o["kind"]] = by_kind.get(o["kind"], 0) + 1
        else:
            not_fired += 1
peak = None
for line in open(out + "/check.time"):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", line)
    if m:
        peak = int(m.group(1))
row = {"seed": seed, "seconds": seconds, "model": summ.get("model"),
       "consistency": summ.get("consistency"), "faults": rep["faults"], "faults_by_kind": by_kind,
       "not_fired": not_fired, "survived": rep["survived"], "rows_lost": rep["rows_lost"],
       "rows_twice": rep["rows_twice"], "gradients_twice": rep["gradients_twice"],
       "worst_recovery_ms": rep["worst_stall_ms"], "restarts": rep["restarts"],
       "epochs_completed": rep["epochs_completed"], "crc_points": rep.get("crc_points"),
       "rss_growth": rep["growth"]["rss"], "fds_growth": rep["growth"]["fds"],
       "test_accuracy": summ.get("test_accuracy"), "checker_peak_rss_kb": peak,
       "verdict": "pass" if rep["pass"] and code == 0 else "fail",
       "failures": rep["failures"][:5], "reproduce": rep["reproduce"], "build": build,
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
print(json.dumps(row))
EOF
    flock "$results" sh -c "cat '$out/row.json' >> '$results'"
    echo "chaos-soak.sh: seed $seed: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["verdict"], "faults", r["faults"], "lost", r["rows_lost"], "twice", r["rows_twice"])' "$out/row.json")"
}

slot=0
pids=()
for seed in $seeds; do
    if recorded "$seed"; then
        echo "chaos-soak.sh: seed $seed already recorded; skipped"
        continue
    fi
    if [ ${#pids[@]} -ge "$jobs" ]; then
        wait -n || true
        alive=()
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
        pids=("${alive[@]}")
    fi
    # A free slot: the base port no running soak of ours holds.
    used=" $(for p in "${pids[@]}"; do cat "$work/slot-$p" 2>/dev/null; done | tr '\n' ' ')"
    slot=0
    while [[ $used == *" $slot "* ]]; do slot=$((slot + 1)); done
    soak "$seed" $((port + 200 * slot)) &
    echo "$slot" > "$work/slot-$!"
    pids+=($!)
done
wait
rm -f "$work"/slot-*
echo "chaos-soak.sh: done"
