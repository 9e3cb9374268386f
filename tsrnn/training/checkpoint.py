"""Training checkpoints: written atomically, checked on load.

A checkpoint is one ``torch.save`` file holding the task name, its configuration, the model and
optimizer states, every RNG state and the position in the data, so that ``--resume`` continues
bit-identically. It is written to a temporary file in the same directory, flushed to disk and
renamed over the target: an interrupted save never leaves a half-written checkpoint.
"""
from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch

import tsrnn

FORMAT = 1


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
    """Read a checkpoint; ``task`` (if given) must match the one that wrote it."""
    path = check_file(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # truncated file, not a torch file, pickle error
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a tsrnn checkpoint of format {FORMAT}")
    if task is not None and payload.get("task") != task:
        raise CheckpointError(f"{path} was written by task {payload.get('task')!r}, not {task!r}")
    return payload


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
