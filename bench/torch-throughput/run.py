#!/usr/bin/env python3
"""Samples/s of one kudus.torch.Worker on the CNN of examples/torch_cnn.py
against a plain single-process PyTorch loop on the same data, batch size
and threads (issue 34 section 4; target: at least 0.9x).

    /usr/bin/python3 bench/torch-throughput/run.py [--trials 5] [--batches 32,128] [--consistency bsp,asp]
    /usr/bin/python3 bench/torch-throughput/run.py --consistency asp,asp-overlap --batches 32
    /usr/bin/python3 bench/torch-throughput/run.py --summary-only

A configuration "MODEL-overlap" (asp-overlap, ssp-overlap) runs the cluster
under MODEL and the worker with Worker(overlap=True): it holds a lease
ahead and computes step k+1 while step k's push, arrival and pull travel,
on the model as pulled (predict=False); "MODEL-predict" is overlap with
its default, predict=True (the step computes on the model moved on by the
update in flight).

A trial starts `kudus local --model external` with one external worker and
one shard, and paired.py: one process in which the Kudus worker and a plain
loop on its own copy of the CNN take turns in blocks of --steps steps,
--pairs block pairs a trial (see paired.py). A trial's ratio is the median
of its block pairs' ratios (kudus / plain samples/s); the figure is the
median over trials. The configurations of a trial run one after the other,
taking turns at going first. Beside it, each side's 10th-percentile step
time and parts (the steps least disturbed by whatever else runs) and their
ratio. Results and their reading: docs/performance.md.

Each trial is one JSON line in docs/results/torch-throughput.jsonl (or
--results), keyed by (consistency, batch, threads, num_workers, trial); a
rerun skips what is recorded. Needs a built tree (make build) and Debian's
python3-torch.
"""
import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "bench", "vs-ddp"))
import common  # noqa: E402  (bench/vs-ddp: the CNN, the data, free ports)

# A step's parts, as paired.py times them ("total": the whole step).
KUDUS_PARTS = ["total", "input", "compute", "push", "arrive", "pull", "telemetry"]
PLAIN_PARTS = ["total", "input", "compute", "step"]


def trial(a, config, batch, nw, out, tmp):
    # "asp-overlap": the cluster under asp, the worker with overlap=True.
    consistency, _, variant = config.partition("-")
    if variant not in ("", "overlap", "predict"):
        raise SystemExit(f"torch-throughput: unknown configuration {config!r} "
                         "(MODEL, MODEL-overlap or MODEL-predict)")
    base = common.free_base(a.base_port, a.base_port + a.port_span, 10)
    local = subprocess.Popen(
        [os.path.join(a.bin_dir, "kudus"), "local", "--model", "external", "--workers", "0",
         "--external-workers", "1", "--consistency", consistency, "--shards", "1", "--lr", "0.05",
         "--momentum", "0.9", "--batch", str(batch), "--epochs", "1000", "--max-seconds", "1200",
         "--base-port", str(base), "--quiet", "true"],
        stdout=open(os.path.join(tmp, "local.log"), "w"), stderr=subprocess.STDOUT)
    try:
        env = dict(os.environ, KUDUS_LIB=os.path.join(a.bin_dir, "libkudus.so"))
        cmd = [sys.executable, os.path.join(HERE, "paired.py"), "--scheduler",
               f"tcp://127.0.0.1:{base}", "--monitor", f"tcp://127.0.0.1:{base + 1}",
               "--batch", str(batch), "--threads", str(a.threads), "--steps", str(a.steps),
               "--pairs", str(a.pairs), "--num-workers", str(nw), "--out", out]
        if variant in ("overlap", "predict"):
            cmd.append("--overlap")
        if variant == "overlap":
            cmd.append("--no-predict")
        with open(os.path.join(tmp, "paired.log"), "w") as log:
            rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                timeout=1200).returncode
        if rc != 0:
            raise RuntimeError(f"paired.py failed; logs in {tmp}")
    finally:
        if local.poll() is None:
            local.send_signal(signal.SIGTERM)
            try:
                local.wait(timeout=60)
            except subprocess.TimeoutExpired:
                local.kill()
                local.wait()


