"""What every part of the GPU probe receives, and the record it returns.

A part is a module of this package with ``run(ctx: Context) -> dict``: a JSON-ready record with
at least ``status`` ("ok", "skipped" or "failed") and, unless ok, ``reason`` (one line). A part
returns by ``ctx.deadline`` (``time.monotonic()`` seconds) with whatever it gathered, and hands its
record to ``ctx.save`` as it grows (after each site or run), so a part stopped at its time limit
still leaves what it measured; it writes any file of its own under ``ctx.out`` (the probe's scratch
folder, which bench/gpu_probe.py archives into files.tar.gz) and names it in its record (relative
to ``ctx.out``, so to the archive's root). ``run_bounded`` runs a command of a part (ncu, a compiler) with
its whole process group stopped at a time limit.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Context:
    """``device``: "cuda" or "cpu" (the CPU runs the kernels' source under the SIMT emulation of
    tests/simt and stand-ins for the GPU tools); ``quick``: tiny shapes; ``out``: the folder the part
    writes into; ``deadline``: when the part must have returned (time.monotonic())."""

    device: str
    quick: bool
    out: Path
    deadline: float
    part: str | None = None  # the part's name: ``save`` writes out/parts/<part>.partial.json

    def left(self) -> float:
        """Seconds until the deadline (negative past it)."""
        return self.deadline - time.monotonic()

    def save(self, record: dict) -> None:
        """The part's record so far, kept where the probe finds it if the part is stopped."""
        if self.part:
            partial = self.out / "parts" / f"{self.part}.partial.json"
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(record, indent=1))

    def log(self, message: str) -> None:
        """One line of progress on stdout, timestamped (the GPU call's output tail shows it)."""
        print(f"[{time.strftime('%H:%M:%S')}] probe: {message}", flush=True)


def skipped(reason: str, **more) -> dict:
    return {"status": "skipped", "reason": reason, **more}


def failed(reason: str, **more) -> dict:
    return {"status": "failed", "reason": reason[:500], **more}


def run_bounded(cmd: list[str], seconds: float, **popen) -> tuple[int | None, str]:
    """``cmd``'s exit code and output (stdout and stderr), or (None, output so far) where it ran past
    ``seconds``: then its whole process group is killed (a compiler or profiled program it started
    must not hold the GPU for the parts after it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            **popen)
    try:
        output, _ = proc.communicate(timeout=seconds)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return None, output or ""
