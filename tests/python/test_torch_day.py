"""A PyTorch user's day with kudus (issue 34 sections 1, 3 and 4): the
package installed into a fresh virtual environment trains; the trained
model comes back (Worker.run's last pull, pull_model, and `python3 -m kudus
export` from a running cluster and from the shards' checkpoints) and scores
the same in plain PyTorch; batches come from a DataLoader over the leases;
a module on a GPU trains where there is one.

Run by ctest (test_python_client) with Debian's python3-pytest,
python3-torch, python3-venv, python3-setuptools and python3-wheel;
KUDUS_BIN_DIR names the build directory.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch

import kudus
import kudus.snapshot
import kudus.torch
from conftest import BIN, SRC, free_base_port, release_base

# One tiny model and data set, written to each test's tmp_path so that the
# in-tree tests, the venv's python and `export --like` import the same one.
# A Conv1d makes a 3-d weight, which the layout knows only as rows x cols.
TINY = '''
import numpy as np
import torch

ROWS, FEATURES, CLASSES = 1200, 20, 3


def data(rows=ROWS, seed=0):
    """A linearly separable 3-class problem: rows x FEATURES, labels."""
    w = np.random.default_rng(99).normal(size=(FEATURES, CLASSES))
    x = np.random.default_rng(seed).normal(size=(rows, FEATURES)).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy((x @ w).argmax(1).astype(np.int64))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * FEATURES, CLASSES)

    def forward(self, x):
        # Columns past FEATURES (a test's row index) are not inputs.
        x = torch.relu(self.conv(x[:, :FEATURES].unsqueeze(1)))
        return self.fc(x.flatten(1))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())
'''


def budget(seconds):
    """The time a test may take (the deadline fixture's alarm)."""
    def mark(f):
        f.budget = seconds
        return f
    return mark


@pytest.fixture(autouse=True)
def deadline(request):
    seconds = getattr(request.function, "budget", 240)

    def expired(signum, frame):
        raise TimeoutError(f"{request.node.name} took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(TINY)
    spec = importlib.util.spec_from_file_location(f"tiny_{abs(hash(str(tmp_path)))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.PATH = str(path)
    return mod


def clean_env(**extra):
    """The environment without this tree's python/ or a venv of the caller;
    pip never goes to an index or keeps a cache."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "KUDUS_LIB", "VIRTUAL_ENV", "PYTHONHOME", "PKG_CONFIG_PATH")
           and not k.startswith("PIP_")}
    env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_ROOT_USER_ACTION="ignore")
    env.update(extra)
    return env


def pip_env(tmp_path, **extra):
    """clean_env, with pip's and venv's scratch files in tmp_path."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return clean_env(TMPDIR=str(scratch), **extra)


def tree_env():
    """This tree's kudus (PYTHONPATH=python) over this build's library."""
    return clean_env(PYTHONPATH=os.path.join(SRC, "python"), KUDUS_LIB=os.path.join(BIN, "libkudus.so"))


def run(cmd, timeout, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, f"{cmd}: rc {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def copy_package(tmp_path):
    """python/ as a user would check it out: no build leftovers of ours
    in the tree, none of theirs in the copy."""
    dest = tmp_path / "python"
    shutil.copytree(os.path.join(SRC, "python"), dest,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "dist", "*.egg-info"))
    return dest


def make_venv(path, pip=True):
    cmd = [sys.executable, "-m", "venv", "--system-site-packages", str(path)]
    run(cmd if pip else cmd + ["--without-pip"], 300, env=pip_env(path.parent))
    return str(path / "bin" / "python")


def import_report(python, cwd, env):
    """Where the kudus a python imports comes from, and its library."""
    out = run([python, "-c", "import json, kudus, kudus.torch; print(json.dumps([kudus.__file__, "
               "kudus.LIBRARY_PATH, kudus.LIBRARY_SOURCE, kudus.library_version()]))"],
              60, cwd=cwd, env=env)
    return json.loads(out.stdout)


WORKER_SCRIPT = '''
import json, sys
import torch
import kudus, kudus.torch
from tiny import Net, accuracy, data

scheduler, name = sys.argv[1], sys.argv[2]
torch.set_num_threads(1)
torch.manual_seed(0)
x, y = data()
model = Net()
worker = kudus.torch.Worker(model, torch.utils.data.TensorDataset(x, y), scheduler, name)
iterations = worker.run()
tx, ty = data(1000, seed=1)
print(json.dumps(dict(iterations=iterations, version=worker.version, final=worker.final,
                      accuracy=accuracy(model, tx, ty), file=kudus.__file__,
                      source=kudus.LIBRARY_SOURCE)))
torch.save(model.state_dict(), name + ".pt")
worker.close()
'''


@budget(540)
def test_fresh_venv_installs_the_package_and_trains(cluster, tmp_path, tiny):
    """python3 -m venv --system-site-packages, pip install --no-index
    --no-build-isolation ./python, then that venv's python: finds the
    library through KUDUS_LIB and pkg-config, says so only at INFO, trains
    with two workers until the run stops, each worker's module then holds
    the run's final model, and the CLI exports the same model from the
    shards' checkpoints."""
    venv = tmp_path / "venv"
    python = make_venv(venv)
    src = copy_package(tmp_path)
    run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", str(src)], 300,
        cwd=tmp_path, env=pip_env(tmp_path))
    lib = os.path.join(BIN, "libkudus.so")
    where, path, source, version = import_report(python, tmp_path, clean_env(KUDUS_LIB=lib))
    assert where.startswith(str(venv)), where
    assert (path, source, version) == (lib, "KUDUS_LIB", kudus.library_version())

    # Said at INFO on the kudus logger, silent by default.
    quiet = run([python, "-c", "import kudus"], 60, cwd=tmp_path, env=clean_env(KUDUS_LIB=lib))
    assert quiet.stderr == "" and quiet.stdout == ""
    loud = run([python, "-c", "import logging; logging.basicConfig(level=logging.INFO); import kudus"],
               60, cwd=tmp_path, env=clean_env(KUDUS_LIB=lib))
    assert f"kudus: loaded {lib} (KUDUS_LIB)" in loud.stderr, loud.stderr

    # pkg-config: an installed prefix's lib/pkgconfig/kudus.pc.
    if shutil.which("pkg-config"):
        prefix = tmp_path / "prefix"
        (prefix / "lib" / "pkgconfig").mkdir(parents=True)
        shutil.copy(os.path.join(BIN, "kudus.pc"), prefix / "lib" / "pkgconfig" / "kudus.pc")
        os.symlink(os.path.realpath(lib), prefix / "lib" / "libkudus.so.0")
        _, path, source, _ = import_report(
            python, tmp_path, clean_env(PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig")))
        assert source == "pkg-config" and os.path.realpath(path) == os.path.realpath(
            prefix / "lib" / "libkudus.so.0"), (path, source)

    (tmp_path / "train.py").write_text(WORKER_SCRIPT)
    ckpt = tmp_path / "ckpt"
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--epochs", "4",
                "--lr", "0.1", "--max-seconds", "120", "--checkpoint-dir", str(ckpt))
    env = clean_env(KUDUS_LIB=lib)
    procs = [subprocess.Popen([python, "train.py", c.scheduler, f"venv-{i}"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=200) for p in procs]
    assert c.wait(timeout=60) == 0
    s = c.summary()
    assert s["stop_reason"] == "epochs", s["stop_reason"]
    reports = []
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for r in reports:
        print(r)
        assert r["file"].startswith(str(venv)) and r["source"] == "KUDUS_LIB"
        assert r["iterations"] > 20
        # Stopped by the scheduler: run() pulled the final version STOP
        # named, so the module holds every commit of the run.
        assert r["final"] and r["version"] == s["updates"], (r, s["updates"])
        assert r["accuracy"] > 0.6, r

    out = run([python, "-m", "kudus", "export", "--checkpoint-dir", str(ckpt), "--like",
               f"{tiny.PATH}:Net", "--out", str(tmp_path / "final.pt")], 120, cwd=tmp_path, env=env)
    assert f"model version {s['updates']} " in out.stdout, out.stdout
    model = tiny.Net()
    exported = torch.load(tmp_path / "final.pt")
    model.load_state_dict(exported)
    tx, ty = tiny.data(1000, seed=1)
    assert tiny.accuracy(model, tx, ty) > 0.6
    # What each worker's module held when run() returned is the exported model.
    for i in range(2):
        held = torch.load(tmp_path / f"venv-{i}.pt")
        assert held.keys() == exported.keys()
        for name in held:
            assert torch.equal(held[name], exported[name]), name


@budget(360)
def test_wheel_carries_libkudus(tmp_path):
    """KUDUS_WHEEL_LIB=.../libkudus.so.0 pip wheel: a platform wheel with
    the library inside, which a venv imports with no KUDUS_LIB, pkg-config
    or system copy to find."""
    src = copy_package(tmp_path)
    dist = tmp_path / "dist"
    lib = os.path.join(BIN, "libkudus.so.0")
    run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-index",
         "--no-build-isolation", "-w", str(dist)], 300, cwd=tmp_path,
        env=pip_env(tmp_path, KUDUS_WHEEL_LIB=lib))
    wheels = list(dist.glob("kudus-*.whl"))
    assert len(wheels) == 1 and not wheels[0].name.endswith("-any.whl"), wheels
    python = make_venv(tmp_path / "venv", pip=False)        # the system's pip, run in the venv
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", str(wheels[0])], 300,
        cwd=tmp_path, env=pip_env(tmp_path))
    where, path, source, version = import_report(python, tmp_path, clean_env(PKG_CONFIG_PATH="/nonexistent"))
    assert source == "bundled", (path, source)
    assert path.startswith(os.path.dirname(where)) and path.endswith("_lib/libkudus.so.0"), path
    assert version == kudus.library_version()
    # An explicit KUDUS_LIB still wins over the bundled copy.
    _, path, source, _ = import_report(python, tmp_path, clean_env(KUDUS_LIB=lib))
    assert (path, source) == (lib, "KUDUS_LIB")


def flat_of(model):
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()]).numpy()


