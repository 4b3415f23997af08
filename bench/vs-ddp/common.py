"""Shared pieces of the Kudus-against-DDP benchmark: the CNN of
examples/torch_cnn.py, the data, snapshots of the model during training,
and their evaluation afterwards (so evaluating costs no training time)."""
import os
import socket
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "examples"))

from kudus.datasets import fashion_mnist  # noqa: E402
from torch_cnn import CNN  # noqa: E402


def free_base(first=21000, last=30000, step=157):
    """A base port in [first, last) whose scheduler, monitor and stream
    ports and first two shard ports are free now."""
    for base in range(first, last - 101, step):
        socks = []
        try:
            for p in (base, base + 1, base + 2, base + 100, base + 101):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no free ports in {first}-{last}")


def train_set():
    x, y = fashion_mnist("train")
    return torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


class Snapshots:
    """Copies of a flat parameter vector every `every` seconds of training."""

    def __init__(self, every):
        self.every = every
        self.t0 = None              # the clock starts at the first step
        self.next = 0.0
        self.times, self.params = [], []

    def maybe(self, flat, force=False):
        if self.t0 is None:
            self.t0 = time.monotonic()
        now = time.monotonic() - self.t0
        if force or now >= self.next:
            self.times.append(now)
            self.params.append(np.array(flat, dtype=np.float32, copy=True))
            self.next = now + self.every

    def save(self, path):
        np.savez(path, times=np.array(self.times), params=np.stack(self.params))


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def evaluate(path, target):
    """Accuracy of the snapshots on the test set, in order until the first
    that reaches target, and of the last one: the first time it reaches
    target (None if never), the last accuracy, and the points evaluated.
    Evaluating every snapshot cost more than the training itself."""
    torch.set_num_threads(2)        # nothing else runs while we evaluate
    data = np.load(path)
    tx, ty = fashion_mnist("t10k")
    tx, ty = torch.from_numpy(tx), torch.from_numpy(ty)
    model = CNN()
    model.eval()

    def accuracy(flat):
        offset = 0
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.from_numpy(flat[offset:offset + p.numel()]).view_as(p))
                offset += p.numel()
            right = sum(int((model(tx[i:i + 2000]).argmax(1) == ty[i:i + 2000]).sum())
                        for i in range(0, len(tx), 2000))
        return right / len(tx)

    times, params = data["times"], data["params"]
    curve, hit = [], None
    for t, flat in zip(times, params):
        a = accuracy(flat)
        curve.append((float(t), a))
        if a >= target:
            hit = float(t)
            break
    if len(curve) < len(times):
        curve.append((float(times[-1]), accuracy(params[-1])))
    return hit, curve[-1][1], curve
