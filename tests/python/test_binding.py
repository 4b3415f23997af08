"""kudus.Client, the ctypes binding of kd_client: argument checks, and a
Python worker beside a built-in C worker in one training run."""
import importlib.util
import os

import numpy as np
import pytest

import kudus
from kudus.datasets import fashion_mnist


def test_library_version():
    assert kudus.library_version() == "0.1.0"


def test_register_times_out_without_a_scheduler():
    with kudus.Client("tcp://127.0.0.1:9", "lonely", samples=10) as c:
        with pytest.raises(kudus.KudusError):
            c.register(timeout_ms=200)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(kudus.KudusError):
        kudus.Client("")
    with kudus.Client("tcp://127.0.0.1:9", "x") as c:
        with pytest.raises(kudus.KudusError):
            c.set_layout([("w", (3, 4)), ("w", (2,))])        # a name twice
        with pytest.raises(kudus.KudusError):
            c.set_layout([("w", (0, 4))])                     # an empty tensor
    with pytest.raises(ValueError):
        kudus.Client("tcp://127.0.0.1:9", "x", wire_dtype="fp8")


# The gradient of examples/numpy_softmax.py, the numpy worker users start
# from (and the compose test's user image runs).
_example = importlib.util.spec_from_file_location(
    "numpy_softmax", os.path.join(os.path.dirname(__file__), "..", "..", "examples", "numpy_softmax.py"))
numpy_softmax = importlib.util.module_from_spec(_example)
_example.loader.exec_module(numpy_softmax)
softmax_gradient = numpy_softmax.softmax_gradient


def test_python_and_c_workers_train_one_model(cluster):
    x, y = fashion_mnist("train")
    c = cluster("--model", "softmax", "--workers", "1", "--external-workers", "1",
                "--epochs", "1", "--max-seconds", "120")
    with kudus.Client(c.scheduler, "py-worker", samples=len(x), monitor=c.monitor,
                      wire_dtype="fp16") as client:
        assert client.register(timeout_ms=30000)
        assert client.model == "softmax"
        assert [t.name for t in client.tensors] == ["W", "b"]
        assert client.tensors[0].rows == 784 and client.tensors[0].cols == 10
        release = client.wait_start(timeout_ms=30000)
        params = np.zeros(client.param_count, np.float32)
        grad = np.zeros_like(params)
        with pytest.raises(ValueError):
            client.pull(np.zeros(3, np.float32))
        iterations = poisoned = 0
        while release is not None and client.pull(params):
            loss = softmax_gradient(params, x[release.rows], y[release.rows], grad)
            # Every 10th gradient holds a NaN: it is not sent, and its rows
            # go back to be trained again.
            if iterations % 10 == 9:
                grad[5] = np.nan
                poisoned += 1
            if not client.push(grad, len(release.rows)):
                break
            release = client.arrive(loss)
            client.telemetry()
            iterations += 1
        assert client.stopped
        assert client.refused == poisoned > 10, (client.refused, poisoned)
    assert c.wait(timeout=120) == 0
    s = c.summary()
    assert s["stop_reason"] == "epochs", s["stop_reason"]
    names = {w["name"]: w for w in s["per_worker"]}
    assert "py-worker" in names and len(names) == 2, names
    assert all(w["applied_samples"] > 1000 for w in names.values()), names
    assert names["py-worker"]["refused"] == poisoned, names["py-worker"]
    assert s["refused_gradients"] == poisoned
    assert iterations > 100
    assert s["test_accuracy"] >= 0.75, s["test_accuracy"]


def _planted_sparse(seed, features, rows, per_row=8):
    """A click log of a planted logistic model: per row `per_row` sorted
    feature keys in 1..features (key 0 is the bias), and 0/1 labels."""
    rng = np.random.default_rng(seed)
    true_w = rng.normal(0, 1.5, features + 1)
    idx = np.sort(np.stack([rng.choice(np.arange(1, features + 1), per_row, replace=False)
                            for _ in range(rows)]), axis=1).astype(np.uint64)
    logits = true_w[0] + true_w[idx.astype(np.int64)].sum(axis=1)
    labels = (rng.random(rows) < 1 / (1 + np.exp(-logits))).astype(np.float32)
    return idx, labels, logits


