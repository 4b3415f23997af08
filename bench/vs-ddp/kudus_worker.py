#!/usr/bin/env python3
"""One Kudus worker of the benchmark: kudus.torch.Worker on the CNN; the
first worker keeps snapshots of the model it pulls."""
import argparse

import torch

import common
import kudus.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheduler", required=True)
    ap.add_argument("--monitor", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--slowdown", type=float, default=1.0)
    ap.add_argument("--snapshots", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    snaps = common.Snapshots(2.0) if a.snapshots else None
    worker = kudus.torch.Worker(common.CNN(), common.train_set(), a.scheduler, a.name,
                                monitor=a.monitor, slowdown=a.slowdown,
                                on_iteration=(lambda w: snaps.maybe(w.flat)) if snaps else None)
    worker.run()
    if snaps and worker.flat is not None:
        snaps.maybe(worker.flat, force=True)
        snaps.save(a.snapshots)
    worker.close()


if __name__ == "__main__":
    main()
