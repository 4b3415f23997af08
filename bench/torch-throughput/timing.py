"""Shared pieces of the throughput benchmark: the CNN and the data (those
of bench/vs-ddp), and a timer of named parts."""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "vs-ddp"))

# The CNN of examples/torch_cnn.py and the Fashion-MNIST training set, as
# the DDP comparison has them (it also puts python/ on the path).
from common import CNN, train_set  # noqa: E402,F401


class Parts:
    """Seconds spent in each named part, summed until reset()."""

    def __init__(self):
        self.seconds = {}

    def timed(self, name, fn):
        """fn, timed as part `name` at every call."""
        def call(*args, **kw):
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.add(name, time.perf_counter() - t)
        return call

    def add(self, name, seconds):
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def reset(self):
        out, self.seconds = self.seconds, {}
        return out
