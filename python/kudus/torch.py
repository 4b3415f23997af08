"""kudus.torch: train any torch.nn.Module as a Kudus worker.

    import kudus.torch
    worker = kudus.torch.Worker(model, dataset, "tcp://127.0.0.1:7000", num_workers=2)
    worker.run()          # until the scheduler stops the run

The scheduler leases rows of `dataset` (any map-style torch Dataset, sample
i = dataset[i]) and the worker computes on exactly those rows, under any
consistency model. With num_workers=0 (the default) each lease's batch is
built on the training thread, `collate([dataset[i] for i in rows])`. With
num_workers > 0 the batches come from a torch.utils.data.DataLoader whose
batch sampler (LeaseSampler) holds the current lease: its worker processes
load and collate the lease's rows in parallel pieces, pin_memory pins, and
each lease goes to the loader as soon as the scheduler names it, so it
loads while the telemetry and the pull of the parameters run. (The next
lease is known only when the scheduler releases the worker, after its
push: there is nothing earlier to prefetch, unless the worker holds a lease
ahead, below.)

With overlap=True (ASP and SSP only) the worker holds one lease ahead
(protocol 9.3.2): while a background thread pushes the gradient of clock c,
arrives and pulls, the training thread computes the gradient of clock c + 1
on the rows the scheduler named ahead, with the model it pulled after the
release of clock c. Two gradient buffers and two parameter buffers take
turns, so the pull never writes what the training thread computes on; one
clock more staleness buys the overlap (docs/consistency.md, "Lease ahead").
By default (predict=True) the gradient is not taken at that model but at
the model moved on by the update still in flight, guessed to equal the last
one: 2 w_c - w_(c-1), a third buffer. With the shards' momentum successive
updates are close, and the guess wins back what the stale clock costs
(docs/performance.md: one worker reached 0.85 in 0.74x the plain worker's
time, against 1.8x without the guess).

The model may live on any device. On the CPU in float32, its parameters
become views into one flat float32 buffer that the client pulls into, so a
pull updates the module in place; on another device (or dtype) each pull is
copied into the parameters and each gradient out of them, one copy per
tensor (through pinned memory for CUDA). Gradients are gathered into a
second flat buffer and pushed.

With a cluster started as `--model external`, the module is the model: its
parameters' names and shapes are declared as the layout, and its initial
values seed the shards (every worker sends them; the first one counts, so
seed torch the same way everywhere or not, as you like).

The trained model back: run() ends with the newest model it can get in the
module (see Worker.run), pull_model(model, scheduler) loads a
running cluster's current model into any module of the same layout,
load_checkpoint(model, directory) the model in the shards' checkpoints, and
`python3 -m kudus export` writes either to a file.

Live evaluation: Evaluator(model, test_data, scheduler) pulls the cluster's
model every `every` seconds into its own module, scores it (accuracy by
default, the test loss, or any callable) and reports it to the monitor
with the version it scored, so the stream, the dashboard, Prometheus,
--target-accuracy and the summary's time_to_accuracy work for a user's own
model (`--model external`) as for a built-in one. Run it in any process,
in a thread (start/stop) or as the process's loop (run).
"""
import logging
import math
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from . import _TENSOR_NAME_MAX, Client, KudusError
from . import snapshot as _snapshot

__all__ = ["Worker", "Evaluator", "LeaseSampler", "pull_model", "load_checkpoint", "load_snapshot"]

log = logging.getLogger("kudus")


def _layout_name(name):
    """A parameter's name as the layout holds it (at most 31 bytes)."""
    return name.encode()[:_TENSOR_NAME_MAX - 1].decode(errors="ignore")


def _rows_cols(shape):
    """The layout's rows x cols of a shape (Client.set_layout's rule)."""
    shape = tuple(int(d) for d in shape) or (1,)
    return shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 1


def _cluster(scheduler, monitor):
    """The scheduler's and monitor's endpoints as given, else from the
    environment `kudus run` sets (KUDUS_SCHEDULER, KUDUS_MONITOR)."""
    if scheduler:
        return scheduler, monitor
    scheduler = os.environ.get("KUDUS_SCHEDULER")
    if not scheduler:
        raise ValueError("kudus.torch: no scheduler endpoint: pass one, or start the program with "
                         "`kudus run --workers N -- python3 ...`, which sets KUDUS_SCHEDULER")
    return scheduler, monitor or os.environ.get("KUDUS_MONITOR")


