"""Which process trains a run: an ``flock`` on the run's ``claim.lock``, so that several campaign
workers (one per CPU) can share one runs folder without two of them training the same run.

The claim is taken without waiting (a run another process holds is left to it), held by the
script while the run trains and passed to the run's ``tsrnn train`` process, so that a script
killed outright keeps its run claimed until the trainer it left behind has ended too. The
kernel releases an ``flock`` when its last holder exits, however it exits: a claim never
outlives its processes.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator, NoReturn

CLAIM = "claim.lock"
HELD_ELSEWHERE = 75  # a script's exit code when runs it needs are being trained by another process (EX_TEMPFAIL)


def leave(name: str, runs: list[str]) -> NoReturn:
    """End a script whose unfinished runs are all claimed by other processes, with exit code
    ``HELD_ELSEWHERE``: the process that finishes the last of them writes the record."""
    print(f"[{name}] {len(runs)} run(s) are being trained by another process ({', '.join(runs)}); the process "
          "that finishes the last one writes the record", flush=True)
    raise SystemExit(HELD_ELSEWHERE)


def claim(run_dir: Path) -> int | None:
    """A descriptor holding the claim on ``run_dir`` (close it to release), or None when another
    process holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / CLAIM, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def claimed(run_dir: Path) -> Iterator[bool]:
    """The claim on ``run_dir`` for the block (True), or False when another process holds it."""
    fd = claim(run_dir)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def held(run_dir: Path) -> bool:
    """Whether another process holds the claim on ``run_dir`` now."""
    with claimed(run_dir) as mine:
        return not mine
