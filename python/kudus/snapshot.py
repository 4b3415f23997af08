"""kudus.snapshot: a whole model's values with its layout, from a running
cluster or from the shards' checkpoints, for kudus.torch.pull_model and
`python3 -m kudus export`. numpy only.

    snap = kudus.snapshot.pull("tcp://127.0.0.1:7000")
    snap = kudus.snapshot.read_checkpoints("ckpt")   # kudus local --checkpoint-dir ckpt
    for name, array in kudus.snapshot.arrays(snap).items(): ...

A Snapshot holds `tensors` (the layout: kudus.Tensor name, offset, count,
rows, cols), `params` (the flat float32 vector), `version` (the model
version; for checkpoints the oldest range's) and `versions` (per shard
range, in key order).
"""
import glob
import itertools
import os
import socket
import struct
import zlib
from collections import OrderedDict, namedtuple

import numpy as np

from . import Client, KudusError, Tensor

__all__ = ["Snapshot", "pull", "read_checkpoint", "read_checkpoints", "arrays"]

Snapshot = namedtuple("Snapshot", "tensors params version versions model source")
Snapshot.__doc__ = "A model's layout (tensors), its flat values (params) and version(s)."

_names = itertools.count()


def pull(scheduler, samples=None, name=None, timeout_ms=30000, curve_keys=None, check=None):
    """The current model of a running cluster.

    It joins the cluster as an evaluator (the role that may pull and
    report, nothing else: it holds no lease and no barrier waits for it),
    pulls the newest committed model once and leaves. `samples` is not
    needed and ignored (an earlier version joined as a worker, which must
    declare the training set's row count). A model nothing has committed
    to yet (version 0) is waited for until `timeout_ms`, then refused.
    `check(tensors)`, when given, sees the layout before the pull and may
    raise to stop it. With CURVE, `curve_keys` is a directory holding the
    evaluator's key (kudus keygen).
    """
    del samples             # the old signature's; an evaluator declares none
    name = name or f"pull-{socket.gethostname()}-{os.getpid()}-{next(_names)}"
    timeout_ms = int(timeout_ms)
    with Client(scheduler, name, timeout_ms=timeout_ms, curve_keys=curve_keys, evaluator=True) as c:
        try:
            registered = c.register(timeout_ms)
        except KudusError:
            raise KudusError(f"kudus: {scheduler} did not welcome us within {timeout_ms / 1000:g} s: "
                             "no cluster there, or training has ended (the reason is in the "
                             "log)") from None
        if not registered:
            raise KudusError(f"kudus: the run at {scheduler} ended before the pull")
        if c.keyed:
            raise KudusError("kudus: a keyed (sparse) model is pulled by key (Client.pull_keys), "
                             "not as a whole")
        tensors = c.tensors
        if check:
            check(tensors)
        try:
            started = c.wait_start(timeout_ms) is not None
        except KudusError:
            raise KudusError(f"kudus: the cluster at {scheduler} did not start training within "
                             f"{timeout_ms / 1000:g} s") from None
        if not started:
            raise KudusError(f"kudus: the run at {scheduler} ended before the pull")
        params = np.empty(c.param_count, np.float32)
        # At least version 1: a model nothing committed to is no trained
        # model (and an external model's shards serve none before a worker
        # seeds it); the shard holds the pull until one is.
        if not c.pull(params, 1):
            if c.stopped:
                raise KudusError(f"kudus: the run at {scheduler} ended during the pull")
            raise KudusError(f"kudus: the cluster at {scheduler} has no trained model (version "
                             f"1 or later) within {timeout_ms / 1000:g} s")
        version, model = c.version, c.model
        c.leave("pulled")
    return Snapshot(tensors, params, version, (version,), model, scheduler)


# Checkpoint files (include/kd_checkpoint.h): a 128-byte little-endian
# header, the layout, the range's float32 values, optimizer state, CRC-32.
_HEADER = 128
_NAME = 32
_MAGIC_V2 = b"KDCKPT02"