def _trainable(model):
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _match(model, tensors, where):
    """(parameter, offset, count) for every trainable parameter of model,
    found by name in the layout `tensors` and checked against its shape.
    ValueError naming the differences otherwise."""
    by_name = {t.name: t for t in tensors}
    pairs, problems = [], []
    for n, p in _trainable(model):
        t = by_name.pop(_layout_name(n), None)
        rows, cols = _rows_cols(p.shape)
        if t is None:
            problems.append(f"parameter {n} {list(p.shape)} is not in {where}")
        elif (t.rows, t.cols) != (rows, cols):
            problems.append(f"parameter {n} is {list(p.shape)} ({rows} x {cols}) in the module "
                            f"but {t.rows} x {t.cols} in {where}")
        else:
            pairs.append((p, t.offset, t.count))
    for t in by_name.values():
        problems.append(f"tensor {t.name} ({t.rows} x {t.cols}) of {where} is no parameter of "
                        "the module")
    if problems:
        more = f" (and {len(problems) - 4} more)" if len(problems) > 4 else ""
        raise ValueError("kudus.torch: the module's layout differs from the model's: "
                         + "; ".join(problems[:4]) + more)
    return pairs


def load_snapshot(model, snap, where="the snapshot"):
    """Copy a kudus.snapshot.Snapshot into the module's parameters, matched
    by name and shape (one copy per tensor, to any device or dtype)."""
    pairs = _match(model, snap.tensors, where)
    with torch.no_grad():
        for p, offset, count in pairs:
            p.copy_(torch.from_numpy(snap.params[offset:offset + count]).view(p.shape))
    return snap.version


def pull_model(model, scheduler, samples=None, name=None, timeout_ms=30000, curve_keys=None):
    """Load the current model of the cluster at `scheduler` into `model`,
    any module whose trainable parameters have the layout's names and
    shapes (ValueError naming the differences otherwise, before anything is
    pulled). Returns the model version.

    It joins the cluster as an evaluator for one pull and leaves at once
    (see kudus.snapshot.pull): no barrier waits for it, and it needs no
    training set. `samples` is ignored (kept so that the earlier
    pull_model(model, scheduler, samples) still works). A cluster whose
    run ended does not answer: read its shards' checkpoints with
    load_checkpoint instead.
    """
    where = f"the cluster at {scheduler}"
    snap = _snapshot.pull(scheduler, name=name, timeout_ms=timeout_ms, curve_keys=curve_keys,
                          check=lambda tensors: _match(model, tensors, where))
    return load_snapshot(model, snap, where)


def load_checkpoint(model, directory):
    """Load the model in the shards' newest checkpoints under `directory`
    (`kudus local --checkpoint-dir DIR`; each shard writes one at a clean
    stop, so after a run they hold its final model). Returns the version."""
    snap = _snapshot.read_checkpoints(directory)
    return load_snapshot(model, snap, f"the checkpoints in {directory}")


