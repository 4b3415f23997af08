#!/usr/bin/env python3
"""One trial of the throughput benchmark, in one process: a
kudus.torch.Worker training the CNN on a cluster, and a plain PyTorch loop
(DataLoader over the same training set, shuffled, torch.optim.SGD with
momentum) on its own copy of the CNN, taking turns in blocks of --steps
steps. Each block pair gives a ratio, kudus samples/s over plain samples/s,
measured a few seconds apart on the same CPU: on a machine whose free CPU
drifts (here, beside a sweep) that pairs far better than runs a minute
apart.

The plain block runs inside the worker's on_iteration callback, so the
worker sits between two iterations meanwhile; the first Kudus iteration
after a plain block is not timed (its pull, sent with the arrival, had the
plain block's time to land). Each Kudus step is split into input (the
lease's batch), compute (forward, backward, gradients into the flat
buffer), push, arrive (the release; under BSP with one worker it waits for
the commit), pull and telemetry; each plain step into input, compute and
the optimizer step. With --overlap (ASP, SSP) the worker holds a lease
ahead, and push, arrive, telemetry and pull run on its background thread
while the next step computes: the parts then overlap in time, and a step's
"other" (its wall time less its parts) goes negative."""
import argparse
import json
import statistics
import time

import torch

import timing  # first: it puts the tree's python/ on the path
import kudus.torch  # noqa: E402


class Enough(Exception):
    """Every block pair is measured."""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--monitor", required=True)
    ap.add_argument("--batch", type=int, required=True, help="the cluster's --batch")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=20, help="steps a block")
    ap.add_argument("--pairs", type=int, default=10, help="block pairs measured")
    ap.add_argument("--warmup", type=int, default=30, help="steps of each side before the first block")
    ap.add_argument("--num-workers", type=int, default=0, help="the worker's DataLoader processes")
    ap.add_argument("--overlap", action="store_true",
                    help="Worker(overlap=True): compute step k+1 while step k communicates")
    ap.add_argument("--no-predict", dest="predict", action="store_false", default=None,
                    help="with --overlap: Worker(predict=False), on the model as pulled")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    data = timing.train_set()

    # The plain loop, stepped a block at a time.
    plain_model = timing.CNN()
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=a.lr, momentum=0.9)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, shuffle=True, drop_last=True)
    batches = iter(loader)

    def plain_block(n, worker):
        """n plain steps; returns each one's [wall ms, {part: ms}, rows]."""
        nonlocal batches
        steps = []
        answered = time.perf_counter()
        for _ in range(n):
            t0 = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                x, y = next(batches)
            t1 = time.perf_counter()
            plain_opt.zero_grad(set_to_none=False)
            torch.nn.functional.cross_entropy(plain_model(x), y).backward()
            t2 = time.perf_counter()
            plain_opt.step()
            t3 = time.perf_counter()
            steps.append([1000 * (t3 - t0), {"input": 1000 * (t1 - t0), "compute": 1000 * (t2 - t1),
                                             "step": 1000 * (t3 - t2)}, len(y)])
            # The worker answers the scheduler's heartbeats now and then
            # (outside the timed steps), so a long block is no death.
            if t3 - answered > 0.5:
                worker.client.sleep(1)
                answered = time.perf_counter()
        return steps

    kudus_parts = timing.Parts()
    state = {"iterations": 0, "skip": False, "last": 0.0, "steps": []}
    pairs = []

    def on_iteration(w):
        now = time.perf_counter()
        s = state
        s["iterations"] += 1
        parts = {k: 1000 * v for k, v in kudus_parts.reset().items()}
        if s["iterations"] < a.warmup:
            return
        if s["iterations"] == a.warmup or s["skip"]:
            if s["iterations"] == a.warmup:
                plain_block(a.warmup, w)
            # The first iteration after a plain block is not timed: it
            # starts the clock of the next.
            s.update(skip=s["iterations"] == a.warmup, last=time.perf_counter(), steps=[])
            return
        parts["compute"] = parts.pop("gradient", 0.0) - parts.get("input", 0.0)
        wall = 1000 * (now - s["last"])
        parts["other"] = wall - sum(parts.values())
        s["steps"].append([wall, parts, len(w.last_rows)])
        s["last"] = now
        if len(s["steps"]) < a.steps:
            return
        kudus_steps = s["steps"]
        plain_steps = plain_block(a.steps, w)
        kudus_rate = 1000 * sum(st[2] for st in kudus_steps) / sum(st[0] for st in kudus_steps)
        plain_rate = 1000 * sum(st[2] for st in plain_steps) / sum(st[0] for st in plain_steps)
        pairs.append({"kudus_samples_per_s": kudus_rate, "plain_samples_per_s": plain_rate,
                      "ratio": kudus_rate / plain_rate, "kudus_steps": kudus_steps,
                      "plain_steps": plain_steps})
        s["skip"] = True
        if len(pairs) >= a.pairs:
            raise Enough()

    worker = kudus.torch.Worker(timing.CNN(), data, a.scheduler, "bench-0", monitor=a.monitor,
                                num_workers=a.num_workers, on_iteration=on_iteration,
                                overlap=a.overlap, predict=a.predict)
    # The input is timed inside the gradient: compute is the difference.
    worker._batch = kudus_parts.timed("input", worker._batch)
    worker._gradient = kudus_parts.timed("gradient", worker._gradient)
    for name in ("pull", "push", "arrive", "telemetry"):
        setattr(worker.client, name, kudus_parts.timed(name, getattr(worker.client, name)))
    try:
        worker.run()
    except Enough:
        pass
    worker.close()
    if len(pairs) < a.pairs:
        raise SystemExit(f"paired: the run ended after {len(pairs)} of {a.pairs} block pairs")

    def split(steps, q):
        """The q-quantile of the step time, and of each part's time."""
        def quantile(values):
            return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1] \
                if 0 < q < 1 else statistics.median(values)
        walls = [st[0] for st in steps]
        out = {k: quantile([st[1].get(k, 0.0) for st in steps]) for k in steps[0][1]}
        out["total"] = quantile(walls)
        return out

    kudus_all = [st for p in pairs for st in p["kudus_steps"]]
    plain_all = [st for p in pairs for st in p["plain_steps"]]
    k10, p10 = split(kudus_all, 0.10), split(plain_all, 0.10)
    out = {"pairs": pairs, "steps": a.steps, "batch": a.batch,
           "ratio": statistics.median(p["ratio"] for p in pairs),
           "kudus_samples_per_s": statistics.median(p["kudus_samples_per_s"] for p in pairs),
           "plain_samples_per_s": statistics.median(p["plain_samples_per_s"] for p in pairs),
           # Each side's step time and parts at their median, and at their
           # 10th percentile: the steps least disturbed by what else ran.
           "kudus_ms": split(kudus_all, 0.5), "plain_ms": split(plain_all, 0.5),
           "kudus_ms_p10": k10, "plain_ms_p10": p10,
           "ratio_p10": p10["total"] / k10["total"]}
    with open(a.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
