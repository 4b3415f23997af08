#!/usr/bin/env python3
"""Kudus (BSP, LSP, auto) against PyTorch DDP over gloo: the CNN of
examples/torch_cnn.py, 4 workers, one thread each, the same batch, learning
rate, momentum and seed; equal speeds, then one worker 4x slower (the same
emulated stretch in both).  Reports time to 0.88 test accuracy (from model
snapshots taken every 2 s and evaluated afterwards), samples/s and wait
fraction; the median of the repeats goes to docs/performance.md.

    /usr/bin/python3 bench/vs-ddp/run.py [--repeats 3] [--seconds 180]

Each finished run is one JSON line in docs/results/vs-ddp.jsonl, keyed by
(system, speeds, repeat, lr schedule and its unit); a rerun skips what is recorded, so an interrupted
sweep resumes.  Needs a built tree (make build) and Debian's python3-torch.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import common  # noqa: E402

SYSTEMS = ["ddp", "kudus-bsp", "kudus-lsp", "kudus-auto"]
SPEEDS = {"equal": [1, 1, 1, 1], "straggler": [1, 1, 1, 4]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(a, speeds, tmp):
    port = free_port()
    snaps = os.path.join(tmp, "snaps.npz")
    procs = []
    for rank, f in enumerate(speeds):
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, "ddp_worker.py"), "--rank", str(rank), "--world", "4",
             "--port", str(port), "--lr", str(a.lr), "--batch", str(a.batch), "--seconds", str(a.seconds),
             "--slowdown", str(f), "--lr-schedule", a.lr_schedule, "--schedule-unit", a.schedule_unit, "--snapshots", snaps, "--stats", os.path.join(tmp, f"stats-{rank}.json")],
            stdout=open(os.path.join(tmp, f"ddp-{rank}.log"), "w"), stderr=subprocess.STDOUT))
    for p in procs:
        if p.wait(timeout=a.seconds + 300) != 0:
            raise RuntimeError(f"ddp rank failed; logs in {tmp}")
    stats = [json.load(open(os.path.join(tmp, f"stats-{r}.json"))) for r in range(4)]
    wall = max(s["wall"] for s in stats)
    samples = sum(s["samples"] for s in stats)
    # Waiting: a rank's wall time not spent on its own compute (measured
    # before training without the all-reduce), averaged over ranks.
    wait = statistics.mean(max(0.0, 1 - s["compute_s"] / s["wall"]) for s in stats)
    return snaps, {"wall": wall, "samples_per_s": samples / wall, "wait_fraction": wait,
                   "steps_per_s": stats[0]["steps"] / wall}


def run_kudus(a, consistency, speeds, tmp):
    base = common.free_base()
    summary = os.path.join(tmp, "summary.json")
    snaps = os.path.join(tmp, "snaps.npz")
    kudus = os.path.join(a.bin_dir, "kudus")
    local = subprocess.Popen(
        [kudus, "local", "--model", "external", "--workers", "0", "--external-workers", "4",
         "--consistency", consistency, "--shards", str(a.shards), "--lr", str(a.lr), "--momentum", "0.9", "--batch", str(a.batch),
         "--lr-schedule", a.lr_schedule, "--schedule-unit", a.schedule_unit, "--seed", str(a.kudus_seed),
         "--epochs", "1000", "--max-seconds", str(a.seconds), "--base-port", str(base),
         "--quiet", "true", "--summary", summary],
        stdout=open(os.path.join(tmp, "local.log"), "w"), stderr=subprocess.STDOUT)
    env = dict(os.environ, KUDUS_LIB=os.path.join(a.bin_dir, "libkudus.so"))
    workers = []
    for rank, f in enumerate(speeds):
        cmd = [sys.executable, os.path.join(HERE, "kudus_worker.py"), "--scheduler",
               f"tcp://127.0.0.1:{base}", "--monitor", f"tcp://127.0.0.1:{base + 1}",
               "--name", f"w-{rank}", "--slowdown", str(f)]
        if rank == 0:
            cmd += ["--snapshots", snaps]
        workers.append(subprocess.Popen(cmd, env=env, stdout=open(os.path.join(tmp, f"w-{rank}.log"), "w"),
                                        stderr=subprocess.STDOUT))
    if local.wait(timeout=a.seconds + 300) != 0:
        raise RuntimeError(f"kudus local failed; logs in {tmp}")
    for w in workers:
        w.wait(timeout=120)
    s = json.load(open(summary))
    rec = {"wall": s["wall_seconds"], "samples_per_s": s["samples"] / s["wall_seconds"],
           "wait_fraction": s["wait_fraction"], "steps_per_s": s["phases"] / s["wall_seconds"]}
    # What auto ran: its last model and every switch (at_s, from, to, reason).
    if s.get("switches") is not None:
        rec.update(mode=s.get("mode"), switches=s["switches"])
    return snaps, rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr-schedule", default="constant",
                    help="constant or step:EVERY:GAMMA, the same in both systems (kd_optimizer's "
                         "schedule; a LambdaLR stepped every iteration in each DDP rank)")
    ap.add_argument("--kudus-seed", type=int, default=42,
                    help="Kudus's seed (its scheduler's per-epoch data permutation)")
    ap.add_argument("--schedule-unit", default="steps", choices=["steps", "samples"],
                    help="what the schedule counts, in both systems: optimizer steps, or training samples")
    ap.add_argument("--target", type=float, default=0.88)
    ap.add_argument("--shards", type=int, default=2, help="Kudus shard processes")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--speeds", default=",".join(SPEEDS))
    ap.add_argument("--results", default=os.path.join(SRC, "docs", "results", "vs-ddp.jsonl"))
    ap.add_argument("--bin-dir", default=os.path.join(SRC, "build"))
    a = ap.parse_args()
    # Checked here, before any run: a DDP rank cannot refuse a schedule
    # without failing the whole sweep.
    if a.lr_schedule != "constant":
        parts = a.lr_schedule.split(":")
        try:
            ok = len(parts) == 3 and parts[0] == "step" and int(parts[1]) > 0 and 0 < float(parts[2]) <= 1
        except ValueError:
            ok = False
        if not ok:
            ap.error(f"--lr-schedule {a.lr_schedule!r}: expected constant or step:EVERY:GAMMA "
                     "(EVERY >= 1, 0 < GAMMA <= 1)")
    done = set()
    if os.path.exists(a.results):
        for line in open(a.results):
            r = json.loads(line)
            if ((r.get("lr_schedule", "constant"), r.get("schedule_unit", "steps"), r.get("kudus_seed", 42))
                    == (a.lr_schedule, a.schedule_unit, a.kudus_seed)):
                done.add((r["system"], r["speeds"], r["repeat"]))
    # Records name the build, so runs of two builds are never mixed up.
    build = subprocess.run(["git", "-C", SRC, "describe", "--always", "--dirty"], capture_output=True,
                           text=True).stdout.strip() or "unknown"
    for repeat in range(1, a.repeats + 1):
        # The systems take turns at going first: a run's speed drifts with
        # what ran before it on the same two cores.
        systems = a.systems.split(",")
        k = (repeat - 1) % len(systems)
        systems = systems[k:] + systems[:k]
        for speeds in a.speeds.split(","):
            for system in systems:
                if (system, speeds, repeat) in done:
                    print(f"vs-ddp: {system} {speeds} #{repeat}: recorded, skipped")
                    continue
                tmp = tempfile.mkdtemp(prefix="kudus-vs-ddp-")
                t = time.monotonic()
                if system == "ddp":
                    snaps, rec = run_ddp(a, SPEEDS[speeds], tmp)
                else:
                    snaps, rec = run_kudus(a, system.split("-")[1], SPEEDS[speeds], tmp)
                hit, final, curve = common.evaluate(snaps, a.target)
                # A run that worked leaves nothing behind; a failed one
                # raised above and keeps its logs for the reader.
                shutil.rmtree(tmp, ignore_errors=True)
                rec.update(system=system, speeds=speeds, repeat=repeat, lr=a.lr, batch=a.batch, build=build,
                           lr_schedule=a.lr_schedule, schedule_unit=a.schedule_unit, kudus_seed=a.kudus_seed,
                           target=a.target, time_to_target=hit, final_accuracy=final,
                           seconds=a.seconds, curve=curve)
                os.makedirs(os.path.dirname(a.results), exist_ok=True)
                with open(a.results, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"vs-ddp: {system} {speeds} #{repeat}: time to {a.target} "
                      f"{hit if hit is not None else 'not reached'} s, final {final:.4f}, "
                      f"{rec['samples_per_s']:.0f} samples/s, wait {rec['wait_fraction']:.2f} "
                      f"({time.monotonic() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