class LeaseSampler(torch.utils.data.Sampler):
    """The batch sampler of a DataLoader over the scheduler's leases: each
    iteration of the loader yields the batches of the lease last given to
    set(rows, parts), in order: its rows in `parts` contiguous pieces (one
    per loader worker process, loaded in parallel)."""

    def __init__(self):
        super().__init__(None)
        self.batches = []

    def set(self, rows, parts=1):
        rows = np.asarray(rows, dtype=np.int64)
        parts = max(1, min(int(parts), len(rows)))
        self.batches = [piece.tolist() for piece in np.array_split(rows, parts)]

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def _cat(parts):
    """Join the collated pieces of one lease along the first dimension."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(_cat(list(p)) for p in zip(*parts)))
    if isinstance(first, (tuple, list)):
        return type(first)(_cat(list(p)) for p in zip(*parts))
    if isinstance(first, dict):
        return {k: _cat([p[k] for p in parts]) for k in first}
    raise TypeError(f"kudus.torch: cannot join collated pieces of type {type(first).__name__}; "
                    "pass split_leases=False")


class Worker:
    """Trains `model` on the rows of `dataset` the scheduler leases.

    With num_workers > 0 each lease's rows are loaded by a DataLoader with
    that many worker processes (persistent for the run), split into up to
    num_workers contiguous pieces collated in parallel and joined with
    torch.cat, which gives collate(rows) for collates that stack rows, as
    torch's default does; split_leases=False has one process collate the
    whole lease (a collate that pads to the longest row, say). pin_memory
    and loader_args (further DataLoader arguments: multiprocessing_context,
    worker_init_fn, ...) go to the DataLoader. A lease is handed to the
    loader as soon as the scheduler names it, so it loads while the
    telemetry and the pull run. Each piece costs a round trip to a worker
    process, so rows already in memory (a TensorDataset) load fastest with
    num_workers=0; the processes pay off when reading a row costs (decoding
    an image, say). device is where batches go (default: the device of the
    model's first parameter).

    overlap=True pipelines each step under ASP and SSP: the training thread
    computes the next clock's gradient, on the lease the scheduler named
    ahead and the model pulled after the last release, while one background
    thread pushes this clock's gradient, arrives, sends the telemetry and
    pulls into the other parameter buffer (the only thread that touches the
    client meanwhile). Parameters on the CPU in float32 are swapped between
    the two buffers at each step (their .data), not copied. predict (on by
    default with overlap) computes each step at the pulled model moved on
    by the last update, 2 w_c - w_(c-1), in a buffer of its own; False
    computes at the pulled model (plain delayed SGD). Overlap adds a clock
    to the staleness ASP already has: two overlapped workers at the shards'
    momentum 0.9 diverged (docs/performance.md), so use it for one worker,
    or with a lower momentum. Under BSP, LSP,
    ALSP or auto the scheduler refuses the registration and run() raises
    ValueError naming the cluster's consistency. on_iteration is still
    called after each arrival, with last_rows the rows that arrival pushed.

    Without a scheduler endpoint the worker takes the one `kudus run` puts
    in its environment (KUDUS_SCHEDULER, with KUDUS_MONITOR for telemetry
    and KUDUS_RANK for its rank and name, worker-RANK).
    """

    def __init__(self, model, dataset, scheduler=None, name=None, loss_fn=None, monitor=None,
                 collate=None, timeout_ms=None, slowdown=1.0, on_iteration=None,
                 num_workers=0, pin_memory=False, split_leases=True, loader_args=None,
                 device=None, overlap=False, predict=None):
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError("kudus.torch: the scheduler leases rows by index, so the dataset must "
                            "be map-style (dataset[i]), not an IterableDataset")
        self.model = model
        self.dataset = dataset
        self.loss_fn = loss_fn or torch.nn.functional.cross_entropy
        self.collate = collate or torch.utils.data.default_collate
        self.params = [p for _, p in _trainable(model)]
        layout = [(n, tuple(p.shape)) for n, p in _trainable(model)]
        # Started by `kudus run`: the cluster and our rank are in the
        # environment.
        rank = os.environ.get("KUDUS_RANK") if not scheduler else None
        scheduler, monitor = _cluster(scheduler, monitor)
        if rank is not None and not name:
            name = f"worker-{rank}"
        self.overlap = bool(overlap)
        # With overlap: compute on the model extrapolated one update ahead
        # (the default; predict=False computes on the pulled model).
        if predict and not overlap:
            raise ValueError("kudus.torch: predict guesses the update in flight, which only "
                             "overlap=True has; pass overlap=True, or leave predict out")
        self.predict = self.overlap and (predict is None or bool(predict))
        self.client = Client(scheduler, name, samples=len(dataset), monitor=monitor,
                             layout=layout, timeout_ms=timeout_ms,
                             rank=int(rank) if rank is not None else None,
                             lease_ahead=self.overlap)
        if device is None:
            device = self.params[0].device if self.params else torch.device("cpu")
        self.device = torch.device(device)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory)
        self.split_leases = bool(split_leases)
        self.loader_args = dict(loader_args or {})
        self.flat = None
        self.grad = None
        self.iterations = 0
        # The rows of the lease of the last gradient computed.
        self.last_rows = None
        # The version the module holds, and whether run() pulled it after
        # training ended (see run).
        self.version = 0
        self.final = False
        # Emulated heterogeneity: each iteration's compute is stretched to
        # slowdown times its real length (a sleep that keeps heartbeats).
        self.slowdown = float(slowdown)
        # Called as on_iteration(worker) after every arrival.
        self.on_iteration = on_iteration
        self._views = False
        self._sampler = self._loader = self._lease = None
        # The rows handed to the loader and not yet read from it.
        self._queued = None

    # Parameters <-> flat buffers ---------------------------------------
    # Parameters on the CPU in float32 become views into the flat buffer
    # (False: copy them like any device's, as tests of that path do).
    _cpu_views = True

    def _bind(self):
        n = self.client.param_count
        ours = sum(p.numel() for p in self.params)
        if ours != n:
            raise ValueError(f"kudus.torch: the module has {ours} parameters, the cluster's "
                             f"model {self.client.model} has {n}")
        self._views = self._cpu_views and all(p.device.type == "cpu" and p.dtype == torch.float32
                                              for p in self.params)
        cuda = sorted({p.device for p in self.params if p.device.type == "cuda"}, key=str)
        self._cuda_devices = cuda
        # Pinned host buffers make the copies to and from a GPU asynchronous.
        # With overlap, two of each: the pull and the push of one clock use
        # one pair while the next clock computes on the other.
        pin = bool(cuda) and not self._views
        buffers = 2 if self.overlap else 1
        flats = [torch.empty(n, dtype=torch.float32, pin_memory=pin) for _ in range(buffers)]
        grads = [torch.zeros(n, dtype=torch.float32, pin_memory=pin) for _ in range(buffers)]
        self._flats = [t.numpy() for t in flats]
        self._grads = [t.numpy() for t in grads]
        # predict: the parameters live in a third buffer, the pulled model
        # moved on by the last update (see _use).
        pred = torch.empty(n, dtype=torch.float32, pin_memory=pin) if self.predict else None
        self._pred = pred.numpy() if self.predict else None
        # Per parameter: it, then its slice of each flat and each gradient buffer.
        self._slices = []
        offset = 0
        with torch.no_grad():
            for p in self.params:
                part = slice(offset, offset + p.numel())
                self._slices.append((p, [t[part] for t in flats] + ([pred[part]] if self.predict else []),
                                     [t[part] for t in grads]))
                offset += p.numel()
            for p, flat, _ in self._slices:
                for f in flat:
                    f.copy_(p.detach().reshape(-1))
            if self.predict:
                for p, flat, _ in self._slices:
                    if self._views:
                        p.data = flat[2].view_as(p)
            self._use(0)
            self._sync()
        self.grad = self._grads[0]

    def _use(self, b, extrapolate=False):
        """Compute on parameter buffer b from now on: views are pointed at
        it (a swap, no copy); other parameters are loaded by _load_params.
        With predict, the parameters stay in their own buffer and take b's
        model, moved on by the step from the other buffer's model to b's
        when extrapolate: the update still in flight, guessed to repeat
        the last one (with the shards' momentum, successive updates are
        close), so a gradient one clock stale is computed where it lands."""
        self._cur = b
        self.flat = self._flats[b]
        if self.predict:
            # A copy from this buffer to a device may still be under way.
            self._sync()
            if extrapolate:
                np.subtract(self._flats[b], self._flats[1 - b], out=self._pred)
                self._pred += self._flats[b]
            else:
                self._pred[:] = self._flats[b]
            return
        if self._views:
            with torch.no_grad():
                for p, flat, _ in self._slices:
                    p.data = flat[b].view_as(p)

    def _sync(self):
        for d in self._cuda_devices:
            torch.cuda.synchronize(d)

    def _load_params(self):
        """After a pull: the flat buffer into the parameters (views need nothing)."""
        if self._views:
            return
        with torch.no_grad():
            for p, flat, _ in self._slices:
                # Asynchronous only from pinned memory to a GPU, which
                # _sync waits for; other devices copy synchronously.
                src = flat[2] if self.predict else flat[self._cur]
                p.copy_(src.view_as(p), non_blocking=p.device.type == "cuda")

    def _store_grads(self, g=0):
        """The parameters' gradients into flat gradient buffer g."""
        for p, _, grad in self._slices:
            if p.grad is None:
                grad[g].zero_()
            else:
                grad[g].copy_(p.grad.reshape(-1), non_blocking=p.device.type == "cuda")
        # Pushed from the host: the copies must have landed.
        self._sync()
        self.grad = self._grads[g]

    # Batches ------------------------------------------------------------
    def _start_loader(self):
        """With num_workers > 0, the DataLoader over the leases; its worker
        processes start here, before the client connects to the cluster."""
        if self.num_workers <= 0:
            return
        self._sampler = LeaseSampler()
        args = dict(batch_sampler=self._sampler, num_workers=self.num_workers,
                    collate_fn=self.collate, pin_memory=self.pin_memory, persistent_workers=True,
                    # Its own generator: the loader's seeds do not draw from
                    # torch's global one.
                    generator=torch.Generator())
        args.update(self.loader_args)
        self._loader = torch.utils.data.DataLoader(self.dataset, **args)
        self._lease = iter(self._loader)            # an empty lease: starts the workers

    def _stop_loader(self):
        if self._loader is None:
            return
        shutdown = getattr(self._lease, "_shutdown_workers", None)
        if shutdown:
            shutdown()
        self._sampler = self._loader = self._lease = None

    def _submit(self, rows):
        """A lease is known: its pieces go to the loader's workers now."""
        if self._loader is not None:
            self._sampler.set(rows, self.num_workers if self.split_leases else 1)
            self._lease = iter(self._loader)
            self._queued = rows

    def _batch(self, rows):
        if self._loader is None:
            return self._to_device(self.collate([self.dataset[int(i)] for i in rows]))
        # A lease the loader was not given yet (a readmission's) goes now.
        if self._queued is None or not np.array_equal(self._queued, rows):
            self._submit(rows)
        self._queued = None
        # Each piece to the device first: a copy from pinned memory there
        # is asynchronous, and the join happens on the device.
        return _cat([self._to_device(next(self._lease)) for _ in range(len(self._sampler))])

    def _to_device(self, batch):
        if isinstance(batch, torch.Tensor):
            return batch.to(self.device, non_blocking=self.pin_memory and self.device.type == "cuda")
        if isinstance(batch, tuple) and hasattr(batch, "_fields"):
            return type(batch)(*(self._to_device(b) for b in batch))
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._to_device(b) for b in batch)
        if isinstance(batch, dict):
            return {k: self._to_device(v) for k, v in batch.items()}
        return batch

    def _gradient(self, rows, g=0, loaded=None):
        """The mean loss of the lease's rows, and their gradient in buffer g;
        loaded() is called once the batch is read, before the compute."""
        batch = self._batch(rows)
        if loaded:
            loaded()
        x, y = batch[0], batch[1]
        self.model.zero_grad(set_to_none=False)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self._store_grads(g)
        self.last_rows = rows
        return float(loss.detach())

    def _final_pull(self, release):
        """Training ended on our side (max_iterations) with the cluster
        still running: pull the model the last release names, which holds
        our last gradient (SSP: the shards' newest, not its cache)."""
        c = self.client
        if release is None or c.stopped:
            return
        version = 0 if c.consistency == "ssp" else None
        if self._pull_final_model(lambda buf: c.pull(buf, version)):
            self.version = c.version
            self.final = True

    def _pull_final_model(self, pull):
        """pull(buffer) the run's final model, and hand it to the module.
        With overlap the pull goes to the buffer nobody computes on, which
        the module takes only if the pull succeeded: a pull that fails
        halfway leaves the module its last complete model."""
        b = 1 - self._cur if self.overlap else self._cur
        if not pull(self._flats[b]):
            return False
        self._use(b)                    # the pulled model, not a guess
        self._load_params()
        self._sync()
        return True

    def _stopped_pull(self):
        """The scheduler stopped the run: pull the final version its STOP
        named (the shards of an external model serve it until the workers
        leave, --final-pull-ms at most), then leave so the run ends."""
        c = self.client
        if self._pull_final_model(c.pull_final):
            self.version = c.version
            self.final = True
        c.leave("done")

    def run(self, max_iterations=None):
        """Register, seed the model when it is external, and train until the
        scheduler stops the run (or for max_iterations). Returns the number
        of iterations.

        The module then holds the run's final model, and `final` is True:
        after max_iterations the cluster still answers and run() pulls once
        more, so the module holds every commit up to its last gradient; when
        the scheduler stopped the run, run() pulls the final version the
        scheduler named (`version`). If that pull fails (the shards went
        away first: a built-in model, whose shards stop with the scheduler,
        or a run killed by a signal), the module holds this worker's last
        pull, without the commits after it, and `final` is False; the run's
        final model is then in the shards' checkpoints, with
        --checkpoint-dir: load_checkpoint, or `python3 -m kudus export
        --checkpoint-dir`.
        """
        c = self.client
        self.final = False
        self._start_loader()
        try:
            if not self._register():
                return 0
            release = c.wait_start()
            if release is None:
                return 0
            self._bind()
            if c.model == "external" and not c.init_params(self.flat):
                return 0
            self.model.train()
            self._submit(release.rows)
            if self.overlap:
                self._run_overlap(release, max_iterations)
            else:
                self._run_plain(release, max_iterations)
            if not self.final and c.stopped and c.model == "external":
                self._stopped_pull()
            if not self.final:
                log.info("kudus.torch: the run stopped; the module holds version %d, this "
                         "worker's last pull", self.version)
            return self.iterations
        finally:
            self._stop_loader()

    def _run_plain(self, release, max_iterations):
        """run()'s loop: pull, compute, push, arrive, one after the other."""
        c = self.client
        while release is not None and c.pull(self.flat):
            self._load_params()
            self.version = c.version
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
            self.iterations += 1
            last = bool(max_iterations and self.iterations >= max_iterations)
            if release is not None and not last:
                self._submit(release.rows)      # loads while telemetry and the pull run
            c.telemetry()
            if self.on_iteration:
                self.on_iteration(self)
            if last:
                self._final_pull(release)
                break

    def _register(self):
        """Register; with overlap, a refusal for it is a ValueError that says
        which consistency the cluster runs."""
        try:
            ok = self.client.register()
        except KudusError as e:
            if self.overlap and "lease_ahead" in str(e):
                raise ValueError(f"kudus.torch: Worker(overlap=True) needs consistency asp or ssp, "
                                 f"and the scheduler refused it: {e}") from None
            raise
        consistency = self.client.consistency if ok else ""
        if ok and self.overlap and consistency not in ("asp", "ssp"):
            raise ValueError(f"kudus.torch: Worker(overlap=True) needs consistency asp or ssp; "
                             f"the cluster runs {consistency}")
        if ok and self.overlap and self.client.momentum >= 0.9:
            log.warning("kudus.torch: overlap adds a clock of staleness, and the shards apply "
                        "momentum %.2f: two overlapped workers at 0.9 missed 0.85 in 4 of 6 runs "
                        "where plain ones trained (docs/performance.md); overlap one worker whose "
                        "core idles while it communicates, or lower --momentum", self.client.momentum)
        return ok

    def _timed_gradient(self, rows, g, loaded=None):
        """_gradient, stretched to slowdown times its length (overlap: a
        plain sleep, as the other thread owns the client); returns the loss
        and the emulated ms to declare with its arrival (0: none)."""
        t0 = time.monotonic()
        loss = self._gradient(rows, g, loaded)
        if self.slowdown <= 1:
            return loss, 0.0
        real_ms = (time.monotonic() - t0) * 1000
        time.sleep(real_ms * (self.slowdown - 1) / 1000)
        return loss, real_ms * self.slowdown

    def _communicate(self, g, rows, loss, emulated_ms, into, last, named):
        """The background thread's half of a step: push gradient buffer g
        (computed on rows), arrive, put the lease named ahead in `named`,
        send the telemetry, and pull into parameter buffer `into`, which
        nobody computes on (not after the last step). Returns the release
        (None when the run ended), the ahead rows, whether the release
        admitted us (a readmission: its lease is new), and whether it
        pulled."""
        c = self.client
        if emulated_ms:
            c.set_emulated_ms(emulated_ms)
        if not c.push(self._grads[g], len(rows)):
            return None, None, False, False
        release = c.arrive(loss)
        if release is None:
            return None, None, False, False
        admitted = c.admitted
        ahead = c.ahead_rows            # valid until the next arrival: copied now
        named.put(ahead)
        c.telemetry()
        pulled = not last and c.pull(self._flats[into])
        return release, ahead, admitted, pulled

    def _run_overlap(self, release, max_iterations):
        """run() with a lease ahead: each step's communication on a
        background thread, the next step's gradient on this one. Only one
        thread uses the client at a time: this one before the first hand-off
        and after each join, which order their memory as ZeroMQ's sockets
        need when they change threads."""
        c = self.client
        if not c.pull(self.flat):
            return
        self._use(self._cur)
        self._load_params()
        self.version = c.version
        rows, ahead, g = release.rows, c.ahead_rows, 0
        # Once the first batch is read, the lease named ahead goes to the
        # loader.
        loss, emulated = self._timed_gradient(rows, g, lambda: self._submit(ahead) if len(ahead) else None)
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kudus-comm")
        job = None
        try:
            while True:
                last = bool(max_iterations and self.iterations + 1 >= max_iterations)
                named = queue.SimpleQueue()
                job = pool.submit(self._communicate, g, rows, loss, emulated, 1 - self._cur, last, named)
                early = []

                def hand_on():
                    # The loader is idle once a batch is read: the lease
                    # named ahead goes to it now, if the arrival came.
                    if not early and not named.empty():
                        early.append(named.get())
                        self._submit(early[0])

                # Meanwhile the next clock's gradient, on the lease named
                # ahead and the model pulled after the last release.
                ahead_step = None
                if not last and len(ahead):
                    ahead_step = (ahead, *self._timed_gradient(ahead, 1 - g, hand_on))
                    hand_on()
                pending, job = job, None
                release, next_ahead, admitted, pulled = pending.result()
                if release is None:
                    break
                self.iterations += 1
                self.last_rows = rows
                if self.on_iteration:
                    self.on_iteration(self)
                if last:
                    self._final_pull(release)
                    break
                if not pulled:
                    break
                hand_on()
                self._use(1 - self._cur, extrapolate=not admitted)
                self._load_params()
                self.version = c.version
                g = 1 - g
                # The lease of this release is the one computed ahead,
                # unless the release readmitted us (its lease is new, even
                # if its rows happen to be the same) or named none ahead.
                if ahead_step is not None and not admitted and np.array_equal(ahead_step[0], release.rows):
                    loss, emulated = ahead_step[1], ahead_step[2]
                else:
                    # Computed now, with nothing in flight: at the pulled
                    # model; the next step's guess is taken again after.
                    if self.predict and not admitted:
                        self._use(self._cur)
                        self._load_params()
                    loss, emulated = self._timed_gradient(release.rows, g)
                    if self.predict and not admitted:
                        self._use(self._cur, extrapolate=True)
                        self._load_params()
                rows, ahead = release.rows, next_ahead
        finally:
            # An exception here waits for the other thread's step to end
            # (the client's own deadlines bound it), and one there comes
            # out of job.result() above.
            # A second interrupt while we wait still shuts the pool down, so
            # that nothing uses the client after run() returns.
            try:
                if job is not None:
                    try:
                        job.result()
                    except Exception:
                        log.exception("kudus.torch: the communication thread failed too")
            finally:
                pool.shutdown(wait=True)
                # The module holds a pulled model, not a guess, however
                # the loop ended (the final pull below may replace it).
                if self.predict:
                    self._use(self._cur)
                    self._load_params()
                    self._sync()

    def close(self):
        self.client.close()


