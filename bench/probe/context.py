"""What every part of the GPU probe receives, and the record it returns.

A part is a module of this package with ``run(ctx: Context) -> dict``: a JSON-ready record with
at least ``status`` ("ok", "skipped" or "failed") and, unless ok, ``reason`` (one line). A part
returns by ``ctx.deadline`` (``time.monotonic()`` seconds) with whatever it gathered; it writes any
file of its own under ``ctx.out`` and names it in its record (relative to ``ctx.out``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Context:
    """``device``: "cuda" or "cpu" (the CPU runs the kernels' source under the SIMT emulation of
    tests/simt and stand-ins for the GPU tools); ``quick``: tiny shapes; ``out``: the probe's output
    folder; ``deadline``: when the part must have returned (time.monotonic())."""

    device: str
    quick: bool
    out: Path
    deadline: float
    notes: list[str] = field(default_factory=list)

    def left(self) -> float:
        """Seconds until the deadline (negative past it)."""
        return self.deadline - time.monotonic()

    def log(self, message: str) -> None:
        """One line of progress on stdout, timestamped (the GPU call's output tail shows it)."""
        print(f"[{time.strftime('%H:%M:%S')}] probe: {message}", flush=True)


def skipped(reason: str, **more) -> dict:
    return {"status": "skipped", "reason": reason, **more}


def failed(reason: str, **more) -> dict:
    return {"status": "failed", "reason": reason[:500], **more}
