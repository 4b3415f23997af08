"""kudus.torch.Worker(overlap=True): a worker that holds one lease ahead
(protocol 9.3.2) computes the next clock's gradient while a background
thread pushes, arrives and pulls. Under ASP two such workers (one reading
its batches through a DataLoader) train a small model to a sane accuracy,
every leased row is applied once per epoch, and the gradients they push
are each one clock stale or more, as the one-clock-older base says; one
such worker under plain SGD makes exactly delayed SGD's steps; under
BSP the scheduler refuses it and run() raises a ValueError naming the
consistency, and the scheduler goes on serving; max_iterations, an
exception on either thread and the final pull end the run cleanly.

Run by ctest (test_python_client); KUDUS_BIN_DIR names the build directory.
"""
import time

import numpy as np
import pytest
import torch

import kudus.torch
from test_torch_day import budget, deadline, loader_runs, tiny  # noqa: F401  (fixtures)


@budget(300)
def test_overlap_under_asp_trains_and_applies_every_row_once(cluster, tmp_path, tiny):
    """Two overlapped workers, one reading its batches through a DataLoader
    of two processes: the run ends on its epochs, every gradient pushed was
    computed on exactly its lease's rows, the summary's applied samples are
    the rows pushed, every epoch's row share is exactly 1.0, the model
    trains, and the pushes are at least one clock stale (computed on the
    model of the release before)."""
    # Momentum 0.5: with 0.9, the clock of staleness overlap adds cost this
    # small model half its accuracy (0.42 against 0.81 at lr 0.1), measured
    # before the worker predicted the model by default.
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2",
                "--consistency", "asp", "--epochs", "3", "--lr", "0.05", "--momentum", "0.5",
                "--max-seconds", "150")
    s, reports = loader_runs(c, tmp_path, ["overlap-0", "overlap-1"], [("0", "overlap"), ("2", "overlap")])
    assert s["epochs_completed"] >= 3 and all(share == 1.0 for share in s["epoch_row_share"]), s
    # The training process reads its rows itself; the DataLoader's processes, never it.
    assert reports[0]["pids"] == [reports[0]["pid"]], reports[0]
    assert reports[1]["pid"] not in reports[1]["pids"], reports[1]
    assert s["staleness_p50"] >= 1, s["staleness_p50"]


@pytest.mark.parametrize("predict", [False, True])
@budget(120)
def test_each_step_is_computed_on_the_model_before(cluster, tiny, predict):
    """One overlapped worker under ASP with plain SGD: the shards end on
    w_{k+1} = w_k - lr g(w_{k-1}; lease k) (g(w_0; lease 0) first), the
    delayed SGD a lease ahead makes, and not on w_k - lr g(w_k; lease k).
    With predict, from the third step on the gradient is taken at the
    model moved on by the last update, 2 w_{k-1} - w_{k-2}."""
    lr, steps = 0.2, 6
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "1",
                "--consistency", "asp", "--optimizer", "sgd", "--momentum", "0", "--lr", str(lr),
                "--epochs", "100", "--max-seconds", "100")
    x, y = tiny.data()
    torch.manual_seed(0)
    model = tiny.Net()
    start = [p.detach().clone() for p in model.parameters()]
    pushed = []
    worker = kudus.torch.Worker(model, torch.utils.data.TensorDataset(x, y), c.scheduler, "delayed",
                                overlap=True, predict=predict,
                                on_iteration=lambda w: pushed.append(list(w.last_rows)))
    assert worker.run(max_iterations=steps) == steps and worker.final
    assert worker.client.momentum == 0.0
    worker.close()

    def gradient(params, rows):
        net = tiny.Net()
        with torch.no_grad():
            for p, v in zip(net.parameters(), params):
                p.copy_(v)
        rows = torch.tensor([int(r) for r in rows])
        torch.nn.functional.cross_entropy(net(x[rows]), y[rows]).backward()
        return [p.grad for p in net.parameters()]

    def train(delayed):
        w = [start]
        for k, rows in enumerate(pushed):
            at = w[k - 1] if delayed and k > 0 else w[k]
            if delayed and predict and k >= 2:
                at = [2 * a - b for a, b in zip(w[k - 1], w[k - 2])]
            g = gradient(at, rows)
            w.append([a - lr * b for a, b in zip(w[k], g)])
        return w[-1]
    want, undelayed = train(True), train(False)
    err = max(float((p.detach() - w).abs().max()) for p, w in zip(model.parameters(), want))
    apart = max(float((a - b).abs().max()) for a, b in zip(want, undelayed))
    assert err < 1e-5 < apart / 100, (err, apart)


@budget(120)
def test_overlap_under_bsp_is_a_clear_error(cluster, tiny):
    """BSP has no use for a lease ahead: run() raises ValueError naming the
    consistency and the field, and the scheduler serves a plain worker."""
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "1",
                "--consistency", "bsp", "--max-seconds", "100")
    data = torch.utils.data.TensorDataset(*tiny.data())
    worker = kudus.torch.Worker(tiny.Net(), data, c.scheduler, "overlap-bsp", overlap=True,
                                timeout_ms=3000)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="this cluster runs bsp") as e:
        worker.run()
    assert "lease_ahead" in str(e.value) and time.monotonic() - t0 < 20, str(e.value)
    worker.close()
    plain = kudus.torch.Worker(tiny.Net(), data, c.scheduler, "plain-bsp")
    assert plain.run(max_iterations=3) == 3
    # WELCOME named the shards' momentum: SGD's default.
    assert abs(plain.client.momentum - 0.9) < 1e-9, plain.client.momentum
    plain.close()


