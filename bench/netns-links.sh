#!/usr/bin/env bash
# Push+pull throughput and barrier latency across emulated links
# (kudus local --netns), against the link's ceiling.  As root.
#
#   bench/netns-links.sh [RATE_MBIT/DELAY_MS ...]     default: 1000/0.2 100/5 10/20
#
# For each link setting, one worker and one shard train an MLP of 334
# hidden units (265,540 floats: 1.01 MiB a push, 1.01 MiB a pull) for 20 s,
# every node behind that link.  The worker's telemetry (the monitor's
# stream) gives the mean push, pull and barrier wait per iteration; the
# median over the run's windows is kept.  Throughput is the model's bytes
# over the push (or pull) time; its ratio is to the link's rate.  Test-set
# evaluation is off: the monitor's pulls would share the shard's link.  A push
# crosses two links (worker's up, shard's down), each at the rate, so the
# ceiling is the rate; the time includes one round trip for the reply.
# Each setting is appended to docs/results/netns-links.jsonl and skipped
# when already there; `python3 bench/report.py` does not read it:
# docs/performance.md quotes it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kudus=${KUDUS:-$here/build/kudus}
out=${NETNS_RESULTS:-$here/docs/results/netns-links.jsonl}
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(1000/0.2 100/5 10/20)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ "$(id -u)" -eq 0 ] || { echo "netns-links: needs root" >&2; exit 1; }
touch "$out"
for s in "${settings[@]}"; do
    rate=${s%/*}
    delay=${s#*/}
    if grep -q "\"setting\": \"$s\"" "$out"; then
        echo "netns-links: $s already recorded"
        continue
    fi
    "$kudus" local --netns true --workers 1 --shards 1 --model mlp --hidden 334 --max-seconds 20 \
        --eval-interval 3600 --link-rate-mbit "$rate" --link-delay-ms "$delay" --quiet true \
        --summary "$tmp/summary.json" > "$tmp/local.log" 2>&1 &
    lp=$!
    for _ in $(seq 1 200); do
        grep -q "stream tcp://" "$tmp/local.log" && break
        sleep 0.1
    done
    stream=$(grep -o 'stream tcp://[0-9.:]*' "$tmp/local.log" | cut -d' ' -f2)
    "$kudus" tail --json --timeout 30 "$stream" > "$tmp/tail.json" 2>/dev/null &
    tp=$!
    wait "$lp" || { echo "netns-links: run $s failed: $(tail -5 "$tmp/local.log")" >&2; exit 1; }
    kill "$tp" 2>/dev/null || true
    wait "$tp" 2>/dev/null || true
    python3 - "$tmp/tail.json" "$tmp/summary.json" "$s" "$rate" "$delay" >> "$out" <<'PY'
import json, statistics, sys, time
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
w = [r for r in rows if r["topic"] == "worker" and r.get("push_ms", 0) > 0]
w = w[len(w) // 5:]                      # skip the first fifth: start-up
s = json.load(open(sys.argv[2]))
setting, rate, delay = sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
bytes_ = s["params"] * 4
med = lambda k: statistics.median(r[k] for r in w)
push, pull, wait = med("push_ms"), med("pull_ms"), med("wait_ms")
mbit = lambda ms: bytes_ * 8 / (ms / 1000) / 1e6
rec = {
    "setting": setting, "rate_mbit": rate, "delay_ms": delay, "bytes": bytes_,
    "push_ms": round(push, 3), "pull_ms": round(pull, 3), "barrier_ms": round(wait, 3),
    "push_mbit": round(mbit(push), 1), "pull_mbit": round(mbit(pull), 1),
    "push_ratio": round(mbit(push) / rate, 3), "pull_ratio": round(mbit(pull) / rate, 3),
    "pushpull_ratio": round(2 * bytes_ * 8 / ((push + pull) / 1000) / 1e6 / rate, 3),
    "iterations": s["updates"], "windows": len(w),
    "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
}
print(json.dumps(rec))
PY
    tail -1 "$out"
done
