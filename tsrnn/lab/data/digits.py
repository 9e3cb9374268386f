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
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

CLASSES = 10
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
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise ValueError(f"{path} is not a readable gzip file: {err}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (its first bytes are {raw[:4].hex() or 'missing'})")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path} is truncated: its header needs {header} bytes, the file has {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    expected = header + math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise ValueError(f"{path} holds {len(raw)} bytes, its header {shape} of {dtype} needs {expected}")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape)


def _find(directory: Path, name: str) -> Path:
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"MNIST file {name} (or {name}.gz) not found in {directory}; the directory needs "
                            f"{', '.join(n for pair in MNIST_FILES.values() for n in pair)}")


def _read_split(directory: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """One split's images (N, rows, columns) uint8 and labels (N,) in 0..CLASSES-1; ValueError naming the file."""
    images, labels = (_find(directory, name) for name in MNIST_FILES[split])
    x, y = read_idx(images), read_idx(labels)
    if x.ndim != 3 or x.dtype != np.uint8:
        raise ValueError(f"{images} holds {x.dtype} of shape {x.shape}, not images (uint8, N x rows x columns)")
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ValueError(f"{labels} holds {y.dtype} of shape {y.shape}, not labels (integers, N)")
    if len(x) != len(y):
        raise ValueError(f"{labels} holds {len(y)} labels but {images} holds {len(x)} images")
    if not len(x):
        raise ValueError(f"{images} holds no images: the {split} split is empty")
    bad = np.flatnonzero((y < 0) | (y >= CLASSES))
    if bad.size:
        raise ValueError(f"{labels}: label {y[bad[0]]} at index {bad[0]} is outside the classes 0..{CLASSES - 1} "
                         f"({bad.size} of the {len(y)} labels are)")
    return x, y


def load_mnist(directory) -> PixelSplits:
    """MNIST from the four standard IDX files in ``directory`` (no download)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"MNIST directory {directory} does not exist")
    parts = {}
    for split in MNIST_FILES:
        x, y = _read_split(directory, split)
        parts[split] = (torch.from_numpy(x.reshape(len(x), -1) / np.float32(255)).float(),
                        torch.from_numpy(y.astype(np.int64)))
    (x, y), cut = parts["train"], len(parts["train"][0]) - 10_000
    if cut <= 0:
        raise ValueError(f"{_find(directory, MNIST_FILES['train'][0])} holds {len(x)} images, which leaves the train "
                         f"split empty: validation takes the last 10,000, so it needs more than 10,000")
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
