"""Live evaluation (issue 34 section 2): kudus.torch.Evaluator scores a
user's own model (--model external) while it trains, and the monitor takes
its reports as it takes its own evaluations: the stream's stats and eval
messages, Prometheus, --target-accuracy stopping the run and the summary's
time_to_accuracy. For a built-in model, `kudus local --evaluator` starts
kudus-worker --evaluator beside the monitor's own evaluation, and the two
agree on every version both scored. And `kudus run` (section 5) starts a
cluster and copies of a script that finds it in its environment.

Run by ctest (test_python_eval) with Debian's python3-pytest and
python3-torch; KUDUS_BIN_DIR names the build directory.
"""
import json
import os
import subprocess
import urllib.request

import pytest
import torch

import kudus.torch
from conftest import BIN, free_base_port
from test_torch_day import budget, deadline, tiny, tree_env  # noqa: F401 (fixtures)


class Tail:
    """`kudus tail --json` on a cluster's stream, into a file."""

    live = []           # every Tail not yet stopped (stop_tails ends them)

    def __init__(self, tmp_path, port):
        self.path = tmp_path / "stream.jsonl"
        self.out = open(self.path, "w")
        self.proc = subprocess.Popen([os.path.join(BIN, "kudus"), "tail", f"tcp://127.0.0.1:{port + 2}",
                                      "--json", "true"], stdout=self.out, stderr=subprocess.DEVNULL)
        Tail.live.append(self)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        if self in Tail.live:
            Tail.live.remove(self)

    def messages(self):
        self.stop()
        with open(self.path) as f:
            return [json.loads(line) for line in f if line.startswith("{")]


@pytest.fixture(autouse=True)
def stop_tails():
    """A test that failed before reading its stream leaves no kudus tail behind."""
    yield
    for t in list(Tail.live):
        t.stop()


@budget(240)
def test_external_model_evaluated_live_stops_at_target(cluster, tmp_path, tiny):
    """A torch module trained by one kudus.torch.Worker, scored every 0.2 s
    by an Evaluator in another thread: the run stops at --target-accuracy,
    and the summary, the stream and /metrics carry the reported accuracy."""
    torch.set_num_threads(1)
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "1", "--epochs", "1000",
                "--lr", "0.05", "--target-accuracy", "0.9", "--max-seconds", "150")
    tail = Tail(tmp_path, c.port)
    x, y = tiny.data()
    metrics = []

    def scrape(ev):
        # /metrics is rendered at each publish (500 ms), and the run may
        # have ended since the last pull: ask after each report until one
        # names the accuracy.
        if len(ev.history) >= 2 and not metrics:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{c.port + 3}/metrics", timeout=5).read()
            except OSError:
                return
            if b"\nkudus_test_accuracy " in text:
                metrics.append(text.decode())

    torch.manual_seed(0)
    ev = kudus.torch.Evaluator(tiny.Net(), tiny.data(600, seed=1), c.scheduler, every=0.2,
                               name="torch-eval", on_eval=scrape, timeout_ms=30000)
    ev.start()
    torch.manual_seed(0)
    # Iterations stretched tenfold (to about 20 ms), so that the run lasts
    # a few seconds of evaluations, not one.
    w = kudus.torch.Worker(tiny.Net(), torch.utils.data.TensorDataset(x, y), c.scheduler, "eval-w0",
                           monitor=c.monitor, timeout_ms=30000, slowdown=10)
    iterations = w.run()
    ev.stop()
    assert c.wait(60) == 0
    s = c.summary()
    stream = tail.messages()

    assert iterations > 0 and len(ev.history) >= 5
    assert s["stop_reason"] == "target-accuracy"
    # The target is met by the mean of the last second's reports; the
    # last one alone may be a little under it.
    assert s["stop_accuracy"] >= 0.9 and s["test_accuracy"] >= 0.8
    # Every milestone up to the target was reached, at a commit time
    # within the run.
    reached = s["time_to_accuracy"]
    assert all(reached[m] is not None and 0 <= reached[m] <= s["wall_seconds"] for m in ("0.70", "0.85"))
    # The evaluator's versions increase, and its last report is the one
    # the scheduler stopped on or later.
    versions = [v for v, _, _ in ev.history]
    assert versions == sorted(versions)
    assert s["test_version"] in versions
    # The stream: stats with the reported accuracy, and every report.
    stats = [m for m in stream if m["topic"] == "stats" and "test_accuracy" in m]
    assert stats and stats[-1]["model"] == "external"
    assert {m["test_version"] for m in stats} <= set(versions)
    evals = [m for m in stream if m["topic"] == "eval"]
    assert evals and all(m["name"] == "torch-eval" and m["metric"] == "accuracy" for m in evals)
    assert all("loss" in m for m in evals)
    # Prometheus.
    assert metrics, "no /metrics scrape named kudus_test_accuracy"


