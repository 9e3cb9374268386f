"""Training checkpoints: written atomically, checked on load.

A checkpoint is one ``torch.save`` file holding the task name, its configuration, the model and
optimizer states, every RNG state, the position in the data and the kernels "auto" chose, so
that ``--resume`` continues bit-identically. It holds tensors and plain Python values only and is
read with ``torch.load(weights_only=True)``. It is written to a temporary file in the same
directory (mode 0666 less the umask, as every other file of a run), flushed to disk and renamed
over the target: an interrupted save never leaves a half-written checkpoint, and a save killed
before the rename leaves a ``.NAME.XXXXXXXX.tmp`` file that ``remove_orphans`` deletes (every run
of `tsrnn train` calls it on its --out before its first save). A save holds a shared
``fcntl.flock`` on the directory from before it creates its temporary file until after the
rename; ``remove_orphans`` deletes only while it holds the exclusive lock, so never the temporary
file of a save in progress in another process (the kernel releases a killed process's locks).

Loading verifies what it reads: a BLAKE2b digest of every value (tensors byte for byte) written
with the checkpoint must match (a flipped bit or an edit is refused), and the model and
optimizer tensors must be finite.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import re
import secrets
from pathlib import Path

import numpy as np
import torch

import tsrnn

FORMAT = 3  # 2: numpy's RNG state as plain values, read with weights_only=True; 3: with a checksum


# What `tsrnn train` writes besides format, version and checksum; "metrics_records": the lines
# metrics.jsonl held when it was written, to which a resume in the same directory cuts the file.
KEYS = ("task", "config", "args", "model", "optimizer", "progress", "carry", "rng", "vocab", "backend_choices",
        "metrics_records")


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable, or from another task, model or format."""


def save(path, payload: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "tsrnn_version": tsrnn.__version__, **payload}
    payload["checksum"] = checksum(payload)
    with _directory_lock(path.parent, fcntl.LOCK_SH):  # held, remove_orphans leaves the folder's .tmp files
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for metrics.jsonl
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


# The temporary file of ``save``: "." + the checkpoint's name + 8 hex digits + ".tmp".
TEMPORARY = re.compile(r"\..+\.[0-9a-f]{8}\.tmp")


def remove_orphans(directory) -> list[Path]:
    """Delete the temporary files (``.NAME.XXXXXXXX.tmp``) of saves into ``directory`` that were
    killed before their rename, and return them. While a save in another process holds its lock
    on the directory nothing is deleted (empty list): its temporary file is not an orphan, and
    the orphans wait for the next call. Where the filesystem has no locks on directories nothing
    is deleted either: a temporary file there cannot be told from one being written."""
    with _directory_lock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB) as locked:
        if not locked:
            return []
        orphans = sorted(p for p in Path(directory).glob(".*.tmp") if TEMPORARY.fullmatch(p.name))
        for orphan in orphans:
            orphan.unlink(missing_ok=True)
    return orphans


@contextlib.contextmanager
def _directory_lock(directory, operation: int):
    """``fcntl.flock(operation)`` on ``directory`` while the block runs; yields whether it holds
    the lock: False where a non-blocking request meets another process's lock, or where the
    filesystem refuses locks on directories (some network filesystems; a save then runs unlocked
    and ``remove_orphans`` deletes nothing)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, operation)
        except OSError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)  # releases the lock


def checksum(payload: dict) -> str:
    """BLAKE2b of every value of ``payload`` but its "checksum": tensors by dtype, shape and bytes,
    other values by their repr, in order, with their keys."""
    digest = hashlib.blake2b(digest_size=16)

    def feed(value):
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(value, dict):
            digest.update(b"{")
            for key, item in value.items():
                digest.update(repr(key).encode())
                feed(item)
            digest.update(b"}")
        elif isinstance(value, (list, tuple)):
            digest.update(b"[" if isinstance(value, list) else b"(")
            for item in value:
                feed(item)
            digest.update(b"]")
        else:
            digest.update(repr(value).encode())

    feed({key: value for key, value in payload.items() if key != "checksum"})
    return digest.hexdigest()


def _non_finite(payload: dict) -> str | None:
    """The first model or optimizer tensor holding NaN or inf, described; None if all are finite."""
    named = [(f"weight {name!r}", t) for name, t in payload.get("model", {}).items()]
    for index, state in payload.get("optimizer", {}).get("state", {}).items():
        named += [(f"optimizer state {key!r} of parameter {index}", t) for key, t in state.items()]
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                return f"its {name} holds {bad} non-finite value{'s' if bad > 1 else ''} (NaN or inf)"
    return None


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


def load(path) -> dict:
    """Read and verify a checkpoint `tsrnn train` wrote (a CheckpointError saying why if it cannot).

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
                        f"tsrnn.lab.training.checkpoint.upgrade({str(path)!r}) rewrites it in format {FORMAT})")
            raise CheckpointError(f"checkpoint {path} holds an object other than tensors and plain values "
                                  f"({refused.group(1)}); refused: loading it could run arbitrary code{hint}") from None
        detail = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        reason = detail.group(1) if detail else text.strip().splitlines()[0] if text.strip() else ""
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {reason})") from None
    if not isinstance(payload, dict) or "format" not in payload:
        raise CheckpointError(f"{path} is not a tsrnn checkpoint")
    if payload["format"] != FORMAT:
        hint = f"; tsrnn.lab.training.checkpoint.upgrade({str(path)!r}) rewrites it" if payload["format"] in (1, 2) else ""
        raise CheckpointError(f"{path} is a tsrnn checkpoint of format {payload['format']}, not {FORMAT}{hint}")
    if payload.get("checksum") != checksum(payload):
        raise CheckpointError(f"checkpoint {path} is corrupt: its contents do not match the checksum saved with "
                              "them (a changed bit or an edit); refused")
    missing = [key for key in KEYS if key not in payload]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(map(repr, missing))}: not a checkpoint `tsrnn train` wrote")
    problem = _non_finite(payload)
    if problem:
        raise CheckpointError(f"checkpoint {path}: {problem}; refused (the run had diverged, or the file was "
                              "altered)")
    return payload


def upgrade(path) -> Path:
    """Rewrite a checkpoint of format 1 (numpy's RNG state as an array) or 2 (no checksum) in place
    in this format. It unpickles the file without restriction: only for a checkpoint you wrote
    yourself."""
    path = check_file(path)
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(payload, dict) or payload.get("format") not in (1, 2):
        raise CheckpointError(f"{path} is not a tsrnn checkpoint of format 1 or 2")
    payload["rng"]["numpy"] = _plain_numpy_state(payload["rng"]["numpy"])
    metrics = path.parent / "metrics.jsonl"  # the lines it has now: more precise is not known
    payload.setdefault("metrics_records", len(metrics.read_bytes().splitlines()) if metrics.exists() else 0)
    payload.setdefault("backend_choices", {})  # format 1 did not record them
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


def set_rng_state(state: dict, path="the checkpoint") -> None:
    """Restore the states ``rng_state`` saved; a CheckpointError naming ``path`` if one is not valid."""
    try:
        torch.set_rng_state(state["torch"])
        random.setstate(tuple(state["python"]))
        name, key, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{path}: its random-number generator state is not valid ({exc})") from None