def own_pull(scheduler, samples):
    """The cluster's model, as the test itself reads it: one pull through
    kudus.Client, no kudus.torch."""
    with kudus.Client(scheduler, "test-reader", samples=samples) as c:
        assert c.register(timeout_ms=30000)
        assert c.wait_start(timeout_ms=30000) is not None
        params = np.empty(c.param_count, np.float32)
        assert c.pull(params)
        tensors, version = c.tensors, c.version
        c.leave("read")
    return tensors, params, version


@budget(60)
def test_kudus_export_settings_are_the_config_tables():
    """`kudus export` checks its settings against the config table before
    anything runs: --help lists them with their KUDUS_* variables, and a
    bad flag, a bad value or a missing source is exit 2 with its name."""
    kudus_bin = os.path.join(BIN, "kudus")

    def env(**extra):
        e = {k: v for k, v in clean_env().items() if not k.startswith("KUDUS_")}
        e.update(KUDUS_PYTHON=sys.executable, **extra)
        return e
    helped = subprocess.run([kudus_bin, "export", "--help"], capture_output=True, text=True, timeout=30,
                            env=env())
    assert helped.returncode == 0
    for name in ("--scheduler", "--checkpoint-dir", "--out", "--like", "--timeout", "KUDUS_OUT"):
        assert name in helped.stdout, name
    cases = [(["--out", "x.pt"], {}, "one of --scheduler ENDPOINT and --checkpoint-dir DIR"),
             (["--scheduler", "tcp://127.0.0.1:1", "--checkpoint-dir", "d", "--out", "x.pt"], {},
              "one of --scheduler"),
             (["--bogus", "1"], {}, "unknown flag '--bogus'"),
             (["--scheduler", "tcp://127.0.0.1:1", "--out", "x.pt"], {"KUDUS_TIMEOUT": "soon"},
              "setting 'timeout'")]
    for args, extra, said in cases:
        r = subprocess.run([kudus_bin, "export"] + args, capture_output=True, text=True, timeout=30,
                           env=env(**extra))
        assert r.returncode == 2 and said in r.stderr, (args, r.returncode, r.stderr)
    # A compose shard or a `kudus run` copy has KUDUS_SCHEDULER: the flag
    # wins, and the writer runs (and says the folder is missing).
    r = subprocess.run([kudus_bin, "export", "--checkpoint-dir", "/nonexistent-kudus-ckpt", "--out", "x.pt"],
                       capture_output=True, text=True, timeout=60,
                       env=env(KUDUS_SCHEDULER="tcp://127.0.0.1:1"))
    assert r.returncode == 1 and "one of" not in r.stderr and "nonexistent-kudus-ckpt" in r.stderr, r.stderr