def rounded(value):
    """Milliseconds and ratios to 3 decimals: every step's times are kept."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    return value


def summarize(results, out=sys.stdout):
    """Per configuration, medians over trials, as a markdown table."""
    by = {}
    for line in open(results):
        r = json.loads(line)
        by.setdefault((r["consistency"], r["batch"], r["threads"], r["num_workers"]), []).append(r)
    print("| kudus | batch | threads | loader processes | trials | plain samples/s | kudus samples/s "
          "| kudus / plain | trials' ratios | kudus / plain at p10 steps "
          "| kudus p10 ms: " + ", ".join(KUDUS_PARTS) + " | plain p10 ms: " + ", ".join(PLAIN_PARTS)
          + " |", file=out)
    print("|" + "---|" * 12, file=out)
    for cfg in sorted(by):
        rs = sorted(by[cfg], key=lambda r: r["trial"])

        def med(key, part=None):
            return statistics.median(r[key].get(part, 0.0) if part else r[key] for r in rs)
        ratios = ", ".join(f"{r['ratio']:.2f}" for r in rs)
        kudus_ms = ", ".join(f"{med('kudus_ms_p10', p):.2f}" for p in KUDUS_PARTS)
        plain_ms = ", ".join(f"{med('plain_ms_p10', p):.2f}" for p in PLAIN_PARTS)
        print(f"| {cfg[0]} | {cfg[1]} | {cfg[2]} | {cfg[3]} | {len(rs)} "
              f"| {med('plain_samples_per_s'):.0f} | {med('kudus_samples_per_s'):.0f} "
              f"| **{med('ratio'):.2f}** | {ratios} | {med('ratio_p10'):.2f} "
              f"| {kudus_ms} | {plain_ms} |", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--batches", default="32,128", help="batch sizes, comma-separated")
    ap.add_argument("--consistency", default="bsp",
                    help="the cluster's consistency models, comma-separated (with one worker, "
                         "BSP waits for each commit before the next release; ASP does not); "
                         "asp-overlap and ssp-overlap run the worker with overlap=True and "
                         "predict=False, asp-predict and ssp-predict with overlap=True as it comes")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    ap.add_argument("--num-workers", default="0",
                    help="the Kudus worker's DataLoader processes, comma-separated (the plain loop "
                         "loads on its own thread, as a plain loop does)")
    ap.add_argument("--steps", type=int, default=20, help="steps a block")
    ap.add_argument("--pairs", type=int, default=10, help="block pairs a trial")
    ap.add_argument("--base-port", type=int, default=16000,
                    help="first base port tried for the Kudus cluster")
    ap.add_argument("--port-span", type=int, default=1000, help="ports searched from --base-port")
    ap.add_argument("--results", default=os.path.join(SRC, "docs", "results", "torch-throughput.jsonl"))
    ap.add_argument("--bin-dir", default=os.path.join(SRC, "build"))
    ap.add_argument("--summary-only", action="store_true", help="print the table of --results")
    a = ap.parse_args()
    # A SIGTERM stops the cluster of the trial under way too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    if not a.summary_only:
        done = set()
        if os.path.exists(a.results):
            for line in open(a.results):
                r = json.loads(line)
                done.add((r["consistency"], r["batch"], r["threads"], r["num_workers"], r["trial"]))
        configs = [(c, int(b), int(n)) for b in a.batches.split(",") for c in a.consistency.split(",")
                   for n in a.num_workers.split(",")]
        for t in range(1, a.trials + 1):
            # Turns at going first: a run's speed drifts with what ran before it.
            k = (t - 1) % len(configs)
            for consistency, batch, nw in configs[k:] + configs[:k]:
                key = (consistency, batch, a.threads, nw, t)
                if key in done:
                    print(f"torch-throughput: {key}: recorded, skipped")
                    continue
                tmp = tempfile.mkdtemp(prefix="kudus-torch-throughput-")
                out = os.path.join(tmp, "result.json")
                trial(a, consistency, batch, nw, out, tmp)
                rec = json.load(open(out))
                rec.update(consistency=consistency, batch=batch, threads=a.threads, num_workers=nw,
                           trial=t, date=datetime.date.today().isoformat())
                os.makedirs(os.path.dirname(a.results), exist_ok=True)
                with open(a.results, "a") as f:
                    f.write(json.dumps(rounded(rec), separators=(",", ":")) + "\n")
                print(f"torch-throughput: {consistency} batch {batch} loader {nw} #{t}: ratio "
                      f"{rec['ratio']:.2f} (kudus {rec['kudus_samples_per_s']:.0f}, plain "
                      f"{rec['plain_samples_per_s']:.0f} samples/s), at p10 steps "
                      f"{rec['ratio_p10']:.2f}; kudus p10 ms "
                      + ", ".join(f"{p} {rec['kudus_ms_p10'].get(p, 0):.2f}" for p in KUDUS_PARTS),
                      flush=True)
                subprocess.run(["rm", "-rf", tmp])
    if os.path.exists(a.results):
        summarize(a.results)


if __name__ == "__main__":
    main()
