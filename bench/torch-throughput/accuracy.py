#!/usr/bin/env python3
"""What overlap costs in accuracy: kudus.torch workers training the CNN of
examples/torch_cnn.py to a target accuracy, at two shard momenta (issue 34
section 4), in three modes: plain (no overlap), overlap (Worker(overlap=True,
predict=False): each step at the model as pulled, one clock stale) and
predict (Worker(overlap=True) as it comes: at the model moved on by the
update in flight).

    /usr/bin/python3 bench/torch-throughput/accuracy.py [--runs 3] [--target 0.85]
    /usr/bin/python3 bench/torch-throughput/accuracy.py --summary-only

Each run is `kudus run --workers N --consistency asp --momentum M
--target-accuracy T -- python3 examples/torch_cnn.py [--overlap
[--no-predict]] --evaluate E`, which stops at the first evaluation at or above T (or at --max-seconds)
and writes its summary. A run is one line of --results: the configuration,
time to each accuracy, samples a second, and samples to the target (time
to it times the run's samples a second, an estimate: the rate is nearly
constant with one worker). Configurations take turns within a round, each
round starting with the next one, and a rerun skips recorded runs.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# (mode, momentum): plain, overlap with predict=False, overlap as it comes.
CONFIGS = [("plain", 0.9), ("overlap", 0.9), ("plain", 0.5), ("overlap", 0.5), ("predict", 0.9),
           ("predict", 0.5)]


def run(a, mode, momentum, tmp):
    summary = os.path.join(tmp, "summary.json")
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"),
               KUDUS_LIB=os.path.join(a.bin_dir, "libkudus.so"))
    cmd = [os.path.join(a.bin_dir, "kudus"), "run", "--workers", str(a.workers), "--consistency", "asp",
           "--momentum", str(momentum), "--target-accuracy", str(a.target),
           "--max-seconds", str(a.max_seconds), "--summary", summary, "--log-level", "warn",
           "--base-port", str(a.base_port), "--",
           "/usr/bin/python3", os.path.join(SRC, "examples", "torch_cnn.py"),
           "--evaluate", str(a.evaluate)]
    if mode in ("overlap", "predict"):
        cmd.append("--overlap")
    if mode == "overlap":
        cmd.append("--no-predict")
    with open(os.path.join(tmp, "run.log"), "w") as log:
        rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            timeout=a.max_seconds + 120).returncode
    if rc != 0 or not os.path.exists(summary):
        sys.exit(f"accuracy: {mode} momentum {momentum}: kudus run failed ({rc}); see {tmp}/run.log")
    s = json.load(open(summary))
    t = (s.get("time_to_accuracy") or {}).get(f"{a.target:.2f}")
    sps = s.get("samples_per_second")
    return {"time_to_target": t, "samples_per_second": sps,
            "samples_to_target": round(t * sps) if t and sps else None,
            "stop_reason": s.get("stop_reason"), "test_accuracy": s.get("test_accuracy"),
            "staleness_p99": s.get("staleness_p99"), "time_to_accuracy": s.get("time_to_accuracy")}


def summary(path, target, workers):
    rows = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    rows = [r for r in rows if r.get("workers", 1) == workers]
    print(f"| worker | momentum | runs | time to {target} (s), median | each run | samples to it, median | "
          "samples/s, median | test accuracy at the stop |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, m in CONFIGS:
        rs = [r for r in rows if r["mode"] == mode and r["momentum"] == m and r["target"] == target]
        if not rs:
            continue
        ts = [r["time_to_target"] for r in rs]
        reached = [t for t in ts if t is not None]
        med = f"{statistics.median(reached):.1f}" if len(reached) == len(ts) else \
            f"{len(ts) - len(reached)} of {len(ts)} missed"
        each = ", ".join("-" if t is None else f"{t:.1f}" for t in ts)
        samp = [r["samples_to_target"] for r in rs if r["samples_to_target"]]
        sps = [r["samples_per_second"] for r in rs if r["samples_per_second"]]
        acc = ", ".join(f"{r['test_accuracy']:.4f}" for r in rs if r.get("test_accuracy") is not None)
        print(f"| {mode} | {m} | {len(rs)} | {med} | {each} | "
              f"{statistics.median(samp):,.0f} | {statistics.median(sps):,.0f} | {acc} |"
              if samp and sps else f"| {mode} | {m} | {len(rs)} | {med} | {each} | - | - | {acc} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="copies of the example (kudus run --workers)")
    ap.add_argument("--target", type=float, default=0.85,
                    help="stop there; the summary times 0.70, 0.75, 0.80, 0.82 and 0.85 only")
    ap.add_argument("--max-seconds", type=int, default=120)
    ap.add_argument("--evaluate", type=float, default=1.0, help="seconds between evaluations")
    ap.add_argument("--base-port", type=int, default=16500)
    ap.add_argument("--bin-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--results", default=os.path.join(SRC, "docs", "results", "torch-overlap-accuracy.jsonl"))
    ap.add_argument("--configs", default="", help="MODE:MOMENTUM pairs to run, comma-separated "
                    "(modes plain, overlap, predict; default: all)")
    ap.add_argument("--summary-only", action="store_true")
    a = ap.parse_args()
    if not a.summary_only:
        done = set()
        if os.path.exists(a.results):
            for line in open(a.results):
                r = json.loads(line)
                done.add((r["mode"], r["momentum"], r["target"], r["run"], r.get("workers", 1)))
        configs = [c for c in CONFIGS if not a.configs or f"{c[0]}:{c[1]}" in a.configs.split(",")]
        for i in range(1, a.runs + 1):
            k = (i - 1) % len(configs)
            for mode, m in configs[k:] + configs[:k]:
                if (mode, m, a.target, i, a.workers) in done:
                    print(f"accuracy: {mode} momentum {m} #{i}: recorded, skipped")
                    continue
                tmp = tempfile.mkdtemp(prefix="kudus-overlap-accuracy-")
                rec = {"mode": mode, "momentum": m, "target": a.target, "run": i, "workers": a.workers,
                       "date": datetime.date.today().isoformat()}
                rec.update(run(a, mode, m, tmp))
                os.makedirs(os.path.dirname(a.results), exist_ok=True)
                with open(a.results, "a") as f:
                    f.write(json.dumps(rec, separators=(",", ":")) + "\n")
                print(f"accuracy: {mode} momentum {m} #{i}: {rec['time_to_target']} s to {a.target}, "
                      f"{rec['samples_per_second']} samples/s", flush=True)
                subprocess.run(["rm", "-rf", tmp])
    summary(a.results, a.target, a.workers)


if __name__ == "__main__":
    main()