def _sparse_lr_worker(c, name, idx, labels, rows, features):
    """Sparse logistic regression in numpy over kudus.Client's keyed pull
    and push, on the first `rows` rows, until the run stops. Returns each
    batch's training loss."""
    per_row = idx.shape[1]
    seen = []
    with kudus.Client(c.scheduler, name, samples=rows, monitor=c.monitor) as client:
        client.set_keyed_layout("w", features + 1, 1)
        assert client.register(timeout_ms=30000)
        assert client.keyed and client.param_count == features + 1
        release = client.wait_start(timeout_ms=30000)
        while release is not None and not client.stopped:
            batch = idx[release.rows]
            keys = np.unique(np.concatenate([[0], batch.ravel()]).astype(np.uint64))
            w = np.zeros(keys.size, np.float32)
            if not client.pull_keys(keys, w):
                break
            pos = np.searchsorted(keys, batch)
            p = 1 / (1 + np.exp(-(w[0] + w[pos].sum(axis=1))))
            y = labels[release.rows]
            seen.append(float(-(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9)).mean()))
            d = ((p - y) / len(y)).astype(np.float32)
            g = np.zeros(keys.size, np.float32)
            g[0] = d.sum()
            np.add.at(g, pos.ravel(), np.repeat(d, per_row))
            if not client.push_keys(keys, g, len(y)):
                break
            release = client.arrive(seen[-1])
    return seen


def _run_threads(targets, timeout=180):
    """Run each (function, args) in a thread; re-raise the first exception."""
    import threading
    errors = []

    def guarded(fn, args):
        try:
            fn(*args)
        except Exception as e:        # re-raised in the test's thread below
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def test_keyed_model_pushes_and_pulls_numpy_index_arrays(cluster, tmp_path):
    """Sparse logistic regression in numpy over kudus.Client's keyed pull
    and push: 2 Python workers, 2 shards, only the keys each batch
    touches cross the wire, and the training loss falls."""
    features, rows = 3000, 4000
    idx, labels, _ = _planted_sparse(3, features, rows)
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--shards", "2",
                "--batch", "40", "--epochs", "3", "--optimizer", "adagrad", "--lr", "0.3",
                "--max-seconds", "120")
    losses = {}

    def work(name):
        losses[name] = _sparse_lr_worker(c, name, idx, labels, rows, features)
    _run_threads([(work, (f"sparse-py-{i}",)) for i in range(2)], timeout=150)
    assert c.wait(60) == 0
    assert len(losses) == 2
    for name, seen in losses.items():
        assert len(seen) > 50, name
        first, last = np.mean(seen[:10]), np.mean(seen[-20:])
        assert last < first - 0.1, f"{name}: loss {first:.3f} -> {last:.3f}"


def _auc(scores, labels):
    """Area under the ROC curve by ranks (ties are rare with float scores)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def test_keyed_model_scored_live_by_an_auc_evaluator(cluster):
    """The sparse model's own metric from any process: an evaluator
    (kudus.Client(evaluator=True)) pulls only the keys of held-out rows,
    scores the planted model's AUC and reports it; the monitor takes it as
    the run's test metric, and --target-accuracy stops the run on it."""
    features, rows, held = 2000, 4000, 1000
    idx, labels, logits = _planted_sparse(5, features, rows + held)
    planted = _auc(logits[rows:], labels[rows:])
    target = round(0.8 * planted, 3)
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2", "--shards", "2",
                "--batch", "40", "--epochs", "50", "--optimizer", "adagrad", "--lr", "0.3",
                "--target-accuracy", str(target), "--max-seconds", "150")
    reports = []

    def evaluate():
        test = idx[rows:]
        keys = np.unique(np.concatenate([[0], test.ravel()]).astype(np.uint64))
        pos = np.searchsorted(keys, test)
        w = np.zeros(keys.size, np.float32)
        with kudus.Client(c.scheduler, "auc-evaluator", monitor=c.monitor, evaluator=True) as ev:
            assert ev.register(timeout_ms=30000)
            ev.wait_start(timeout_ms=30000)
            seen = -1
            while not ev.stopped and ev.pull_keys(keys, w):
                if ev.version != seen:
                    seen = ev.version
                    value = _auc(w[0] + w[pos].sum(axis=1), labels[rows:])
                    ev.report_eval("auc", value, seen)
                    reports.append((seen, value))
                ev.sleep(300)

    _run_threads([(_sparse_lr_worker, (c, f"auc-w{i}", idx, labels, rows, features)) for i in range(2)]
                 + [(evaluate, ())])
    assert c.wait(60) == 0
    s = c.summary()
    print("planted AUC", planted, "target", target, "reports", len(reports), reports[-3:])
    versions = [v for v, _ in reports]
    assert reports and versions == sorted(set(versions)), versions
    assert max(value for _, value in reports) >= target
    assert s["stop_reason"] == "target-accuracy", s["stop_reason"]
    assert s["stop_accuracy"] >= target


def test_keyed_calls_check_their_arrays():
    with kudus.Client("tcp://127.0.0.1:9", "x") as c:
        with pytest.raises(ValueError):
            c.pull_keys(np.array([1, 2], np.int64), np.zeros(2, np.float32))     # not uint64
        with pytest.raises(ValueError):
            c.push_keys(np.array([1, 2], np.uint64), np.zeros(3, np.float32), 1)  # 3 values, 2 keys
        with pytest.raises(kudus.KudusError):
            c.set_keyed_layout("", 10)
