#!/usr/bin/env python3
"""The side-by-side's table: medians of paired ratios, trial by trial.

    bench/vs-pslite/summary.py RESULTS [--run RUN_ID]

Without --run, the latest run in RESULTS.  A ratio pairs the Kudus row and
the ps-lite row of one trial and one size, so both saw the same machine.
"""
import argparse
import json
import statistics
import sys

TARGETS = {  # (column, size) -> the floor
    ("shm", 1 << 20): 2.5,
    ("shm", 16 << 20): 3.0,
}
TCP_FLOOR = 1.2


def size_name(n):
    if n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n % 1024 == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--run")
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.results) if l.strip()]
    if not rows:
        sys.exit("summary.py: no rows in %s" % args.results)
    run = args.run or rows[-1]["run_id"]
    rows = [r for r in rows if r.get("run_id") == run]
    sparse = [r for r in rows if r.get("bench") == "sparse-pslite"]
    rows = [r for r in rows if "size_bytes" in r]
    by = {}
    for r in rows:
        by[(r["system"], r["trial"], int(r["size_bytes"]))] = r
    sizes = sorted({k[2] for k in by})
    trials = sorted({k[1] for k in by})
    first = rows[0]
    print("Run %s: Kudus %s, ps-lite %s, %d trials, one server and one worker, "
          "one request in flight; GB/s counts 2 S per push+pull.\n"
          % (run, first.get("build"), first.get("pslite_commit"), len(trials)))
    print("| size | ps-lite GB/s | Kudus TCP GB/s | Kudus shm GB/s | ZeroMQ echo GB/s "
          "| TCP / ps-lite | shm / ps-lite | TCP / echo |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for s in sizes:
        cols = {"p": [], "t": [], "m": [], "e": [], "tr": [], "mr": [], "te": []}
        for t in trials:
            p, k = by.get(("ps-lite", t, s)), by.get(("kudus", t, s))
            if not p or not k:
                continue
            pg = float(p["pushpull_gbps"])
            tg = float(k["pushpull_gbps"])
            eg = float(k["zmq_echo_gbps"])
            cols["p"].append(pg)
            cols["t"].append(tg)
            cols["e"].append(eg)
            cols["tr"].append(tg / pg)
            cols["te"].append(tg / eg)
            if k.get("shm_pushpull_gbps") is not None:
                mg = float(k["shm_pushpull_gbps"])
                cols["m"].append(mg)
                cols["mr"].append(mg / pg)
        med = {c: (statistics.median(v) if v else None) for c, v in cols.items()}
        f = lambda v, d=2: "-" if v is None else ("%.*f" % (d, v))
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            size_name(s), f(med["p"]), f(med["t"]), f(med["m"]), f(med["e"]),
            f(med["tr"]), f(med["mr"]), f(med["te"])))
        if med["tr"] is not None:
            verdicts.append("TCP %s: %.2fx ps-lite (target >= %.1f): %s" % (
                size_name(s), med["tr"], TCP_FLOOR, "met" if med["tr"] >= TCP_FLOOR else "missed"))
        floor = TARGETS.get(("shm", s))
        if floor and med["mr"] is not None:
            verdicts.append("shm %s: %.2fx ps-lite (target >= %.1f): %s" % (
                size_name(s), med["mr"], floor, "met" if med["mr"] >= floor else "missed"))
    if sparse:
        sp = {(r["system"], r["trial"]): r for r in sparse}
        ratios, cells = [], {"ps-lite": ([], []), "kudus": ([], [])}
        for t in sorted({r["trial"] for r in sparse}):
            p, k = sp.get(("ps-lite", t)), sp.get(("kudus", t))
            if not p or not k:
                continue
            for who, r in (("ps-lite", p), ("kudus", k)):
                cells[who][0].append(float(r["first_push_ms"]))
                cells[who][1].append(float(r["first_pull_ms"]))
            ratios.append((float(p["first_push_ms"]) + float(p["first_pull_ms"]))
                          / (float(k["first_push_ms"]) + float(k["first_pull_ms"])))
        if ratios:
            keys = sparse[0].get("keys")
            print("\nps-lite's sparse benchmark (tests/test_kv_app_benchmark: %s keys, one float "
                  "each, one push and one pull, each timed once) against Kudus's keyed push and pull "
                  "of the same shape (kudus bench sparse --sparse-parts pslite --repeat 1), %d "
                  "paired trials, medians:\n" % ("{:,}".format(keys) if keys else "?", len(ratios)))
            print("| system | push ms | pull ms |")
            print("|---|---|---|")
            for who in ("ps-lite", "kudus"):
                print("| %s | %.0f | %.0f |" % ("Kudus" if who == "kudus" else who,
                                                statistics.median(cells[who][0]),
                                                statistics.median(cells[who][1])))
            med = statistics.median(ratios)
            verdicts.append("keyed push+pull: %.2fx ps-lite's speed (target >= 1.5): %s"
                            % (med, "met" if med >= 1.5 else "missed"))
    print()
    for v in verdicts:
        print("- " + v)


if __name__ == "__main__":
    main()