def read_checkpoint(path):
    """One shard's checkpoint file: a dict of its header fields (version,
    lo, hi, n_params, ...), `tensors` (the whole model's layout) and
    `params` (the values of [lo, hi)). ValueError if it is not a whole,
    dense, version-2 checkpoint."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER + 8 or data[:8] != _MAGIC_V2:
        raise ValueError(f"{path}: not a version-2 Kudus checkpoint")
    if zlib.crc32(data[:-4]) != struct.unpack_from("<I", data, len(data) - 4)[0]:
        raise ValueError(f"{path}: CRC mismatch (a torn or damaged file)")
    (version, samples, rank, lo, hi, n_params) = struct.unpack_from("<6Q", data, 8)
    kind, hidden, ts_ms = struct.unpack_from("<IIQ", data, 56)
    n_state, opt_kind, opt_steps, key_dim = struct.unpack_from("<IIQI", data, 72)
    if key_dim:
        raise ValueError(f"{path}: a keyed (sparse) range; only dense models are exported")
    if not lo < hi <= n_params:
        raise ValueError(f"{path}: bad range [{lo}, {hi}) of {n_params}")
    pos = _HEADER
    (n_tensors,) = struct.unpack_from("<I", data, pos)
    pos += 4
    tensors, offset = [], 0
    for _ in range(n_tensors):
        raw = data[pos:pos + _NAME]
        rows, cols = struct.unpack_from("<QQ", data, pos + _NAME)
        pos += _NAME + 16
        tensors.append(Tensor(raw.split(b"\0", 1)[0].decode(errors="replace"), offset,
                              rows * cols, rows, cols))
        offset += rows * cols
    if not tensors or offset != n_params:
        raise ValueError(f"{path}: no layout that makes the model (a checkpoint written before "
                         "layouts were stored?)")
    count = hi - lo
    expect = pos + (1 + n_state) * count * 4 + 4
    if len(data) != expect:
        raise ValueError(f"{path}: {len(data)} bytes, expected {expect}")
    params = np.frombuffer(data, dtype="<f4", count=count, offset=pos).astype(np.float32)
    return dict(path=path, version=version, samples=samples, rank=rank, lo=lo, hi=hi,
                n_params=n_params, ts_ms=ts_ms, tensors=tensors, params=params)


def read_checkpoints(directory):
    """The model in the shards' newest valid checkpoints under `directory`
    (`ckpt-*.kdc` in it or in its subdirectories, one per shard as
    `kudus local --checkpoint-dir` makes them). Each key range takes its
    newest readable file; the ranges must cover the model. A shard writes
    one at a clean stop, so after a run that ended they hold its final
    model."""
    files = sorted(glob.glob(os.path.join(directory, "ckpt-*.kdc"))
                   + glob.glob(os.path.join(directory, "*", "ckpt-*.kdc")))
    if not files:
        raise FileNotFoundError(f"kudus: no checkpoints (ckpt-*.kdc) in {directory} or its "
                                "subdirectories")
    by_dir = {}
    for path in files:
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    best, errors = {}, []
    for paths in by_dir.values():
        # Newest first (names sort by version); the first readable one counts.
        for path in sorted(paths, reverse=True):
            try:
                ck = read_checkpoint(path)
            except (OSError, ValueError) as e:
                errors.append(str(e))
                continue
            key = (ck["lo"], ck["hi"])
            if key not in best or ck["version"] > best[key]["version"]:
                best[key] = ck
            break
    if not best:
        raise ValueError("kudus: no readable checkpoint: " + "; ".join(errors[:3]))
    ranges = sorted(best)
    first = best[ranges[0]]
    n_params, tensors = first["n_params"], first["tensors"]
    params = np.empty(n_params, np.float32)
    at = 0
    for lo, hi in ranges:
        ck = best[(lo, hi)]
        if ck["n_params"] != n_params or ck["tensors"] != tensors:
            raise ValueError(f"kudus: {ck['path']} belongs to another model than {first['path']}")
        if lo != at:
            raise ValueError(f"kudus: the checkpoints in {directory} leave keys [{at}, {lo}) "
                             "uncovered (a shard's directory missing?)")
        params[lo:hi] = ck["params"]
        at = hi
    if at != n_params:
        raise ValueError(f"kudus: the checkpoints in {directory} leave keys [{at}, {n_params}) "
                         "uncovered (a shard's directory missing?)")
    versions = tuple(best[r]["version"] for r in ranges)
    return Snapshot(tensors, params, min(versions), versions, None, directory)


def arrays(snap, shapes=None):
    """Name -> numpy array (a copy) for each tensor of the snapshot, in
    layout order. `shapes` (name -> shape) gives the module's own shapes; a
    tensor without one is rows x cols, or [rows] when cols is 1."""
    shapes = shapes or {}
    out = OrderedDict()
    for t in snap.tensors:
        shape = tuple(shapes.get(t.name, (t.rows,) if t.cols == 1 else (t.rows, t.cols)))
        out[t.name] = snap.params[t.offset:t.offset + t.count].reshape(shape).copy()
    return out
