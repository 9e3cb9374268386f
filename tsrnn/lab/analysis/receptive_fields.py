"""TILT's temporal receptive fields in a trained MLP LM (seed 004, Figures 2-4).

The context of a TILT-MLP or TILT-Buffer-MLP is fixed (not learned): slot n's output j steps after
a unit input is ``context.kernels(length)[n, j]`` (S11-S12). This records those curves, each
slot's τ* and the lag of its peak, and draws them with ``tsrnn.lab.plot.tilt_receptive_fields``.
"""
from __future__ import annotations

import math

import torch

from tsrnn.lab import plot


def receptive_fields(context, length: int | None = None) -> dict:
    """Kernels (slots, length), τ* and peak lag of every slot of a TILT context; ``length``
    defaults to ceil(3 max τ*) + 1 steps back, as the figure."""
    tau = context.tau_star.detach().double().cpu()
    length = length or math.ceil(3 * tau.max().item()) + 1
    kernels = context.kernels(length).detach().double().cpu()
    return {"tau_star": tau.tolist(), "length": length, "peak_lag": kernels.argmax(1).tolist(),
            "peak_value": kernels.max(1).values.tolist(), "kernels": kernels.tolist()}


def figure(context, summary: dict, path) -> None:
    """The receptive-field figure of the context (``tsrnn.lab.plot.tilt_receptive_fields``)."""
    plot.tilt_receptive_fields(path, context, length=summary["length"],
                               title=f"TILT context of the MLP LM: {len(summary['tau_star'])} slot(s)")


def is_tilt(context) -> bool:
    """True for the contexts with TILT receptive fields (TILT, TILT-Buffer), not the plain buffer."""
    return isinstance(getattr(context, "tau_star", None), torch.Tensor)
