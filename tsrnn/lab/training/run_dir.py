"""A run's directory (``--out``): claimed by one run, never overwritten unasked, its records exact.

- A directory *holds a run* when it has ``last.pt``, ``best.pt`` or ``metrics.jsonl``. ``claim``
  refuses it unless the run continues there (``--resume`` of a checkpoint in it) or
  ``--overwrite`` says to replace it (its checkpoints and metrics are deleted first).
- ``metrics.jsonl`` gets one JSON line per event. A checkpoint records how many lines the file
  held when it was written; resuming in the same directory cuts the file back to them, so the
  steps trained again after the checkpoint are not recorded twice.
- Temporary files of a save killed before its rename are deleted when a run starts, never that
  of a save in progress in another process (``checkpoint.remove_orphans``).
- Every file gets mode 0666 less the umask (checkpoints too, see ``checkpoint.save``).
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from tsrnn.lab.training import checkpoint

RUN_FILES = ("last.pt", "best.pt", "metrics.jsonl")


def held_run(out) -> list[str]:
    """The files that make ``out`` hold a run (empty if it holds none)."""
    return [name for name in RUN_FILES if (Path(out) / name).exists()]


def continues_here(out, resume) -> bool:
    """Whether the resumed checkpoint lies in ``out``: the run goes on in its own directory."""
    return resume is not None and Path(resume).resolve().parent == Path(out).resolve()


def claim_error(out, resume=None, overwrite=False) -> str | None:
    """Why ``out`` cannot take this run (one line), or None: it holds another run, and the run
    neither continues there nor was asked to overwrite it."""
    held = held_run(out)
    if not held or overwrite or continues_here(out, resume):
        return None
    return (f"--out {out} holds another run ({', '.join(held)}); continue it with --resume {Path(out) / 'last.pt'}, "
            "replace it with --overwrite, or choose another --out")


def writable_error(out) -> str | None:
    """Why ``out`` cannot be written (one line), or None: the directory, or the nearest existing
    folder it would be created in, is a file or not writable."""
    path = Path(out)
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                what = "is an existing file" if existing == path else f"is inside {existing}, an existing file"
                return f"--out {out} {what}; --out must be a directory (it is created if missing)"
            if not os.access(existing, os.W_OK | os.X_OK):
                where = "" if existing == path else f" (it would be created in {existing})"
                return f"--out {out}: {existing} is not writable{where}"
            return None
    return None


def prepare(out, metrics_records, overwrite: bool) -> None:
    """Make ``out`` ready for the run (rank 0): create it, delete orphan temporary files; with
    ``overwrite`` the old run's files; on a resume here (``metrics_records`` not None) cut
    metrics.jsonl back to the lines its checkpoint had seen; else start it empty."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint.remove_orphans(out)
    if overwrite:
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
    path = out / "metrics.jsonl"
    if metrics_records is None:
        path.unlink(missing_ok=True)
    elif path.exists():
        with path.open("rb") as f:
            kept = b"".join(line for _, line in zip(range(metrics_records), f))
        with path.open("r+b") as f:
            f.truncate(len(kept))


class Metrics:
    """Appends JSON lines to OUT/metrics.jsonl (rank 0 only; ``path`` None elsewhere) and counts them.
    A non-finite number (a NaN or inf gradient norm) is written as ``null``: JSON has no NaN."""

    def __init__(self, path: Path | None):
        self.path = path
        self.records = 0
        if path is not None and path.exists():
            with path.open("rb") as f:
                self.records = sum(1 for _ in f)

    def write(self, **record) -> dict:
        """Append ``record`` with its time; returns it as written (a non-finite number as None), so
        what the other logs take from here equals what they read back from the file on a resume."""
        record = {"time": round(time.time(), 3),
                  **{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}}
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(record, allow_nan=False) + "\n")
            self.records += 1
        return record
