"""kudus.torch: train any torch.nn.Module as a Kudus worker.

    import kudus.torch
    worker = kudus.torch.Worker(model, dataset, "tcp://127.0.0.1:7000")
    worker.run()          # until the scheduler stops the run

The module's parameters become views into one flat float32 buffer that the
client pulls into, so a pull updates the module in place; gradients are
gathered into a second flat buffer and pushed. The scheduler leases rows of
`dataset` (any indexable torch Dataset, sample i = dataset[i]) and the
worker computes on exactly those rows, under any consistency model.

With a cluster started as `--model external`, the module is the model: its
parameters' names and shapes are declared as the layout, and its initial
values seed the shards (every worker sends them; the first one counts, so
seed torch the same way everywhere or not, as you like).
"""
import time

import numpy as np
import torch

from . import Client


class Worker:
    """Trains `model` on the rows of `dataset` the scheduler leases."""

    def __init__(self, model, dataset, scheduler, name=None, loss_fn=None, monitor=None,
                 collate=None, timeout_ms=None, slowdown=1.0, on_iteration=None):
        self.model = model
        self.dataset = dataset
        self.loss_fn = loss_fn or torch.nn.functional.cross_entropy
        self.collate = collate or torch.utils.data.default_collate
        self.params = [p for p in model.parameters() if p.requires_grad]
        layout = [(n, tuple(p.shape)) for n, p in model.named_parameters() if p.requires_grad]
        self.client = Client(scheduler, name, samples=len(dataset), monitor=monitor,
                             layout=layout, timeout_ms=timeout_ms)
        self.flat = None
        self.grad = None
        self.iterations = 0
        # Emulated heterogeneity: each iteration's compute is stretched to
        # slowdown times its real length (a sleep that keeps heartbeats).
        self.slowdown = float(slowdown)
        # Called as on_iteration(worker) after every arrival.
        self.on_iteration = on_iteration

    def _bind(self):
        """Make every parameter a view into the flat buffer the client pulls into."""
        n = self.client.param_count
        ours = sum(p.numel() for p in self.params)
        if ours != n:
            raise ValueError(f"kudus.torch: the module has {ours} parameters, the cluster's "
                             f"model {self.client.model} has {n}")
        self.flat = np.empty(n, np.float32)
        self.grad = np.zeros(n, np.float32)
        flat_t = torch.from_numpy(self.flat)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                view = flat_t[offset:offset + p.numel()].view_as(p)
                view.copy_(p.detach())
                p.data = view
                offset += p.numel()

    def _gradient(self, rows):
        batch = self.collate([self.dataset[int(i)] for i in rows])
        x, y = batch[0], batch[1]
        self.model.zero_grad(set_to_none=False)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        offset = 0
        for p in self.params:
            g = p.grad
            self.grad[offset:offset + p.numel()] = (g.reshape(-1).numpy() if g is not None else 0)
            offset += p.numel()
        return float(loss.detach())

    def run(self, max_iterations=None):
        """Register, seed the model when it is external, and train until the
        scheduler stops the run. Returns the number of iterations."""
        c = self.client
        if not c.register():
            return 0
        release = c.wait_start()
        if release is None:
            return 0
        self._bind()
        if c.model == "external" and not c.init_params(self.flat):
            return 0
        self.model.train()
        while release is not None and c.pull(self.flat):
            t0 = time.monotonic()
            loss = self._gradient(release.rows)
            if self.slowdown > 1:
                real_ms = (time.monotonic() - t0) * 1000
                c.set_emulated_ms(real_ms * self.slowdown)
                if not c.sleep(real_ms * (self.slowdown - 1)):
                    break
            if not c.push(self.grad, len(release.rows)):
                break
            release = c.arrive(loss)
            c.telemetry()
            self.iterations += 1
            if self.on_iteration:
                self.on_iteration(self)
            if max_iterations and self.iterations >= max_iterations:
                break
        return self.iterations

    def close(self):
        self.client.close()