class Evaluator:
    """Scores the cluster's model live and reports it to the monitor.

        ev = kudus.torch.Evaluator(Net(), (x_test, y_test), "tcp://127.0.0.1:7000", every=5)
        ev.start()        # a thread; or ev.run() as this process's loop
        ...
        ev.stop()

    `model` is a module of the workers' layout (names and shapes of its
    trainable parameters), not a Worker's own module: each pull overwrites
    it. `test_data` is a pair of tensors (inputs, labels), a map-style
    Dataset of (input, label) rows, or any iterable of (inputs, labels)
    batches such as a DataLoader. `metric` is "accuracy" (the default; the
    test loss is reported beside it), "loss", or a callable
    metric(model, test_data) -> float, reported under its __name__ (one
    that takes longer than the scheduler's liveness, 3 s by default, has
    the evaluator declared dead and registered again; any
    value in [0, 1] but a "loss" is the run's test metric: the one
    --target-accuracy and time_to_accuracy use). Every `every` seconds it
    pulls whatever version the shards hold and, when that is new, scores
    it. It is an evaluator to the cluster (its own role: it may pull and
    report, nothing else) and never holds the workers up. `history` lists
    (version, value, loss) of each report; on_eval(evaluator) is called
    after each. The run's STOP ends it.
    """

    def __init__(self, model, test_data, scheduler=None, metric="accuracy", every=5.0, name=None,
                 monitor=None, batch_size=1000, loss_fn=None, device=None, timeout_ms=None,
                 curve_keys=None, on_eval=None):
        if isinstance(metric, str):
            if metric not in ("accuracy", "loss"):
                raise ValueError(f"kudus.torch: metric is \"accuracy\", \"loss\" or a callable "
                                 f"metric(model, test_data), not {metric!r}")
            self.metric_name, self._metric = metric, None
        elif callable(metric):
            self.metric_name, self._metric = getattr(metric, "__name__", "metric"), metric
        else:
            raise TypeError("kudus.torch: metric must be a name or a callable")
        self.model = model
        self.test_data = test_data
        self.every = float(every)
        self.batch_size = int(batch_size)
        self.loss_fn = loss_fn or torch.nn.functional.cross_entropy
        params = [p for _, p in _trainable(model)]
        self.device = torch.device(device) if device is not None else (
            params[0].device if params else torch.device("cpu"))
        self.on_eval = on_eval
        scheduler, monitor = _cluster(scheduler, monitor)
        self.client = Client(scheduler, name, monitor=monitor, timeout_ms=timeout_ms,
                             curve_keys=curve_keys, evaluator=True)
        self.where = f"the cluster at {scheduler}"
        self.history = []
        self._registered = False
        self._halt = threading.Event()
        self._thread = None
        self.error = None

    def _batches(self):
        d = self.test_data
        if isinstance(d, (tuple, list)) and len(d) == 2 and all(isinstance(t, torch.Tensor) for t in d):
            x, y = d
            for i in range(0, len(x), self.batch_size):
                yield x[i:i + self.batch_size], y[i:i + self.batch_size]
        elif isinstance(d, torch.utils.data.Dataset):
            yield from torch.utils.data.DataLoader(d, batch_size=self.batch_size)
        else:
            yield from d

    def score(self):
        """The metric of the module as it is now, and the test loss (NaN
        when the metric is a callable)."""
        self.model.eval()
        with torch.no_grad():
            if self._metric:
                return float(self._metric(self.model, self.test_data)), math.nan
            correct = total = 0
            loss = 0.0
            for batch in self._batches():
                # A long scoring must not look like a death to the
                # scheduler (three missed heartbeats): a 1 ms sleep in the
                # client answers it between batches.
                if self._registered:
                    self.client.sleep(1)
                x, y = batch[0].to(self.device), batch[1].to(self.device)
                out = self.model(x)
                loss += float(self.loss_fn(out, y)) * len(y)
                correct += int((out.argmax(1) == y).sum())
                total += len(y)
        if total == 0:
            raise ValueError("kudus.torch: the evaluator's test data is empty")
        loss /= total
        return (correct / total if self.metric_name == "accuracy" else loss), loss

    def _wait(self, seconds):
        """Sleep while answering the scheduler; False when the run or we stopped."""
        until = time.monotonic() + seconds
        while not self._halt.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return True
            if not self.client.sleep(min(left, 0.2) * 1000):
                return False
        return False

    def run(self, max_evaluations=None):
        """Register as an evaluator and report every `every` seconds until
        the run stops (or stop(), or max_evaluations). Returns the number of
        reports."""
        c = self.client
        if not c.register() or c.wait_start() is None:
            return 0
        self._registered = True
        pairs = _match(self.model, c.tensors, self.where)
        flat = np.empty(c.param_count, np.float32)
        last = None
        while not self._halt.is_set() and c.pull(flat, 0):
            version = c.version
            if version != last:
                with torch.no_grad():
                    for p, offset, count in pairs:
                        p.copy_(torch.from_numpy(flat[offset:offset + count]).view(p.shape))
                value, loss = self.score()
                if not c.report_eval(self.metric_name, value, version, loss) and not self.history:
                    log.warning("kudus.torch: the evaluator has no monitor to report to yet "
                                "(pass monitor=, the monitor's intake endpoint)")
                self.history.append((version, value, loss))
                log.debug("kudus.torch: evaluated version %d: %s %.4f", version, self.metric_name, value)
                last = version
                if self.on_eval:
                    self.on_eval(self)
                if max_evaluations and len(self.history) >= max_evaluations:
                    break
            if not self._wait(self.every):
                break
        return len(self.history)

    def _main(self):
        try:
            self.run()
        except Exception as e:      # kept for stop() to raise in the caller
            self.error = e
        finally:
            self.client.close()

    def start(self):
        """Run in a daemon thread."""
        self._thread = threading.Thread(target=self._main, name="kudus-evaluator", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout=30):
        """Stop the thread (at its next wait) and close; raises what it raised."""
        self._halt.set()
        if self._thread:
            self._thread.join(timeout)
        self.close()
        if self.error:
            raise self.error

    def close(self):
        if self._thread is None or not self._thread.is_alive():
            self.client.close()
