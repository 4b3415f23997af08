"""Median of paired ratios (after / before) per configuration, from the
rows bench/before-after.sh wrote.

    python3 bench/before-after.py OUT BEFORE_COMMIT AFTER_COMMIT
"""
import collections
import json
import statistics
import sys


def key(row):
    if row.get("bench") == "pushpull":
        return ("pushpull", row["size_bytes"], row["shards"], row["inflight"])
    return (row.get("bench"), row.get("workers"), row.get("shards"), row.get("evaluation"))


def figure(row):
    """The figure to compare: throughput (higher is better) for pushpull,
    the phase time's ratio to its compute-bound limit (lower) for phase."""
    if row.get("bench") == "pushpull":
        return row.get("pushpull_gbps"), True
    return row.get("phase_ms"), False


def main(path, before, after):
    sides = collections.defaultdict(dict)
    for line in open(path):
        row = json.loads(line)
        if row.get("build") not in (before, after):
            continue
        sides[(key(row), row["trial"])][row["side"]] = row
    ratios = collections.defaultdict(list)
    higher = {}
    for (k, _trial), pair in sides.items():
        if "before" in pair and "after" in pair:
            a, up = figure(pair["after"])
            b, _ = figure(pair["before"])
            if a and b:
                ratios[k].append(a / b)
                higher[k] = up
    print(f"after {after} / before {before}: median of paired ratios (n pairs, spread)")
    for k in sorted(ratios, key=str):
        r = ratios[k]
        better = "higher is better" if higher[k] else "lower is better"
        print(f"  {' '.join(map(str, k)):40s} {statistics.median(r):.3f}  (n={len(r)}, "
              f"{min(r):.3f}..{max(r):.3f}, {better})")


if __name__ == "__main__":
    main(*sys.argv[1:4])
