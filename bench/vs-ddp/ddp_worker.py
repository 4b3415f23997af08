#!/usr/bin/env python3
"""One rank of the DDP (gloo) side: the CNN, batch per rank, SGD with
momentum, DistributedSampler; rank 0 keeps snapshots.  A slowdown F
stretches each step's compute to F times its length, as Kudus's workers do."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import common


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--slowdown", type=float, default=1.0)
    ap.add_argument("--lr-schedule", default="constant", help="constant or step:EVERY:GAMMA")
    ap.add_argument("--schedule-unit", default="steps", choices=["steps", "samples"],
                    help="what EVERY counts: optimizer steps, or samples of all ranks")
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--stats", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(1)
    model = torch.nn.parallel.DistributedDataParallel(common.CNN())
    data = common.train_set()
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=a.world, rank=a.rank, seed=1)
    loader = torch.utils.data.DataLoader(data, batch_size=a.batch, sampler=sampler, drop_last=True)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, foreach=False)
    sched = None
    if a.lr_schedule != "constant":
        # The same rule as kd_optimizer's step:EVERY:GAMMA: step t (from 1)
        # uses lr * GAMMA ** ((t - 1) // EVERY), or with unit=samples
        # lr * GAMMA ** (samples before step t // EVERY), where every step
        # takes batch samples from each of the world's ranks.
        kind, every, gamma = a.lr_schedule.split(":")
        assert kind == "step", a.lr_schedule
        every, gamma = int(every), float(gamma)
        per_step = a.batch * a.world if a.schedule_unit == "samples" else 1
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: gamma ** ((k * per_step) // every))
    # Each rank's own compute per step, without the all-reduce: the median
    # of a few local steps (no_sync), so that waiting can be told apart from
    # computing afterwards.  The gradients of these steps are thrown away.
    local = []
    x0, y0 = next(iter(loader))
    for _ in range(12):
        t = time.monotonic()
        with model.no_sync():
            torch.nn.functional.cross_entropy(model(x0), y0).backward()
        local.append(time.monotonic() - t)
        opt.zero_grad()
    own_step = sorted(local)[len(local) // 2] * a.slowdown
    dist.barrier()
    snaps = common.Snapshots(2.0) if a.rank == 0 else None
    steps, compute_s, t0 = 0, 0.0, time.monotonic()
    epoch, done = 0, False
    while not done:
        sampler.set_epoch(epoch)
        for x, y in loader:
            t_step = time.monotonic()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()          # the all-reduce overlaps the backward pass
            opt.step()
            if sched:
                sched.step()
            real = time.monotonic() - t_step
            if a.slowdown > 1:
                time.sleep(real * (a.slowdown - 1))
            compute_s += own_step
            steps += 1
            if snaps:
                snaps.maybe(common.flat_params(model.module))
            # Every rank stops at the same step: rank 0's clock decides.
            flag = torch.tensor([1 if time.monotonic() - t0 >= a.seconds else 0])
            if steps % 20 == 0:
                dist.broadcast(flag, 0)
                if flag.item():
                    done = True
                    break
        epoch += 1
    wall = time.monotonic() - t0
    if snaps:
        snaps.maybe(common.flat_params(model.module), force=True)
        snaps.save(a.snapshots)
    with open(a.stats, "w") as f:
        json.dump({"rank": a.rank, "steps": steps, "wall": wall, "compute_s": compute_s,
                   "samples": steps * a.batch}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
