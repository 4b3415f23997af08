"""Fashion-MNIST from Debian's dataset-fashion-mnist (gzipped IDX files),
read with numpy alone: no torchvision needed."""
import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def _open(path):
    if os.path.exists(path):
        return open(path, "rb")
    if os.path.exists(path + ".gz"):
        return gzip.open(path + ".gz", "rb")
    raise FileNotFoundError(f"kudus.datasets: no {path}[.gz]")


def _idx(path, magic, dims):
    with _open(path) as f:
        head = np.frombuffer(f.read(4 + 4 * dims), dtype=">u4")
        if head[0] != magic:
            raise ValueError(f"kudus.datasets: {path}: bad magic {head[0]:#x}")
        shape = tuple(int(d) for d in head[1:])
        data = np.frombuffer(f.read(), dtype=np.uint8)
    if data.size != int(np.prod(shape)):
        raise ValueError(f"kudus.datasets: {path}: {data.size} bytes, header says {shape}")
    return data.reshape(shape)


def fashion_mnist(split="train", directory=DEFAULT_DIR):
    """(images float32 [n, 784] in [0, 1], labels int64 [n]) for split
    "train" or "t10k", the same rows libkudus's kd_dataset reads."""
    images = _idx(os.path.join(directory, f"{split}-images-idx3-ubyte"), 0x803, 3)
    labels = _idx(os.path.join(directory, f"{split}-labels-idx1-ubyte"), 0x801, 1)
    if images.shape[0] != labels.shape[0]:
        raise ValueError("kudus.datasets: images and labels differ in count")
    return images.reshape(images.shape[0], -1).astype(np.float32) / 255.0, labels.astype(np.int64)
