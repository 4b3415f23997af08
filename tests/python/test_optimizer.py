"""kd_optimizer against torch.optim: the same gradient sequence, the same
parameters after 1,000 steps, to 1e-6 relative, for every rule and schedule.

Run by ctest (test_python_optimizer) with Debian's python3-pytest and
python3-torch; KUDUS_BIN_DIR names the build directory holding kd_opt_replay.
"""
import zlib
import os
import subprocess

import numpy as np
import pytest
import torch

BIN = os.environ.get("KUDUS_BIN_DIR", "build")
N, STEPS = 257, 1000
REL = 1e-6


def replay(tmp_path, spec, x0, grads):
    src = tmp_path / "in.bin"
    out = tmp_path / "out.bin"
    with open(src, "wb") as f:
        np.array([x0.size, len(grads)], dtype=np.int32).tofile(f)
        x0.astype(np.float32).tofile(f)
        grads.astype(np.float32).tofile(f)
    subprocess.run([os.path.join(BIN, "kd_opt_replay"), spec, str(src), str(out)],
                   check=True, timeout=60)
    return np.fromfile(out, dtype=np.float32)


def torch_run(make, x0, grads, schedule=None):
    torch.set_num_threads(1)
    p = torch.nn.Parameter(torch.tensor(x0, dtype=torch.float32))
    opt = make([p])
    sched = schedule(opt) if schedule else None
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float32)
        opt.step()
        if sched:
            sched.step()
    return p.detach().numpy()


def data(seed):
    rng = np.random.default_rng(seed)
    x0 = rng.normal(0, 1, N).astype(np.float32)
    # Gradients of mixed scale, a few exact zeros and sign flips: the cases
    # where AdaGrad's and Adam's denominators matter.
    grads = (rng.normal(0, 1, (STEPS, N)) * rng.choice([1e-3, 0.1, 1, 10], (STEPS, N)))
    grads[rng.random((STEPS, N)) < 0.02] = 0
    return x0, grads.astype(np.float32)


def rel_err(a, b):
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-3)))


CASES = [
    ("sgd lr=0.01 momentum=0", lambda ps: torch.optim.SGD(ps, lr=0.01, foreach=False), None),
    ("sgd lr=0.01 momentum=0.9", lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, foreach=False), None),
    ("sgd lr=0.01 momentum=0.9 wd=0.01",
     lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, weight_decay=0.01, foreach=False), None),
    ("nesterov lr=0.01 momentum=0.9",
     lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, nesterov=True, foreach=False), None),
    ("adagrad lr=0.05 eps=1e-10", lambda ps: torch.optim.Adagrad(ps, lr=0.05, eps=1e-10, foreach=False), None),
    ("adagrad lr=0.05 eps=1e-10 wd=0.001",
     lambda ps: torch.optim.Adagrad(ps, lr=0.05, eps=1e-10, weight_decay=0.001, foreach=False), None),
    ("adam lr=0.001", lambda ps: torch.optim.Adam(ps, lr=0.001, foreach=False), None),
    ("adam lr=0.003 beta1=0.8 beta2=0.99 eps=1e-06 wd=0.01",
     lambda ps: torch.optim.Adam(ps, lr=0.003, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.01,
                                 foreach=False), None),
    ("adamw lr=0.001 wd=0.01", lambda ps: torch.optim.AdamW(ps, lr=0.001, weight_decay=0.01, foreach=False), None),
    ("adam lr=0.001 schedule=step:100:0.5",
     lambda ps: torch.optim.Adam(ps, lr=0.001, foreach=False),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=100, gamma=0.5)),
    ("sgd lr=0.01 momentum=0.9 schedule=cosine:1000",
     lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9, foreach=False),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=1000)),
    # Warm-up: lr * t / W for the first W steps (t from 1), as a LambdaLR
    # of epoch e = t - 1, chained with a step decay.
    ("adamw lr=0.002 wd=0.01 schedule=step:300:0.3 warmup=50",
     lambda ps: torch.optim.AdamW(ps, lr=0.002, weight_decay=0.01, foreach=False),
     lambda o: torch.optim.lr_scheduler.LambdaLR(
         o, lambda e: min(1.0, (e + 1) / 50) * 0.3 ** (e // 300))),
]


@pytest.mark.parametrize("spec,make,schedule", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(tmp_path, spec, make, schedule):
    x0, grads = data(zlib.crc32(spec.encode()) % 1000)
    ours = replay(tmp_path, spec, x0, grads)
    theirs = torch_run(make, x0, grads, schedule)
    assert np.all(np.isfinite(ours))
    err = rel_err(ours, theirs)
    print(f"{spec}: max relative difference {err:.2e}")
    assert err <= REL, f"{spec}: max relative difference {err:.2e} > {REL}"


def test_malformed_spec_is_refused(tmp_path):
    x0, grads = data(1)
    for bad in ["rmsprop lr=0.1", "adam lr=-1", "adam lr", "sgd momentum=2", "nesterov momentum=0",
                "adam schedule=cosine:0", "adam bogus=1"]:
        with pytest.raises(subprocess.CalledProcessError) as e:
            replay(tmp_path, bad, x0, grads[:2])
        assert e.value.returncode == 2, bad