@budget(180)
def test_overlap_ends_cleanly_on_max_iterations_and_on_errors(cluster, tiny, caplog):
    """Under SSP: max_iterations ends with the final pull (the module holds
    the cluster's model, whichever buffer it was in); an exception of the
    training thread, and one of the communication thread, come out of
    run() without a hang."""
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "1",
                "--consistency", "ssp", "--epochs", "100", "--max-seconds", "150")
    data = torch.utils.data.TensorDataset(*tiny.data())
    torch.manual_seed(0)
    model = tiny.Net()
    worker = kudus.torch.Worker(model, data, c.scheduler, "overlap-0", overlap=True)
    with caplog.at_level("WARNING", logger="kudus"):
        assert worker.run(max_iterations=7) == 7
    assert worker.final and worker.version > 0
    # The shards' default momentum came with WELCOME, and the worker said
    # what overlap does with it.
    assert abs(worker.client.momentum - 0.9) < 1e-9, worker.client.momentum
    assert any("momentum 0.90" in r.getMessage() for r in caplog.records), caplog.text
    worker.close()
    # Nobody else trains: the cluster's model is the module's, bit for bit.
    other = tiny.Net()
    assert kudus.torch.pull_model(other, c.scheduler) == worker.version
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a.detach(), b.detach())

    calls = []

    def failing_loss(out, target):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("loss failed on the training thread")
        return torch.nn.functional.cross_entropy(out, target)

    worker = kudus.torch.Worker(tiny.Net(), data, c.scheduler, "overlap-1", overlap=True,
                                loss_fn=failing_loss)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="training thread"):
        worker.run()
    assert time.monotonic() - t0 < 60
    worker.close()

    worker = kudus.torch.Worker(tiny.Net(), data, c.scheduler, "overlap-2", overlap=True)
    sent = []

    def failing_telemetry():
        sent.append(1)
        if len(sent) == 3:
            raise RuntimeError("telemetry failed on the communication thread")
        return True
    worker.client.telemetry = failing_telemetry
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="communication thread"):
        worker.run()
    assert time.monotonic() - t0 < 60 and worker.iterations == 2, worker.iterations
    worker.close()


def test_two_parameter_buffers_swap_views_not_values(tiny):
    """On the CPU the parameters are views into one of two flat buffers,
    and a step moves them to the other without copying (no cluster: the
    binding alone)."""
    worker = kudus.torch.Worker(tiny.Net(), torch.utils.data.TensorDataset(*tiny.data()),
                                "tcp://127.0.0.1:1", "unused", overlap=True, predict=False)
    # As if WELCOME had named the module's own size.
    size = sum(p.numel() for p in worker.params)
    worker.client.__class__ = type("Welcomed", (type(worker.client),), {"param_count": size})
    worker._bind()
    first = [p.data_ptr() for p in worker.params]
    values = [p.detach().clone() for p in worker.params]
    worker._flats[1][:] = 1.5
    worker._use(1)
    assert all(p.data_ptr() != a for p, a in zip(worker.params, first))
    assert all(bool((p == 1.5).all()) for p in worker.params)
    worker._use(0)
    assert [p.data_ptr() for p in worker.params] == first
    assert all(torch.equal(p, v) for p, v in zip(worker.params, values))
    assert np.shares_memory(worker.flat, worker._flats[0])
    worker.close()


def test_predict_without_overlap_is_a_clear_error(tiny):
    """predict guesses the update in flight, which only overlap has."""
    with pytest.raises(ValueError, match="overlap=True"):
        kudus.torch.Worker(tiny.Net(), torch.utils.data.TensorDataset(*tiny.data()),
                           "tcp://127.0.0.1:1", "unused", predict=True)


def test_predict_moves_the_parameters_on_by_the_last_update(tiny):
    """With predict (overlap's default) the parameters are views into a
    third buffer that takes the newest pulled model moved on by the step
    from the one before, 2 w_k - w_{k-1}; without extrapolation, the
    pulled model itself (no cluster: the binding alone)."""
    worker = kudus.torch.Worker(tiny.Net(), torch.utils.data.TensorDataset(*tiny.data()),
                                "tcp://127.0.0.1:1", "unused", overlap=True)
    assert worker.predict
    size = sum(p.numel() for p in worker.params)
    worker.client.__class__ = type("Welcomed", (type(worker.client),), {"param_count": size})
    worker._bind()
    where = [p.data_ptr() for p in worker.params]
    worker._flats[0][:] = 1.0
    worker._flats[1][:] = 1.5
    worker._use(1, extrapolate=True)
    assert [p.data_ptr() for p in worker.params] == where
    assert all(bool((p == 2.0).all()) for p in worker.params)
    assert np.shares_memory(worker.flat, worker._flats[1])
    worker._use(1)
    assert all(bool((p == 1.5).all()) for p in worker.params)
    worker.close()
