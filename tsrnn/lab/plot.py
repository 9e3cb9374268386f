"""Figures: TILT's temporal receptive fields (seed 004, Figure 3), and the figure helpers that
``tsrnn.lab.analysis`` draws with.

matplotlib is an optional dependency, imported only when a figure is drawn. The figures are
drawn on a ``matplotlib.figure.Figure`` with its own Agg canvas: no pyplot, no global backend
switch, nothing left open.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from tsrnn import _validation as check


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("tsrnn.lab.plot needs matplotlib: pip install matplotlib") from error
    return Figure, FigureCanvasAgg


def require_matplotlib() -> None:
    """Raise ImportError (naming the install command) now if matplotlib is missing, before a long
    computation whose figures could not be drawn."""
    _matplotlib()


def new_figure(figsize=(7.0, 4.2), dpi=120):
    """An empty ``matplotlib.figure.Figure`` (constrained layout) on its own Agg canvas."""
    Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig, path) -> Path:
    """Write ``fig`` as a PNG to ``path`` (its folder must exist); return the path."""
    fig.savefig(os.fspath(path), format="png")
    return Path(path)


def colours(n: int) -> list:
    """n colours along viridis, dark to light."""
    _matplotlib()
    from matplotlib import cm

    return [cm.viridis(v) for v in torch.linspace(0.0, 0.9, n).tolist()]


def _receptive_field_figure(tilt=None, length=None, log_x=False, title=None, figsize=(7.0, 4.2), dpi=120):
    """The Figure of ``tilt_receptive_fields`` (no file written): one line per row of
    ``tilt.kernels(length)``, in τ* order, x = steps back."""
    if tilt is None:
        from tsrnn.memory.tilt import TILT

        tilt = TILT()
    if not callable(getattr(tilt, "kernels", None)):
        raise TypeError(f"tilt must have a kernels(length) method (tsrnn.TILT, tsrnn.memory.contexts.*), "
                        f"got {type(tilt).__name__}")
    tau = getattr(tilt, "tau_star", None)
    tau = None if tau is None else tau.detach().double().cpu()
    if length is None:
        if tau is None:
            raise ValueError("length is required when tilt has no tau_star")
        length = math.ceil(3 * tau.max().item()) + 1  # the widest field has decayed to ~3% by 3 τ*
    length = check.count("length", length, minimum=2)
    kernels = tilt.kernels(length).detach().double().cpu()  # (N, length)
    if tau is not None and tau.numel() != kernels.shape[0]:
        tau = None  # e.g. TILT-Buffer: one τ*, several slots

    fig = new_figure(figsize, dpi)
    from matplotlib import cm, colors, ticker

    ax = fig.add_subplot()
    rows = kernels.shape[0]
    j = torch.arange(length).numpy()
    style = {"marker": "o", "markersize": 3} if length <= 40 else {}  # show that j is discrete
    if tau is not None and rows > 10:
        norm = colors.LogNorm(vmin=tau.min().item(), vmax=max(tau.max().item(), tau.min().item() * 1.0001))
        cmap = cm.viridis
        for n in range(rows):
            ax.plot(j, kernels[n].numpy(), color=cmap(norm(tau[n].item())), linewidth=1.2, **style)
        bar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax)
        bar.set_label("τ* (steps)")
        bar.set_ticks([v for v in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
                       if tau.min().item() <= v <= tau.max().item()] or [tau.min().item()])
        bar.ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    else:
        for n in range(rows):
            label = f"τ* = {tau[n].item():.3g}" if tau is not None else f"slot {n}"
            ax.plot(j, kernels[n].numpy(), linewidth=1.5, label=label, **style)
        ax.legend(fontsize="small", ncols=2 if rows > 5 else 1)
    if log_x:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, length - 1)
    ax.set_xlabel("steps back j (0 = current input)")
    ax.set_ylabel("activation g(j) for a unit input")
    ax.grid(alpha=0.3)
    if title is None:
        k, g = getattr(tilt, "k", None), getattr(tilt, "g", None)
        if k is None and hasattr(tilt, "tilt"):
            k, g = tilt.tilt.k, tilt.tilt.g
        title = "Temporal receptive fields" + (f" (k = {k}, g = {g:g})" if k is not None else "")
    ax.set_title(title)
    return fig


def tilt_receptive_fields(path, tilt=None, length=None, log_x=False, title=None, figsize=(7.0, 4.2), dpi=120):
    """Save a PNG of the impulse responses g_τ*(j) of every τ* (seed 004, Figure 3); return path.

    Args:
        path: file to write (str or os.PathLike); its folder must exist.
        tilt: a ``tsrnn.TILT`` (default ``tsrnn.TILT()``: 30 τ* from 1 to 50, k = 4, g = 0) or any
            module with ``kernels(length)`` and ``tau_star``, such as ``tsrnn.memory.contexts.TILTContext``.
        length: steps back drawn (default ceil(3 max τ*) + 1).
        log_x: a symmetric-log x axis (the early, narrow fields spread out).
        title, figsize (inches), dpi: the figure's look.

    One line per τ*, x = steps back j (0 is the current input): the curve of τ* is the output
    of that τ* j steps after a unit input, ``tilt.kernels(length)[n, j]`` (S11-S12). Up to 10
    curves get a legend, more get a log-τ* colour scale with a colorbar.
    """
    return save(_receptive_field_figure(tilt, length, log_x, title, figsize, dpi), path)
