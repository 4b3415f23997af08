#!/usr/bin/env bash
# Tune the learning rate of each model of `equal` (issue 16's protocol): a
# grid of 4 values per model, one tuning seed (100, distinct from the
# evaluation seeds), time to 0.86 as the criterion.
#
#   bench/tune-lr.sh            run the grid (resumable), then print the table
#   bench/tune-lr.sh --print    print the table of what is recorded, run nothing
#   bench/tune-lr.sh --apply    write the chosen values into bench/scenarios/*.json
#
# Runs are recorded in docs/results/tuning.jsonl (scenario "tuning", model
# "<model>-lr<value>") and skipped when already there.  The chosen lr of a
# model is the one with the shortest time to 0.86 (a run that never reached
# it counts as infinitely slow; ties go to the higher final accuracy).
# --apply writes it into every model entry of every scenario with the same
# consistency model (backup takes LSP's, ssp10 takes SSP's) and, where an
# entry has an lr per optimizer, gives "sgd" ten times the momentum value
# (heavy-ball momentum 0.9 multiplies the step by 1/(1-0.9)).
#
# Environment: KUDUS (default build/kudus), KUDUS_BASE_PORT (default 15600),
# LR_GRID_PHASED (default "0.025 0.05 0.1 0.2": BSP, LSP, ALSP, which average
# N gradients per step), LR_GRID_ASYNC (default "0.001 0.0015 0.0025 0.0035": ASP
# and SSP, which take one step per gradient).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
kudus=${KUDUS:-build/kudus}
port=${KUDUS_BASE_PORT:-15600}
mode=${1:-run}
export LR_GRID_PHASED=${LR_GRID_PHASED:-0.025 0.05 0.1 0.2}
export LR_GRID_ASYNC=${LR_GRID_ASYNC:-0.001 0.0015 0.0025 0.0035}
results=docs/results/tuning.jsonl
scenario=/tmp/kudus-tuning.json

if [ "$mode" = run ]; then
    [ -x "$kudus" ] || make build
    # The tuning scenario: equal's shape and models, one seed, the grid.
    python3 - "$scenario" <<'PY'
import json, os, sys
equal = json.load(open("bench/scenarios/equal.json"))
phased = os.environ["LR_GRID_PHASED"].split()
asyncs = os.environ["LR_GRID_ASYNC"].split()
models = []
for m in equal["models"]:
    grid = asyncs if m.get("consistency", m["name"]) in ("asp", "ssp") else phased
    for lr in grid:
        entry = dict(m)
        entry["name"] = "%s-lr%s" % (m["name"], lr)
        entry["lr"] = float(lr)
        models.append(entry)
# Stop at the criterion, and give up at 120 s: a setting that needs longer
# than twice BSP's time at a middling rate is not the one chosen anyway.
equal.update(name="tuning", seeds=[100], models=models, targets=[0.86], target=0.86,
             cap_seconds=120,
             description="learning-rate grid on equal (bench/tune-lr.sh)")
json.dump(equal, open(sys.argv[1], "w"), indent=1)
PY
    "$kudus" experiment "$scenario" --results "$results" --out /tmp/kudus-experiments/tuning \
        --base-port "$port" || { status=$?; [ $status -ge 128 ] && exit $status; }
    mode=--print
fi

python3 - "$mode" "$results" <<'PY'
import glob, json, math, re, sys
mode, path = sys.argv[1], sys.argv[2]
if mode not in ("--print", "--apply"):
    sys.exit("usage: bench/tune-lr.sh [--print|--apply]")
try:
    runs = [json.loads(l) for l in open(path) if l.strip()]
except FileNotFoundError:
    sys.exit("tune-lr: no %s yet; run bench/tune-lr.sh first" % path)
table = {}
for r in runs:
    if r.get("scenario") != "tuning":
        continue
    base = r["model"].rsplit("-lr", 1)[0]
    t = (r.get("time_to") or {}).get("0.86")
    table.setdefault(base, []).append((r["lr"], t, r.get("final_accuracy"), r["consistency"]))
chosen = {}
print("%-6s %-8s %-14s %s" % ("model", "lr", "time to 0.86", "final accuracy"))
for base in sorted(table):
    rows = sorted(table[base])
    for lr, t, acc, _ in rows:
        print("%-6s %-8g %-14s %s" % (base, lr, "%.2f s" % t if t is not None else "not reached",
                                      "%.4f" % acc if acc is not None else "-"))
    best = min(rows, key=lambda x: (x[1] if x[1] is not None else math.inf, -(x[2] or 0)))
    chosen[best[3]] = best[0]
    edge = best[0] in (rows[0][0], rows[-1][0]) and len(rows) > 1
    print("%-6s chosen lr %g%s%s" % (base, best[0], "" if len(rows) == 4 else
                                     "  (only %d of 4 grid values recorded)" % len(rows),
                                     "  (at the edge of the grid: consider widening it)" if edge else ""))
if mode == "--print":
    print("\nwrite them into bench/scenarios/*.json with: bench/tune-lr.sh --apply")
    sys.exit(0)
# --apply: rewrite the "lr" of each model entry line, by consistency model.
pat = re.compile(r'("lr":\s*)(\{[^}]*\}|[0-9.eE+-]+)')
for f in sorted(glob.glob("bench/scenarios/*.json")):
    out = []
    for line in open(f):
        m = re.search(r'"consistency":\s*"(\w+)"', line)
        if m and '"name"' in line and m.group(1) in chosen:
            lr = chosen[m.group(1)]
            def repl(mm):
                v = mm.group(2)
                if not v.startswith("{"):
                    return mm.group(1) + "%g" % lr
                keys = json.loads(v)
                for k in keys:
                    keys[k] = lr * 10 if k == "sgd" else lr
                return mm.group(1) + "{" + ", ".join('"%s": %g' % kv for kv in keys.items()) + "}"
            line = pat.sub(repl, line, count=1)
        out.append(line)
    text = "".join(out)
    json.loads(text)        # still valid JSON
    open(f, "w").write(text)
    print("tune-lr: updated", f)
PY
