#!/usr/bin/env python3
"""The vs-DDP table for docs/performance.md, from docs/results/vs-ddp.jsonl:
per system and speed setting, the median over the repeats of the time to
the target accuracy (and to two lower ones, read from the same snapshot
curves: the first crossing of a plateau is noisy), samples/s, wait fraction
and final accuracy, and each time as a ratio to DDP's.

    python3 bench/vs-ddp/summarize.py [--results FILE]
"""
import argparse
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def first_at(curve, level):
    for t, a in curve:
        if a >= level:
            return t
    return None


def window_mean(curve, lo, hi):
    """Mean accuracy of the snapshots taken in [lo, hi) s: less noisy than
    a first crossing.  Every run's curve covers 10-30 s (a curve stops at
    its first crossing of the target, and none crosses before 30 s)."""
    values = [a for t, a in curve if lo <= t < hi]
    return sum(values) / len(values) if values else None


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(HERE, "..", "..", "docs", "results", "vs-ddp.jsonl"))
    a = ap.parse_args()
    runs = [json.loads(line) for line in open(a.results)]
    levels = sorted({r["target"] for r in runs})[-1:] + [0.87, 0.85]
    rows = {}
    for r in runs:
        key = (r["speeds"], r["system"])
        rows.setdefault(key, []).append(r)
    print("| speeds | system | runs | " + " | ".join(f"time to {lv:.2f} s (x DDP)" for lv in levels)
          + " | mean accuracy 10-30 s | samples/s | wait fraction | final accuracy |")
    print("|---" * (7 + len(levels)) + "|")
    for speeds in ("equal", "straggler"):
        ddp = {lv: median(first_at(r["curve"], lv) for r in rows.get((speeds, "ddp"), [])) for lv in levels}
        for system in ("ddp", "kudus-bsp", "kudus-lsp"):
            rs = rows.get((speeds, system))
            if not rs:
                continue
            cells = []
            for lv in levels:
                m = median(first_at(r["curve"], lv) for r in rs)
                if m is None:
                    cells.append("not reached")
                elif system == "ddp" or not ddp[lv]:
                    cells.append(f"{m:.1f}")
                else:
                    cells.append(f"{m:.1f} ({m / ddp[lv]:.2f})")
            print(f"| {speeds} | {system} | {len(rs)} | " + " | ".join(cells)
                  + f" | {median(window_mean(r['curve'], 10, 30) for r in rs):.4f}"
                  + f" | {median(r['samples_per_s'] for r in rs):.0f}"
                  + f" | {median(r['wait_fraction'] for r in rs):.2f}"
                  + f" | {median(r['final_accuracy'] for r in rs):.4f} |")


if __name__ == "__main__":
    main()
