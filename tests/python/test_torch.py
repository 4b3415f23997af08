"""kudus.torch: two PyTorch workers train examples/torch_cnn.py's CNN, a
model of their own (--model external), to 0.80 test accuracy."""
import os
import re
import subprocess
import sys

from conftest import SRC


def test_two_pytorch_workers_reach_080(cluster, tmp_path):
    c = cluster("--model", "external", "--workers", "0", "--external-workers", "2",
                "--epochs", "1", "--max-seconds", "240", "--lr", "0.05")
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
    logs, procs = [], []
    for i in range(2):
        log = open(tmp_path / f"cnn-{i}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(SRC, "examples", "torch_cnn.py"), c.scheduler,
             f"cnn-{i}", c.monitor], stdout=log, stderr=subprocess.STDOUT, env=env))
    assert c.wait(timeout=300) == 0
    for p in procs:
        assert p.wait(timeout=120) == 0
    for log in logs:
        log.close()
    s = c.summary()
    assert s["model"] == "external"
    assert s["stop_reason"] == "epochs", s["stop_reason"]
    for i in range(2):
        text = (tmp_path / f"cnn-{i}.log").read_text()
        m = re.search(r"test accuracy ([0-9.]+)", text)
        assert m, text[-2000:]
        print(f"cnn-{i}: {m.group(0)}")
        assert float(m.group(1)) >= 0.80, text[-2000:]