@budget(300)
def test_trained_model_back_scores_the_same(cluster, tmp_path, tiny):
    """Two workers (one through the parameter copies any device takes)
    train for a number of iterations and end with the cluster's model in
    their modules; pull_model, `python3 -m kudus export` (.pt) and the C
    command `kudus export` (.npz), from the running cluster and, once it
    stopped, from its checkpoints,
    give the same values; a fresh module loaded with torch.load +
    load_state_dict scores what the cluster's model scores."""
    torch.set_num_threads(1)
    ckpt = tmp_path / "ckpt"
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--epochs", "1000",
                "--lr", "0.1", "--max-seconds", "200", "--checkpoint-dir", str(ckpt))
    x, y = tiny.data()
    data = torch.utils.data.TensorDataset(x, y)
    workers = []
    for i in range(2):
        torch.manual_seed(0)
        w = kudus.torch.Worker(tiny.Net(), data, c.scheduler, f"back-{i}", timeout_ms=30000)
        if i == 1:
            w._cpu_views = False        # parameters copied as on a GPU
        workers.append(w)
    results = {}
    threads = [threading.Thread(target=lambda w=w: results.setdefault(w, w.run(max_iterations=40)),
                                daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert [results.get(w) for w in workers] == [40, 40]
    assert workers[0]._views and not workers[1]._views

    tensors, params, version = own_pull(c.scheduler, len(x))
    assert [w.final for w in workers] == [True, True]
    assert [w.version for w in workers] == [version, version]
    for w in workers:
        assert np.array_equal(flat_of(w.model), params)

    # The cluster's model, evaluated by the test's own mapping of the flat
    # vector to the module's parameters.
    tx, ty = tiny.data(1000, seed=1)
    ref = tiny.Net()
    with torch.no_grad():
        by_name = {t.name: t for t in tensors}
        for n, p in ref.named_parameters():
            t = by_name[n]
            p.copy_(torch.from_numpy(params[t.offset:t.offset + t.count]).view(p.shape))
    cluster_accuracy = tiny.accuracy(ref, tx, ty)
    assert cluster_accuracy > 0.5

    export = [sys.executable, "-m", "kudus", "export"]
    like = ["--like", f"{tiny.PATH}:Net"]
    out = run(export + ["--scheduler", c.scheduler, "--out", str(tmp_path / "model.pt")] + like, 120,
              env=tree_env())
    assert f"model version {version} " in out.stdout, out.stdout
    # The C command runs the same writer and finds the package and the
    # library beside its build by itself: no PYTHONPATH, no KUDUS_LIB.
    # Its settings are the config table's: --out comes from KUDUS_OUT here,
    # and --samples, which earlier versions needed, is still taken.
    run([os.path.join(BIN, "kudus"), "export", "--scheduler", c.scheduler, "--samples", str(len(x))], 120,
        env=clean_env(KUDUS_PYTHON=sys.executable, KUDUS_OUT=str(tmp_path / "model.npz")))

    fresh = tiny.Net()
    fresh.load_state_dict(torch.load(tmp_path / "model.pt"))
    assert abs(tiny.accuracy(fresh, tx, ty) - cluster_accuracy) <= 0.001
    assert np.array_equal(flat_of(fresh), params)
    with np.load(tmp_path / "model.npz") as z:
        assert list(z.keys()) == [t.name for t in tensors]
        assert z["conv.weight"].shape == (4, 3)         # rows x cols without --like
        assert np.array_equal(np.concatenate([z[t.name].reshape(-1) for t in tensors]), params)

    pulled = tiny.Net()
    assert kudus.torch.pull_model(pulled, c.scheduler) == version
    assert np.array_equal(flat_of(pulled), params)

    # Without --like the 3-d weight is rows x cols: load_state_dict says so.
    run(export + ["--scheduler", c.scheduler, "--samples", str(len(x)), "--out",
                  str(tmp_path / "flat.pt")], 120, env=tree_env())
    with pytest.raises(RuntimeError, match="conv.weight"):
        tiny.Net().load_state_dict(torch.load(tmp_path / "flat.pt"))

    # Stopped, the cluster answers no more; its shards' last checkpoints
    # hold the same model.
    for w in workers:
        w.close()
    c.proc.send_signal(signal.SIGTERM)
    c.wait(timeout=60)
    out = run(export + ["--checkpoint-dir", str(ckpt), "--out", str(tmp_path / "ckpt.pt")] + like,
              120, env=tree_env())
    assert f"model version {version} " in out.stdout, out.stdout
    from_ckpt = tiny.Net()
    from_ckpt.load_state_dict(torch.load(tmp_path / "ckpt.pt"))
    assert np.array_equal(flat_of(from_ckpt), params)
    loaded = tiny.Net()
    assert kudus.torch.load_checkpoint(loaded, str(ckpt)) == version
    assert np.array_equal(flat_of(loaded), params)
    with pytest.raises(kudus.KudusError):
        kudus.torch.pull_model(tiny.Net(), c.scheduler, len(x), timeout_ms=2000)


LOADER_SCRIPT = '''
import collections, json, os, sys
import torch
import kudus.torch
from tiny import FEATURES, Net, accuracy, data

scheduler, name = sys.argv[1], sys.argv[2]
# Optional: DataLoader processes (default 2), and "overlap" for a worker
# that computes each lease one step ahead (test_torch_overlap.py).
loaders = int(sys.argv[3]) if len(sys.argv) > 3 else 2
overlap = sys.argv[4:] == ["overlap"]
torch.set_num_threads(1)
torch.manual_seed(0)
x, y = data()


class Indexed(torch.utils.data.Dataset):
    """Row i with two more columns: i, and the pid of the process that read it."""
    def __len__(self):
        return len(x)

    def __getitem__(self, i):
        return torch.cat([x[i], torch.tensor([float(i), float(os.getpid())])]), y[i]


seen = []


class Recording(Net):
    def forward(self, batch):
        seen.append(batch[:, FEATURES:].long().tolist())
        return super().forward(batch)


leases = mismatches = rows = 0
pids = set()


def check(worker):
    global leases, mismatches, rows
    # Overlapped, the last batch is the next lease's, computed ahead.
    batch = seen[-2] if overlap else seen[-1]
    leases += 1
    rows += len(worker.last_rows)
    pids.update(pid for _, pid in batch)
    if [i for i, _ in batch] != [int(r) for r in worker.last_rows]:
        mismatches += 1


model = Recording()
worker = kudus.torch.Worker(model, Indexed(), scheduler, name, num_workers=loaders, on_iteration=check,
                            overlap=overlap)
iterations = worker.run()
tx, ty = data(1000, seed=1)
print(json.dumps(dict(iterations=iterations, leases=leases, rows=rows, mismatches=mismatches,
                      pids=sorted(pids), pid=os.getpid(), accuracy=accuracy(model, tx, ty))))
worker.close()
'''


def loader_runs(c, tmp_path, names, args=None):
    """LOADER_SCRIPT as one worker process a name (with its args), to the
    end of the run on cluster c: each lease's batch held exactly its rows,
    in its order, the applied samples are the rows each worker pushed, and
    the model trains. Returns the summary and each worker's report."""
    (tmp_path / "loader.py").write_text(LOADER_SCRIPT)
    procs = [subprocess.Popen([sys.executable, "loader.py", c.scheduler, name, *extra], cwd=tmp_path,
                              env=tree_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, extra in zip(names, args or [()] * len(names))]
    outs = [p.communicate(timeout=200) for p in procs]
    assert c.wait(timeout=60) == 0
    s = c.summary()
    assert s["stop_reason"] == "epochs", s["stop_reason"]
    per_worker = {w["name"]: w for w in s["per_worker"]}
    reports = []
    for name, p, (out, err) in zip(names, procs, outs):
        assert p.returncode == 0, err[-3000:]
        r = json.loads(out.strip().splitlines()[-1])
        print(r)
        assert r["mismatches"] == 0 and r["leases"] == r["iterations"] > 10, r
        w = per_worker[name]
        assert w["iterations"] == r["iterations"] and w["applied_samples"] == r["rows"], (w, r)
        assert r["accuracy"] > 0.6, r
        reports.append(r)
    return s, reports


@budget(300)
def test_dataloader_workers_use_each_leased_row_once(cluster, tmp_path, tiny):
    """num_workers=2: every lease's batch holds exactly its rows, in its
    order, read by the DataLoader's two worker processes (never the
    training process); the applied samples are the leases' rows, and the
    model trains."""
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--epochs", "3",
                "--lr", "0.1", "--max-seconds", "150")
    s, reports = loader_runs(c, tmp_path, ["loader-0", "loader-1"])
    for r in reports:
        assert len(r["pids"]) == 2 and r["pid"] not in r["pids"], r
    assert sum(w["applied_samples"] for w in s["per_worker"]) >= 3 * tiny.ROWS


def test_lease_sampler_and_join():
    """The pieces of a lease, and their join, are collate(rows)."""
    x = torch.arange(30, dtype=torch.float32).view(10, 3)
    data = torch.utils.data.TensorDataset(x, torch.arange(10))
    sampler = kudus.torch.LeaseSampler()
    sampler.set(np.array([7, 1, 4, 9, 0], np.uint64), parts=2)
    assert list(sampler) == [[7, 1, 4], [9, 0]] and len(sampler) == 2
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler)
    joined = kudus.torch._cat(list(loader))
    whole = torch.utils.data.default_collate([data[i] for i in [7, 1, 4, 9, 0]])
    assert all(torch.equal(a, b) for a, b in zip(joined, whole))
    sampler.set([3], parts=4)
    assert list(sampler) == [[3]]


def wait_trained(c, timeout=60):
    """Until the monitor's stream (kudus tail --json) shows a version above
    0: own_pull joins as a worker, and must not be the one the run waits for."""
    tail = subprocess.Popen([os.path.join(BIN, "kudus"), "tail", f"tcp://127.0.0.1:{c.port + 2}",
                             "--json", "true", "--timeout", str(timeout)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in tail.stdout:
            m = json.loads(line)
            if m.get("topic") == "stats" and m.get("version", 0) > 0:
                return m["version"]
    finally:
        tail.kill()
        tail.wait()
    raise AssertionError("the cluster did not train")


@budget(180)
def test_pull_model_shape_mismatch_is_a_clear_error(cluster, tmp_path):
    """pull_model into a module whose parameters differ from the cluster's
    layout names each difference, before anything is pulled; a module of
    the same layout gets the model. It pulls as an evaluator: no training
    set's row count, and no worker joins or leaves the cluster (the
    earlier call, with samples, still works the same way)."""
    from test_torch_eval import Tail
    c = cluster("--model", "softmax", "--workers", "1", "--epochs", "1000", "--max-seconds", "120")
    tail = Tail(tmp_path, c.port)
    try:
        s_pull_model_checks(c, tail)
    finally:
        tail.stop()


def s_pull_model_checks(c, tail):
    """The body of test_pull_model_shape_mismatch_is_a_clear_error."""
    wait_trained(c)

    class Softmax(torch.nn.Module):
        def __init__(self, classes=10, bias=True):
            super().__init__()
            self.W = torch.nn.Parameter(torch.zeros(784, classes))
            if bias:
                self.b = torch.nn.Parameter(torch.zeros(10))

    with pytest.raises(ValueError, match=r"parameter W is \[784, 12\] \(784 x 12\) in the module but "
                                         r"784 x 10 in the cluster"):
        kudus.torch.pull_model(Softmax(classes=12), c.scheduler)
    with pytest.raises(ValueError, match=r"tensor b \(10 x 1\) of the cluster at .* is no parameter"):
        kudus.torch.pull_model(Softmax(bias=False), c.scheduler)
    model = Softmax()
    version = kudus.torch.pull_model(model, c.scheduler)
    assert version > 0 and float(model.W.abs().sum()) > 0
    again = Softmax()
    assert kudus.torch.pull_model(again, c.scheduler, 60000, timeout_ms=20000) >= version
    assert float(again.W.abs().sum()) > 0
    # The control: a pull as a worker leaves a worker-left event behind.
    own_pull(c.scheduler, 60000)
    until = time.monotonic() + 20
    while b'"test-reader"' not in tail.path.read_bytes() and time.monotonic() < until:
        time.sleep(0.2)
    c.kill()
    events = [m for m in tail.messages() if m["topic"] == "event"]
    assert [m["kind"] for m in events if m.get("name") == "test-reader"] == ["worker-left"], events
    assert not [m for m in events if m.get("name", "").startswith("pull-")], events


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@budget(300)
def test_module_on_a_gpu_trains(cluster, tiny):
    """A module on the GPU beside one on the CPU: parameters and gradients
    cross through the flat buffers, and both end with the cluster's model."""
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--epochs", "1000",
                "--lr", "0.1", "--max-seconds", "200")
    x, y = tiny.data()
    data = torch.utils.data.TensorDataset(x, y)
    torch.manual_seed(0)
    gpu = kudus.torch.Worker(tiny.Net().cuda(), data, c.scheduler, "gpu", num_workers=2, pin_memory=True)
    cpu = kudus.torch.Worker(tiny.Net(), data, c.scheduler, "cpu")
    threads = [threading.Thread(target=w.run, args=(30,), daemon=True) for w in (gpu, cpu)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=200)
    assert gpu.iterations == cpu.iterations == 30 and gpu.final and cpu.final
    assert all(p.is_cuda for p in gpu.model.parameters())
    assert np.array_equal(flat_of(gpu.model), flat_of(cpu.model))
    tx, ty = tiny.data(1000, seed=1)
    assert tiny.accuracy(gpu.model, tx.cuda(), ty.cuda()) == tiny.accuracy(cpu.model, tx, ty)


LONG = '''
import torch


class Long(torch.nn.Module):
    """A parameter name longer than the layout's 31 bytes."""
    def __init__(self):
        super().__init__()
        self.a_rather_long_submodule_name = torch.nn.Linear(20, 3)

    def forward(self, x):
        return self.a_rather_long_submodule_name(x)
'''


@budget(180)
def test_export_like_restores_long_names(cluster, tmp_path, tiny):
    """The layout cuts names to 31 bytes; export --like writes the module's
    own, so load_state_dict takes the file as it is."""
    (tmp_path / "long.py").write_text(LONG)
    spec = importlib.util.spec_from_file_location("long_model", tmp_path / "long.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "1", "--epochs", "1000",
                "--lr", "0.1", "--max-seconds", "120")
    x, y = tiny.data()
    w = kudus.torch.Worker(mod.Long(), torch.utils.data.TensorDataset(x, y), c.scheduler, "long")
    assert w.run(max_iterations=5) == 5 and w.final
    names = [t.name for t in w.client.tensors]
    assert names == ["a_rather_long_submodule_name.we", "a_rather_long_submodule_name.bi"]
    export = [sys.executable, "-m", "kudus", "export", "--scheduler", c.scheduler]
    run(export + ["--like", f"{tmp_path / 'long.py'}:Long", "--out", str(tmp_path / "long.pt")], 120,
        env=tree_env())
    fresh = mod.Long()
    fresh.load_state_dict(torch.load(tmp_path / "long.pt"))
    assert np.array_equal(flat_of(fresh), flat_of(w.model))
    run(export + ["--out", str(tmp_path / "cut.pt")], 120, env=tree_env())
    assert list(torch.load(tmp_path / "cut.pt")) == names
    w.close()


# Plain PyTorch, no kudus: the README example's CNN (its class, taken from
# the example's source) scores an exported state_dict on the test set.
PLAIN_SCORE = '''
import ast, gzip, json, sys
import numpy as np
import torch
import torch.nn as nn

example, weights, data = sys.argv[1:4]
tree = ast.parse(open(example).read())
cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CNN")
namespace = {"torch": torch, "nn": nn}
exec(compile(ast.Module([cls], []), example, "exec"), namespace)
model = namespace["CNN"]()
model.load_state_dict(torch.load(weights))


def idx(name, offset):
    with gzip.open(f"{data}/{name}.gz") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


x = torch.from_numpy(idx("t10k-images-idx3-ubyte", 16).reshape(-1, 784).astype(np.float32) / 255.0)
y = torch.from_numpy(idx("t10k-labels-idx1-ubyte", 8).astype(np.int64))
model.eval()
with torch.no_grad():
    right = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum()) for i in range(0, len(x), 1000))
print(json.dumps({"accuracy": right / len(x)}))
'''

# The same final model as kudus.torch reads it from the checkpoints, scored
# by the example's own test_accuracy, and compared tensor by tensor with the
# exported state_dict.
KUDUS_SCORE = '''
import json, sys
import torch
import kudus.torch
sys.path.insert(0, sys.argv[1])
from torch_cnn import CNN, test_accuracy
model = CNN()
kudus.torch.load_checkpoint(model, sys.argv[2])
exported = torch.load(sys.argv[3])
mine = model.state_dict()
same = sorted(exported) == sorted(mine) and all(torch.equal(exported[k], mine[k]) for k in mine)
print(json.dumps({"accuracy": test_accuracy(model, "cpu"), "same": same}))
'''


def stream_from(url, into, stop):
    """The dashboard's server-sent events: every data line's JSON into a list."""
    import urllib.request
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                for line in r:
                    if line.startswith(b"data: "):
                        into.append(json.loads(line[6:]))
                    if stop.is_set():
                        return
        except Exception:
            time.sleep(0.2)     # not listening yet, cut, or gone with the run


@budget(600)
def test_the_readmes_day_from_a_fresh_venv(tmp_path):
    """The issue's whole day, as README.md tells it: a fresh venv with
    `pip install ./python`; `kudus run` starts a cluster and two copies of
    examples/torch_cnn.py, copy 0 evaluating; the dashboard's stream carries
    a live accuracy curve; --target-accuracy stops the run; `python3 -m
    kudus export` writes the final model as a state_dict, tensor for tensor
    what kudus.torch reads from the checkpoints, which plain PyTorch scores
    exactly as kudus.torch does."""
    python = make_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", str(copy_package(tmp_path))],
        200, cwd=tmp_path, env=pip_env(tmp_path))
    env = clean_env(KUDUS_LIB=os.path.join(BIN, "libkudus.so"))
    example = os.path.join(SRC, "examples", "torch_cnn.py")
    base = free_base_port()
    dash = base + 20            # in the reserved block, a port kudus local leaves alone
    target = 0.86
    events, stop = [], threading.Event()
    reader = threading.Thread(target=stream_from, args=(f"http://127.0.0.1:{dash}/events", events, stop),
                              daemon=True)
    reader.start()
    summary, ckpt = tmp_path / "summary.json", tmp_path / "ckpt"
    try:
        out = subprocess.run(
            [os.path.join(BIN, "kudus"), "run", "--workers", "2", "--epochs", "5", "--lr", "0.05",
             "--target-accuracy", str(target), "--max-seconds", "240", "--dashboard", f"127.0.0.1:{dash}",
             "--checkpoint-dir", str(ckpt), "--summary", str(summary), "--quiet", "true",
             "--base-port", str(base), "--", python, example, "--evaluate", "1"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    finally:
        stop.set()
        reader.join(10)
        release_base(base)
    said = out.stdout[-3000:] + out.stderr[-3000:]
    assert out.returncode == 0, said
    with open(summary) as f:
        s = json.load(f)
    print({k: s.get(k) for k in ("stop_reason", "updates", "test_accuracy", "time_to_accuracy")})
    assert s["model"] == "external" and s["stop_reason"] == "target-accuracy", said
    assert s["test_accuracy"] >= target and s["time_to_accuracy"] is not None, said

    # The dashboard drew a curve: several versions scored while it trained,
    # the last over the target.
    curve = sorted({(m["test_version"], m["test_accuracy"]) for m in events
                    if m.get("topic") == "stats" and m.get("test_accuracy") is not None
                    and m.get("test_version") is not None})
    print("curve", curve)
    assert len(curve) >= 3, f"the dashboard saw {curve}\n{said}"
    assert max(a for _, a in curve) >= target

    out = run([python, "-m", "kudus", "export", "--checkpoint-dir", str(ckpt), "--like", f"{example}:CNN",
               "--out", str(tmp_path / "cnn.pt")], 120, cwd=tmp_path, env=env)
    assert f"model version {s['updates']} " in out.stdout, out.stdout
    (tmp_path / "plain.py").write_text(PLAIN_SCORE)
    plain = json.loads(run(["/usr/bin/python3", str(tmp_path / "plain.py"), example, str(tmp_path / "cnn.pt"),
                            "/usr/share/datasets/fashion-mnist"], 120, cwd=tmp_path,
                           env=clean_env()).stdout.strip().splitlines()[-1])
    (tmp_path / "score.py").write_text(KUDUS_SCORE)
    ours = json.loads(run([python, str(tmp_path / "score.py"), os.path.dirname(example), str(ckpt),
                           str(tmp_path / "cnn.pt")], 120, cwd=tmp_path, env=env).stdout.strip().splitlines()[-1])
    print("final model", plain, ours)
    assert ours["same"], "the exported state_dict differs from the checkpoints' model"
    assert plain["accuracy"] == ours["accuracy"]
    # The final model is the trained one: a few commits past the version
    # that met the target, not the initial values.
    assert plain["accuracy"] >= target - 0.05