@budget(120)
def test_builtin_and_reported_evaluations_agree(cluster, tmp_path):
    """`kudus local --evaluator` on softmax: the monitor's own evaluation and
    the evaluator's REPORT agree within 0.001 on each version both scored."""
    c = cluster("--model", "softmax", "--workers", "1", "--shards", "1", "--evaluator", "true",
                "--eval-interval", "0.3", "--delay-ms", "150", "--max-seconds", "8")
    tail = Tail(tmp_path, c.port)
    assert c.wait(90) == 0
    stream = tail.messages()
    by = {}
    for m in stream:
        if m["topic"] == "eval":
            by.setdefault(m["name"], {})[m["version"]] = m["value"]
    assert set(by) == {"monitor", "evaluator"}, by.keys()
    common = sorted(set(by["monitor"]) & set(by["evaluator"]))
    assert len(common) >= 2, by
    worst = max(abs(by["monitor"][v] - by["evaluator"][v]) for v in common)
    print(f"FIGURE eval: {len(common)} versions scored by both, largest difference {worst:.6f}, "
          f"accuracy {by['monitor'][common[-1]]:.4f} at version {common[-1]}")
    assert worst <= 0.001
    assert c.summary()["stop_reason"] == "max-seconds"


@budget(150)
def test_slow_c_evaluator_stays_alive(cluster, tmp_path):
    """kudus-worker --evaluator whose scoring outlasts the scheduler's
    liveness window (each of the 10 test batches takes 600 ms more, 6 s a
    scoring against 3 x 1000 ms): it answers heartbeats between batches, so
    it is never declared dead, and its reports reach the stream."""
    c = cluster("--model", "softmax", "--workers", "1", "--shards", "1", "--delay-ms", "100",
                "--max-seconds", "20")
    tail = Tail(tmp_path, c.port)
    log = open(tmp_path / "evaluator.log", "w")
    ev = subprocess.Popen([os.path.join(BIN, "kudus-worker"), "--evaluator", "true", "--scheduler", c.scheduler,
                           "--name", "slow-eval", "--eval-interval", "0", "--eval-delay-ms", "600"],
                          stdout=log, stderr=subprocess.STDOUT)
    try:
        assert c.wait(90) == 0
        assert ev.wait(30) == 0
    finally:
        if ev.poll() is None:
            ev.kill()
            ev.wait()
        log.close()
    stream = tail.messages()
    local_log = (tmp_path / "local.log").read_text()
    assert "dead evaluator" not in local_log, local_log[-2000:]
    reports = [m for m in stream if m["topic"] == "eval" and m["name"] == "slow-eval"]
    # 20 s of run, 6 s or more a scoring: two reports at least.
    assert len(reports) >= 2, reports
    versions = [m["version"] for m in reports]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)


def test_evaluator_refuses_a_bad_metric():
    with pytest.raises(ValueError):
        kudus.torch.Evaluator(torch.nn.Linear(2, 2), (torch.zeros(1, 2), torch.zeros(1)), "tcp://127.0.0.1:1",
                              metric="f1")


TRAIN = '''
import os
import sys

import torch

import kudus.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = tiny.data()
# No endpoint: `kudus run` put the cluster in the environment.
worker = kudus.torch.Worker(tiny.Net(), torch.utils.data.TensorDataset(x, y))
if os.environ["KUDUS_RANK"] == "0":
    kudus.torch.Evaluator(tiny.Net(), tiny.data(300, seed=1), every=0.3, name="run-eval").start()
n = worker.run()
worker.close()
print(f"copy {os.environ['KUDUS_RANK']} of {os.environ['KUDUS_WORKERS']}: {n} iterations", flush=True)
'''


@budget(180)
def test_kudus_run_starts_the_copies_and_the_cluster(tmp_path, tiny):
    """`kudus run --workers 2 -- python3 train.py`: two copies of a script
    that names no endpoint train the cluster's model to its epochs, one of
    them evaluating it, and the summary comes back."""
    (tmp_path / "train.py").write_text(TRAIN)
    summary = tmp_path / "summary.json"
    out = subprocess.run([os.path.join(BIN, "kudus"), "run", "--workers", "2", "--epochs", "10", "--lr", "0.05",
                          "--base-port", str(free_base_port()), "--quiet", "true", "--summary", str(summary),
                          "--", "/usr/bin/python3", str(tmp_path / "train.py")],
                         capture_output=True, text=True, timeout=150, env=tree_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "copy 0 of 2:" in out.stdout and "copy 1 of 2:" in out.stdout
    assert "kudus: summary" in out.stdout
    with open(summary) as f:
        s = json.load(f)
    assert s["model"] == "external" and s["stop_reason"] == "epochs"
    assert sorted((w["rank"], w["name"]) for w in s["per_worker"]) == [(0, "worker-0"), (1, "worker-1")]
    # Rank 0 evaluated the model while it trained.
    assert s["test_accuracy"] is not None
