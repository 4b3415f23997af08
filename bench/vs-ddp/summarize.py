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


def median_time(times):
    """Median time to a level; a run that never reached it counts as the
    slowest, so the median is None ("not reached") when most runs did not."""
    times = [t if t is not None else float("inf") for t in times]
    if not times:
        return None
    m = statistics.median(times)
    return None if m == float("inf") else m


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
    schedules = sorted({r.get("lr_schedule", "constant") + (" (samples)" if r.get("schedule_unit") == "samples" else "")
                        for r in runs})
    if len(schedules) > 1:
        raise SystemExit(f"summarize: {a.results} mixes learning-rate schedules {schedules}; one file per schedule")
    print(f"learning-rate schedule: {schedules[0]}\n")
    print("| speeds | system | runs | " + " | ".join(f"time to {lv:.2f} s (x DDP)" for lv in levels)
          + " | mean accuracy 10-30 s | samples/s | steps/s | wait fraction | final accuracy |")
    print("|---" * (8 + len(levels)) + "|")
    for speeds in ("equal", "straggler"):
        ddp = {lv: median_time(first_at(r["curve"], lv) for r in rows.get((speeds, "ddp"), [])) for lv in levels}
        for system in ("ddp", "kudus-bsp", "kudus-lsp", "kudus-auto"):
            rs = rows.get((speeds, system))
            if not rs:
                continue
            cells = []
            for lv in levels:
                m = median_time(first_at(r["curve"], lv) for r in rs)
                if m is None:
                    cells.append("not reached")
                elif system == "ddp" or not ddp[lv]:
                    cells.append(f"{m:.1f}")
                else:
                    cells.append(f"{m:.1f} ({m / ddp[lv]:.2f})")
            window = median(window_mean(r["curve"], 10, 30) for r in rs)
            steps = median(r.get("steps_per_s") for r in rs)
            print(f"| {speeds} | {system} | {len(rs)} | " + " | ".join(cells)
                  + (f" | {window:.4f}" if window is not None else " | -")
                  + f" | {median(r['samples_per_s'] for r in rs):.0f}"
                  + (f" | {steps:.1f}" if steps is not None else " | -")
                  + f" | {median(r['wait_fraction'] for r in rs):.2f}"
                  + f" | {median(r['final_accuracy'] for r in rs):.4f} |")


if __name__ == "__main__":
    main()
