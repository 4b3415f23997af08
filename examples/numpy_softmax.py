#!/usr/bin/env python3
"""A worker of your own in numpy: softmax regression on Fashion-MNIST
through the kudus package, the smallest complete user of kudus.Client.

It declares its model (an external layout), seeds the shards, trains on
the rows it is leased until the run ends, and prints the test accuracy of
the model it last pulled. It finds the cluster in KUDUS_SCHEDULER and
KUDUS_MONITOR, so it runs as it is under `kudus run` and as the workers of
the compose "user" profile (tests/compose/user/Dockerfile builds it into
an image FROM kudus:latest):

    build/kudus local --model external --workers 0 --external-workers 2 --epochs 1 &
    KUDUS_SCHEDULER=tcp://127.0.0.1:7000 KUDUS_LIB=build/libkudus.so \
        PYTHONPATH=python python3 examples/numpy_softmax.py &      # twice
"""
import os
import socket
import sys

import numpy as np

import kudus
from kudus.datasets import fashion_mnist


def softmax_gradient(params, x, y, grad):
    """Mean cross-entropy of softmax regression, W [784 x 10] then b [10]."""
    W, b = params[:7840].reshape(784, 10), params[7840:]
    z = x @ W + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
    p[np.arange(len(y)), y] -= 1
    p /= len(y)
    grad[:7840] = (x.T @ p).reshape(-1)
    grad[7840:] = p.sum(axis=0)
    return float(loss)


def main():
    x, y = fashion_mnist("train")
    # Compose cannot number a service's replicas: the host's name (the
    # container's) and the pid are unique, and the scheduler picks a rank.
    name = f"user-{socket.gethostname()}-{os.getpid()}"
    with kudus.Client(os.environ["KUDUS_SCHEDULER"], name, samples=len(x),
                      monitor=os.environ.get("KUDUS_MONITOR"),
                      layout=[("W", (784, 10)), ("b", (10,))]) as client:
        if not client.register(timeout_ms=120000):
            sys.exit(f"{name}: the run ended before it registered")
        release = client.wait_start(timeout_ms=120000)
        # The shards learn an external model's values from its workers,
        # once they know where the shards are: after START (the first
        # worker's INIT counts, later ones change nothing).
        params = np.zeros(client.param_count, np.float32)
        if release is None or not client.init_params(params):
            sys.exit(f"{name}: the run ended before training started")
        grad = np.zeros_like(params)
        steps = 0
        while release is not None and client.pull(params):
            loss = softmax_gradient(params, x[release.rows], y[release.rows], grad)
            if not client.push(grad, len(release.rows)):
                break
            release = client.arrive(loss)
            client.telemetry()
            steps += 1
    tx, ty = fashion_mnist("t10k")
    W, b = params[:7840].reshape(784, 10), params[7840:]
    accuracy = float(((tx @ W + b).argmax(axis=1) == ty).mean())
    print(f"{name}: {steps} steps, test accuracy {accuracy:.4f} (of the model it last pulled)",
          flush=True)


if __name__ == "__main__":
    main()
