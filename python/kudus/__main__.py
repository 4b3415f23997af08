"""python3 -m kudus: the binding's command line.

    python3 -m kudus export --scheduler tcp://127.0.0.1:7000 --out model.pt
    python3 -m kudus export --checkpoint-dir ckpt --out model.npz
    python3 -m kudus version
"""
import argparse
import importlib
import importlib.util
import os
import sys

import numpy as np

USAGE_EXAMPLES = """
A .pt file is torch.save of a state_dict: the layout's tensor names (the
module's parameter names) to tensors, for torch.load + load_state_dict. A
.npz file holds the same arrays for numpy (and C: row-major rows x cols).
The layout knows each tensor as rows x cols, by a name of at most 31 bytes:
--like names a module whose parameters give the exact shapes (a conv weight
[8, 1, 5, 5], not 8 x 25) and the full names; without it a tensor is
[rows, cols], or [rows] when cols is 1. Only parameters are in the file: a
module with buffers (BatchNorm's running statistics) loads it with
load_state_dict(..., strict=False).

--scheduler pulls the current model of a running cluster: it joins as an
evaluator (pull only; no barrier waits for it) for one pull and leaves.
--checkpoint-dir reads the shards' newest checkpoints (kudus
local --checkpoint-dir DIR): a shard writes one at a clean stop, so after
a run they hold its final model.
"""


def _like(spec):
    """The module named by FILE.py:NAME or package.module:NAME (a class or
    function called with no arguments, or a module instance)."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise SystemExit(f"kudus export: --like wants FILE.py:NAME or MODULE:NAME, not {spec!r}")
    if where.endswith(".py") or os.sep in where:
        name = "kudus_like_" + os.path.splitext(os.path.basename(where))[0]
        loader = importlib.util.spec_from_file_location(name, where)
        if loader is None:
            raise SystemExit(f"kudus export: cannot import {where}")
        mod = importlib.util.module_from_spec(loader)
        sys.modules[name] = mod
        loader.loader.exec_module(mod)
    else:
        mod = importlib.import_module(where)
    import torch
    obj = getattr(mod, attr)
    return obj if isinstance(obj, torch.nn.Module) else obj()


def export(args):
    from . import snapshot

    module = _like(args.like) if args.like else None
    if module is not None:
        from .torch import _layout_name, _match, _trainable
    if args.scheduler:
        # The module's layout is checked before anything is pulled.
        check = None if module is None else (
            lambda tensors: _match(module, tensors, f"the cluster at {args.scheduler}"))
        snap = snapshot.pull(args.scheduler, timeout_ms=int(args.timeout * 1000),
                             curve_keys=args.curve_keys, check=check)
    else:
        snap = snapshot.read_checkpoints(args.checkpoint_dir)
    shapes = {}
    if module is not None:
        _match(module, snap.tensors, f"the checkpoints in {args.checkpoint_dir}"
               if args.checkpoint_dir else f"the cluster at {args.scheduler}")
        shapes = {_layout_name(n): tuple(p.shape) for n, p in _trainable(module)}
    arrays = snapshot.arrays(snap, shapes)
    if module is not None:
        # The module's own names: the layout cuts them to 31 bytes.
        full = {_layout_name(n): n for n, _ in _trainable(module)}
        arrays = {full[name]: a for name, a in arrays.items()}
    out = args.out
    if out.endswith((".pt", ".pth")):
        import torch
        torch.save({name: torch.from_numpy(a) for name, a in arrays.items()}, out)
    elif out.endswith(".npz"):
        np.savez(out, **arrays)
    else:
        raise SystemExit(f"kudus export: --out must end in .pt, .pth or .npz, not {out!r}")
    versions = ("" if len(set(snap.versions)) <= 1
                else f" (the shards' ranges at versions {', '.join(map(str, snap.versions))})")
    print(f"kudus export: {len(arrays)} tensors, {snap.params.size} values, model version "
          f"{snap.version}{versions} from {snap.source} -> {out}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m kudus")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write a cluster's model to a .pt or .npz file",
                        epilog=USAGE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = ex.add_mutually_exclusive_group(required=True)
    source.add_argument("--scheduler", metavar="ENDPOINT",
                        help="a running cluster's scheduler, tcp://HOST:PORT")
    source.add_argument("--checkpoint-dir", metavar="DIR",
                        help="the shards' checkpoint directory (or its parent, one directory per shard)")
    ex.add_argument("--out", required=True, metavar="FILE", help="FILE.pt (PyTorch) or FILE.npz (numpy)")
    # Taken and ignored: earlier versions pulled as a worker, which needed it.
    ex.add_argument("--samples", type=int, metavar="N", help=argparse.SUPPRESS)
    ex.add_argument("--like", metavar="FILE.py:NAME",
                    help="a module (class, function or instance) whose parameter shapes to write")
    ex.add_argument("--timeout", type=float, default=30, metavar="S",
                    help="with --scheduler: seconds to wait for the cluster (default 30)")
    ex.add_argument("--curve-keys", metavar="DIR", help="with --scheduler: CURVE keys (kudus keygen DIR)")
    sub.add_parser("version", help="the package's and the loaded libkudus's versions and path")
    args = parser.parse_args(argv)
    if args.command == "export":
        try:
            return export(args)
        except (OSError, ValueError, RuntimeError) as e:     # RuntimeError: KudusError
            print(f"kudus export: {e}", file=sys.stderr)
            return 1
    import kudus
    print(f"kudus {kudus.__version__}, libkudus {kudus.library_version()} from "
          f"{kudus.LIBRARY_PATH} ({kudus.LIBRARY_SOURCE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
