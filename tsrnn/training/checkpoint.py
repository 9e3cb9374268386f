"""Training checkpoints: written atomically, checked on load.

A checkpoint is one ``torch.save`` file holding the task name, its configuration, the model and
optimizer states, every RNG state, the position in the data and the kernels "auto" chose, so
that ``--resume`` continues bit-identically. It holds tensors and plain Python values only and is
read with ``torch.load(weights_only=True)``. It is written to a temporary file in the same
directory, flushed to disk and renamed over the target: an interrupted save never leaves a
half-written checkpoint.
"""
from __future__ import annotations

import os
import random
import re
import tempfile
from pathlib import Path

import numpy as np
import torch

import tsrnn

FORMAT = 2  # 2: numpy's RNG state as plain values, read with weights_only=True


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or from another task, model or format."""


def save(path, payload: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "tsrnn_version": tsrnn.__version__, **payload}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def check_file(path) -> Path:
    """``path`` as a Path if it is an existing file; a clear CheckpointError if it is missing or a
    directory (a run directory given in place of its ``last.pt`` / ``best.pt``)."""
    path = Path(path)
    if path.is_dir():
        found = [str(path / name) for name in ("last.pt", "best.pt") if (path / name).is_file()]
        hint = f"; did you mean {' or '.join(found)}?" if found else ""
        raise CheckpointError(f"checkpoint {path} is a directory, not a checkpoint file{hint}")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return path


def load(path, task: str | None = None) -> dict:
    """Read a checkpoint; ``task`` (if given) must match the one that wrote it.

    Read with ``torch.load(weights_only=True)``: a checkpoint holds tensors and plain Python values
    only (dicts, lists, tuples, strings, numbers, None), and a file holding anything else, which
    unpickling could run code for, is refused unread."""
    path = check_file(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a global the weights-only unpickler refuses, a truncated file, not a torch file
        text = str(exc)
        refused = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        if refused:
            hint = ""
            if refused.group(1).startswith("numpy"):
                hint = (" (a checkpoint of format 1 held numpy's RNG state as an array: if you wrote it yourself, "
                        f"tsrnn.training.checkpoint.upgrade({str(path)!r}) rewrites it in format {FORMAT})")
            raise CheckpointError(f"checkpoint {path} holds an object other than tensors and plain values "
                                  f"({refused.group(1)}); refused: loading it could run arbitrary code{hint}") from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = detail.group(1) if detail else text.strip().splitlines()[0] if text.strip() else ""
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tsrnn checkpoint of format {FORMAT}")
    if task is not None and payload.get("task") != task:
        raise CheckpointError(f"{path} was written by task {payload.get('task')!r}, not {task!r}")
    return payload


def upgrade(path) -> Path:
    """Rewrite a checkpoint of format 1 (numpy's RNG state as an array) in place in this format.
    It unpickles the file without restriction: only for a checkpoint you wrote yourself."""
    path = check_file(path)
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(payload, dict) or payload.get("format") != 1:
        raise CheckpointError(f"{path} is not a tsrnn checkpoint of format 1")
    payload["rng"]["numpy"] = _plain_numpy_state(payload["rng"]["numpy"])
    del payload["format"], payload["tsrnn_version"]
    return save(path, payload)


def rng_state() -> dict:
    """Every RNG's state in plain values and tensors (numpy's key as an int64 tensor)."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": _plain_numpy_state(np.random.get_state())}


def _plain_numpy_state(state) -> tuple:
    """numpy's legacy RNG state with its key as an int64 tensor, which weights_only loading reads."""
    name, key, pos, has_gauss, cached = state
    return name, torch.from_numpy(np.asarray(key).astype(np.int64)), int(pos), int(has_gauss), float(cached)


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, cached))
