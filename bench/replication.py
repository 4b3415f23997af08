#!/usr/bin/env python3
"""Replicated shards against unreplicated ones: the same training run with
--replicas 1 and --replicas 2 (chain replication), alternating, so that
both see the same machine.  Reports samples/s of each and their ratio, and
the bytes the chains forwarded against the gradient bytes the primaries
received, for a small model (softmax, 7,850 parameters, latency-bound) and
a larger one (mlp, hidden 512: 407,050 parameters).

    python3 bench/replication.py [--repeats 3] [--seconds 20] [--bin-dir build]

Each run is one JSON line in docs/results/replication.jsonl, keyed by
(model, replicas, repeat); a rerun skips what is recorded.  The table goes
to stdout; docs/performance.md quotes it.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, ".."))
MODELS = {"softmax": ["--model", "softmax"], "mlp512": ["--model", "mlp", "--hidden", "512"]}


def run_once(a, model, replicas, port):
    with tempfile.TemporaryDirectory(prefix="kudus-repl-") as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [os.path.join(a.bin_dir, "kudus"), "local", "--workers", "2", "--shards", "2",
               "--replicas", str(replicas), "--epochs", "1000", "--max-seconds", str(a.seconds),
               "--consistency", "bsp", "--base-port", str(port), "--summary", summary] + MODELS[model]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds + 120)
        if out.returncode != 0:
            raise RuntimeError(f"kudus local failed ({out.returncode}): {out.stdout[-2000:]}{out.stderr[-2000:]}")
        s = json.load(open(summary))
        chain = grad = 0
        for line in (out.stdout + out.stderr).splitlines():
            m = re.search(r"replica (\w+) version=\d+ lo=\d+ params_crc=\w+ chain_bytes=(\d+) bytes_in=(\d+)", line)
            if m and m.group(1) == "primary":
                chain += int(m.group(2))
                grad += int(m.group(3))
        return {"samples_per_s": s["samples"] / s["wall_seconds"], "wall": s["wall_seconds"],
                "samples": s["samples"], "chain_bytes": chain, "gradient_bytes": grad,
                "test_accuracy": s.get("test_accuracy")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--base-port", type=int, default=18000)
    ap.add_argument("--bin-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--results", default=os.path.join(SRC, "docs", "results", "replication.jsonl"))
    a = ap.parse_args()
    done = {}
    if os.path.exists(a.results):
        for line in open(a.results):
            r = json.loads(line)
            done[(r["model"], r["replicas"], r["repeat"])] = r
    for repeat in range(1, a.repeats + 1):
        for model in a.models.split(","):
            for replicas in (1, 2):
                key = (model, replicas, repeat)
                if key in done:
                    continue
                rec = run_once(a, model, replicas, a.base_port)
                rec.update(model=model, replicas=replicas, repeat=repeat, seconds=a.seconds)
                os.makedirs(os.path.dirname(a.results), exist_ok=True)
                with open(a.results, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                done[key] = rec
                print(f"replication: {model} R={replicas} #{repeat}: {rec['samples_per_s']:.0f} samples/s",
                      flush=True)
    print("| model | samples/s, R = 1 | samples/s, R = 2 | R = 2 / R = 1 | chain bytes / gradient bytes |")
    print("|---|---|---|---|---|")
    for model in a.models.split(","):
        one = [done[(model, 1, r)]["samples_per_s"] for r in range(1, a.repeats + 1) if (model, 1, r) in done]
        two = [done[(model, 2, r)] for r in range(1, a.repeats + 1) if (model, 2, r) in done]
        if not one or not two:
            continue
        # Paired ratios, repeat by repeat: each pair ran back to back.
        ratios = [done[(model, 2, r)]["samples_per_s"] / done[(model, 1, r)]["samples_per_s"]
                  for r in range(1, a.repeats + 1) if (model, 1, r) in done and (model, 2, r) in done]
        wire = statistics.median(t["chain_bytes"] / t["gradient_bytes"] for t in two if t["gradient_bytes"])
        print(f"| {model} | {statistics.median(one):.0f} | {statistics.median(t['samples_per_s'] for t in two):.0f} "
              f"| {statistics.median(ratios):.2f} | {wire:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
