"""Digit images as pixel sequences (seed 002 §4.2): MNIST from its IDX files, or scikit-learn's
bundled 8x8 digits when no directory is given (offline; 64 steps instead of 784).

Each image becomes a sequence of its pixels read row by row, scaled to [0, 1]; the permuted
variant (pMNIST) reorders every sequence by one fixed permutation. Splits as in the seed: MNIST's
60,000 training images cut into the first 50,000 for training and the last 10,000 for
validation, and its 10,000 test images. The 1,797 8x8 digits are shuffled once (seed 0) and cut
into 1,297 / 250 / 250.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


@dataclass(frozen=True)
class PixelSplits:
    """pixels (N, P) float32 in [0, 1] and labels (N,) int64 per split."""
    train: tuple[torch.Tensor, torch.Tensor]
    valid: tuple[torch.Tensor, torch.Tensor]
    test: tuple[torch.Tensor, torch.Tensor]

    @property
    def steps(self) -> int:
        return self.train[0].shape[1]

    def permuted(self, seed: int = 0) -> "PixelSplits":
        """The same splits with every sequence reordered by one permutation drawn from ``seed``."""
        order = torch.randperm(self.steps, generator=torch.Generator().manual_seed(seed))
        return PixelSplits(*((x[:, order], y) for x, y in (self.train, self.valid, self.test)))


def read_idx(path) -> np.ndarray:
    """An IDX file (LeCun's MNIST format; gzipped if the name ends in .gz) as an array: two zero
    bytes, a type byte, a dimension count, big-endian uint32 sizes, then the data."""
    path = Path(path)
    raw = (gzip.decompress if path.suffix == ".gz" else bytes)(path.read_bytes())
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (its first bytes are {raw[:4].hex() or 'missing'})")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path} is truncated: its header needs {header} bytes, the file has {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"{path} holds {len(raw)} bytes, its header {shape} of {dtype} needs {expected}")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape)


def _find(directory: Path, name: str) -> Path:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"MNIST file {name} (or {name}.gz) not found in {directory}; the directory needs "
                            f"{', '.join(n for pair in MNIST_FILES.values() for n in pair)}")


def load_mnist(directory) -> PixelSplits:
    """MNIST from the four standard IDX files in ``directory`` (no download)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"MNIST directory {directory} does not exist")
    parts = {}
    for split, (images, labels) in MNIST_FILES.items():
        x, y = read_idx(_find(directory, images)), read_idx(_find(directory, labels))
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(f"{directory}: {images} {x.shape} and {labels} {y.shape} are not images and their labels")
        parts[split] = (torch.from_numpy(x.reshape(len(x), -1) / np.float32(255)).float(),
                        torch.from_numpy(y.astype(np.int64)))
    (x, y), cut = parts["train"], len(parts["train"][0]) - 10_000
    if cut <= 0:
        raise ValueError(f"{directory}: the training files hold {len(x)} images, fewer than the 10,000 of validation")
    return PixelSplits(train=(x[:cut], y[:cut]), valid=(x[cut:], y[cut:]), test=parts["test"])


def load_small_digits() -> PixelSplits:
    """scikit-learn's 1,797 8x8 digits (pixel values 0..16), shuffled with seed 0."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("the default digits come from scikit-learn (pip install scikit-learn); or pass an MNIST "
                          "directory with --data") from None
    digits = load_digits()
    x = torch.from_numpy(digits.data / 16.0).float()
    y = torch.from_numpy(digits.target.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    return PixelSplits(train=(x[:-500], y[:-500]), valid=(x[-500:-250], y[-500:-250]), test=(x[-250:], y[-250:]))
