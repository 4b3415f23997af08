#!/usr/bin/env python3
"""A small CNN on Fashion-MNIST, trained as a Kudus worker.

Start a cluster whose model is the workers' own, then any number of these:

    build/kudus local --model external --workers 0 --external-workers 2 --epochs 2 --lr 0.05
    PYTHONPATH=python python3 examples/torch_cnn.py tcp://127.0.0.1:7000 cnn-0 &
    PYTHONPATH=python python3 examples/torch_cnn.py tcp://127.0.0.1:7000 cnn-1 &

Each worker declares the CNN's layout, seeds the shards with its initial
values (the first one counts), trains on the rows it is leased, and at the
end prints the test accuracy of the last model it pulled.
"""
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


def main(argv):
    if len(argv) < 3:
        print(f"usage: {argv[0]} SCHEDULER NAME [MONITOR]", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x, y = fashion_mnist("train")
    train = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    model = CNN()
    worker = kudus.torch.Worker(model, train, argv[1], argv[2],
                                monitor=argv[3] if len(argv) > 3 else None)
    iterations = worker.run()
    tx, ty = fashion_mnist("t10k")
    model.eval()
    with torch.no_grad():
        right = sum(int((model(torch.from_numpy(tx[i:i + 1000])).argmax(1)
                         == torch.from_numpy(ty[i:i + 1000])).sum()) for i in range(0, len(tx), 1000))
    print(f"torch_cnn: {iterations} iterations, model version {worker.client.version}, "
          f"test accuracy {right / len(tx):.4f}", flush=True)
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
