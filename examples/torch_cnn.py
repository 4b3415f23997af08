#!/usr/bin/env python3
"""A small CNN on Fashion-MNIST, trained as a Kudus worker.

Install the package once (README.md, "Python and PyTorch"), start a
cluster whose model is the workers' own, then any number of these:

    python3 -m venv --system-site-packages .venv && . .venv/bin/activate
    pip install --no-index --no-build-isolation ./python
    build/kudus local --model external --workers 0 --external-workers 2 --epochs 2 --lr 0.05 \\
        --checkpoint-dir ckpt &
    KUDUS_LIB=build/libkudus.so python3 examples/torch_cnn.py tcp://127.0.0.1:7000 cnn-0 &
    KUDUS_LIB=build/libkudus.so python3 examples/torch_cnn.py tcp://127.0.0.1:7000 cnn-1 &

Each worker declares the CNN's layout, seeds the shards with its initial
values (the first one counts), trains on the rows it is leased (with
--num-workers N, loaded by a DataLoader's N processes), and at the end
prints the test accuracy of the model in its module. With --evaluate
SECONDS it also runs a kudus.torch.Evaluator, which scores the cluster's
model on the test set that often while it trains and reports it to the
monitor: the stream, the dashboard's curve, Prometheus, --target-accuracy
and the summary's time_to_accuracy then work for this model too. Under
`kudus run` it needs no endpoint:

    build/kudus run --workers 2 --epochs 2 --lr 0.05 --target-accuracy 0.85 -- \
        python3 examples/torch_cnn.py --evaluate 2

The run's final model is in the shards' checkpoints:

    python3 -m kudus export --checkpoint-dir ckpt --like examples/torch_cnn.py:CNN --out cnn.pt
"""
import argparse
import os
import sys

import torch
import torch.nn as nn

import kudus.torch
from kudus.datasets import fashion_mnist


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5, padding=2)
        self.conv2 = nn.Conv2d(8, 16, 5, padding=2)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = x.view(-1, 1, 28, 28)
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def test_accuracy(model, device):
    tx, ty = fashion_mnist("t10k")
    tx, ty = torch.from_numpy(tx), torch.from_numpy(ty)
    model.eval()
    with torch.no_grad():
        right = sum(int((model(tx[i:i + 1000].to(device)).argmax(1).cpu() == ty[i:i + 1000]).sum())
                    for i in range(0, len(tx), 1000))
    return right / len(tx)


def main(argv):
    parser = argparse.ArgumentParser(description="A Kudus worker training a CNN on Fashion-MNIST.")
    parser.add_argument("scheduler", nargs="?",
                        help="the scheduler, tcp://HOST:PORT (default: KUDUS_SCHEDULER, as kudus run sets it)")
    parser.add_argument("name", nargs="?",
                        help="this worker's name, unique in the cluster (default under kudus run: worker-RANK)")
    parser.add_argument("monitor", nargs="?", help="the monitor's intake, for telemetry")
    parser.add_argument("--num-workers", type=int, default=0, help="DataLoader processes (0: none)")
    parser.add_argument("--device", default="cpu", help="where the module lives (cpu, cuda, ...)")
    parser.add_argument("--save", help="torch.save the module's state_dict here at the end")
    parser.add_argument("--overlap", action="store_true",
                        help="compute the next step while this one's push and pull travel (asp and ssp "
                             "clusters only; each gradient is one step staler)")
    parser.add_argument("--no-predict", dest="predict", action="store_false", default=None,
                        help="with --overlap: compute on the model as pulled, not moved on by the "
                             "update still in flight")
    parser.add_argument("--evaluate", type=float, metavar="SECONDS",
                        help="also score the cluster's model on the test set every SECONDS and report it "
                             "to the monitor (an evaluator; under kudus run, only in copy 0)")
    args = parser.parse_args(argv[1:])
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x, y = fashion_mnist("train")
    train = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    model = CNN().to(args.device)
    worker = kudus.torch.Worker(model, train, args.scheduler, args.name, monitor=args.monitor,
                                num_workers=args.num_workers, pin_memory=args.device.startswith("cuda"),
                                overlap=args.overlap, predict=args.predict)
    evaluator = None
    if args.evaluate and os.environ.get("KUDUS_RANK", "0") == "0":
        tx, ty = fashion_mnist("t10k")
        evaluator = kudus.torch.Evaluator(CNN().to(args.device), (torch.from_numpy(tx), torch.from_numpy(ty)),
                                          args.scheduler, every=args.evaluate, monitor=args.monitor).start()
    iterations = worker.run()
    if evaluator:
        evaluator.stop()
    print(f"torch_cnn: {iterations} iterations, model version {worker.version}"
          f"{'' if worker.final else ' (its last pull)'}, "
          f"test accuracy {test_accuracy(model, args.device):.4f}", flush=True)
    if args.save:
        torch.save(model.state_dict(), args.save)
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
